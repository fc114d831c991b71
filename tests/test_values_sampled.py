"""Value tests for what a random sample of planted bugs showed no test looked at.

Each test pins a documented output against hand arithmetic written out here (from the model's
config.json in model_specs/, the cluster spec's figures, or transformers' parameter counts in
tests/data/hf_params.json), never against the code under test. docs/mutation.md lists the
mutants that led to each.
"""

from __future__ import annotations

import pytest

from mlsyscalc.calc.comm_collectives import collective_cost

from .conftest import load_data

HF = load_data("hf_params.json")["models"]  # transformers counts, meta device

# hgx-h100: NVLink 370 GB/s achievable for all-reduce, 3.4 us a step; one 50 GB/s NIC a GPU, 14 us


def test_flat_ring_over_two_nodes_runs_on_the_rails():
    # 4 GPUs on 2 nodes, 2 a node: NCCL runs one ring per NIC, so the ring's bandwidth is
    # min(NVLink 370, 2 NICs x 50) = 100 GB/s and each step waits for the NIC's 14 us.
    # all-reduce of 1 GiB: 2(p-1) = 6 steps, 2(p-1)/p = 1.5 x n bytes
    n = 2**30
    cost = collective_cost("all-reduce", n, 4, "hgx-h100", nodes=2)
    (phase,) = cost.phases
    assert phase.link == "intra+inter (rails)" and phase.steps == 6
    assert cost.time_s == pytest.approx(6 * 14e-6 + 1.5 * n / 100e9, rel=1e-12)


def test_flat_ring_of_one_gpu_a_node_is_the_network_alone():
    # 2 GPUs on 2 nodes: the ring is the NIC link only: 2 steps of 14 us, n bytes at 50 GB/s
    n = 2**30
    cost = collective_cost("all-reduce", n, 2, "hgx-h100", nodes=2)
    (phase,) = cost.phases
    assert phase.link.startswith("8x ConnectX-7") and phase.steps == 2
    assert cost.time_s == pytest.approx(2 * 14e-6 + n / 50e9, rel=1e-12)


@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "gpt2"])
def test_tied_head_adds_no_weight_bytes(run_cli, model):
    # a tied lm_head reads the embedding table: bf16 weights are 2 bytes x transformers' count
    d = run_cli.json("memory", "infer", model)
    assert HF[model]["tied_embeddings"] and HF[model]["lm_head_params"] == 0
    assert d["weights_bytes"] == 2 * HF[model]["total_params"]


def test_group_size_is_bounded_by_whole_column_parallel_inputs(run_cli):
    # deepseek-v3 under --tp 2: kv_b_proj is column-parallel, so each rank keeps its whole input
    # of kv_lora_rank = 512 columns; row-parallel o_proj (128 heads x 128 = 16384 in) and the
    # experts' down_proj (2048 in) are split to 8192 and 1024. Narrowest: 512.
    assert run_cli.json("memory", "infer", "deepseek-v3", "--dtype", "int4", "--group-size", "512",
                        "--tp", "2")["dtype"] == "int4"
    code, _, err = run_cli("memory", "infer", "deepseek-v3", "--dtype", "int4", "--group-size", "1024",
                           "--tp", "2")
    assert code == 2 and "narrowest weight input (512 columns per rank)" in err
    # llama2-7b under --tp 2: o_proj's 4096 inputs split to 2048, q/k/v/gate/up keep 4096
    code, _, err = run_cli("memory", "infer", "llama2-7b", "--dtype", "int4", "--group-size", "4096", "--tp", "2")
    assert code == 2 and "(2048 columns per rank)" in err
