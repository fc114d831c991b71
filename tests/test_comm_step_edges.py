"""Edge cases of `mlsys comm step` found in review: each was a wrong number or a refusal before its fix."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mlsyscalc import load_model
from mlsyscalc.calc.comm.collectives import collective_cost
from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.cli.main import cli

LLAMA7 = load_model("llama2-7b")  # 32 layers
MIXTRAL = load_model("mixtral-8x7b")  # 32 MoE layers, 8 experts
DEEPSEEK = load_model("deepseek-v3")  # 61 layers, the first 3 dense


def rows_of(result, dim):
    return [r for r in result.rows if r.dim == dim]


@pytest.mark.parametrize("opts", [
    dict(dp=8, zero=1), dict(tp=2, pp=2), dict(tp=8, sp=True), dict(cp=2),
])
def test_step_tree_falls_back_to_ring_where_tree_does_not_apply(opts):
    """--algo tree prices all-reduces as trees; p2p, all-gather, reduce-scatter stay ring (as NCCL does)."""
    tree = step_comm(LLAMA7, StepOptions(**opts, algo="tree"), "hgx-h100")
    ring = step_comm(LLAMA7, StepOptions(**opts), "hgx-h100")
    for t, r in zip(tree.rows, ring.rows, strict=True):
        if t.collective == "all-reduce":
            nodes = t.nodes
            assert t.time_per_call_s == pytest.approx(
                collective_cost("all-reduce", t.message_bytes, t.group_size, "hgx-h100", nodes, "tree").time_s)
        else:
            assert t.time_per_call_s == pytest.approx(r.time_per_call_s)


def test_step_tree_with_experts_on_the_cli():
    result = CliRunner().invoke(cli, ["comm", "step", "mixtral", "--dp", "8", "--ep", "8", "--algo", "tree", "--json"])
    assert result.exit_code == 0, result.output


def test_ep_counts_the_moe_layers_of_the_busiest_stage():
    """deepseek-v3 with 61 stages: 58 of them hold one MoE layer, so the all-to-all is not zero."""
    r = step_comm(DEEPSEEK, StepOptions(dp=8, ep=8, pp=61), "hgx-h100")
    (a2a,) = rows_of(r, "ep")
    assert a2a.calls == 4 * 1
    # 62 layers, 3 dense, over 2 stages: stage 0 holds 28 MoE layers, stage 1 holds 31
    deeper = load_model("deepseek-v3", {"num_hidden_layers": 62})
    (a2a,) = rows_of(step_comm(deeper, StepOptions(dp=8, ep=8, pp=2), "hgx-h100"), "ep")
    assert a2a.calls == 4 * 31
    # 8 layers (MoE: 3-7), 2 stages x 2 chunks of 2 layers: stage 1 holds chunks 1 and 3 (layers 2-3, 6-7)
    assert 4 * 3 == rows_of(step_comm(load_model("deepseek-v3", {"num_hidden_layers": 8}),
                                      StepOptions(dp=8, ep=8, pp=2, interleave=2), "hgx-h100"), "ep")[0].calls


def test_expert_gradient_group_with_context_parallel_follows_the_expert_grid():
    """cp=2 and ep=8 over dp=8 (tp 1, etp 1): Megatron-Core folds the experts into the stage's 16 ranks as ep 8
    (ranks 0-7, cp ranks included) x edp 2, so each expert's replicas are ranks r and r + 8, on two nodes, whatever
    the attention's order of cp and dp."""
    r = step_comm(MIXTRAL, StepOptions(dp=8, ep=8, cp=2), "hgx-h100")
    dense, experts = rows_of(r, "dp")
    assert (dense.group_size, dense.nodes) == (16, 2)
    assert (experts.group_size, experts.nodes) == (2, 2)
    (a2a,) = rows_of(r, "ep")
    assert (a2a.group_size, a2a.nodes) == (8, 1)  # the all-to-all stays in a node
    flipped = step_comm(MIXTRAL, StepOptions(dp=8, ep=8, cp=2, order=("tp", "dp", "cp", "pp")), "hgx-h100")
    assert rows_of(flipped, "dp")[1].nodes == 2


def test_pipeline_p2p_crosses_nodes_when_the_stages_do():
    """tp 4, pp 4 on 8-GPU nodes: stages 1 -> 2 sit on different nodes; the pipeline waits for that hop."""
    r = step_comm(LLAMA7, StepOptions(tp=4, pp=4), "hgx-h100")
    (p2p,) = rows_of(r, "pp")
    assert p2p.nodes == 2
    assert p2p.time_per_call_s == pytest.approx(collective_cost("p2p", p2p.message_bytes, 2, "hgx-h100", 2).time_s)
    inside = step_comm(LLAMA7, StepOptions(tp=2, pp=4), "hgx-h100")  # 8 GPUs: one node
    assert rows_of(inside, "pp")[0].nodes == 1
