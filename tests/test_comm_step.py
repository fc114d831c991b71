"""Per-dimension traffic of a training step against hand arithmetic and the papers' ratios."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc import load_model
from mlsyscalc.calc.comm.collectives import collective_cost
from mlsyscalc.calc.counts.layers import mlp_linears
from mlsyscalc.calc.comm.step import StepOptions, placement, step_comm
from mlsyscalc.calc.counts.params import count_params
from mlsyscalc.errors import MlsysError

LLAMA7 = load_model("llama2-7b")  # 32 layers, hidden 4096, 32 heads, 6,738,415,616 params
MIXTRAL = load_model("mixtral-8x7b")


def rows_of(result, dim):
    return [r for r in result.rows if r.dim == dim]


def test_plain_dp_is_one_gradient_all_reduce():
    r = step_comm(LLAMA7, StepOptions(dp=8), "hgx-h100")
    (row,) = r.rows
    grads = 6_738_415_616 * 2  # bf16
    assert (row.collective, row.calls, row.message_bytes, row.group_size, row.nodes) == ("all-reduce", 1, grads, 8, 1)
    assert row.time_s == pytest.approx(collective_cost("all-reduce", grads, 8, "hgx-h100").time_s)
    assert row.bytes_per_gpu == pytest.approx(2 * 7 / 8 * grads)
    assert r.total_time_s == r.exposed_time_s == row.time_s


def test_zero_volumes_match_rajbhandari_2020():
    """ZeRO-1/2 move 2 Psi like plain DP; ZeRO-3 moves 3 Psi (Rajbhandari et al. 2020, sec. 7)."""
    base = step_comm(LLAMA7, StepOptions(dp=16), "hgx-h100").total_bytes_per_gpu
    for stage, ratio in ((1, 1.0), (2, 1.0), (3, 1.5)):
        r = step_comm(LLAMA7, StepOptions(dp=16, zero=stage), "hgx-h100")
        assert r.total_bytes_per_gpu == pytest.approx(ratio * base), stage
    # with 4 micro-batches ZeRO-2 reduce-scatters 4 times, ZeRO-3 also gathers 8 times
    z2 = step_comm(LLAMA7, StepOptions(dp=16, zero=2, grad_accum=4), "hgx-h100")
    assert [r.calls for r in z2.rows] == [4, 1]
    z3 = step_comm(LLAMA7, StepOptions(dp=16, zero=3, grad_accum=4), "hgx-h100")
    assert [(r.collective, r.calls) for r in z3.rows] == [("all-gather", 8), ("reduce-scatter", 4)]
    # FSDP2 as ZeRO-2 reshards at each backward's end: it gathers again every micro-batch; ZeRO-3 is unchanged
    fsdp2 = step_comm(LLAMA7, StepOptions(dp=16, zero=2, grad_accum=4, fsdp=True), "hgx-h100")
    assert [(r.collective, r.calls) for r in fsdp2.rows] == [("reduce-scatter", 4), ("all-gather", 4)]
    assert step_comm(LLAMA7, StepOptions(dp=16, zero=3, grad_accum=4, fsdp=True), "hgx-h100").rows == z3.rows


def test_fsdp2_zero2_gathers_hide_behind_every_forward(run_cli):
    """`mlsys train --framework torch --zero 2` with 4 micro-batches: 4 all-gathers behind 4 forwards; the same
    layout priced as Megatron-LM gathers once behind the first forward."""
    args = ("train", "llama2-7b", "--gpus", "16", "--cluster", "hgx-h100", "--seq", "2048", "--global-batch", "64",
            "--micro-batch", "1", "--zero", "2", "--dp", "16", "--overlap", "none")
    torch, megatron = run_cli.json(*args, "--framework", "torch"), run_cli.json(*args, "--framework", "megatron")
    (gather,) = [r.time_s for r in step_comm(LLAMA7, StepOptions(dp=16, zero=2), "hgx-h100").rows
                 if r.collective == "all-gather"]  # one call over 2 nodes
    assert torch["comm_total_s"]["dp"] - megatron["comm_total_s"]["dp"] == pytest.approx(3 * gather, rel=1e-9)


def test_tensor_parallel_by_hand_and_sequence_parallel_same_bytes():
    opts = StepOptions(tp=8, batch=2, seq=4096, grad_accum=3)
    (ar,) = step_comm(LLAMA7, opts, "hgx-h100").rows
    assert ar.message_bytes == 2 * 4096 * 4096 * 2
    assert ar.calls == 4 * 32 * 3  # 2 forward + 2 backward, per layer, per micro-batch
    sp = step_comm(LLAMA7, StepOptions(tp=8, batch=2, seq=4096, grad_accum=3, sp=True), "hgx-h100")
    assert [r.collective for r in sp.rows] == ["all-gather", "reduce-scatter"]
    assert sp.total_bytes_per_gpu == pytest.approx(ar.bytes_per_gpu)


def test_parallel_attention_halves_tp_all_reduces():
    phi2 = load_model("phi-2")
    (row,) = step_comm(phi2, StepOptions(tp=4), "hgx-h100").rows
    assert phi2.parallel_attention and row.calls == 2 * phi2.num_layers


def test_pipeline_bubble_and_p2p():
    r = step_comm(LLAMA7, StepOptions(pp=4, grad_accum=8), "hgx-h100")
    assert r.bubble_fraction == pytest.approx(3 / 11) and r.bubble_ratio == pytest.approx(3 / 8)
    (p2p,) = r.rows
    assert (p2p.collective, p2p.calls, p2p.message_bytes) == ("p2p", 16, 2048 * 4096 * 2)
    v2 = step_comm(LLAMA7, StepOptions(pp=4, grad_accum=8, interleave=2), "hgx-h100")
    assert v2.bubble_fraction == pytest.approx(1.5 / 9.5) and v2.rows[0].calls == 32


def test_placement_keeps_tp_inside_and_dp_across_nodes():
    assert placement(8, 1, 8) == (1, 8)
    assert placement(16, 8, 8) == (16, 1)
    assert placement(8, 2, 8) == (2, 4)
    r = step_comm(LLAMA7, StepOptions(dp=4, tp=8), "hgx-h100")
    nodes = {x.dim: x.nodes for x in r.rows}
    assert nodes == {"dp": 4, "tp": 1} and r.nodes == 4
    flipped = step_comm(LLAMA7, StepOptions(dp=4, tp=8, order=("dp", "cp", "tp", "pp")), "hgx-h100")
    assert {x.dim: x.nodes for x in flipped.rows} == {"dp": 1, "tp": 4}
    tp_time = lambda res: sum(x.time_s for x in res.rows if x.dim == "tp")  # noqa: E731
    assert tp_time(flipped) > 3 * tp_time(r)  # TP over the NICs is far slower than over NVLink


def test_expert_parallel_all_to_all_and_expert_gradients():
    r = step_comm(MIXTRAL, StepOptions(dp=8, ep=8, batch=1, seq=4096), "hgx-h100")
    (a2a,) = rows_of(r, "ep")
    assert a2a.message_bytes == 4096 * 2 * 4096 * 2  # tokens x top-2 x hidden x bf16
    assert a2a.calls == 4 * 32  # dispatch + combine, forward and backward, 32 MoE layers
    (dense,) = rows_of(r, "dp")  # each expert lives on one EP rank only: no expert gradient all-reduce
    experts = sum(lin.params for i in range(32) for lin in mlp_linears(MIXTRAL, i) if lin.copies > 1)
    assert dense.message_bytes == (count_params(MIXTRAL).total - experts) * 2
    wider = step_comm(MIXTRAL, StepOptions(dp=16, ep=8), "hgx-h100")
    dense16, expert16 = rows_of(wider, "dp")
    assert (dense16.group_size, expert16.group_size) == (16, 2)
    assert expert16.message_bytes == experts // 8 * 2 and expert16.nodes == 2


def test_context_parallel_kv_exchange():
    r = step_comm(LLAMA7, StepOptions(cp=4, seq=16384), "hgx-h100")
    ag, rs = rows_of(r, "cp")
    kv = 16384 * 32 * (128 + 128) * 2  # K and V of the whole sequence, bf16
    assert (ag.collective, ag.message_bytes, ag.calls) == ("all-gather", kv, 64)
    assert (rs.collective, rs.calls) == ("reduce-scatter", 32)
    assert rows_of(r, "dp")[0].group_size == 4  # gradients reduce over dp x cp


def test_overlap_is_explicit():
    opts = dict(dp=8, tp=8, pp=2, grad_accum=8)
    plain = step_comm(LLAMA7, StepOptions(**opts), "hgx-h100")
    hidden = step_comm(LLAMA7, StepOptions(**opts, overlap=("dp",)), "hgx-h100")
    dp_time = sum(r.time_s for r in rows_of(plain, "dp"))
    assert hidden.total_time_s == pytest.approx(plain.total_time_s)
    assert hidden.exposed_time_s == pytest.approx(plain.total_time_s - dp_time)
    assert sum(v["time_s"] for v in plain.by_dim.values()) == pytest.approx(plain.total_time_s)


@pytest.mark.parametrize("opts, message", [
    (StepOptions(tp=3), "tp: attention heads: 32 is not divisible by 3"),
    (StepOptions(pp=3), "layers: 32 is not divisible by 3"),
    (StepOptions(dp=8, ep=2), "has no routed experts"),
    (StepOptions(cp=3, seq=1000), r"rule seq % \(2\*cp\) == 0: .*1000 is not divisible by 6"),
    (StepOptions(zero=4), "--zero must be 0, 1, 2 or 3"),
    (StepOptions(dp=12), "divisible by 8"),
])
def test_bad_layouts_are_clear_errors(opts, message):
    with pytest.raises(MlsysError, match=message):
        step_comm(LLAMA7, opts, "hgx-h100")


def test_parts_price_one_side_of_the_step_each_and_add_up_to_the_whole():
    """parts=("dp",) keeps the data-parallel rows, ("model",) the TP/PP/EP/CP rows, in the same order as
    the whole step's, so a search can price each side once per distinct key."""
    spec = load_model("mixtral-8x7b")
    o = StepOptions(dp=16, tp=2, pp=2, ep=4, cp=2, zero=1, batch=1, seq=4096, grad_accum=4)
    whole = step_comm(spec, o, "hgx-h100").rows
    dp = step_comm(spec, o, "hgx-h100", parts=("dp",)).rows
    model = step_comm(spec, o, "hgx-h100", parts=("model",)).rows
    assert {r.dim for r in dp} == {"dp"} and "dp" not in {r.dim for r in model}
    assert dp + model == whole and {r.dim for r in model} == {"tp", "pp", "ep", "cp"}
    # the expert data-parallel group (Megatron-Core's folding): a stage's tp 2 x cp 2 x dp 16 = 64 ranks hold etp 2
    # (the default: tp) x ep 4 x edp 8, etp innermost, so one expert shard's replicas are etp x ep = 8 ranks apart:
    # 0, 8, ..., 56, one on each of 8 nodes
    experts = [r for r in dp if "routed experts" in r.rule]
    assert experts and {(r.group_size, r.nodes) for r in experts} == {(8, 8)}


def test_torch_tp_reduces_each_column_linears_input_gradient():
    """Without SP, Megatron all-reduces 2 a layer forward and 2 backward (fused QKV and gate/up share an input);
    plain torch DTensor TP all-reduces each column-parallel linear's input gradient: q, k, v, gate, up = 5 a
    llama layer backward (measured: 226 all-reduces a step of a 32-layer llama, 7 x 32 + 2 for the ends);
    phi-2's parallel block: 1 forward, q, k, v, up = 4 backward. Same message size either way."""
    llama, phi = load_model("llama2-7b"), load_model("phi-2")
    o = StepOptions(tp=2, batch=1, seq=2048, grad_accum=3)
    (megatron,) = rows_of(step_comm(llama, o, "hgx-h200"), "tp")
    (torch,) = rows_of(step_comm(llama, replace(o, tp_input_reduce="each"), "hgx-h200"), "tp")
    assert (megatron.calls, torch.calls) == (4 * 32 * 3, 7 * 32 * 3) and torch.message_bytes == megatron.message_bytes
    assert torch.time_s == pytest.approx(megatron.time_s * 7 / 4, rel=1e-12)
    (parallel,) = rows_of(step_comm(phi, replace(o, tp_input_reduce="each"), "hgx-h200"), "tp")
    assert parallel.calls == (1 + 4) * 32 * 3
    # two pipeline stages: each stage's share of the 5 x 32 backward reductions, 2 forward a layer of its 16
    (staged,) = rows_of(step_comm(llama, replace(o, pp=2, tp_input_reduce="each"), "hgx-h200"), "tp")
    assert staged.calls == (2 * 16 + 5 * 16) * 3
    with pytest.raises(MlsysError, match="tp_input_reduce must be shared or each"):
        step_comm(llama, replace(o, tp_input_reduce="fused"), "hgx-h200")
