"""The host probe (bench.cases.host, calc.roofline.host.probe_costs) and the host costs it feeds:
hand arithmetic with fake timings, so it runs without a GPU."""

from __future__ import annotations

import json

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.host import (EAGER_HOST_S, EAGER_LAYER_HOST_S, HostCosts, host_from_record, probe_costs,
                                          probe_host_costs)
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

CEIL = load_ceilings("H100-SXM")


def test_probe_costs_divide_by_kernels_and_layers():
    # 30 ms over 1000 priced kernels: 30 us each; 8.4 ms over 12 layers: 0.7 ms each
    costs = probe_costs(30e-3, 1000, 8.4e-3, 12)
    assert costs.s_per_kernel == pytest.approx(30e-6) and costs.s_per_layer == pytest.approx(0.7e-3)
    with pytest.raises(MlsysError, match="must be positive"):
        probe_costs(30e-3, 0, 8.4e-3, 12)


def test_default_costs_are_the_fitted_constants():
    assert HostCosts() == HostCosts(EAGER_HOST_S, EAGER_LAYER_HOST_S, "default")
    assert (EAGER_HOST_S, EAGER_LAYER_HOST_S) == (29e-6, 0.699e-3)


def _train(ceilings, batch=1, seq=128):
    opts = RooflineOptions(phase="train", batch=batch, seq=seq, impl="torch", check_fit=False, master_weights=False)
    return predict_model(load_model("gpt2"), ceilings, opts)


def test_host_costs_replace_the_constants_in_the_roofline():
    base = _train(CEIL)
    probed = _train(CEIL.with_host(40e-6, 0.5e-3, "probe"))
    assert probed.kernels == base.kernels and probed.gpu_s == base.gpu_s
    assert base.host_path_s == pytest.approx(base.kernels * 29e-6)
    assert probed.host_path_s == pytest.approx(base.kernels * 40e-6)  # host-bound: the step follows the host
    assert probed.time_s == pytest.approx(max(probed.gpu_s, base.kernels * 40e-6))
    decode = predict_model(load_model("gpt2"), CEIL.with_host(None, 0.5e-3),
                           RooflineOptions(phase="decode", context=1023, impl="torch", launch="eager"))
    assert decode.host_path_s == pytest.approx(12 * 0.5e-3)  # gpt2: 12 layers x 0.5 ms
    assert any("0.5 ms per decoder layer" in n for n in decode.notes)


def test_calibration_file_host_section(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"gpu": "H100-SXM", "host": {"s_per_kernel": 35e-6, "source": "mlsys bench host"}}))
    ceilings = load_ceilings(None, str(path))
    assert ceilings.host.s_per_kernel == 35e-6 and ceilings.host.s_per_layer == EAGER_LAYER_HOST_S
    assert ceilings.as_dict("bf16")["host"]["source"] == "mlsys bench host"
    assert load_ceilings("H100-SXM", {"gpu": "H100-SXM"}).host == HostCosts()
    for bad, message in (({"s_per_kernel": -1}, "in \\(0, 1\\)"), ({"s_per_kernel": "x"}, "in \\(0, 1\\)"),
                         ({"per_op": 1e-5}, "unknown: per_op"), ([1], "must be an object")):
        with pytest.raises(MlsysError, match=message):
            host_from_record(bad)


def test_roofline_cli_takes_the_host_costs():
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    args = ["roofline", "gpt2", "--phase", "train", "--batch", "1", "--seq", "128", "--impl", "torch",
            "--no-master-weights", "--json"]
    base = json.loads(CliRunner().invoke(cli, args).output)
    probed = json.loads(CliRunner().invoke(cli, [*args, "--host-us-per-kernel", "40"]).output)
    kernels = base["totals"]["kernels"]
    assert probed["totals"]["host_path_s"] == pytest.approx(kernels * 40e-6)
    assert probed["ceilings"]["host"]["s_per_kernel"] == pytest.approx(40e-6)
    bad = CliRunner().invoke(cli, [*args, "--host-us-per-kernel", "0"])
    assert bad.exit_code == 2


def test_tiny_spec_keeps_the_layers_and_shrinks_the_widths():
    from mlsyscalc.bench.cases.host import TINY_HIDDEN, tiny_spec

    for name in ("gpt2", "phi-2", "falcon-7b", "llama3-8b"):
        spec = load_model(name)
        tiny = tiny_spec(spec)
        assert (tiny.num_layers, tiny.gated_mlp, tiny.qkv_bias, tiny.rotary_fraction) == \
            (spec.num_layers, spec.gated_mlp, spec.qkv_bias, spec.rotary_fraction)
        assert tiny.hidden_size == TINY_HIDDEN and tiny.num_heads % tiny.num_kv_heads == 0
        assert (tiny.num_kv_heads == 1) == (spec.num_kv_heads == 1)


def _fake_timer(tiny, device, reps):
    return 0.05, 0.0105  # train step 50 ms, decode step 10.5 ms


def test_probe_fields_with_fake_timings():
    from mlsyscalc.bench.cases.host import probe, tiny_spec
    from mlsyscalc.bench.cases.model import ModelCase, roofline_options

    spec = load_model("gpt2")
    fields = probe(spec, CEIL, "cpu", timer=_fake_timer)
    kernels = predict_model(tiny_spec(spec), CEIL, roofline_options(ModelCase("train", 1, 64, graphs=False))).kernels
    assert fields["host_probe_train_kernels"] == kernels
    assert fields["host_s_per_kernel"] == pytest.approx(0.05 / kernels)
    assert fields["host_s_per_layer"] == pytest.approx(0.0105 / 12)
    assert fields["host_probe_model"] == "gpt2-tiny" and fields["host_launch_s"] is None


def test_bench_rows_record_the_probe_and_price_with_it(tmp_path):
    pytest.importorskip("torch")
    from mlsyscalc.bench.cases.host import probe
    from mlsyscalc.bench.cases.model import ModelCase, roofline_options, run_model_cases
    from mlsyscalc.bench.rows import ResultStore
    from mlsyscalc.specs.lookup import parse_overrides

    spec = load_model("gpt2", parse_overrides(["n_layer=2", "n_embd=64", "n_head=4", "vocab_size=97"]))
    calls = []

    def fake_probe(s, ceilings, device):
        calls.append(s.name)
        return probe(s, ceilings, device, timer=_fake_timer)
    cases = [ModelCase("decode", 1, 8, graphs=False), ModelCase("train", 1, 8)]
    rows = run_model_cases(spec, cases, CEIL, ResultStore(tmp_path / "r.jsonl"), "cpu", reps=1, profile=False,
                           host_probe=fake_probe)
    assert calls == [spec.name]  # once per process, before the first case
    assert [r.extra["profiled_before"] for r in rows] == [0, 0]  # no profile on the CPU
    for row, case in zip(rows, cases):
        assert row.error is None, row.error
        x = row.extra
        assert x["host_s_per_layer"] == pytest.approx(0.0105 / 2)
        want = predict_model(spec, CEIL.with_host(x["host_s_per_kernel"], x["host_s_per_layer"]), roofline_options(case))
        assert row.predicted_ms == pytest.approx(want.time_s * 1e3, rel=1e-12)
    # the eager decode of 2 layers is host-bound: 2 x (10.5 ms / 2 tiny layers) = 10.5 ms, far above its kernels
    assert rows[0].predicted_ms == pytest.approx(10.5)


def test_a_failing_probe_leaves_its_error_and_the_default_costs():
    from mlsyscalc.bench.cases import host

    def broken(*args, **kwargs):
        raise RuntimeError("no device")
    original, host.probe = host.probe, broken
    try:
        fields = host.probe_once(load_model("gpt2"), CEIL, "nowhere")
    finally:
        host.probe = original
        host._PROBED.pop(("gpt2", "nowhere"), None)
    assert fields == {"host_probe_error": "RuntimeError: no device"}
    assert probe_host_costs(fields) is None


def test_host_rows_are_common_schema():
    from mlsyscalc.bench.cases.host import host_rows

    fields = {"host_s_per_kernel": 30e-6, "host_s_per_layer": 0.7e-3, "host_launch_s": 5e-6,
              "host_probe_model": "gpt2-tiny", "host_probe_train_s": 0.03, "host_probe_train_kernels": 1000,
              "host_probe_decode_s": 0.0084, "host_probe_layers": 12}
    rows = host_rows(load_model("gpt2"), fields, {"gpu": "x"}, "now")
    assert [r.kernel for r in rows] == ["host.train", "host.decode", "host.launch"]
    assert [r.median_ms for r in rows] == pytest.approx([30.0, 8.4, 10.0])  # 2000 launches x 5 us
    assert rows[0].extra["host_s_per_kernel"] == 30e-6 and rows[2].env == {"gpu": "x"}


def test_report_scores_probed_rows_with_their_probe_and_the_others_as_before():
    from mlsyscalc.bench.rows import Row
    from mlsyscalc.report.models_report_host import probe_error, probe_lines

    rows = [Row("model.train", "eager", s, "bf16", variant=v, median_ms=ms)
            for s, v, ms in (("B1", "a", 60.0), ("B2", "b", 36.0), ("B1", "c", 10.0))]
    a, b, c = (r.key for r in rows)
    # a: default host 40 ms (+50%), probe 57 ms (+5.3%); b: no probe, 30 ms (+20%); c: eager decode, probe 9.5 ms
    fit = {"rows": [{"key": a, "phase": "train", "uncalibrated_s": 0.040},
                    {"key": b, "phase": "train", "uncalibrated_s": 0.030}]}
    lines = probe_lines(fit, rows, {c: 0.008}, {a: 0.057, c: 0.0095})
    assert lines[0][0].startswith("uncalibrated train within +-15% (--impl torch, host probe of the same call: 1 rows")
    assert lines[0][1:] == ["1/2", f"{100 * (0.2 + 3 / 57) / 2:+.1f}%"]  # median of 5.3% and 20%
    assert lines[1][1:] == ["1/1", f"{100 * 0.5 / 9.5:+.1f}%"]
    assert probe_error(rows[0], {a: 0.057}) == "+5.3%" and probe_error(rows[1], {a: 0.057}) is None
    assert probe_lines(fit, rows, {}, {}) == [] and probe_lines(fit, rows, {}, {a: 0.05}, keys={b}) == []


def test_train_takes_the_host_cost_per_kernel_as_torch_op_s():
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    args = ["train", "gpt2", "--gpus", "1", "--gpu", "H100-SXM", "--seq", "1024", "--global-batch", "2",
            "--micro-batch", "2", "--framework", "torch", "--json"]
    base = json.loads(CliRunner().invoke(cli, args).output)
    mine = json.loads(CliRunner().invoke(cli, [*args, "--host-us-per-kernel", "80"]).output)
    ops = mine["host_work"]["ops"]  # one micro-batch: host_fb = ops x op_s
    assert base["host_costs"]["op_s"] == pytest.approx(53.7e-6) and mine["host_costs"]["op_s"] == pytest.approx(80e-6)
    assert mine["host_path_s"]["forward_backward"] == pytest.approx(ops * 80e-6)
    assert base["host_path_s"]["forward_backward"] == pytest.approx(ops * 53.7e-6)


def test_bench_host_json_feeds_a_calibration_file(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from mlsyscalc.bench.cases import host
    from mlsyscalc.cli.main import cli

    real = host.probe
    monkeypatch.setattr(host, "probe", lambda spec, ceilings, device, reps: {
        **real(spec, ceilings, device, reps, timer=_fake_timer), "host_launch_s": 6e-6})
    out = tmp_path / "host.jsonl"
    result = CliRunner().invoke(cli, ["bench", "host", "gpt2", "--cpu", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["host"]["s_per_layer"] == pytest.approx(0.0105 / 12) and data["host"]["launch_s"] == 6e-6
    assert [r["kernel"] for r in data["rows"]] == ["host.train", "host.decode", "host.launch"]
    assert len(out.read_text().splitlines()) == 3
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"gpu": "H100-SXM", "host": data["host"]}))
    roof = json.loads(CliRunner().invoke(cli, ["roofline", "gpt2", "--phase", "decode", "--context", "100", "--impl",
                                               "torch", "--launch", "eager", "--calibration", str(cal),
                                               "--json"]).output)
    assert roof["totals"]["host_path_s"] == pytest.approx(0.0105)  # 12 layers x (10.5 ms / 12)
