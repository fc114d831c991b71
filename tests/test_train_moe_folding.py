"""Megatron-Core's MoE parallel folding (calc.parallel.expert_grid) in train, plan, memory train and comm step: every
folding rule exits 2 naming it; the traffic, memory and kernels of folded layouts against hand arithmetic; the
DeepSeek-V3 layout of 512 H100s; plan's search over ep and etp; properties over random layouts.

Megatron-Core (NVIDIA/Megatron-LM at d98e8a6, megatron/core/parallel_state.py) numbers a pipeline stage's
tp x cp x dp ranks a second time as etp x ep x edp, etp innermost; expert_tensor_parallel_size defaults to tp.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.comm.collectives import collective_cost
from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.calc.parallel.expert_grid import ExpertGrid
from mlsyscalc.calc.parallel.shards import stage_params
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.counts.params import count_params
from mlsyscalc.calc.parallel.pipeline_split import PipelineSplit, stage_layer_ids
from mlsyscalc.calc.plan.search import plan
from mlsyscalc.calc.plan.memory import MemoryTable
from mlsyscalc.calc.plan.space import PlanOptions, structures
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.train.parts import roofline_pass
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

from .test_plan import assert_search_equals_train_step

H100 = load_ceilings("H100-SXM")
HGX = load_cluster("hgx-h100")
MIXTRAL = load_model("mixtral-8x7b")  # 32 MoE layers, 8 experts, top-2, hidden 4096, expert width 14336
EXPERT_LAYER = 8 * 3 * 4096 * 14336  # one layer's routed expert weights (gate, up, down of 8 experts)
DENSE = count_params(MIXTRAL).total - 32 * EXPERT_LAYER  # attention, router, norms, embeddings, head
GH = ("--gpu", "H100-SXM")
DEEPSEEK_512 = ("train", "deepseek-v3", "--gpus", "512", *GH, "--seq", "4096", "--global-batch", "15360", "--tp", "2",
                "--pp", "8", "--ep", "64", "--decoder-first-pipeline-num-layers", "7",
                "--decoder-last-pipeline-num-layers", "6", "--zero", "1")


@pytest.mark.parametrize("args,rule", [
    (DEEPSEEK_512[1:], "rule tp*cp*dp % (etp*ep) == 0"),  # etp defaults to tp = 2: 2 x 64 does not divide 64
    (("mixtral-8x7b", "--gpus", "8", *GH, "--ep", "3", "--global-batch", "8"), "rule experts % ep == 0"),
    (("mixtral-8x7b", "--set", "intermediate_size=14340", "--gpus", "8", *GH, "--tp", "4", "--etp", "8",
      "--global-batch", "2"), "experts.gate_proj width over --etp: 14340 is not divisible by 8"),
    (("gpt-oss-20b", "--gpus", "2", *GH, "--tp", "2"), "rule etp == 1 with expert biases"),
    (("mixtral-8x7b", "--gpus", "2", *GH, "--tp", "2", "--no-sp"), "rule --sp with --tp 2 on an MoE model"),
    (("mixtral-8x7b", "--gpus", "2", *GH, "--tp", "2", "--no-sp", "--etp", "1", "--framework", "torch"),
     "rule --etp 1 other than --tp 2 needs --sp"),
    (("mixtral-8x7b", "--gpus", "32", *GH, "--ep", "2", "--etp", "16", "--global-batch", "32"),
     "rule ETP within a node: --etp 16 must divide the 8 GPUs of a node"),
    (("llama2-7b", "--gpus", "8", *GH, "--ep", "2", "--global-batch", "8"), "--ep 2: llama2-7b has no routed experts"),
    (("llama2-7b", "--gpus", "8", *GH, "--tp", "2", "--etp", "1", "--global-batch", "4"),
     "--etp 1: llama2-7b has no routed experts"),
])
def test_each_folding_rule_exits_2_with_one_line_naming_it(run_cli, args, rule):
    code, out, err = run_cli("train", *args)
    assert code == 2 and out == "" and rule in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("command", [("memory", "train"), ("comm", "step")])
def test_memory_and_comm_refuse_the_same_grid(run_cli, command):
    """The same ExpertGrid rules behind `memory train` and `comm step`: ep 8 with etp = tp = 4 over tp 4 x dp 2."""
    code, _, err = run_cli(*command, "mixtral-8x7b", "--tp", "4", "--dp", "2", "--ep", "8", "--sp")
    assert code == 2 and "rule tp*cp*dp % (etp*ep) == 0" in err and "etp*ep = 4*8 = 32" in err
    assert run_cli.json(*command, "mixtral-8x7b", "--tp", "4", "--dp", "2", "--ep", "8", "--etp", "1", "--sp")


def _rows(r, dim):
    return [(x.collective, x.message_bytes, x.calls, x.group_size, x.nodes) for x in r.rows if x.dim == dim]


def test_folded_traffic_by_hand():
    """mixtral-8x7b on 8 GPUs as tp 4 x dp 2 with SP, 2 micro-batches of 4096 tokens. ep 8 > dp 2 (refused
    before folding): the a2a moves each rank's 4096 / 4 sequence-split tokens x top-2 x 4096 x 2 bytes over all 8
    ranks, 4 calls a MoE layer a micro-batch; TP keeps one SP pair a layer (Mixtral has no shared experts: the MoE
    layer's MLP pair is gone); the dense gradients all-reduce over dp 2, the experts' over edp = 8 / (1 x 8) = 1: none."""
    o = StepOptions(tp=4, dp=2, ep=8, etp=1, sp=True, seq=4096, grad_accum=2)
    r = step_comm(MIXTRAL, o, HGX)
    routed, act = 1024 * 2 * 4096 * 2, 4096 * 4096 * 2
    assert _rows(r, "ep") == [("all-to-all", routed, 4 * 32 * 2, 8, 1)]
    assert _rows(r, "tp") == [("all-gather", act, 2 * 32 * 2, 4, 1), ("reduce-scatter", act, 2 * 32 * 2, 4, 1)]
    assert _rows(r, "dp") == [("all-reduce", DENSE // 4 * 2, 1, 2, 1)]
    assert r.params_per_gpu == DENSE / 4 + 32 * EXPERT_LAYER / 8  # E / ep experts, whole (etp 1)
    # ep 4 x etp 2: the a2a over ranks 2 apart, then the etp pair gathers 2 x the routed bytes and scatters them back,
    # forward and backward; experts split over 2 ranks each, 2 a GPU: the same expert parameters per GPU
    r = step_comm(MIXTRAL, replace(o, ep=4, etp=2), HGX)
    assert _rows(r, "ep") == [("all-to-all", routed, 4 * 32 * 2, 4, 1), ("all-gather", 2 * routed, 2 * 32 * 2, 2, 1),
                              ("reduce-scatter", 2 * routed, 2 * 32 * 2, 2, 1)]
    assert r.params_per_gpu == DENSE / 4 + 32 * EXPERT_LAYER / 8
    # ep 2 x etp 1 on 16 GPUs (dp 4): edp = 16 / 2 = 8, replicas every 2nd rank, 4 on each of 2 nodes
    r = step_comm(MIXTRAL, replace(o, dp=4, ep=2), HGX)
    experts = [x for x in r.rows if "routed experts" in x.rule]
    assert [(x.message_bytes, x.group_size, x.nodes) for x in experts] == [(32 * EXPERT_LAYER // 2 * 2, 8, 2)]


def test_shared_experts_keep_their_tp_pair():
    """DeepSeek-V3 cut to 8 layers (3 dense, 5 MoE with one shared expert) at tp 2 with SP: 2 SP pairs a dense
    layer, 1 + 1 an MoE layer (attention, shared experts), 16 a pass; qwen3-30b-a3b (48 MoE layers, no shared
    experts): 1 a layer, 48."""
    ds = load_model("deepseek-v3", {"num_hidden_layers": 8})
    ((_, _, calls, _, _), _) = _rows(step_comm(ds, StepOptions(tp=2, sp=True, seq=4096)), "tp")
    assert calls == 2 * (2 * 3 + 2 * 5)
    qwen = load_model("qwen3-30b-a3b")
    ((_, _, calls, _, _), _) = _rows(step_comm(qwen, StepOptions(tp=2, sp=True, seq=4096, ep=2, etp=1)), "tp")
    assert calls == 2 * 48


def test_folded_memory_by_hand():
    """The same tp 4 x dp 2 x ep 8 x etp 1 layout, ZeRO-1: a GPU holds one whole expert of each layer
    (32 x 3 x 4096 x 14336 parameters); AdamW's 12 bytes shard over dp 2 for the dense parameters and over edp 1
    (none) for the experts. The dispatched expert inputs a layer saves are the rank's own 1024 tokens x top-2 x
    4096 x 2 bytes (etp 1 gathers none); with etp = tp = 4 (the default) the four ranks' tokens, 4 x as many."""
    opts = TrainOptions(seq=4096, tp=4, dp=2, ep=8, etp=1, sp=True, zero=1)
    mem = train_memory(MIXTRAL, opts)
    experts = 32 * EXPERT_LAYER // 8
    assert stage_params(MIXTRAL, range(32), True, True, 4, 8, 1, etp=1).expert == experts
    dense = mem.stages[0].params - experts
    assert mem.breakdown["weights"] == 2 * (dense + experts)
    assert mem.breakdown["optimizer"] == pytest.approx(12 * (dense / 2 + experts), abs=2)
    saved = dict(mem.activation_items)["dispatched expert inputs (k copies)"]
    assert saved == 1024 * 2 * 4096 * 2
    default = dict(train_memory(MIXTRAL, replace(opts, ep=2, etp=None)).activation_items)
    assert default["dispatched expert inputs (k copies)"] == 4 * saved
    # ep 2 x etp 1 on the same 8 GPUs: 4 experts a GPU, ZeRO over edp = 8 / 2 = 4
    wider = train_memory(MIXTRAL, replace(opts, ep=2))
    assert wider.breakdown["optimizer"] == pytest.approx(12 * (dense / 2 + 4 * experts / 4), abs=2)


def test_folded_step_by_hand():
    """train_step of tp 4 x dp 2 x ep 8 x etp 1 on 8 H100s, 4 micro-batches, nothing overlapped: ep_comm_s is
    4 x 32 a2a calls a micro-batch at the comm model's price; the routed GEMMs run the rank's one expert (E / ep)
    on its 1024 tokens x top-2 = 2048 rows, unsplit (14336 wide)."""
    opts = TrainStepOptions(gpus=8, seq=4096, global_batch=8, tp=4, ep=8, etp=1, overlap=())
    step = train_step(MIXTRAL, H100, HGX, opts)
    a2a = collective_cost("all-to-all", 1024 * 2 * 4096 * 2, 8, HGX).time_s
    assert step.breakdown["ep_comm_s"] == pytest.approx(4 * 4 * 32 * a2a, rel=1e-12)
    assert step.step_time_s == pytest.approx(sum(step.breakdown.values()), rel=1e-12)
    rows = {r.pred.name: r.pred for r in roofline_pass(MIXTRAL, H100, tp=4, cp=1, micro_batch=1, seq=4096,
                                                        dtype="bf16", ep=8, etp=1).rows if r.pass_name == "forward"}
    tokens, groups, n, k = rows["experts.gate_proj"].dims
    assert (tokens, n, k) == (2048, 14336, 4096) and groups == pytest.approx(1.0)
    assert step.as_dict()["layout"] | {"ep": 8, "etp": 1, "edp": 1} == step.as_dict()["layout"]


def test_deepseek_v3_on_512_h100s_answers(run_cli):
    """The issue's layout (tp 2, pp 8, ep 64 on 512 H100s; 61 layers as 7 + 6 x 8 + 6) with --etp 1: the a2a of
    each rank's 2048 sequence-split tokens x top-8 x 7168 x 2 bytes spans 64 ranks on 8 nodes, 4 calls for each
    of the busiest stage's 8 MoE layers and 480 micro-batches; a GPU holds 4 of the 256 experts of its layers."""
    data = run_cli.json(*DEEPSEEK_512, "--etp", "1")
    assert data["layout"] | {"ep": 64, "etp": 1, "edp": 1, "dp": 32} == data["layout"]
    assert data["step_time_s"] == pytest.approx(sum(data["breakdown"].values()), rel=1e-12)
    assert data["breakdown"]["ep_comm_s"] > 0 and data["memory_bytes_per_gpu"] > 0
    spec = load_model("deepseek-v3")
    stages = stage_layer_ids(61, 8, 1, PipelineSplit(first=7, last=6))
    assert [len(s) for s in stages] == [7, 8, 8, 8, 8, 8, 8, 6]
    comm = step_comm(spec, StepOptions(tp=2, pp=8, dp=32, ep=64, etp=1, sp=True, seq=4096, grad_accum=480, zero=1,
                                       stages=stages), HGX)
    assert _rows(comm, "ep") == [("all-to-all", 2048 * 8 * 7168 * 2, 4 * 8 * 480, 64, 8)]  # no etp pair: etp 1
    assert stage_params(spec, stages[1], False, False, 2, 64, 8, etp=1).expert == 8 * 4 * 3 * 7168 * 2048


def test_plan_finds_folded_layouts_and_is_never_worse_than_a_pinned_one():
    """mixtral-8x7b cut to 4 layers on 8 H100s: the search holds folded layouts (ep > dp: refused before) and
    etp 1 beside etp = tp; its best is no slower than the best with any pinned expert grid."""
    spec = load_model("mixtral-8x7b", {"num_hidden_layers": 4})
    opts = PlanOptions(gpus=8, seq=4096, global_batch=16, max_micro_batch=2, top=1)
    every = list(structures(spec, HGX, opts))
    assert any(c.ep > c.data_parallel for c in every) and {c.expert_tp for c in every if c.tp == 4} == {1, 4}
    best = plan(spec, H100, HGX, opts).candidates[0]
    for fix in ((("tp", 4), ("ep", 8), ("etp", 1)), (("tp", 2), ("ep", 4), ("etp", 2)), (("ep", 1),), (("etp", 2),)):
        pinned = plan(spec, H100, HGX, replace(opts, fix=fix)).candidates
        assert not pinned or best.step_time_s <= pinned[0].step_time_s * (1 + 1e-12), fix
    assert {c.expert_tp for c in structures(spec, HGX, replace(opts, fix=(("etp", 2),)))} == {2}  # any etp, pinned


def test_plan_prices_folded_uneven_moe_layouts_as_train_does():
    """DeepSeek-V3 cut to 8 layers (3 dense, shared experts: TP pairs differ by layer kind) on 16 GPUs, uneven
    splits and interleaving included: sampled candidates and the top ones equal train_step."""
    spec = load_model("deepseek-v3", {"num_hidden_layers": 8})
    opts = PlanOptions(gpus=16, seq=2048, global_batch=32, max_micro_batch=2, max_cp=2)
    assert any(c.ep * c.expert_tp > c.data_parallel for c in structures(spec, HGX, opts))
    assert_search_equals_train_step(spec, H100, HGX, opts, samples=30, seed=3, top=4)


@pytest.mark.parametrize("lay", [dict(tp=4, dp=2, ep=8, etp=1, zero=1), dict(tp=2, dp=4, ep=4, etp=2, zero=3),
                                 dict(tp=2, dp=2, pp=2, cp=2, ep=8, etp=1, zero=2)])
def test_plan_memory_equals_train_memory_for_folded_layouts(lay):
    lay = {"pp": 1, "cp": 1, **lay}
    ref = train_memory(MIXTRAL, TrainOptions(seq=4096, sp=True, grad_accum=4, **lay)).total
    grid = ExpertGrid(tp=lay["tp"], cp=lay["cp"], dp=lay["dp"], ep=lay["ep"], etp=lay["etp"])
    got = MemoryTable(MIXTRAL, 4096, "bf16").total_bytes(
        tp=lay["tp"], ep=lay["ep"], pp=lay["pp"], cp=lay["cp"], sp=True, zero=lay["zero"], shard=lay["dp"] * lay["cp"],
        recompute="none", micro_batch=1, micro_batches=4, vp=1, split=PipelineSplit(), etp=lay["etp"],
        expert_shard=grid.edp)
    assert got == pytest.approx(ref, abs=16)


@st.composite
def _grids(draw):
    """A valid expert grid over mixtral-8x7b's 8 experts: tp, cp, dp, then ep and etp that fold into them."""
    tp, cp, dp = draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2))), draw(st.sampled_from((1, 2, 4, 8)))
    stage = tp * cp * dp
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if stage % e == 0]))
    etp = draw(st.sampled_from([t for t in (1, 2, 4) if stage % (t * ep) == 0]))
    return dict(tp=tp, cp=cp, dp=dp, ep=ep, etp=etp, zero=draw(st.sampled_from((0, 1, 2, 3))))


SMALL = load_model("mixtral-8x7b", {"num_hidden_layers": 2})


@settings(max_examples=25, deadline=None)
@given(_grids())
def test_more_expert_parallelism_never_more_memory_per_gpu(lay):
    """Doubling ep (or etp) at a fixed layout never adds memory per GPU: E / (etp ep) experts a GPU, and ZeRO over
    edp = tp cp dp / (etp ep) keeps a GPU's share of their states at most what it was; the experts' parameters
    on a GPU times etp x ep are the stage's."""
    base = TrainOptions(seq=2048, sp=True, **lay)
    mem = train_memory(SMALL, base).total
    per_gpu = stage_params(SMALL, range(2), True, True, lay["tp"], lay["ep"], 1, etp=lay["etp"]).expert
    assert per_gpu * lay["ep"] * lay["etp"] == 2 * 8 * 3 * 4096 * 14336
    stage = lay["tp"] * lay["cp"] * lay["dp"]
    for more in (dict(ep=2 * lay["ep"]), dict(etp=2 * lay["etp"])):
        grown = replace(base, **more)
        if grown.ep <= 8 and stage % (grown.ep * grown.experts.expert_tp) == 0 and grown.experts.expert_tp <= 4:
            assert train_memory(SMALL, grown).total <= mem


@settings(max_examples=25, deadline=None)
@given(_grids())
def test_the_dense_gradients_ignore_the_expert_grid(lay):
    """The dense parameters' DP traffic is the attention grid's alone (dp x cp); the expert grid moves only the
    experts' rows and the dispatcher's."""
    o = StepOptions(tp=lay["tp"], cp=lay["cp"], dp=lay["dp"], ep=lay["ep"], etp=lay["etp"], zero=lay["zero"], sp=True,
                    seq=2048)
    plain = replace(o, ep=1, etp=None)
    dense = lambda r: [x for x in r.rows if x.dim == "dp" and "routed experts" not in x.rule]  # noqa: E731
    assert dense(step_comm(SMALL, o, HGX)) == dense(step_comm(SMALL, plain, HGX))
    experts = [x for x in step_comm(SMALL, o, HGX).rows if "routed experts" in x.rule]
    assert all(x.group_size == o.experts.edp for x in experts) and (o.experts.edp > 1) == bool(experts)


def test_deepseek_v3_plans_on_512_h100s_in_seconds():
    """The 671B MoE on 512 H100s (micro-batches up to 2; docs/plan.md times the default search): every ep and
    etp that folds, counted and timed, and no slower than the issue's grid (tp 2, pp 8, ep 64, etp 1) pinned.
    The bound is a guard against a hang, not a benchmark."""
    spec = load_model("deepseek-v3")
    cluster = load_cluster("hgx-h100")
    opts = PlanOptions(gpus=512, seq=4096, global_batch=15360, max_micro_batch=2, top=1)
    result = plan(spec, H100, cluster, opts)
    assert result.searched > 50_000 and result.search_s < 60 and result.candidates[0].fits
    issue = (("tp", 2), ("pp", 8), ("ep", 64), ("etp", 1))
    pinned = plan(spec, H100, cluster, replace(opts, fix=issue)).candidates[0]
    assert pinned.options.layout() | {"ep": 64, "etp": 1, "edp": 1} == pinned.options.layout()
    assert result.candidates[0].step_time_s <= pinned.step_time_s


def test_expert_widths_divide_by_etp_not_tp(run_cli):
    """Expert widths split over etp only: mixtral with 14,340-wide experts (4 x 3585) trains at tp 8 with etp 1, and
    plan searches tp 8 for it (with etp 1); etp = tp = 8 exits 2 naming the experts' width."""
    spec = load_model("mixtral-8x7b", {"num_hidden_layers": 4, "intermediate_size": 14340})
    base = ("train", "mixtral-8x7b", "--set", "num_hidden_layers=4", "--set", "intermediate_size=14340", "--gpus", "8",
            *GH, "--tp", "8", "--global-batch", "1")
    assert run_cli.json(*base, "--etp", "1")["layout"]["etp"] == 1
    code, _, err = run_cli(*base)
    assert code == 2 and "experts.gate_proj width over --etp: 14340 is not divisible by 8" in err
    opts = PlanOptions(gpus=8, seq=2048, global_batch=8, max_micro_batch=1, fix=(("tp", 8),))
    assert {c.expert_tp for c in structures(spec, HGX, opts)} == {1}
