"""Value tests for the planner, the training step's rules and overlap, the calibration ceilings, the
calibration fit and the scaling tables: what a random sample of planted bugs showed no test pinned.

Every expectation is hand arithmetic written out here from a documented formula (the module
docstrings, docs/train.md, docs/plan.md, docs/models.md, docs/roofline.md), a published table
(Hoffmann et al. 2022), the definition of an algorithm (Nelder & Mead 1965), or another module
computing the same quantity (train_step for the planner's search, adamw_op for the optimizer
time); none compares a function with itself. Fitted efficiencies and measured figures are not
pinned: only rules, formulas, bounds and documented defaults.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from mlsyscalc.calc.calibration import (CALIBRATED_EFFICIENCY, calibrated_ceilings, datasheet_ceilings,
                                        load_ceilings, match_gpu)
from mlsyscalc.calc.calibration_fit import Observation, Term, _nelder_mead, fit, loss
from mlsyscalc.calc.plan import _Memo, _search, plan
from mlsyscalc.calc.plan_space import PlanOptions, execution_options, parse_fix, structures
from mlsyscalc.calc.roofline_train import adamw_op
from mlsyscalc.calc.train import optimizer_s, resolve_cluster, train_step
from mlsyscalc.calc.train_comm import Windows, contention_s, dim_times
from mlsyscalc.calc.train_options import TrainStepOptions
from mlsyscalc.calc.train_parts import roofline_pass, stage_parts
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("H100-SXM")
HGX = load_cluster("hgx-h100")  # 8 H100 a node, NVLink inside, one NIC a GPU between nodes


# --- train_comm: which traffic is exposed (module docstring of calc.train_comm) --------------------

# one micro-batch of the slowest stage: forward 1 s, backward 2 s, attention 0.5 s; m = 4 micro-batches,
# so the step's kernels take m (f + b) = 12 s and its attention m a = 2 s
W = Windows(forward_s=1.0, backward_s=2.0, attention_s=0.5, micro_batches=4)


@pytest.mark.parametrize("zero,exposed", [
    (0, (10 - 2) + (6 - 1)),   # ZeRO 0-1: gradients behind the last backward (2 s), params behind the first forward (1 s)
    (1, (10 - 2) + (6 - 1)),
    (2, max(0, 10 - 2 * 4) + (6 - 1)),  # ZeRO-2: the reduce-scatter hides behind every backward: m b = 8 s
    (3, (10 + 6) - 12),  # ZeRO-3: gathers and reduce-scatters behind forward + backward of every micro-batch
])
def test_dp_traffic_exposed_per_zero_stage(zero, exposed):
    seconds = {("dp", "grad"): 10.0, ("dp", "param"): 6.0}
    total, shown = dim_times(seconds, zero=zero, recompute="none", overlap=("dp",), windows=W)
    assert total["dp"] == 16.0 and shown["dp"] == exposed
    # not overlapped: all of it is exposed, whatever the stage
    _, plain = dim_times(seconds, zero=zero, recompute="none", overlap=(), windows=W)
    assert plain["dp"] == 16.0


def test_model_traffic_windows_and_full_recompute_factors():
    # tp hides behind all kernels (12 s), cp behind the attention kernels (m a = 2 s); full
    # recomputation repeats TP's forward all-reduces (x 1.5) and CP's forward K,V gather (x 4/3)
    seconds = {("tp", "model"): 20.0, ("cp", "model"): 3.0, ("pp", "model"): 0.5}
    total, shown = dim_times(seconds, zero=0, recompute="none", overlap=("tp", "cp"), windows=W)
    assert (total["tp"], shown["tp"], total["cp"], shown["cp"]) == (20.0, 8.0, 3.0, 1.0)
    assert shown["pp"] == total["pp"] == 0.5 and shown["dp"] == 0.0
    total, shown = dim_times(seconds, zero=0, recompute="full", overlap=("tp", "cp"), windows=W)
    assert (total["tp"], shown["tp"]) == (30.0, 18.0)
    assert total["cp"] == pytest.approx(4.0, rel=1e-15) and shown["cp"] == pytest.approx(2.0, rel=1e-15)


def test_contention_is_the_sm_share_of_hidden_seconds():
    # hidden = total - exposed per overlapped dimension: dp 16 - 13 = 3 s, tp 20 - 8 = 12 s (pp not
    # overlapped: ignored); 16 of 64 SMs held -> a quarter of 15 s
    total = {"dp": 16.0, "tp": 20.0, "pp": 5.0, "cp": 0.0, "ep": 0.0}
    exposed = {"dp": 13.0, "tp": 8.0, "pp": 5.0, "cp": 0.0, "ep": 0.0}
    assert contention_s(total, exposed, ("dp", "tp"), 16 / 64) == 0.25 * 15
    assert contention_s(total, exposed, (), 0.25) == 0.0


# --- train_options: the layout rules and defaults (docs/train.md) ---------------------------------

def test_train_options_defaults():
    # one GPU, plain data parallelism (ZeRO 0), sp on (inert at tp 1); `plan` shares these defaults
    o = TrainStepOptions()
    assert (o.gpus, o.global_batch, o.micro_batch, o.zero, o.sp, o.comm_sms) == (1, 1, 1, 0, True, 16)
    assert PlanOptions().base() == o


def test_sequence_parallel_is_active_from_tp_2():
    assert TrainStepOptions(gpus=2, tp=2).sp_active and TrainStepOptions(gpus=2, tp=2).layout()["sp"] is True
    assert not TrainStepOptions(gpus=2, tp=1).sp_active and not TrainStepOptions(gpus=2, tp=2, sp=False).sp_active


@pytest.mark.parametrize("change,message", [
    (dict(comm_sms=-1), "--comm-sms must be a non-negative integer"),
    (dict(comm_sms=1.5), "--comm-sms must be a non-negative integer"),
    (dict(capacity_factor=100.0), "--capacity-factor must be in (0, 100)"),
    (dict(capacity_factor=0.0), "--capacity-factor must be in (0, 100)"),
    (dict(micro_batch=0), "--micro-batch must be a positive integer"),
    (dict(vp=0), "--vp must be a positive integer"),
    (dict(gpus=1.5), "--gpus must be a positive integer"),
])
def test_bad_train_options_name_the_option(change, message):
    with pytest.raises(MlsysError, match=message.replace("(", r"\(").replace(")", r"\)")):
        replace(TrainStepOptions(gpus=8, global_batch=8), **change).validate(load_model("llama2-7b"), HGX)


@pytest.mark.parametrize("change", [dict(comm_sms=0), dict(capacity_factor=99.5), dict(micro_batch=1)])
def test_boundary_train_options_are_accepted(change):
    # comm_sms 0 means overlap is free (documented); the capacity factor's range is open at 100
    replace(TrainStepOptions(gpus=8, global_batch=8), **change).validate(load_model("llama2-7b"), HGX)


def test_tp_must_divide_the_node():
    # rule TP within a node: tp <= 8 and 8 % tp == 0; tp 3 is at most 8 but does not divide it
    spec = load_model("llama2-7b")
    with pytest.raises(MlsysError, match="rule TP within a node: --tp 3 must divide the 8 GPUs"):
        TrainStepOptions(gpus=3, tp=3, sp=False).check_layout(spec, HGX)
    with pytest.raises(MlsysError, match="rule TP within a node: --tp 16"):
        TrainStepOptions(gpus=16, tp=16, sp=False).check_layout(spec, HGX)


def test_one_full_node_needs_no_inter_node_link():
    # a node of 8 without a network: 8 GPUs are one node (allowed), 16 span two (refused)
    spec, lone = load_model("llama2-7b"), replace(HGX, inter=None)
    TrainStepOptions(gpus=8, global_batch=8).check_layout(spec, lone)
    with pytest.raises(MlsysError, match="16 GPUs span nodes"):
        TrainStepOptions(gpus=16, global_batch=16).check_layout(spec, lone)


# --- train: cluster choice and the optimizer's parameter count ---------------------------------------

@pytest.mark.parametrize("gpu,cluster", [("H100-SXM", "hgx-h100"), ("A100-80GB-SXM", "dgx-a100"),
                                         ("H200", "hgx-h200"), ("L40S", "pcie-l40s")])
def test_resolve_cluster_picks_the_gpus_own_cluster(gpu, cluster):
    # the built-in cluster made of that GPU (clusters/*.json name their GPU)
    for gpus in (8, 64):
        got = resolve_cluster(gpu, None, gpus)
        assert got.name == cluster and got.gpu == gpu


def test_resolve_cluster_without_a_cluster_of_that_gpu():
    with pytest.raises(MlsysError, match="no built-in cluster of B200 GPUs"):
        resolve_cluster("B200", None, 8)


def test_optimizer_counts_sharded_parameters():
    # ZeRO >= 1: dense parameters over dp x cp = 4 ranks, routed experts over 4 / ep = 2 (ep 2):
    # 1e9 / 4 + 4e8 x 2 / 4 = 4.5e8 parameters on the fullest stage; ZeRO 0: all 1.4e9
    counts = ((1_000_000_000, 400_000_000), (600_000_000, 0))
    for zero, params in ((1, 450_000_000), (3, 450_000_000), (0, 1_400_000_000)):
        got = optimizer_s(counts, zero, 4, 2, "bf16", H100)
        assert got == adamw_op(params, "bf16", H100).predicted_s
    # a stage with no parameters still runs one AdamW kernel over (at least) one parameter
    assert optimizer_s(((0, 0),), 0, 1, 1, "bf16", H100) == adamw_op(1, "bf16", H100).predicted_s
    assert adamw_op(1, "bf16", H100).predicted_s != adamw_op(2, "bf16", H100).predicted_s


# --- train_parts: per-stage kernel time from the roofline rows (module docstring) ------------------

def test_context_parallel_rank_sees_half_the_earlier_keys():
    # cp 2 on seq 4096: each rank holds 2048 query tokens against (4096 - 2048) / 2 = 1024 earlier keys
    result = roofline_pass(load_model("llama2-7b"), H100, tp=1, cp=2, micro_batch=1, seq=4096, dtype="bf16")
    assert (result.options.seq, result.options.context) == (2048, 1024)
    result = roofline_pass(load_model("llama2-7b"), H100, tp=1, cp=4, micro_batch=1, seq=4096, dtype="bf16")
    assert (result.options.seq, result.options.context) == (1024, 1536)


def _layer_forward(result, kind_layers, scale):
    rows = [r for r in result.rows if r.pass_name == "forward" and r.layers == kind_layers]
    return sum(scale(r) * r.total_s for r in rows)


def test_sequence_parallel_divides_only_the_norms_by_tp():
    # llama2-7b at tp 2: one layer's forward is the roofline's layer rows / 32 layers, with the
    # norm group (norms, residual adds) on tokens / tp under sp, unchanged without it
    spec = load_model("llama2-7b")
    result = roofline_pass(spec, H100, tp=2, cp=1, micro_batch=1, seq=2048, dtype="bf16")
    plain = _layer_forward(result, "layers", lambda r: 1.0) / 32
    with_sp = _layer_forward(result, "layers", lambda r: 0.5 if r.group == "norm" else 1.0) / 32
    assert with_sp < plain
    assert stage_parts(spec, result, sp=False).layer_s["dense"]["forward"] == pytest.approx(plain, rel=1e-12)
    assert stage_parts(spec, result, sp=True).layer_s["dense"]["forward"] == pytest.approx(with_sp, rel=1e-12)
    # at tp 1 sp has nothing to split
    one = roofline_pass(spec, H100, tp=1, cp=1, micro_batch=1, seq=2048, dtype="bf16")
    assert stage_parts(spec, one, sp=True).layer_s == stage_parts(spec, one, sp=False).layer_s


def test_capacity_factor_pads_only_the_routed_experts():
    # mixtral: every layer is MoE; routed-expert matmuls x capacity factor 1.5, the rest unchanged
    spec = load_model("mixtral-8x7b", {"num_hidden_layers": 2})
    result = roofline_pass(spec, H100, tp=1, cp=1, micro_batch=1, seq=1024, dtype="bf16")
    want = _layer_forward(result, "moe layers", lambda r: 1.5 if r.pred.name.startswith("experts.") else 1.0) / 2
    base = _layer_forward(result, "moe layers", lambda r: 1.0) / 2
    assert want > base
    assert stage_parts(spec, result, sp=False, capacity_factor=1.5).layer_s["moe"]["forward"] == pytest.approx(
        want, rel=1e-12)


# --- plan_space: --fix parsing and the enumeration rules (module docstring) ------------------------

@pytest.mark.parametrize("word,value", [("true", True), ("on", True), ("1", True), ("yes", True),
                                        ("false", False), ("off", False), ("0", False), ("no", False),
                                        ("ON", True), ("Off", False)])
def test_fix_sp_words(word, value):
    assert parse_fix((f"sp={word}",)) == (("sp", value),)


def test_fix_counts_and_their_lower_bounds():
    # ZeRO counts from 0, every other axis from 1; "micro-batch" is spelled with a dash on the CLI
    assert parse_fix(("zero=0", "tp=1", "micro-batch=2", "recompute=full")) == (
        ("zero", 0), ("tp", 1), ("micro_batch", 2), ("recompute", "full"))
    for bad in ("tp=0", "pp=0", "zero=-1", "tp=x", "dp=1.5"):
        with pytest.raises(MlsysError, match="not a valid count"):
            parse_fix((bad,))


def test_execution_options_are_every_zero_and_recompute():
    modes = ("none", "selective", "full")
    assert execution_options(PlanOptions()) == [(z, r) for z in (0, 1, 2, 3) for r in modes]
    assert execution_options(PlanOptions(fix=(("zero", 0),))) == [(0, r) for r in modes]
    assert execution_options(PlanOptions(fix=(("zero", 2), ("recompute", "full")))) == [(2, "full")]


def test_sp_is_searched_on_unless_fixed_off():
    # tp > 1 layouts come with sp on; --fix sp=off searches only those without; tp 1 never has sp
    spec, opts = load_model("gpt2"), PlanOptions(gpus=4, seq=1024, global_batch=4, max_micro_batch=1)
    free = list(structures(spec, HGX, opts))
    off = list(structures(spec, HGX, replace(opts, fix=(("sp", False),))))
    on = list(structures(spec, HGX, replace(opts, fix=(("sp", True),))))
    assert {c.sp for c in free if c.tp > 1} == {True} and {c.sp for c in off if c.tp > 1} == {False}
    assert {c.sp for c in free if c.tp == 1} == {False}
    key = lambda c: (c.tp, c.pp, c.data_parallel, c.cp, c.ep, c.vp, c.micro_batch)  # noqa: E731
    assert sorted(map(key, off)) == sorted(map(key, free)) == sorted(map(key, on))
    assert any(c.tp > 1 for c in off)


# --- plan: progress and the memoised search against train_step -------------------------------------

def test_plan_reports_progress_per_layout():
    # progress(done, total): after each layout, done grows by the execution grid (12) up to the total
    spec, opts = load_model("gpt2"), PlanOptions(gpus=2, seq=1024, global_batch=2, top=1)
    calls: list[tuple[int, int]] = []
    result = plan(spec, H100, HGX, opts, progress=lambda done, total: calls.append((done, total)))
    n = result.searched
    assert calls == [(12 * (i + 1), n) for i in range(n // 12)] and n == 12 * len(list(structures(spec, HGX, opts)))


def test_memoised_search_follows_moe_layers_across_model_chunks():
    """A model whose MoE layers sit unevenly over the stages (deepseek-v3 cut to 12 layers, the first 10
    dense): with pp 3 the busiest stage holds 2 MoE layers at vp 1, 1 at vp 2 and 4, so the EP traffic
    is not linear in vp. The plan's memoised step time must still be train_step's."""
    spec = load_model("deepseek-v3", {"num_hidden_layers": 12, "first_k_dense_replace": 10})
    opts = PlanOptions(gpus=6, seq=512, global_batch=6, max_micro_batch=1,
                       fix=(("pp", 3), ("ep", 2), ("vp", 4), ("zero", 1), ("recompute", "none")))
    memo = _Memo(spec, H100, HGX, opts)
    layouts, grid = list(structures(spec, HGX, opts)), execution_options(opts)
    assert layouts and grid == [(1, "none")]
    step, _ = _search(memo, layouts, grid, None)
    for j, lay in enumerate(layouts):
        ref = train_step(spec, H100, HGX, replace(lay, zero=1, recompute="none"))
        assert step[j] == pytest.approx(ref.step_time_s, rel=1e-9), lay.layout()
