"""`mlsys bench fused`: its cases (shapes, bytes, names), a CPU interpreter run through the CLI, bad input,
and the reports/fused page written from rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlsyscalc.bench.cases import fused as F
from mlsyscalc.bench.rows import ResultStore, Row
from mlsyscalc.calc.roofline.fused_ops import fused_bytes, predict_fused
from mlsyscalc.report.bench import regenerate


def test_train_sweep_covers_every_op_and_pass_within_the_tensor_cap():
    cases = F.bench_cases(sweep="train")
    assert cases[0].kernel == "torch_copy" and cases[0].bytes == 2 * 2**30
    kernels = {c.kernel for c in cases[1:]}
    assert kernels == {f"triton_{op}_{p}" for op in F.OPS for p in F.passes_of(op)}
    assert len({c.key for c in cases}) == len(cases) == 426
    glu = [c.shape for c in cases if c.kernel == "triton_swiglu_fwd"]
    assert "65536x14336" in glu and "65536x28672" not in glu   # (65536, 2 x 28672) bf16 is 7 GiB
    ce = [c.shape for c in cases if c.kernel == "triton_cross_entropy_fwdbwd"]
    assert "16384x128256" in ce and "16384x151936" not in ce and len(ce) == 13
    assert {c.shape for c in cases if c.kernel == "triton_rotary_fwd"} >= {"1x8x128", "65536x128x128"}


def test_case_bytes_are_calc_counts_and_unpriced_off_a_gpu():
    (case,) = [c for c in F.bench_cases(("rotary",), ("bwd",), "goals") if c.shape == "4096x32x128"]
    assert case.bytes == sum(fused_bytes("rotary_bwd", 4096, 32 * 128, "bfloat16", head_dim=128))
    assert case.predicted_ms is None   # the card is unknown here: no prediction to compare with
    assert F.price_ms("rotary_bwd", 4096, 4096, "bf16", "H200", head_dim=128) == \
        predict_fused("rotary_bwd", 4096, 4096, "bf16", "H200", head_dim=128).predicted_s * 1e3


def test_bad_choices_are_mlsys_errors():
    with pytest.raises(ValueError, match="small sweep only"):
        F.bench_cases(sweep="train", small=True)
    with pytest.raises(ValueError, match="fwdbwd"):
        F.bench_cases(("cross_entropy",), ("fwd",))


@pytest.mark.parametrize("args,message", [(["--sweep", "train"], "small sweep only"),
                                          (["--op", "cross_entropy", "--pass", "bwd"], "fwdbwd")])
def test_cli_bad_input_exits_2_with_one_line(args, message):
    proc = subprocess.run([sys.executable, "-m", "mlsyscalc", "bench", "fused", "--interpret", *args],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.interpret
def test_interpret_run_gates_and_records_each_row(tmp_path):
    out = tmp_path / "fused" / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "mlsyscalc", "bench", "fused", "--interpret", "--quiet",
                           "--op", "layernorm", "--op", "cross_entropy", "--pass", "bwd", "--pass", "fwdbwd",
                           "--out", str(out), "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert [r["kernel"] for r in rows] == ["torch_copy"] + ["triton_layernorm_bwd"] * 4 + \
        ["triton_cross_entropy_fwdbwd"] * 2
    assert all(r["ok"] and r["rel_err"] < 5e-3 and r["error"] is None for r in rows)
    ln = rows[1]
    assert (ln["extra_op"], ln["extra_pass"], ln["extra_tokens"], ln["extra_width"]) == ("layernorm", "bwd", 1, 40)
    assert ln["bytes"] == ln["extra_read_bytes"] + ln["extra_write_bytes"]
    assert ln["extra_partial_bytes"] == 2 * 4 * ln["extra_programs"] * 40 * 2   # dw and db partials
    assert len(ResultStore(out).rows()) == len(rows)


ENV = {"backend": "cuda", "gpu": "NVIDIA H200", "sm_count": 132, "torch": "2.11.0+cu130", "triton": "3.6.0",
       "git_commit": "abc1234"}


def _row(kernel: str, shape: str, ms: float, base_ms: float, tokens: int, width: int, **extra) -> Row:
    op, pass_ = kernel[len("triton_"):].rsplit("_", 1)
    nbytes = sum(fused_bytes(f"{op}_{pass_}", tokens, width, "bfloat16", **extra))
    return Row(kernel, "F.rms_norm", shape, "bfloat16", ok=True, rel_err=1e-3, median_ms=ms, baseline_median_ms=base_ms,
               bytes=nbytes, env=ENV, measured_at="2026-12-02T00:00:00+00:00",
               extra={"op": op, "pass": pass_, "tokens": tokens, "width": width, **extra}).finish()


def test_page_names_the_card_and_prices_every_row(tmp_path):
    folder = tmp_path / "fused"
    store = ResultStore(folder / "rows.jsonl")
    copy = Row("torch_copy", "", "1073741824B", "bfloat16", ok=True, median_ms=0.5, bytes=2.0 * 2**30,
               env=ENV, extra={"op": "copy"}).finish()
    rows = [copy, _row("triton_rmsnorm_fwd", "4096x4096", 0.03, 0.04, 4096, 4096),
            _row("triton_rotary_bwd", "4096x32x128", 0.03, 0.09, 4096, 4096, head_dim=128)]
    for r in rows:
        store.append(r)
    (page,) = regenerate(tmp_path)
    text = page.read_text()
    assert "NVIDIA H200" in text and "torch 2.11.0+cu130" in text and "abc1234" in text
    assert f"Generated by `mlsys bench report {tmp_path}`" in text
    assert "## rmsnorm fwd" in text and "## rotary bwd" in text and (folder / "gbps_vs_bytes.png").exists()
    predicted = predict_fused("rmsnorm_fwd", 4096, 4096, "bfloat16", "H200").predicted_s * 1e6
    assert f"| {predicted:.1f} |" in text                                # re-priced on the H200 datasheet
    assert f"{100 * rows[1].GBps / copy.GBps:.0f}%" in text              # fraction of the measured copy


def test_the_held_out_sweeps_share_no_token_count_or_width_with_the_train_sweep_or_each_other():
    from mlsyscalc.bench.cases.fused import GRIDS

    for family in GRIDS["train"]:
        sweeps = ("train", "heldout", "fresh", "blind", "reserve")
        seen = [set(GRIDS[s][family][0]) for s in sweeps]
        widths = [set(GRIDS[s][family][1]) for s in sweeps]
        for a in range(len(sweeps)):
            for b in range(a + 1, len(sweeps)):
                assert not seen[a] & seen[b], (family, a, b)
                assert not widths[a] & widths[b], (family, a, b)
