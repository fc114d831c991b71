"""Zero-bubble 1F1B and DualPipe (`--schedule zb1p|dualpipe`): the bubbles of the DeepSeek-V3 report's Table 2,
written out by hand from the slowest stage's f, b and weight-gradient w; memory as 1F1B's (zb1p) or of two stages
a rank (dualpipe); the rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc import load_model
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.train.step import pipeline_bubble_s, train_step
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.calc.train.parts import pipeline_stages, roofline_pass, stage_parts, stage_wgrad_s

ARGS = ("train", "llama2-7b", "--gpus", "8", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "16",
        "--pp", "8", "--dp", "1", "--micro-batch", "1")


def test_bubbles_by_hand():
    f, b, w = 3.0, 5.0, 2.0
    assert pipeline_bubble_s("1f1b", 8, 1, f, b, w) == 7 * 8.0
    assert pipeline_bubble_s("gpipe", 8, 1, f, b, w) == 7 * 8.0
    assert pipeline_bubble_s("1f1b", 8, 2, f, b, w) == 7 / 2 * 8.0
    assert pipeline_bubble_s("zb1p", 8, 1, f, b, w) == 7 * (8.0 - 4.0)
    assert pipeline_bubble_s("dualpipe", 8, 1, f, b, w) == 3 * (3.0 + 10.0 - 6.0)
    assert pipeline_bubble_s("zb1p", 8, 1, 1.0, 1.0, 1.5) == 0.0  # never negative


def test_weight_gradient_seconds_are_the_wgrad_rows():
    """w of a stage: its layers' wgrad GEMMs (and the embedding's backward on the first stage, the head's wgrad on
    the last), a part of the backward."""
    spec, ceil = load_model("llama2-7b"), load_ceilings("H100-SXM")
    result = roofline_pass(spec, ceil, tp=1, cp=1, micro_batch=1, seq=2048, dtype="bf16")
    parts = stage_parts(spec, result, sp=False)
    rows = [r for r in result.rows if r.pass_name == "backward" and r.layers == "layers"
            and r.pred.name.endswith(".wgrad")]
    per_layer = sum(r.total_s for r in rows) / spec.num_layers
    assert parts.wgrad_s["dense"] == pytest.approx(per_layer, rel=1e-12) and per_layer > 0
    first, middle, last = pipeline_stages(spec, 4, 1)[0], pipeline_stages(spec, 4, 1)[1], pipeline_stages(spec, 4, 1)[3]
    assert stage_wgrad_s(parts, middle) == pytest.approx(8 * per_layer, rel=1e-12)
    assert stage_wgrad_s(parts, first) == pytest.approx(8 * per_layer + parts.first_s["backward"], rel=1e-12)
    assert stage_wgrad_s(parts, middle) < stage_wgrad_s(parts, last) < 8 * parts.layer_s["dense"]["backward"] + \
        parts.last_s["backward"]


def test_train_moves_only_the_bubble_and_dualpipe_doubles_the_states(run_cli):
    one = run_cli.json(*ARGS)
    zb = run_cli.json(*ARGS, "--schedule", "zb1p")
    dual = run_cli.json(*ARGS, "--schedule", "dualpipe")
    for other in (zb, dual):
        assert {k: v for k, v in other["breakdown"].items() if k != "bubble_s"} == pytest.approx(
            {k: v for k, v in one["breakdown"].items() if k != "bubble_s"}, rel=1e-12)
        assert other["step_time_s"] == pytest.approx(sum(other["breakdown"].values()), rel=1e-12)
    assert dual["breakdown"]["bubble_s"] < zb["breakdown"]["bubble_s"] < one["breakdown"]["bubble_s"]
    assert zb["memory_bytes_per_gpu"] == one["memory_bytes_per_gpu"]
    # rank 1 of 8 holds stages 1 and 6: 8 decoder layers where 1F1B's rank 1 holds 4
    spec = load_model("llama2-7b")
    mem = {s: train_memory(spec, TrainOptions(seq=2048, pp=8, grad_accum=16, schedule=s)) for s in ("1f1b", "dualpipe")}
    assert mem["dualpipe"].stages[1].breakdown["weights"] == 2 * mem["1f1b"].stages[1].breakdown["weights"]
    assert mem["dualpipe"].stages[1].micro_batches_in_flight == 9  # pp + 1
    # the ends: ranks 0 and 7 both hold the embedding and the head (as stages 0 and 7 together)
    assert mem["dualpipe"].stages[0].params == mem["dualpipe"].stages[7].params == \
        mem["1f1b"].stages[0].params + mem["1f1b"].stages[7].params


@pytest.mark.parametrize("extra,message", [
    (("--pp", "7", "--gpus", "7", "--global-batch", "14", "--decoder-first-pipeline-num-layers", "2"), "--pp must be even"),
    (("--global-batch", "4", "--dp", "1"), "an even count of at least --pp 8"),
    (("--framework", "torch"), "priced for Megatron-style code"),
])
def test_dualpipe_rules_exit_2(run_cli, extra, message):
    args = list(ARGS)
    for flag in ("--pp", "--gpus", "--global-batch", "--dp"):
        if flag in extra:
            i = args.index(flag)
            del args[i:i + 2]
    code, _, err = run_cli(*args, *extra, "--schedule", "dualpipe")
    assert code == 2 and message in err and "Traceback" not in err


def test_zero_bubble_has_no_interleaving(run_cli):
    code, _, err = run_cli(*ARGS, "--vp", "2", "--schedule", "zb1p")
    assert code == 2 and "--vp interleaves the 1F1B schedule: not with --schedule zb1p" in err


@settings(max_examples=25, deadline=None)
@given(pp=st.sampled_from([2, 4, 8]), m_per_pp=st.integers(1, 4), recompute=st.sampled_from(["none", "selective", "full"]),
       micro_batch=st.sampled_from([1, 2]))
def test_schedules_never_lengthen_1f1b_or_go_negative(pp, m_per_pp, recompute, micro_batch):
    """Over pipeline depths, micro-batch counts and recomputation: every schedule's step is its parts' sum, no part is
    negative, zero-bubble 1F1B is never slower than 1F1B, and the schedules differ in the bubble alone."""
    spec, ceil = load_model("llama2-7b"), load_ceilings("H100-SXM")
    m = m_per_pp * pp  # even (pp is) and at least pp: DualPipe's rule
    steps = {}
    for schedule in ("1f1b", "zb1p", "dualpipe"):
        opts = TrainStepOptions(gpus=pp, pp=pp, seq=2048, micro_batch=micro_batch, global_batch=micro_batch * m,
                                recompute=recompute, schedule=schedule)
        s = train_step(spec, ceil, "hgx-h100", opts)
        assert all(v >= 0 for v in s.breakdown.values())
        assert s.step_time_s == pytest.approx(sum(s.breakdown.values()), rel=1e-12)
        steps[schedule] = s
    assert steps["zb1p"].step_time_s <= steps["1f1b"].step_time_s
    for other in ("zb1p", "dualpipe"):
        assert steps[other].step_time_s - steps[other].breakdown["bubble_s"] == pytest.approx(
            steps["1f1b"].step_time_s - steps["1f1b"].breakdown["bubble_s"], rel=1e-12)
