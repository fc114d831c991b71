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

import re

import math
from dataclasses import replace

import pytest

from mlsyscalc.calc.roofline.calibration import (CALIBRATED_EFFICIENCY, calibrated_ceilings, datasheet_ceilings,
                                        load_ceilings, match_gpu)
from mlsyscalc.calc.roofline.calibration_fit import Observation, Term, _nelder_mead, fit, loss
from mlsyscalc.calc.plan.search import _Memo, _search, plan
from mlsyscalc.calc.plan.space import PlanOptions, execution_options, parse_fix, structures
from mlsyscalc.calc.roofline.training import adamw_op
from mlsyscalc.calc.train.step import optimizer_s, resolve_cluster, train_step
from mlsyscalc.calc.comm.exposed import Windows, contention_s, dim_times, traffic
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.calc.train.parts import roofline_pass, stage_parts
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("H100-SXM")
HGX = load_cluster("hgx-h100")  # 8 H100 a node, NVLink inside, one NIC a GPU between nodes


# --- train_comm: which traffic is exposed (module docstring of calc.comm.exposed) --------------------

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
    # pp and ep, when overlapped, hide behind all of the step's kernels too
    total, shown = dim_times({("pp", "model"): 13.0, ("ep", "model"): 11.0}, zero=0, recompute="full",
                             overlap=("pp", "ep"), windows=W)
    assert (total["pp"], shown["pp"], total["ep"], shown["ep"]) == (13.0, 1.0, 11.0, 0.0)
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
    with pytest.raises(MlsysError, match="no built-in cluster of RTX-4090 GPUs"):
        resolve_cluster("RTX-4090", None, 8)


def test_optimizer_counts_sharded_parameters():
    # ZeRO >= 1: dense parameters over dp x cp = 4 ranks, routed experts over 4 / ep = 2 (ep 2):
    # 1e9 / 4 + 4e8 x 2 / 4 = 4.5e8 parameters on the fullest stage; ZeRO 0: all 1.4e9
    counts = ((1_000_000_000, 400_000_000), (600_000_000, 0))
    for zero, params in ((1, 450_000_000), (3, 450_000_000), (0, 1_400_000_000)):
        got = optimizer_s(counts, zero, 4, 2, "bf16", H100)
        assert got == adamw_op(params, "bf16", H100).step_s  # the kernel and the stream's gap before it
    # a stage with no parameters still runs one AdamW kernel over (at least) one parameter
    assert optimizer_s(((0, 0),), 0, 1, 1, "bf16", H100) == adamw_op(1, "bf16", H100).step_s
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


# --- calibration: ceilings from the datasheet or a calibration file (docs/roofline.md) ------------

H100_BF16, H100_BPS = 989.5e12, 3.35e12  # H100-SXM datasheet: dense bf16 FLOP/s, HBM3 bytes/s
MEASURED = {"gpu": "NVIDIA H100 80GB HBM3", "peak_flops": {"bf16": 800e12},
            "bandwidth_Bps": {"read": 2e12, "write": 3e12}}


def test_calibrated_copy_bandwidth_is_the_harmonic_mean():
    # measured ceilings are used at efficiency 1 (matmul, memory); a copy reads and writes as many
    # bytes: 2 / (1/2 + 1/3) TB/s = 2.4 TB/s, and the ridge is 800 TFLOP/s over it
    c = calibrated_ceilings(MEASURED)
    d = c.as_dict("bf16")
    assert c.gpu.name == "H100-SXM" and d["source"] == "calibration" and c.calibrated
    assert (d["read_Bps"], d["write_Bps"], d["matmul_flops_per_s"]) == (2e12, 3e12, 800e12)
    assert d["bandwidth_Bps"] == pytest.approx(2.4e12, rel=1e-12)
    assert d["ridge_flops_per_byte"] == pytest.approx(800e12 / 2.4e12, rel=1e-12)
    # reads and writes share the bus: their times add; an elementwise kernel unless told it is a GEMM
    assert c.memory_s(1e9, 1e9) == pytest.approx(1e9 / 2e12 + 1e9 / 3e12, rel=1e-12)
    skinny = CALIBRATED_EFFICIENCY.matmul_skinny
    assert c.memory_s(1e9, 1e9, skinny=True) == pytest.approx((1e9 / 2e12 + 1e9 / 3e12) / skinny, rel=1e-12)


def test_datasheet_ceilings_apply_the_efficiencies():
    c = datasheet_ceilings("H100-SXM")
    e = c.efficiency
    d = c.as_dict("bf16")
    assert d["read_Bps"] == d["write_Bps"] == pytest.approx(H100_BPS * e.memory, rel=1e-12)
    assert d["bandwidth_Bps"] == pytest.approx(H100_BPS * e.memory, rel=1e-12)
    assert d["ridge_flops_per_byte"] == pytest.approx(H100_BF16 * e.matmul / (H100_BPS * e.memory), rel=1e-12)
    assert c.memory_s(1e9, 2e9) == pytest.approx(3e9 / H100_BPS / e.memory, rel=1e-12)
    assert c.memory_s(1e9, 2e9, skinny=True) == pytest.approx(3e9 / H100_BPS / e.matmul_skinny, rel=1e-12)


def test_with_efficiency_changes_one_kind_and_names_unknown_ones():
    c = datasheet_ceilings("H100-SXM")
    half = c.with_efficiency(matmul=0.5, attention=0.25)
    assert half.flops_per_s("bf16") == H100_BF16 * 0.5 and half.flops_per_s("bf16", "attention") == H100_BF16 * 0.25
    assert half.efficiency.memory == c.efficiency.memory and half.read_ceiling_Bps == c.read_ceiling_Bps
    with pytest.raises(MlsysError, match="unknown efficiency bogus, flops"):
        c.with_efficiency(bogus=0.5, flops=0.5)


def test_unmeasured_bandwidth_falls_back_to_the_datasheet_with_a_note():
    # no bandwidth in the file: the datasheet's 3.35 TB/s x the default memory efficiency, as the base
    # (the calibrated memory efficiency on top is 1)
    eff = datasheet_ceilings("H100-SXM").efficiency.memory
    c = calibrated_ceilings({"gpu": "H100-SXM", "peak_flops": {"bf16": 800e12}})
    assert c.read_ceiling_Bps == c.write_ceiling_Bps == pytest.approx(H100_BPS * eff, rel=1e-12)
    assert any(n.startswith("bandwidth: not measured") for n in c.notes)


@pytest.mark.parametrize("bws,noted", [
    ({"read": 2e12}, True), ({"write": 2e12}, True), ({"read": 2e12, "write": 3e12}, False),
    ({"copy": 2.5e12}, False), ({"copy": 2.5e12, "read": 2e12}, False),
])
def test_bandwidth_note_only_when_read_and_write_or_copy_are_missing(bws, noted):
    c = calibrated_ceilings({"gpu": "H100-SXM", "bandwidth_Bps": bws})
    assert any(n.startswith("bandwidth: not measured") for n in c.notes) is noted
    if "copy" in bws:  # a measured copy rate stands in for whichever of read, write is missing
        assert c.write_Bps == 2.5e12 and c.read_Bps == bws.get("read", 2.5e12)


def test_unmeasured_dtypes_are_noted_and_scaled_measured_ones_are_not():
    c = calibrated_ceilings(MEASURED)
    eff = datasheet_ceilings("H100-SXM").efficiency
    assert not any(n.startswith("bf16:") for n in c.notes)
    assert any(n.startswith("fp8: not in the calibration file") for n in c.notes)
    # an unmeasured fp8 peak is the datasheet's at the fp8 GEMMs' share (matmul_fp8), tf32 at matmul's
    assert c.peak("bf16") == 800e12 and c.peak("fp8") == pytest.approx(1979e12 * eff.matmul_fp8, rel=1e-12)
    assert c.peak("tf32") == pytest.approx(494.5e12 * eff.matmul, rel=1e-12)


def test_a_file_measured_on_another_gpu_is_noted():
    other = dict(MEASURED, gpu="NVIDIA H200")
    note = "calibration measured on 'NVIDIA H200', used with the H100-SXM datasheet"
    assert note in calibrated_ceilings(other, gpu="H100-SXM").notes
    assert not any("measured on" in n for n in calibrated_ceilings(other, gpu="H200").notes)
    assert not any("measured on" in n for n in calibrated_ceilings(other).notes)
    assert not any("measured on" in n for n in calibrated_ceilings(MEASURED, gpu="H100-SXM").notes)


@pytest.mark.parametrize("device,name", [("NVIDIA GeForce RTX", "RTX-4090"), ("AMD Instinct MI300X", "MI300X"),
                                         ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA L40S", "L40S")])
def test_match_gpu_by_a_unique_prefix(device, name):
    # a name that starts exactly one GPU's name or alias ("geforce-rtx" -> geforce-rtx-4090; "amd" ->
    # amd-mi300x once the words that match nothing are dropped)
    assert match_gpu(device).name == name


def test_match_gpu_refuses_an_ambiguous_prefix():
    # "a100" starts the 40 GB and the 80 GB cards' aliases alike
    with pytest.raises(MlsysError, match="no built-in GPU matches device 'NVIDIA A100'"):
        match_gpu("NVIDIA A100")


# --- calibration_fit: Nelder-Mead as defined (Nelder & Mead 1965: reflect 1, expand 2, contract 1/2,
# shrink 1/2 towards the best point), the loss, the bounds (docs/models.md) ------------------------

def _traced(g):
    seen: list[tuple[float, ...]] = []

    def f(x):
        seen.append(tuple(x))
        return g(*x)
    return f, seen


def test_nelder_mead_expands_then_restarts_from_the_best():
    # f = (x - 1)^2 from 0, step 0.25: simplex {0: 1, 0.25: 0.5625}; centre 0.25, reflect 0.5 (0.25
    # < 0.5625: better than the best) -> expand 0.25 + 2 x 0.25 = 0.75 (0.0625 < 0.25: kept). Round two
    # from 0.75: {0.75: 0.0625, 1.0: 0}; reflect 1.25 (0.0625, not better than 0.0625's neighbour 0)
    # -> contract 1.0 + (0.75 - 1.0) / 2 = 0.875 (0.015625 < 0.0625: kept); best 1.0
    f, seen = _traced(lambda x: (x - 1) ** 2)
    assert _nelder_mead(f, [0.0], step=0.25, iters=1, restarts=1) == [0.75]
    assert seen == [(0.0,), (0.25,), (0.5,), (0.75,)]
    f, seen = _traced(lambda x: (x - 1) ** 2)
    assert _nelder_mead(f, [0.0], step=0.25, iters=1, restarts=2) == [1.0]
    assert seen == [(0.0,), (0.25,), (0.5,), (0.75,), (0.75,), (1.0,), (1.25,), (0.875,)]


def test_nelder_mead_contracts_when_the_reflection_is_not_better_than_the_best():
    # f = (x - 0.3)^2: {0: 0.09, 0.25: 0.0025}; reflect 0.5 (0.04): worse than the best, and in one
    # dimension the second-worst is the best -> contract to 0.125 (0.030625 < 0.09)
    f, seen = _traced(lambda x: (x - 0.3) ** 2)
    assert _nelder_mead(f, [0.0], step=0.25, iters=1, restarts=1) == [0.25]
    assert seen == [(0.0,), (0.25,), (0.5,), (0.125,)]


def test_nelder_mead_in_two_dimensions():
    # f = (x - 2)^2 + (y - 0.2)^2 from (0, 0), step 1: vertices (0,0) 4.04, (1,0) 1.04, (0,1) 4.64
    # 1. centre (0.5, 0), reflect (1,-1) 2.44: not better than 1.04, better than 4.04 -> kept
    # 2. best (1,0), (1,-1), worst (0,0): centre (1,-0.5), reflect (2,-1) 1.44 -> kept
    # 3. worst (1,-1): centre (1.5,-0.5), reflect (2,0) 0.04 < 1.04 -> expand (2.5,0.5) 0.34 > 0.04: reflect kept
    # 4. worst (2,-1): centre (1.5,0), reflect (1,1) 1.64 >= 1.04 -> contract (1.75,-0.5) 0.5525 < 1.44
    f, seen = _traced(lambda x, y: (x - 2) ** 2 + (y - 0.2) ** 2)
    assert _nelder_mead(f, [0.0, 0.0], step=1.0, iters=4, restarts=1) == [2.0, 0.0]
    assert seen == [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, -1.0), (2.0, -1.0), (2.0, 0.0), (2.5, 0.5),
                    (1.0, 1.0), (1.75, -0.5)]


@pytest.mark.parametrize("inner,points,best", [
    # contraction (0.25, 0.5) scores 2: better than the worst (3), not than the second (1): kept
    (2.0, [], [1.0, 0.0]),
    # it scores 3, as the worst: shrink every vertex halfway to the best (1,0): (0.5,0) and (0.5,0.5)
    (3.0, [(0.5, 0.0), (0.5, 0.5)], [1.0, 0.0]),
])
def test_nelder_mead_contraction_and_shrink(inner, points, best):
    table = {(0.0, 0.0): 1.0, (1.0, 0.0): 0.0, (0.0, 1.0): 3.0, (1.0, -1.0): 5.0, (0.25, 0.5): inner,
             (0.5, 0.0): 0.5, (0.5, 0.5): 10.0}
    f, seen = _traced(lambda x, y: table.get((x, y), 100.0))
    assert _nelder_mead(f, [0.0, 0.0], step=1.0, iters=1, restarts=1) == best
    assert seen == [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, -1.0), (0.25, 0.5), *points]
    # one more iteration after the shrink starts from the values of the shrunk simplex (0, 0.5, 10)
    if points:
        f, seen = _traced(lambda x, y: table.get((x, y), 100.0))
        _nelder_mead(f, [0.0, 0.0], step=1.0, iters=2, restarts=1)
        assert seen[7] == (1.0, -0.5)  # centre (0.75, 0) of the two best + (0.75, 0) - (0.5, 0.5)


START = {"matmul": 0.5, "matmul_skinny": 0.5, "attention": 0.5, "memory": 0.5, "launch_s": 1e-6}
ONE = (1.0, 1.0, 1.0, 1.0)  # efficiencies the terms were priced at


def test_loss_is_the_mean_squared_log_error():
    # priced at matmul efficiency 0.5, refitted to 0.25: 1 s of compute becomes 2 s; measured 4 s and 1 s
    terms = (Term(1, "matmul", 1.0, 0.0),)
    obs = [Observation("a", 4.0, terms, (0.5, 1.0, 1.0, 1.0)), Observation("b", 1.0, terms, (0.5, 1.0, 1.0, 1.0))]
    params = dict(START, matmul=0.25, launch_s=0.0)
    assert loss(obs[:1], params) == pytest.approx(math.log(2 / 4) ** 2, rel=1e-12)
    assert loss(obs, params) == pytest.approx((math.log(2 / 4) ** 2 + math.log(2 / 1) ** 2) / 2, rel=1e-12)


@pytest.mark.parametrize("name,term", [
    ("matmul", Term(1, "matmul", 1.0, 0.0)), ("attention", Term(1, "attention", 1.0, 0.0)),
    ("memory", Term(1, "memory", 0.0, 1.0)), ("matmul_skinny", Term(1, "matmul", 0.0, 1.0, skinny=True)),
])
def test_fit_clamps_efficiencies_to_their_bounds(name, term):
    # 1 s of work at efficiency 1 measured at 100 s wants 0.01 (below the floor 0.05), at 0.1 s wants 10
    # (above the ceiling, 1 for every efficiency: a calibration file refuses more)
    low = fit([Observation("slow", 100.0, (term,), ONE)], START, fixed=("launch_s",))
    high = fit([Observation("fast", 0.1, (term,), ONE)], START, fixed=("launch_s",))
    assert low[name] == 0.05 and high[name] == 1.0
    assert low["launch_s"] == high["launch_s"] == 1e-6


def test_fit_clamps_the_launch_cost():
    # a step of nothing but one kernel launch: measured 1 s -> 50 us at most; 1 ns -> 0.1 us at least
    empty = (Term(1, "memory", 0.0, 0.0),)
    assert fit([Observation("long", 1.0, empty, ONE)], START)["launch_s"] == 5e-5
    assert fit([Observation("short", 1e-9, empty, ONE)], START)["launch_s"] == 1e-7


def test_fit_recovers_the_efficiencies_that_priced_the_steps():
    # steps written out at matmul 0.6, attention 0.4, memory 0.8, GEMM stream 0.7, launch 3 us (terms
    # priced at efficiency 1: a term's time at efficiency e is its time / e)
    launch = 3e-6
    obs = [Observation("mm", 1e-3 / 0.6 + launch, (Term(1, "matmul", 1e-3, 0.0),), ONE),
           Observation("attn", 2e-3 / 0.4 + launch, (Term(1, "attention", 2e-3, 0.0),), ONE),
           Observation("mem", 4 * (1e-4 / 0.8 + launch), (Term(4, "memory", 0.0, 1e-4),), ONE),
           Observation("gemv", 3e-4 / 0.7 + launch, (Term(1, "matmul", 1e-6, 3e-4, skinny=True),), ONE),
           Observation("tiny", 10 * (1e-6 / 0.8 + launch), (Term(10, "memory", 0.0, 1e-6),), ONE)]
    got = fit(obs, START)
    want = {"matmul": 0.6, "attention": 0.4, "memory": 0.8, "matmul_skinny": 0.7, "launch_s": launch}
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-4), k


def test_per_op_rows_join_the_fit_and_unmeasured_ones_are_left_out():
    # the steps say nothing about attention; one profiled attention op (0.25 s of work measured at
    # 0.5 s) does: 0.5. An op with no measured time (0 s) is left out rather than divided by.
    fixed = ("launch_s",)
    obs = [Observation("step", 2.0 + 1e-6, (Term(1, "matmul", 1.0, 0.0),), ONE)]
    op = Observation("attn op", 0.5 + 1e-6, (Term(1, "attention", 0.25, 0.0),), ONE)
    unmeasured = Observation("no time", 0.0, (Term(1, "attention", 0.25, 0.0),), ONE)
    start = dict(START, attention=0.9)
    assert fit(obs, start, fixed)["attention"] == 0.9
    with_op = fit(obs, start, fixed, ops=[op])
    assert with_op["attention"] == pytest.approx(0.5, rel=1e-4) and with_op["matmul"] == pytest.approx(0.5, rel=1e-4)
    assert fit(obs, start, fixed, ops=[op, unmeasured]) == with_op


def test_fit_refuses_unmeasured_steps():
    with pytest.raises(MlsysError, match="measured times must be positive"):
        fit([Observation("zero", 0.0, (Term(1, "matmul", 1.0, 0.0),), ONE)], START)
    with pytest.raises(MlsysError, match="no measured rows to fit"):
        fit([], START)


# --- scaling: the published tables and the fit's objective (Hoffmann et al. 2022) -----------------

def test_chinchilla_tables_obey_c_equals_6nd():
    """Hoffmann et al. 2022 compute FLOPs as C = 6 N D (section 3): every printed (N, C, D) row of
    Table 3 and Table A3 agrees to the rounding of its 2-3 printed digits (under 5%)."""
    from mlsyscalc.calc.scaling import laws as s

    for table in (s.CHINCHILLA_TABLE3, s.CHINCHILLA_TABLE_A3_APPROACH2, s.CHINCHILLA_TABLE_A3_APPROACH3):
        assert [n for n, _, _ in table] == [400e6, 1e9, 10e9, 67e9, 175e9, 280e9, 520e9, 1e12, 10e12]
        for n, c, d in table:
            assert 6 * n * d == pytest.approx(c, rel=0.05), (n, c, d)


def _runs(n):
    from mlsyscalc.calc.scaling.fit import Runs

    grid = [(p, t) for p in (1e8, 2e8, 4e8, 8e8) for t in (2e9, 8e9, 3e10)][:n]
    return Runs(tuple(p for p, _ in grid), tuple(t for _, t in grid), tuple(2.0 + 1e9 / p / 10 + i * 1e-3
                                                                           for i, (p, _) in enumerate(grid)))


def test_fit_needs_eight_runs():
    from mlsyscalc.calc.scaling.fit import MIN_RUNS, check_runs

    assert MIN_RUNS == 8
    check_runs(_runs(8))  # 4 sizes x 2 token counts: enough
    with pytest.raises(MlsysError, match="need at least 8 runs to fit E, A, B, alpha, beta; got 7"):
        check_runs(_runs(7))


def test_huber_objective_of_a_law_against_another():
    """Eq. (11): sum_i Huber_1e-3(log L_theta(N_i, D_i) - log L_i), L = E + A / N^alpha + B / D^beta with
    theta = (log A, log B, log E, alpha, beta); here runs lying on Chinchilla's eq. (10) law, theta the
    Epoch AI replication's (Besiroglu et al. 2024). Every residual exceeds delta: the linear branch."""
    import numpy as np

    from mlsyscalc.calc.scaling.fit import _objective_batch

    n = np.array([1e8, 4e8, 1e9, 7e9])
    d = np.array([2e9, 2e10, 1e11, 1.4e12])
    chinchilla = 1.69 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28
    epoch = 1.8172 + 482.01 / n ** 0.3478 + 2085.43 / d ** 0.3658
    r = np.log(epoch) - np.log(chinchilla)
    assert np.all(np.abs(r) > 1e-3)
    want = float(np.sum(1e-3 * (np.abs(r) - 0.5e-3)))
    theta = np.array([[math.log(482.01), math.log(2085.43), math.log(1.8172), 0.3478, 0.3658]])
    got = _objective_batch(theta, np.log(n), np.log(d), np.log(chinchilla), 1e-3)
    assert got.shape == (1,) and float(got[0]) == pytest.approx(want, rel=1e-9)
    # at Chinchilla's own theta every residual is zero (rounding aside): the quadratic branch, ~0
    own = np.array([[math.log(406.4), math.log(410.7), math.log(1.69), 0.34, 0.28]])
    assert float(_objective_batch(own, np.log(n), np.log(d), np.log(chinchilla), 1e-3)[0]) < 1e-25


# --- train: the documented step formulas, read back from train_step (docs/train.md) ---------------

@pytest.mark.parametrize("name,lay", [
    ("llama2-7b", dict(gpus=16, global_batch=32, tp=2, pp=4, vp=2, micro_batch=1, zero=1, recompute="selective")),
    ("llama3-8b", dict(gpus=8, global_batch=16, tp=2, pp=2, cp=2, micro_batch=2, zero=2, recompute="full")),
    ("mixtral-8x7b", dict(gpus=16, global_batch=16, tp=2, pp=2, ep=4, micro_batch=1, zero=3, recompute="none",
                          capacity_factor=1.25)),
])
def test_train_step_rates_bubble_and_flops(name, lay):
    from mlsyscalc.calc.counts.flops import FlopOptions, count_flops

    spec = load_model(name)
    opts = TrainStepOptions(seq=2048, overlap=("dp", "cp", "tp"), **lay)
    step = train_step(spec, H100, HGX, opts)
    d = step.as_dict()
    t, gpus, b = d["step_time_s"], lay["gpus"], d["breakdown"]
    assert t == pytest.approx(sum(b.values()), rel=1e-12)
    assert d["tokens_per_s"] == pytest.approx(lay["global_batch"] * 2048 / t, rel=1e-12)
    # model FLOPs: calc.counts.flops of the global batch, 3 x forward; recompute: the attention core
    # (selective) or the forward less the lm_head (full)
    flops = count_flops(spec, FlopOptions(batch=lay["global_batch"], seq=2048, causal=True))
    extra = {"none": 0, "selective": flops.breakdown["attention_core"],
             "full": flops.forward - flops.breakdown["lm_head"]}[lay["recompute"]]
    assert d["model_flops"] == 3 * flops.forward and d["recompute_flops"] == extra
    assert d["peak_flops"] == H100_BF16
    assert d["tflops_per_gpu"] == pytest.approx(3 * flops.forward / (t * gpus), rel=1e-12)
    assert d["mfu"] == pytest.approx(3 * flops.forward / (t * gpus * H100_BF16), rel=1e-12)
    assert d["hfu"] == pytest.approx((3 * flops.forward + extra) / (t * gpus * H100_BF16), rel=1e-12)
    # bubble / compute = (p - 1) / (v m), m = global batch / (dp x micro-batch)
    p, v = lay["pp"], lay.get("vp", 1)
    m = lay["global_batch"] // (d["layout"]["dp"] * lay["micro_batch"])
    assert d["layout"]["num_micro_batches"] == m
    assert b["bubble_s"] == pytest.approx(b["compute_s"] * (p - 1) / (v * m), rel=1e-12)
    # memory: calc.memory.training's total at its peak stage and phase (the interleaved schedule's extra
    # chunk-forwards are counted there: calc.memory.schedule.in_flight)
    from mlsyscalc.calc.parallel.shards import verdict

    assert d["usable_bytes"] == verdict(H100.gpu, 0, "10%").usable_bytes  # `mlsys memory`'s default reserve
    assert d["memory_bytes_per_gpu"] == step.memory.total
    assert sum(d["memory"]["breakdown"].values()) == d["memory_bytes_per_gpu"]
    assert d["fits"] is (d["memory_bytes_per_gpu"] <= d["usable_bytes"])
    assert d["comm_sms"] == 16 and d["overlap"] == ["dp", "cp", "tp"]
    # contention = comm_sms / sm_count x the hidden (total - exposed) seconds of the overlapped dimensions
    total = d["comm_total_s"]
    assert set(total) == {"tp", "cp", "dp", "pp", "ep"}
    assert all(0 <= b[f"{k}_comm_s"] <= total[k] * (1 + 1e-12) for k in total)
    assert b["pp_comm_s"] == total["pp"] and b["ep_comm_s"] == total["ep"]  # not overlapped: all exposed
    hidden = sum(total[k] - b[f"{k}_comm_s"] for k in ("dp", "cp", "tp"))
    assert b["contention_s"] == pytest.approx(16 / 132 * hidden, rel=1e-9, abs=0)


@pytest.mark.parametrize("name,opts", [
    ("deepseek-v3", PlanOptions(gpus=8, seq=1024, global_batch=16, max_micro_batch=2, max_cp=2,
                                overlap=("dp", "tp", "ep", "pp"), capacity_factor=1.25)),
    ("llama3-8b", PlanOptions(gpus=16, seq=2048, global_batch=32, max_micro_batch=2, max_cp=4,
                              dtype="fp8", overlap=("cp",))),
    # unfused attention's S x S scores: the search once kept flash attention's activations here
    # (llama3-8b tp 1 pp 2 dp 8, no recompute: 33.3 GB in the search, 51.6 GB in train_step)
    ("llama3-8b", PlanOptions(gpus=16, seq=2048, global_batch=32, max_micro_batch=2, max_cp=1,
                              attention="unfused")),
    ("gpt2", PlanOptions(gpus=8, seq=1024, global_batch=16, max_micro_batch=4, overlap=())),
])
def test_memoised_search_equals_train_step_under_other_options(name, opts):
    """The plan's vectorised step time and memory are train_step's for the same layout, also with
    overlap, capacity factor, unfused attention and fp8 options, MLA + MoE with dense first layers."""
    from tests.test_plan import assert_search_equals_train_step

    spec = load_model(name, {"num_hidden_layers": 8} if name == "deepseek-v3" else None)
    assert_search_equals_train_step(spec, H100, HGX, opts, samples=14, seed=1)


def test_plan_json_and_why():
    # the best layout first, the reason names what it saves against the fastest rival that decides
    # tp/pp/ZeRO/recompute otherwise, by the difference of their step times
    spec = load_model("gpt2")
    opts = PlanOptions(gpus=4, seq=1024, global_batch=8, top=3)
    result = plan(spec, H100, HGX, opts)
    d = result.as_dict()
    assert (d["gpus"], d["seq"], d["global_batch"], d["dtype"], d["fix"]) == (4, 1024, 8, "bf16", {})
    assert d["overlap"] == ["dp", "cp"] and d["attention"] == "flash"
    assert d["searched"] == 12 * len(list(structures(spec, HGX, opts))) and d["feasible"] == d["searched"]
    steps = [c["step_time_s"] for c in d["candidates"]]
    assert len(steps) == 3 and steps == sorted(steps)
    best = result.candidates[0]
    assert d["why"].startswith(f"{best.step_time_s:.4g} s per step, ") and "less than the best layout" in d["why"]
    # no fitting layout: the reason says so
    # (llama2-7b on one GPU: 16 bytes of weights, gradients and AdamW states a parameter, > 100 GB)
    tight = plan(load_model("llama2-7b"), H100, HGX, PlanOptions(gpus=1, seq=1024, global_batch=1))
    assert tight.candidates == () and tight.feasible == 0
    assert tight.why.startswith("no layout fits in memory")


def test_plan_validates_its_options():
    spec = load_model("gpt2")
    for field in ("gpus", "seq", "global_batch", "top", "max_micro_batch", "max_cp"):
        flag = "--" + field.replace("_", "-")
        with pytest.raises(MlsysError, match=f"{flag} must be a positive integer"):
            plan(spec, H100, HGX, replace(PlanOptions(gpus=2, global_batch=2), **{field: 0}))
    with pytest.raises(MlsysError, match="no layout of 2 GPUs obeys the rules with --fix tp=4"):
        plan(spec, H100, HGX, PlanOptions(gpus=2, global_batch=2, fix=(("tp", 4),)))


# --- calibration files: validation, efficiencies, launch cost, sources (docs/roofline.md) ---------

@pytest.mark.parametrize("data,message", [
    ({"peak_flops": {"bf16": "abc"}}, "calibration record: peak_flops.bf16 must be a number, got 'abc'"),
    ({"peak_flops": {"bf16": True}}, "calibration record: peak_flops.bf16 must be a number, got True"),
    ({"peak_flops": {"bf16": -1}}, "calibration record: peak_flops.bf16 must be positive, got -1"),
    ({"peak_flops": {"bf16": 0}}, "calibration record: peak_flops.bf16 must be positive, got 0"),
    ({"peak_flops": {"bf16": "inf"}}, "calibration record: peak_flops.bf16 must be finite, got 'inf'"),
    ({"peak_flops": [1]}, "calibration record: peak_flops must be an object"),
    ({"bandwidth_Bps": 3e12}, "calibration record: bandwidth_Bps must be an object"),
    ({"bandwidth_Bps": {"read": -5}}, "calibration record: bandwidth_Bps.read must be positive"),
    ({"sm_count": 114.5}, "calibration record: sm_count must be a whole number, got 114.5"),
    ({"sm_count": 0}, "calibration record: sm_count must be positive, got 0"),
    ({"launch_overhead_s": -1e-6}, "calibration record: launch_overhead_s must be positive"),
    ({"efficiency": [0.5]}, "calibration record: efficiency must be an object"),
    ({"efficiency": {"matmul": 0.5, "tensor": 0.5}}, "calibration record: unknown efficiency tensor"),
    ({"efficiency": {"matmul": None}}, "calibration record: efficiency.matmul must be a number, got None"),
    ({"efficiency": {"memory": 1.5}}, "calibration record: efficiency.memory: must be a fraction in"),
    ({"peak_flops": {"bf16": 2e15}}, "calibration record: peak_flops.bf16 = 2e+15 is above the datasheet's 9.895e+14"),
    ({"peak_flops": {"bf16": 1e-300}}, "calibration record: peak_flops.bf16 = 1e-300 is below 1/1000 of the datasheet"),
    ({"bandwidth_Bps": {"copy": 4e12}}, "calibration record: bandwidth_Bps.copy = 4e+12 is above the datasheet's 3.35e+12"),
    ({"sm_count": 133}, "calibration record: sm_count 133 is more than the card's 132"),
])
def test_bad_calibration_records_name_the_field(data, message):
    with pytest.raises(MlsysError, match=re.escape(message)):
        load_ceilings("H100-SXM", dict(data, gpu="H100-SXM"))


def test_calibration_record_fields_are_used():
    # a MIG slice's SM count, a measured launch cost, a peak given as a string, a fitted efficiency
    # (kinds it omits keep the calibrated defaults)
    data = {"gpu": "H100-SXM", "sm_count": 66, "launch_overhead_s": 3e-6, "peak_flops": {"bf16": "7e14"},
            "efficiency": {"matmul": 0.9}}
    c = load_ceilings(calibration=data)
    assert (c.sm_count, c.launch_s, c.peak("bf16"), c.source) == (66, 3e-6, 7e14, "calibration record")
    assert c.efficiency == replace(CALIBRATED_EFFICIENCY, matmul=0.9)
    # a fitted file from before matmul_fp8 and attention_flash2 takes what calibrate writes for a class it does not
    # fit: its base's value (the datasheet defaults over a datasheet base, which carries the datasheet fp8 peak)
    old = load_ceilings(calibration={**data, "peak_flops": {"bf16": 9.895e14, "fp8": 1.979e15}, "base": "datasheet"})
    assert (old.efficiency.matmul_fp8, old.efficiency.attention_flash2) == (0.65, 0.36)
    assert old.flops_per_s("fp8", "matmul_fp8") == pytest.approx(1.979e15 * 0.65)
    assert c.flops_per_s("bf16") == pytest.approx(7e14 * 0.9, rel=1e-15)
    # the caller's launch cost wins over the file's; without either, 2 us (one back-to-back launch gap)
    assert load_ceilings(calibration=data, launch_s=1e-6).launch_s == 1e-6
    assert load_ceilings(calibration={"gpu": "H100-SXM"}).launch_s == 2e-6 == load_ceilings().launch_s
    assert load_ceilings(calibration={"gpu": "H100-SXM"}).sm_count == 132
    assert load_ceilings(calibration={"gpu": "H100-SXM"}).efficiency == CALIBRATED_EFFICIENCY


def test_calibration_file_source_and_default_gpu(tmp_path):
    import json

    path = tmp_path / "cal.json"
    path.write_text(json.dumps(MEASURED))
    c = load_ceilings(calibration=path)
    assert c.source == str(path) and c.gpu.name == "H100-SXM" and c.bandwidth_Bps == pytest.approx(2.4e12, rel=1e-12)
    assert load_ceilings().gpu.name == "H100-SXM" and load_ceilings().source == "datasheet"
    assert not load_ceilings().calibrated
    path.write_text("[1, 2]")
    with pytest.raises(MlsysError, match="must hold a JSON object"):
        load_ceilings(calibration=path)
    # the datasheet of a device name as torch reports it
    assert load_ceilings("NVIDIA H200").gpu.name == "H200"
    with pytest.raises(MlsysError):
        load_ceilings("no-such-gpu")


# --- calibration_fit.predict: the re-pricing formula of the module docstring -------------------------

def test_predict_reprices_every_row():
    from mlsyscalc.calc.roofline.calibration_fit import predict

    # priced at matmul 0.5, attention 0.4, memory 0.8, GEMM stream 0.7; refitted to half of each, launch 1 us
    base = (0.5, 0.4, 0.8, 0.7)
    params = {"matmul": 0.25, "attention": 0.2, "memory": 0.4, "matmul_skinny": 0.35, "launch_s": 1e-6}
    terms = (Term(2, "matmul", 1e-3, 3e-3),            # compute 2e-3 vs memory 6e-3 (x memory's 2): memory
             Term(1, "attention", 4e-3, 1e-3),         # compute 8e-3 vs 2e-3
             Term(3, "memory", 1e-4, 2e-4),            # memory-kind compute scales with matmul: 2e-4 vs 4e-4
             Term(1, "matmul", 1e-3, 5e-3, skinny=True),  # 2e-3 vs the GEMM stream's 5e-3 x 2 = 1e-2
             Term(0, "matmul", 1.0, 1.0))              # no calls: nothing
    obs = Observation("step", 1.0, terms, base, comm_s=0.5)
    want = 0.5 + 2 * (6e-3 + 1e-6) + (8e-3 + 1e-6) + 3 * (4e-4 + 1e-6) + (1e-2 + 1e-6)
    assert predict(obs, params) == pytest.approx(want, rel=1e-12)


def test_fit_leaves_kinds_no_row_depends_on_at_their_start():
    # no attention rows and no GEMM-stream rows (and a zero-count attention row): those keep the start
    obs = [Observation("mm", 2e-3 + 1e-6, (Term(1, "matmul", 1e-3, 0.0), Term(0, "attention", 1.0, 0.0),
                                          Term(0, "matmul", 0.0, 1.0, skinny=True)), ONE)]
    got = fit(obs, dict(START, attention=0.33, matmul_skinny=0.44), fixed=("launch_s",))
    assert got["attention"] == 0.33 and got["matmul_skinny"] == 0.44
    assert got["matmul"] == pytest.approx(0.5, rel=1e-4)
    # a fixed parameter keeps its start even when rows depend on it
    assert fit(obs, START, fixed=("launch_s", "matmul"))["matmul"] == 0.5


# --- train_parts: stages and the slowest one (module docstring) ------------------------------------

def test_pipeline_stages_of_the_interleaved_schedule():
    # 12 layers, pp 3, vp 2: chunks of 2 layers, stage s holds chunks s and s + 3
    from mlsyscalc.calc.train.parts import pipeline_stages

    spec = load_model("deepseek-v3", {"num_hidden_layers": 12, "first_k_dense_replace": 3})
    stages = pipeline_stages(spec, 3, 2)
    assert [st.layers for st in stages] == [(0, 1, 6, 7), (2, 3, 8, 9), (4, 5, 10, 11)]
    assert [(st.dense, st.moe) for st in stages] == [(2, 2), (1, 3), (0, 4)]
    assert [(st.first, st.last) for st in stages] == [(True, False), (False, False), (False, True)]
    assert [st.layers for st in pipeline_stages(spec, 2, 1)] == [tuple(range(6)), tuple(range(6, 12))]


def test_stage_time_and_the_slowest_stage():
    from mlsyscalc.calc.train.parts import Stage, StageParts, slowest_stage, stage_time

    layer = {"dense": {"forward": 1.0, "backward": 2.0, "recompute_selective": 0.25, "recompute_full": 1.0},
             "moe": {"forward": 3.0, "backward": 6.0, "recompute_selective": 0.5, "recompute_full": 3.0}}
    attn = {"dense": {"forward": 0.125, "backward": 0.25, "recompute_selective": 0.125, "recompute_full": 0.125},
            "moe": {"forward": 0.5, "backward": 1.0, "recompute_selective": 0.5, "recompute_full": 0.5}}
    parts = StageParts(layer, attn, {"forward": 0.0625, "backward": 0.125}, {"forward": 4.0, "backward": 8.0})
    first = Stage(0, (0, 1, 2), 2, 1, True, False)
    last = Stage(1, (3, 4, 5), 3, 0, False, True)
    # first: 2 dense + 1 MoE + embedding; selective adds the recomputed attention core to the backward
    assert stage_time(parts, first, "none") == (2 * 1 + 3 + 0.0625, 2 * 2 + 6 + 0.125, 2 * 0.375 + 1.5)
    assert stage_time(parts, first, "selective") == (5.0625, 2 * 2.25 + 6.5 + 0.125, 2 * 0.5 + 2.0)
    assert stage_time(parts, first, "full") == (5.0625, 2 * 3 + 9 + 0.125, 2 * 0.5 + 2.0)
    # last: 3 dense + final norm and lm_head: 3 + 4 = 7 forward, 6 + 8 = 14 backward: slower than 5.06 + 10.1
    assert stage_time(parts, last, "none") == (7.0, 14.0, 3 * 0.375)
    assert slowest_stage(parts, (first, last), "none") == (7.0, 14.0, 1.125)
    assert slowest_stage(parts, (first,), "none") == stage_time(parts, first, "none")


# --- train_options: every rule names itself (module docstring: Megatron-LM's rules) ----------------

@pytest.mark.parametrize("name,lay,message", [
    ("llama2-7b", dict(gpus=8, zero=4), "--zero must be 0, 1, 2 or 3, got 4"),
    ("llama2-7b", dict(gpus=8, recompute="some"), "--recompute must be one of none, selective, full, got 'some'"),
    ("llama2-7b", dict(gpus=8, dp=0), "--dp must be a positive integer, got 0"),
    ("llama2-7b", dict(gpus=8, dtype="int8"), "--dtype for training: one of bf16, fp16, fp8, mxfp8, nvfp4, got 'int8'"),
    ("llama2-7b", dict(gpus=8, overlap=("dp", "xx")), "--overlap: dimensions are tp, dp, pp, cp, ep, got dp, xx"),
    ("llama2-7b", dict(gpus=8, attention="sdpa"), "--attention must be one of"),
    ("llama2-7b", dict(gpus=8, tp=2, dp=2), r"rule tp\*pp\*dp\*cp == gpus: 2\*1\*2\*1 = 4, not --gpus 8"),
    ("llama2-7b", dict(gpus=8, global_batch=12), r"rule global_batch % \(dp\*micro_batch\) == 0"),
    ("llama2-7b", dict(gpus=8, global_batch=8, vp=2), "rule vp needs pp > 1"),
    ("llama2-7b", dict(gpus=8, global_batch=8, pp=2, micro_batch=2, vp=2), r"rule num_micro_batches % pp == 0"),
    ("llama2-7b", dict(gpus=8, pp=16), r"rule gpus % \(tp\*pp\*cp\) == 0"),
    ("llama2-7b", dict(gpus=6, pp=6, global_batch=6), r"rule layers % \(pp\*vp\) == 0"),
    ("llama2-7b", dict(gpus=4, pp=2, vp=32, global_batch=4), r"rule layers % \(pp\*vp\) == 0"),
    ("llama2-7b", dict(gpus=8, cp=2, attention="unfused"), "--attention unfused has no context parallelism"),
    ("llama2-7b", dict(gpus=8, seq=2050, cp=2), r"rule seq % \(2\*cp\) == 0"),
    ("llama2-7b", dict(gpus=8, seq=2052, cp=2, tp=4), r"rule \(seq/cp\) % tp == 0 with --sp"),
    ("llama2-7b", dict(gpus=8, ep=2), "--ep 2: llama2-7b has no routed experts"),
    ("mixtral-8x7b", dict(gpus=8, ep=2, global_batch=24, dp=6), r"rule tp\*pp\*dp\*cp == gpus"),
    ("mixtral-8x7b", dict(gpus=12, ep=2, global_batch=12), "rule whole nodes"),
    ("mixtral-8x7b", dict(gpus=4, ep=8, global_batch=4), r"rule tp\*cp\*dp % \(etp\*ep\) == 0"),
])
def test_layout_rules_name_the_rule(name, lay, message):
    with pytest.raises(MlsysError, match=message):
        TrainStepOptions(**lay).validate(load_model(name), HGX)


def test_experts_must_split_evenly_over_ep():
    spec = load_model("mixtral-8x7b")  # 8 routed experts
    with pytest.raises(MlsysError, match="rule experts % ep == 0"):
        TrainStepOptions(gpus=24, global_batch=24, ep=3).check_layout(spec, HGX)
    TrainStepOptions(gpus=16, global_batch=16, ep=4).check_layout(spec, HGX)
    TrainStepOptions(gpus=8, global_batch=8, ep=8).validate(spec, HGX)  # 8 experts over 8 ranks: one each


def test_derived_layout_numbers():
    o = TrainStepOptions(gpus=64, tp=4, pp=2, cp=2, global_batch=32, micro_batch=2, dtype="fp8")
    # dp = 64 / (4 x 2 x 2) = 4; micro-batches = 32 / (4 x 2) = 4; fp8 keeps bf16 in memory and on the wire
    assert (o.data_parallel, o.num_micro_batches, o.memory_dtype) == (4, 4, "bf16")
    assert replace(o, dp=2).data_parallel == 2 and TrainStepOptions(dtype="fp16").memory_dtype == "fp16"
    # the routed experts' grid over a stage's 4 x 2 x 4 = 32 ranks: etp = tp = 4 (Megatron-Core's default), ep 1, edp 8
    assert o.layout() == {"tp": 4, "pp": 2, "dp": 4, "cp": 2, "ep": 1, "etp": 4, "edp": 8, "vp": 1, "sp": True,
                          "micro_batch": 2,
                          "num_micro_batches": 4, "zero": 0, "recompute": "none", "dtype": "fp8"}


def test_comm_sm_share():
    # 16 of the H100's 132 SMs; no SM count in the spec: no share; all SMs held: refused
    assert TrainStepOptions().comm_sm_share(132) == 16 / 132
    assert TrainStepOptions(comm_sms=0).comm_sm_share(132) == 0.0
    assert TrainStepOptions().comm_sm_share(None) == 0.0
    assert TrainStepOptions(comm_sms=131).comm_sm_share(132) == 131 / 132
    with pytest.raises(MlsysError, match="--comm-sms 132 leaves no SM for compute"):
        TrainStepOptions(comm_sms=132).comm_sm_share(132)


# --- scaling_fit: what the fit refuses (module docstring) -----------------------------------------

def test_check_runs_refusals():
    from mlsyscalc.calc.scaling.fit import Runs, check_runs

    good = _runs(12)
    check_runs(good)
    cases = [
        (replace(good, params=(-1.0,) + good.params[1:]), "every params value must be positive and finite"),
        (replace(good, tokens=(math.inf,) + good.tokens[1:]), "every tokens value must be positive and finite"),
        (replace(good, loss=(0.0,) + good.loss[1:]), "every loss value must be positive and finite"),
        (Runs((1e8, 2e8) * 4, good.tokens[:8], good.loss[:8]), "need at least 3 distinct model sizes; got 2"),
        (Runs(good.params[:8], (2e9, 8e9) * 4, good.loss[:8]), "need at least 3 distinct token counts; got 2"),
        (replace(good, loss=(2.5,) * 12), "every run has the same loss"),
        (Runs(tuple(1e8 * 2 ** i for i in range(8)), tuple(2e9 * 2 ** i for i in range(8)),
              tuple(3.0 - 0.1 * i for i in range(8))), "log\\(params\\) and log\\(tokens\\) move together"),
    ]
    for runs, message in cases:
        with pytest.raises(MlsysError, match=message):
            check_runs(runs)


def test_parse_runs_names_the_missing_column():
    from mlsyscalc.calc.scaling.fit import parse_runs

    runs = parse_runs([{"params": "70M", "tokens": "1.4B", "loss": "3.1"}] * 2, "runs.csv")
    assert runs.params == (70e6, 70e6) and runs.tokens == (1.4e9, 1.4e9) and runs.loss == (3.1, 3.1)
    with pytest.raises(MlsysError, match="runs.csv line 3: missing tokens, loss"):
        parse_runs([{"params": "1", "tokens": "2", "loss": "3"}, {"params": "1", "tokens": "", "loss": " "}],
                   "runs.csv")


def _chinchilla_runs():
    import numpy as np

    n = np.array([1e8, 4e8, 1e9, 7e9, 3e8])
    d = np.array([2e9, 2e10, 1e11, 1.4e12, 5e9])
    return n, d, 1.69 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28


def test_huber_objective_inside_delta_is_quadratic_and_the_gradient_is_the_derivative():
    """Near the data (E 0.001 higher, every residual below delta = 1e-3) Huber is r^2 / 2; the single-theta
    objective is the same sum divided by delta, and its analytic gradient matches central differences."""
    import numpy as np

    from mlsyscalc.calc.scaling.fit import _objective, _objective_batch

    n, d, loss_ = _chinchilla_runs()
    near = 1.691 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28
    r = np.log(near) - np.log(loss_)
    assert np.all(np.abs(r) < 1e-3)
    theta = np.array([math.log(406.4), math.log(410.7), math.log(1.691), 0.34, 0.28])
    want = float(np.sum(0.5 * r * r))
    x, y, log_l = np.log(n), np.log(d), np.log(loss_)
    assert float(_objective_batch(theta[None, :], x, y, log_l, 1e-3)[0]) == pytest.approx(want, rel=1e-9)
    value, grad = _objective(theta, x, y, log_l, 1e-3)
    assert value == pytest.approx(want / 1e-3, rel=1e-9)
    # a point with residuals on both branches: the gradient against central differences, coordinate by coordinate
    theta = np.array([math.log(480.0), math.log(400.0), math.log(1.7), 0.35, 0.27])
    _, grad = _objective(theta, x, y, log_l, 1e-3)
    for i in range(5):
        h = np.zeros(5)
        h[i] = 1e-7
        numeric = (_objective(theta + h, x, y, log_l, 1e-3)[0] - _objective(theta - h, x, y, log_l, 1e-3)[0]) / 2e-7
        assert grad[i] == pytest.approx(numeric, rel=1e-5, abs=1e-6), i


# --- train_comm.traffic, plan_space enumeration, plan's reason ---------------------------------------

def test_traffic_sums_seconds_per_dimension_and_kind():
    from mlsyscalc.calc.comm.step import CommRow

    def row(dim, collective, calls, per_call):
        return CommRow(dim, collective, "rule", 8, 1, 1024, calls, 512.0, per_call, False)

    rows = [row("dp", "all-gather", 1, 0.5), row("dp", "reduce-scatter", 4, 0.25), row("dp", "all-reduce", 1, 2.0),
            row("tp", "all-reduce", 64, 0.001), row("tp", "all-gather", 32, 0.002), row("pp", "p2p", 8, 0.01)]
    got = traffic(rows)
    want = {("dp", "param"): 0.5, ("dp", "grad"): 4 * 0.25 + 2.0, ("tp", "model"): 64 * 0.001 + 32 * 0.002,
            ("pp", "model"): 8 * 0.01}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12), k


def test_context_parallel_is_searched_in_powers_of_two_up_to_max_cp():
    # 24 GPUs of llama2-7b at seq 4096: cp takes the powers of two that divide 24 / (tp pp): 1, 2, 4, 8 at
    # most (never 3, 6, 12 or 24), capped by --max-cp
    spec = load_model("llama2-7b")
    cluster = load_cluster("hgx-h100")
    opts = PlanOptions(gpus=24, seq=4096, global_batch=24, max_micro_batch=1, max_cp=16)
    cps = {c.cp for c in structures(spec, cluster, opts)}
    assert cps == {1, 2, 4, 8}
    assert {c.cp for c in structures(spec, cluster, replace(opts, max_cp=2))} == {1, 2}
    # every candidate splits all GPUs: tp pp dp cp = 24, tp divides the node's 8; pp divides the 32 layers
    # unless the split is uneven (pp 3: 10/11/11, 11/11/10, ...; pp 6: 6/5/5/5/5/6, 4/6/6/6/6/4; pp 12: 1/3 x 10/1)
    for c in structures(spec, cluster, replace(opts, max_cp=4)):
        assert c.tp * c.pp * c.data_parallel * c.cp == 24 and 8 % c.tp == 0
        assert 32 % c.pp == 0 if c.pipeline_split.even else c.pp in (3, 6, 12)


@pytest.mark.parametrize("axis,value", [("tp", 2), ("pp", 2), ("dp", 2), ("cp", 2), ("micro_batch", 2), ("vp", 2),
                                        ("ep", 2)])
def test_fixed_axes_pin_every_layout(axis, value):
    spec = load_model("mixtral-8x7b", {"num_hidden_layers": 8})
    opts = PlanOptions(gpus=16, seq=1024, global_batch=32, max_micro_batch=4, max_cp=4, fix=((axis, value),))
    layouts = list(structures(spec, HGX, opts))
    assert layouts and all(c.layout()[axis] == value for c in layouts)
    free = list(structures(spec, HGX, replace(opts, fix=())))
    assert len(layouts) < len(free) and {c.layout()[axis] for c in free} > {value}


def test_why_names_the_rival_layout_and_the_part_it_loses_on():
    spec = load_model("llama2-7b")
    base = TrainStepOptions(gpus=8, seq=2048, global_batch=16)
    best = train_step(spec, H100, HGX, replace(base, tp=2, zero=1))
    rival = train_step(spec, H100, HGX, replace(base, tp=8, zero=1))
    from mlsyscalc.calc.plan.search import why

    deltas = {k: rival.breakdown[k] - best.breakdown[k] for k in best.breakdown}
    part = max(deltas, key=lambda k: deltas[k])
    assert why(best, rival) == (
        f"{best.step_time_s:.4g} s per step, {rival.step_time_s - best.step_time_s:.3g} s less than the best layout "
        f"with other tp/pp/ZeRO/recompute choices (tp 8->2, dp 1->4, num_micro_batches 16->4), mostly {part} ({deltas[part]:.3g} s less)")
    assert why(best, None) == (f"{best.step_time_s:.4g} s per step; every other fitting layout makes the same "
                               "tp/pp/ZeRO/recompute choices")
    # with tp, pp, ZeRO and recompute all fixed there is no rival
    fixed = (("tp", 2), ("pp", 1), ("zero", 1), ("recompute", "none"))
    result = plan(spec, H100, HGX, PlanOptions(gpus=8, seq=2048, global_batch=16, top=2, fix=fixed))
    assert result.why.endswith("every other fitting layout makes the same tp/pp/ZeRO/recompute choices")


def test_a100_has_no_fp8_peak_measured_or_not():
    # the A100 datasheet lists no fp8: neither the datasheet nor a calibration without fp8 invents one
    with pytest.raises(MlsysError, match="A100-80GB-SXM: no fp8 peak"):
        datasheet_ceilings("A100-80GB-SXM").peak("fp8")
    cal = calibrated_ceilings({"gpu": "A100-80GB-SXM", "peak_flops": {"bf16": 280e12}})
    with pytest.raises(MlsysError, match="A100-80GB-SXM: no fp8 peak"):
        cal.peak("fp8")
    assert not any(n.startswith("fp8") for n in cal.notes) and any(n.startswith("int8") for n in cal.notes)
    # ... but a measured fp8 peak is used
    assert calibrated_ceilings({"gpu": "A100-80GB-SXM", "peak_flops": {"fp8": 1e15}}).peak("fp8") == 1e15


def test_datasheet_as_dict_keys():
    c = datasheet_ceilings("H100-SXM", launch_s=5e-6)
    e = c.efficiency
    d = c.as_dict("bfloat16")
    assert (d["source"], d["gpu"], d["sm_count"], d["dtype"]) == ("datasheet", "H100-SXM", 132, "bf16")
    assert d["base_flops_per_s"] == d["datasheet_flops_per_s"] == H100_BF16 and d["datasheet_Bps"] == H100_BPS
    assert d["matmul_flops_per_s"] == H100_BF16 * e.matmul and d["attention_flops_per_s"] == H100_BF16 * e.attention
    assert d["launch_overhead_s"] == 5e-6 and d["notes"] == []
    assert d["efficiency"] == {"matmul": e.matmul, "attention": e.attention, "memory": e.memory,
                               "matmul_skinny": e.matmul_skinny, "memory_broadcast": e.memory_broadcast,
                               "matmul_unaligned": e.matmul_unaligned,
                               "matmul_unaligned_stream": e.matmul_unaligned_stream,
                               "matmul_grouped_stream": e.matmul_grouped_stream, "attention_small_head": e.attention_small_head,
                               "matmul_fp8": e.matmul_fp8, "attention_flash2": e.attention_flash2,
                               "memory_fused": e.memory_fused, "memory_fused_norm_bwd": e.memory_fused_norm_bwd}
    assert datasheet_ceilings("H100-SXM").launch_s == 2e-6
    with pytest.raises(MlsysError, match="launch overhead"):
        datasheet_ceilings("H100-SXM", launch_s=-1e-6)


def test_plan_ranks_exactly_as_train_step_would():
    """Brute force: train_step on every candidate of a small search (gpt2 on 2 GPUs, 4% of the GPU
    usable so that only some layouts fit, no recomputation); the plan's feasible count and top 4 are
    those of train_step."""
    import itertools

    spec = load_model("gpt2")
    opts = PlanOptions(gpus=2, seq=1024, global_batch=4, max_micro_batch=2, top=4, reserve="96%",
                       fix=(("recompute", "none"),), all_variants=True)
    result = plan(spec, H100, HGX, opts)
    steps = []
    for lay, (zero, rc) in itertools.product(structures(spec, HGX, opts), execution_options(opts)):
        s = train_step(spec, H100, HGX, replace(lay, zero=zero, recompute=rc, reserve="96%"))
        steps.append((s.step_time_s, s.fits, s.options.layout()))
    fitting = sorted((t, i) for i, (t, fits, _) in enumerate(steps) if fits)
    assert result.searched == len(steps) and result.feasible == len(fitting) and 0 < len(fitting) < len(steps)
    got = [c.step_time_s for c in result.candidates]
    assert got == pytest.approx([t for t, _ in fitting[:4]], rel=1e-9)
    assert all(c.fits for c in result.candidates)


def test_train_refusals_and_the_named_cluster():
    with pytest.raises(MlsysError, match="gpt2 has 1024 learned position embeddings; train needs 2048 positions"):
        train_step(load_model("gpt2"), H100, "hgx-h100", TrainStepOptions(seq=2048))
    with pytest.raises(MlsysError, match="give --gpu NAME or --cluster NAME|FILE"):
        resolve_cluster(None, None, 8)
    assert resolve_cluster("B200", "hgx-h100", 8).name == "hgx-h100"  # a named cluster wins over the GPU
    step = train_step(load_model("gpt2"), H100, "hgx-h100", TrainStepOptions(seq=1024))
    assert (step.cluster, step.gpu, step.model) == ("hgx-h100", "H100-SXM", "gpt2")
