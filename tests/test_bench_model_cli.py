"""`mlsys bench model` on the CPU (a smoke test of the path; times are CPU times) and the triton
kernel path of the builder under TRITON_INTERPRET=1 against the torch path."""

from __future__ import annotations

from dataclasses import replace

import json
import os

import pytest

torch = pytest.importorskip("torch")

from mlsyscalc.cli.main import cli  # noqa: E402

TINY = ["--set", "num_hidden_layers=2", "--set", "hidden_size=64", "--set", "intermediate_size=96",
        "--set", "num_attention_heads=4", "--set", "num_key_value_heads=2", "--set", "vocab_size=97"]


def _run(args):
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, args)
    return result


@pytest.mark.parametrize("phase,extra", [("prefill", ["--mode", "eager"]), ("decode", ["--mode", "eager"]), ("train", ["--mode", "eager"])])
def test_cpu_rows_carry_the_roofline_prediction(tmp_path, phase, extra):
    out = tmp_path / "rows.jsonl"
    result = _run(["bench", "model", "llama3-8b", *TINY, "--phase", phase, "--batch", "1,2", "--seq", "16",
                   "--cpu", "--reps", "1", "--quiet", "--out", str(out), "--json", *extra])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = data["rows"]
    assert [r["extra_batch"] for r in rows] == [1, 2] and all(r["error"] is None for r in rows)
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
    from mlsyscalc.specs.lookup import load_model
    from mlsyscalc.specs.lookup import parse_overrides

    spec = load_model("llama3-8b", parse_overrides(TINY[1::2]))
    for row in rows:
        opts = (RooflineOptions(phase="decode", batch=row["extra_batch"], context=16) if phase == "decode"
                else RooflineOptions(phase=phase, batch=row["extra_batch"], seq=16))
        # the rows compare with the kernels plain PyTorch runs (impl torch), the last position's
        # logits in prefill, bf16 AdamW states in training and, for these eager rows, the host's path
        # per layer, as the benchmarked model does
        opts = replace(opts, impl="torch", logits="last" if phase == "prefill" else "all",
                       master_weights=phase != "train", launch="eager")
        want = predict_model(spec, load_ceilings("H100-SXM"), opts).time_s * 1e3
        assert row["predicted_ms"] == pytest.approx(want, rel=1e-12)
        assert row["median_ms"] > 0
    assert len(out.read_text().splitlines()) == 2
    again = json.loads(_run(["bench", "model", "llama3-8b", *TINY, "--phase", phase, "--batch", "1,2", "--seq",
                             "16", "--cpu", "--quiet", "--out", str(out), "--json", *extra]).output)
    assert [r["median_ms"] for r in again["rows"]] == [r["median_ms"] for r in rows]  # resumed, not re-run
    assert len(out.read_text().splitlines()) == 2


def test_a_graph_replayed_training_step_is_priced_without_the_host_path(tmp_path):
    """--mode graph on a training step: the row is the replay (no host path priced); by default a
    one-GPU training step gets both rows, a multi-GPU one the eager row only."""
    from mlsyscalc.bench.cases.model import model_cases
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    result = _run(["bench", "model", "llama3-8b", *TINY, "--phase", "train", "--seq", "16", "--mode", "graph",
                   "--cpu", "--reps", "1", "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)["rows"][0]
    assert row["baseline"] == "graph" and row["extra_mode"] == "graph" and row["error"] is None
    spec = load_model("llama3-8b", parse_overrides(TINY[1::2]))
    base = RooflineOptions(phase="train", seq=16, impl="torch", master_weights=False)
    graph = predict_model(spec, load_ceilings("H100-SXM"), replace(base, launch="graph"))
    eager = predict_model(spec, load_ceilings("H100-SXM"), base)
    assert row["predicted_ms"] == pytest.approx(graph.time_s * 1e3, rel=1e-12)
    assert graph.host_path_s == 0 < eager.host_path_s and graph.time_s < eager.time_s  # tiny: host-bound eager
    assert [c.mode for c in model_cases("train", [1], [16])] == ["graph", "eager"]
    assert [c.mode for c in model_cases("train", [1], [16], dp=2)] == ["eager"]
    assert [c.mode for c in model_cases("train", [1], [16], tp=2)] == ["eager"]


def test_layers_scale_the_comparison_and_say_so():
    result = _run(["bench", "model", "llama3-8b", *TINY[:1], "num_hidden_layers=8", *TINY[2:], "--phase", "prefill",
                   "--seq", "16", "--layers", "2", "--cpu", "--reps", "1", "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    row = data["rows"][0]
    assert row["extra_layers"] == 2 and row["extra_full_layers"] == 8 and "L2/8" in row["shape"]
    ratio = row["extra_full_predicted_s"] / (row["predicted_ms"] * 1e-3)
    assert row["extra_full_estimated_s"] == pytest.approx(row["median_ms"] * 1e-3 * ratio)
    assert any("--layers" in note for note in data["notes"])


@pytest.mark.parametrize("args,message", [
    (["--phase", "train", "--dtype", "int4", "--kernels", "triton"], "weight-only"),
    (["--phase", "prefill", "--batch", "0"], "positive"),
    (["--phase", "prefill", "--batch", "x"], "integers"),
    (["--phase", "train", "--fsdp"], "torchrun"),
    (["--phase", "prefill", "--tp", "2"], "torchrun"),
])
def test_bad_input_exits_2(args, message):
    result = _run(["bench", "model", "llama3-8b", *TINY, "--cpu", *args])
    assert result.exit_code == 2 and message in result.output


def test_moe_decode_has_graph_and_eager_rows():
    """The experts' grouped GEMMs keep the per-expert counts on the device, so an MoE model gets its
    graph row as well as the eager one (no refusal)."""
    result = _run(["bench", "model", "mixtral-8x7b", *TINY, "--set", "num_local_experts=4", "--phase", "decode",
                   "--seq", "8", "--cpu", "--reps", "1", "--quiet", "--json"])
    rows = json.loads(result.output)["rows"]
    assert [r["baseline"] for r in rows] == ["graph", "eager"]
    assert all(r["error"] is None and r["median_ms"] > 0 for r in rows)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU tensors through Triton's interpreter (on a GPU the bench's correctness gate checks "
                           "the same kernels in bf16 on every --kernels triton row)")
def test_triton_kernels_match_torch_in_the_interpreter():
    """Flash attention (prefill) and paged decode inside the model reproduce the torch path's
    logits (fp32 weights, Triton's CPU interpreter)."""
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    spec = load_model("llama3-8b", parse_overrides(TINY[1::2]))
    torch.manual_seed(0)
    ref = build_model(spec, "float32", "cpu")
    tri = build_model(spec, "float32", "cpu", kernels="triton")
    tri.load_state_dict(ref.state_dict())
    ids = torch.randint(0, spec.vocab_size, (2, 8))
    want = ref.logits(ids)
    caches = tri.new_caches(2, 8)
    assert caches[0][0].shape[1] == 64  # whole pages
    torch.testing.assert_close(tri.prefill(ids[:, :7], caches), want[:, 6], rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(tri.decode(ids[:, 7:8], caches, 7), want[:, 7], rtol=2e-3, atol=2e-3)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the CPU gate runs in Triton's interpreter")
def test_triton_rows_pass_the_correctness_gate_on_cpu():
    """The gate runs the same step with the torch attention path: in the interpreter they agree."""
    from mlsyscalc.bench.cases.model import GATE_TOL, ModelCase, _gate
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    spec = load_model("llama3-8b", parse_overrides(TINY[1::2]))
    model = build_model(spec, "float32", "cpu", kernels="triton")
    err = _gate(model, spec, ModelCase("decode", 2, 9, False, "triton"), "cpu")
    assert err < 1e-4 < GATE_TOL
    assert all(m.kernels == "triton" for m in model.modules() if hasattr(m, "kernels"))
