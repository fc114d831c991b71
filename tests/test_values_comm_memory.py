"""Value tests for what a 1,119-mutant discovery run of calc/ and specs/ showed no test looked at:
collectives, the training step's communication, cluster and GPU specs, the memory calculators and
the spec readers.

Expected numbers are hand arithmetic written out here from the model's config.json
(model_specs/models), the cluster or GPU spec's figures (model_specs/clusters, model_specs/gpus),
transformers' parameter counts (tests/data/hf_params.json), or a property that must hold (a limit
case, parts that add up to a total); never the code under test. docs/mutation.md says how mutants
are made and scored.
"""

from __future__ import annotations

import re

import pytest

from mlsyscalc.calc.comm.collectives import CollectiveCost, collective_cost, ring_terms
from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import cluster_from_dict, load_cluster
from mlsyscalc.specs.gpu import load_gpu
from mlsyscalc.specs.lookup import load_model

from .conftest import load_data

HF = load_data("hf_params.json")["models"]  # transformers counts, meta device
GiB = 2**30

# hgx-h100 (model_specs/clusters/hgx-h100.json): 8 GPUs a node; NVLink 370 GB/s and 3.4 us a step;
# one 50 GB/s NIC a GPU, 14 us a step
NVL_BW, NVL_LAT, NIC_BW, NIC_LAT = 370e9, 3.4e-6, 50e9, 14e-6


# ---- collectives ---------------------------------------------------------------------------------

@pytest.mark.parametrize("collective", ["all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                        "broadcast", "reduce", "p2p"])
def test_a_single_gpu_ring_sends_nothing(collective):
    # one rank has no peer: no step and no byte, whatever the collective
    assert ring_terms(collective, 1, 2**20) == (0, 0.0)


def test_hierarchical_on_one_node_is_the_flat_ring():
    # with every GPU on one node there is no inter-node stage to split off: NCCL's flat ring,
    # 2(p-1) = 14 steps and 2(p-1)/p n bytes over NVLink for an all-reduce of 8 GPUs
    n = GiB
    cost = collective_cost("all-reduce", n, 8, "hgx-h100", nodes=1, algo="hierarchical")
    (phase,) = cost.phases
    assert phase.name == "ring all-reduce" and phase.steps == 14
    assert cost.time_s == pytest.approx(14 * NVL_LAT + 2 * 7 / 8 * n / NVL_BW, rel=1e-12)
    # all-to-all has no hierarchical form: on one node it is the pairwise exchange, (p-1)/p n
    a2a = collective_cost("all-to-all", n, 8, "hgx-h100", nodes=1, algo="hierarchical")
    (phase,) = a2a.phases
    assert phase.name == "pairwise all-to-all" and phase.steps == 7
    assert a2a.time_s == pytest.approx(7 * NVL_LAT + 7 / 8 * n / NVL_BW, rel=1e-12)


def test_hierarchical_reduce_scatter_over_two_nodes():
    # 16 GPUs on 2 nodes: reduce-scatter of n over the 8 GPUs of a node ((p-1) = 7 steps, 7/8 n),
    # then of the n/8 shard over the 2 nodes (1 step, 1/2 x n/8 on the NIC)
    n = GiB
    cost = collective_cost("reduce-scatter", n, 16, "hgx-h100", nodes=2, algo="hierarchical")
    intra, inter = cost.phases
    assert (intra.steps, inter.steps) == (7, 1)
    assert (intra.bytes_per_gpu, inter.bytes_per_gpu) == (7 / 8 * n, n / 16)
    assert cost.time_s == pytest.approx(7 * NVL_LAT + 7 / 8 * n / NVL_BW + NIC_LAT + n / 16 / NIC_BW, rel=1e-12)


def test_hierarchical_with_one_gpu_a_node_keeps_only_the_network_stage():
    # 2 nodes of 1 GPU: the intra-node stages have one rank and drop out; what is left is an
    # all-reduce of n over the 2 nodes: 2 steps of 14 us and n bytes at 50 GB/s
    n = GiB
    cost = collective_cost("all-reduce", n, 2, "hgx-h100", nodes=2, algo="hierarchical")
    (phase,) = cost.phases
    assert phase.gpus == 2 and phase.steps == 2
    assert cost.time_s == pytest.approx(2 * NIC_LAT + n / NIC_BW, rel=1e-12)


def test_auto_picks_hierarchical_over_a_slow_network():
    # hgx-h100 with 1 GB/s NICs, 16 GPUs on 2 nodes, all-reduce of 1 GiB:
    #   ring on the rails: min(370, 8 x 1) = 8 GB/s, 30 steps of 14 us, 2 x 15/16 n bytes: 0.25 s
    #   tree: 2 ceil(log2 16) = 8 steps, 2 n at 8 GB/s: 0.27 s
    #   hierarchical: reduce-scatter and all-gather of n on NVLink (7 steps, 7/8 n each) and an
    #   all-reduce of n/8 over 2 nodes (2 steps, n/8 bytes at 1 GB/s): 0.14 s, the least
    n = GiB
    slow = load_cluster("hgx-h100").with_links(inter_bandwidth_GBps=1)
    cost = collective_cost("all-reduce", n, 16, slow, nodes=2, algo="auto")
    assert cost.algo == "hierarchical"
    hier = 2 * (7 * NVL_LAT + 7 / 8 * n / NVL_BW) + 2 * NIC_LAT + n / 8 / 1e9
    assert cost.time_s == pytest.approx(hier, rel=1e-12)


@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_tree_broadcast_and_reduce_cross_the_tree_once(collective):
    # double binary tree, 8 GPUs: ceil(log2 8) = 3 steps and n bytes (only all-reduce goes up and
    # down again: 2 x 3 steps, 2 n)
    n = GiB
    cost = collective_cost(collective, n, 8, "hgx-h100", algo="tree")
    (phase,) = cost.phases
    assert (phase.steps, phase.bytes_per_gpu) == (3, n)
    assert cost.time_s == pytest.approx(3 * NVL_LAT + n / NVL_BW, rel=1e-12)


@pytest.mark.parametrize("gpus", [0, 1])
def test_a_collective_needs_two_gpus(gpus):
    with pytest.raises(MlsysError, match=f"all-reduce needs at least 2 GPUs, got {gpus}"):
        collective_cost("all-reduce", GiB, gpus, "hgx-h100")


def test_a_collective_cost_without_call_overhead_has_no_host_wait():
    # the documented default: no call overhead modelled, so the time is the devices' time
    (phase,) = collective_cost("all-gather", GiB, 8, "hgx-h100").phases
    cost = CollectiveCost("all-gather", "ring", GiB, 8, 1, (phase,))
    assert cost.host_wait_s == 0.0 and cost.time_s == phase.time_s


# ---- communication of one training step ----------------------------------------------------------

MIXTRAL = HF["mixtral-8x7b"]


def test_params_per_gpu_split_dense_by_tp_pp_and_experts_also_by_ep():
    # mixtral-8x7b, tp 2, pp 2, ep 2 (dp 2): the dense part (transformers' total minus the routed
    # experts) splits over tp x pp = 4 GPUs, the routed experts over tp x pp x ep = 8
    spec = load_model("mixtral-8x7b")
    r = step_comm(spec, StepOptions(dp=2, tp=2, pp=2, ep=2))
    dense = MIXTRAL["total_params"] - MIXTRAL["routed_expert_params"]
    assert r.params_per_gpu == pytest.approx(dense / 4 + MIXTRAL["routed_expert_params"] / 8, rel=1e-12)
    assert r.nodes == 1  # 8 GPUs on one 8-GPU node


def test_two_expert_model_counts_its_experts_as_routed():
    # mixtral cut to 2 experts a layer: routed params 32 layers x 2 experts x 3 x 4096 x 14336;
    # with ep 2 each GPU keeps one expert a layer and reduces its gradients over dp / ep = 1 rank
    # (no expert row); the dense gradients all-reduce over dp = 2
    spec = load_model("mixtral-8x7b", {"num_local_experts": 2})
    experts = 32 * 2 * 3 * 4096 * 14336
    dense = MIXTRAL["total_params"] - MIXTRAL["routed_expert_params"] - 32 * 4096 * 6  # router 4096 x 2
    r = step_comm(spec, StepOptions(dp=2, ep=2))
    assert r.params_per_gpu == pytest.approx(dense + experts / 2, rel=1e-12)
    (dp_row,) = [x for x in r.rows if x.dim == "dp"]
    assert dp_row.message_bytes == 2 * dense


def test_expert_gradients_of_a_two_node_layout():
    # mixtral, dp 16, ep 2 on two 8-GPU nodes: the replicas of one expert shard are every 2nd rank,
    # 8 ranks, 4 on each node; each reduces experts / ep params of 2 bytes
    r = step_comm(load_model("mixtral-8x7b"), StepOptions(dp=16, ep=2))
    rows = {x.rule: x for x in r.rows if x.dim == "dp"}
    experts = rows["gradient all-reduce once per step (routed experts)"]
    assert (experts.group_size, experts.nodes) == (8, 2)
    assert experts.message_bytes == MIXTRAL["routed_expert_params"] // 2 * 2
    assert r.nodes == 2


def test_pipeline_sends_the_activation_split_over_tp():
    # llama3-8b, tp 2, pp 2, 4 micro-batches of 1 x 2048 tokens: the stage boundary sends
    # b s h x 2 bytes / tp = 2048 x 4096 x 2 / 2 per micro-batch, forward and backward
    r = step_comm(load_model("llama3-8b"), StepOptions(tp=2, pp=2, grad_accum=4))
    (pp,) = [x for x in r.rows if x.dim == "pp"]
    assert (pp.collective, pp.message_bytes, pp.calls) == ("p2p", 2048 * 4096 * 2 // 2, 2 * 4)
    # bubble (p - 1) / (m + p - 1) = 1/5 of the step, 1/4 of the compute (Narayanan et al. 2021)
    assert (r.bubble_fraction, r.bubble_ratio) == (pytest.approx(1 / 5), pytest.approx(1 / 4))


def test_context_parallel_kv_traffic_per_micro_batch():
    # llama3-8b, cp 2, 4 micro-batches: K and V of 8 heads x 128 for 1 x 2048 tokens in bf16 =
    # 2048 x 8 x 256 x 2 bytes; all-gather forward and backward on each of 32 layers, reduce-scatter
    # backward, every micro-batch
    r = step_comm(load_model("llama3-8b"), StepOptions(cp=2, grad_accum=4))
    rows = {x.collective: x for x in r.rows if x.dim == "cp"}
    assert rows["all-gather"].message_bytes == rows["reduce-scatter"].message_bytes == 2048 * 8 * 256 * 2
    assert (rows["all-gather"].calls, rows["reduce-scatter"].calls) == (2 * 32 * 4, 32 * 4)


def test_context_parallel_with_fewer_kv_heads_than_tp_ranks():
    # llama3-8b with 2 KV heads under tp 4: each rank keeps one replicated KV head:
    # K, V = 2048 tokens x 1 head x 256 x 2 bytes
    spec = load_model("llama3-8b", {"num_key_value_heads": 2})
    r = step_comm(spec, StepOptions(tp=4, cp=2))
    rows = [x for x in r.rows if x.dim == "cp"]
    assert {x.message_bytes for x in rows} == {2048 * 1 * 256 * 2}


def test_by_dim_adds_up_the_rows():
    # each dimension's bytes and time are the sum of its rows; nothing else
    r = step_comm(load_model("mixtral-8x7b"), StepOptions(dp=4, tp=2, ep=2, cp=2, zero=1, grad_accum=2))
    dims = {x.dim for x in r.rows}
    assert set(r.by_dim) == dims == {"dp", "tp", "ep", "cp"}
    for d in dims:
        assert r.by_dim[d]["bytes_per_gpu"] == pytest.approx(sum(x.bytes_per_gpu for x in r.rows if x.dim == d),
                                                             rel=1e-12, abs=0)
        assert r.by_dim[d]["time_s"] == pytest.approx(sum(x.time_s for x in r.rows if x.dim == d), rel=1e-12, abs=0)


def test_a_one_byte_message_is_still_priced():
    # gpt2 cut to 2 heads of width 1 (hidden 2), fp8, 1 token: the pipeline sends 1 x 2 x 1 byte / tp 2
    # = 1 byte per micro-batch, forward and backward: a call like any other
    spec = load_model("gpt2", {"n_embd": 2, "n_head": 2})
    r = step_comm(spec, StepOptions(tp=2, pp=2, seq=1, dtype="fp8"))
    (pp,) = [x for x in r.rows if x.dim == "pp"]
    assert (pp.message_bytes, pp.calls) == (1, 2)


def test_layers_must_split_over_pp_times_interleave():
    with pytest.raises(MlsysError, match="pp x interleave: layers: 32 is not divisible by 64"):
        step_comm(load_model("llama3-8b"), StepOptions(pp=2, interleave=32))


# ---- cluster and GPU specs -----------------------------------------------------------------------

def _cluster(**intra):
    link = {"link": "test", "bandwidth_GBps": 100, "latency_us": 2.0, **intra}
    return {"name": "t", "gpus_per_node": 4, "intra_node": link}


def test_cluster_line_rate_error_names_the_figure():
    with pytest.raises(MlsysError, match=r"line_rate_GBps': must be >= 0, got -5\b"):
        cluster_from_dict(_cluster(line_rate_GBps=-5), "t.json")


def test_cluster_accepts_a_single_gpu_node_and_any_positive_figures():
    spec = cluster_from_dict({**_cluster(bandwidth_GBps=1e-10, latency_us=0), "gpus_per_node": 1}, "t.json")
    assert spec.gpus_per_node == 1
    assert (spec.intra.bandwidth_Bps, spec.intra.latency_s) == (pytest.approx(0.1, rel=1e-12), 0.0)
    with pytest.raises(MlsysError, match="gpus_per_node': must be >= 1, got 0"):
        cluster_from_dict({**_cluster(), "gpus_per_node": 0}, "t.json")


def test_cluster_protocol_without_base_latency_has_none():
    proto = {"name": "LL", "bandwidth_GBps": 20, "latency_us": 1.5}
    spec = cluster_from_dict(_cluster(protocols=[proto]), "t.json")
    (p,) = spec.intra.protocols
    assert (p.bandwidth_Bps, p.latency_s, p.base_latency_s) == (20e9, pytest.approx(1.5e-6, rel=1e-12, abs=0), 0.0)


def test_with_links_overrides_in_base_units():
    spec = load_cluster("hgx-h100").with_links(bandwidth_GBps=200, latency_us=5)
    assert spec.intra.bandwidth_Bps == 200e9
    assert spec.intra.latency_s == pytest.approx(5e-6, rel=1e-12, abs=0)
    # an overridden link has no datasheet line rate, so the JSON states none
    assert spec.intra.line_rate_Bps == 0.0 and "line_rate_GBps" not in spec.to_dict()["intra_node"]
    with pytest.raises(MlsysError, match="bandwidth must be positive, got 0"):
        load_cluster("hgx-h100").with_links(bandwidth_GBps=0)


def test_h100_spec_figures_in_base_units():
    # model_specs/gpus/H100-SXM.json: 989.5 dense bf16 TFLOP/s, 3350 GB/s, 50 MB L2, 1980 MHz boost
    gpu = load_gpu("H100-SXM")
    assert gpu.ridge_point("bf16") == pytest.approx(989.5e12 / 3350e9, rel=1e-12)
    assert gpu.l2_bytes == 50_000_000
    assert gpu.boost_clock_hz == pytest.approx(1980e6, rel=1e-12)


def test_a_group_of_one_rank_sits_on_one_node():
    from mlsyscalc.calc.comm.step import placement

    # the limit case: one rank is one GPU of one node, whatever the stride
    assert placement(1, 1, 8) == placement(1, 16, 8) == (1, 1)


# ---- inference memory ----------------------------------------------------------------------------

def _infer(model, overrides=None, **opts):
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory

    return infer_memory(load_model(model, overrides), InferOptions(**opts))


def test_prefill_workspace_without_flash_holds_the_scores():
    # llama3-8b, 2048-token prefill chunk of a 4096 context, no flash attention: the attention phase
    # holds q (4096), k and v (2 x 1024), the attention output (4096) and 32 heads x 4096 keys of
    # scores per token, more than the MLP's 3 x 14336; plus the residual and norm output (2 x 4096),
    # 2 bytes each
    attn = 4096 + 2 * 1024 + 4096 + 32 * 4096
    assert attn > 3 * 14336
    r = _infer("llama3-8b", flash=False)
    assert r.detail["activations_workspace"] == 2048 * (2 * 4096 + attn) * 2
    # tp 2: heads, KV heads and scores split over the 2 ranks
    r = _infer("llama3-8b", flash=False, tp=2)
    assert r.detail["activations_workspace"] == 2048 * (2 * 4096 + attn // 2) * 2


def test_prefill_workspace_takes_the_widest_mlp_of_any_layer():
    # deepseek-v3 with 40000-wide dense MLPs (first 3 layers): the gated MLP phase 3 x 40000 is
    # wider than the routed experts' top-8 x 2048 and than MLA's attention phase
    # (q 128 x 192, k and v 2 x 128 x 192, output 128 x 128 = 90112); plus 2 x 7168, 2 bytes each
    r = _infer("deepseek-v3", {"intermediate_size": 40000})
    assert 3 * 40000 > max(8 * 2048 * 3, 128 * 192 * 3 + 128 * 128)
    assert r.detail["activations_workspace"] == 2048 * (2 * 7168 + 3 * 40000) * 2


def test_kv_tokens_cached_per_sequence():
    # a full cache keeps the whole context; mistral-7b's 4096-token window caps every layer's slots
    assert _infer("llama3-8b", context=4096).kv_tokens_cached == 4096
    assert _infer("mistral-7b", context=8192).kv_tokens_cached == 4096
    # paged in 1000-token blocks: 4096 tokens take 5 blocks
    assert _infer("llama3-8b", context=4096, block_size=1000).kv_tokens_cached == 5000


def test_max_batch_of_exactly_one():
    from mlsyscalc.calc.memory.inference import InferOptions, solve_max

    # memory that holds batch 1 and one byte more: the largest batch is 1 (each sequence adds its
    # KV cache, megabytes)
    spec = load_model("llama3-8b")
    one = _infer("llama3-8b", batch=1).total
    n, result = solve_max(spec, InferOptions(), "batch", one + 1)
    assert n == 1 and result is not None and result.total == one
    assert solve_max(spec, InferOptions(), "batch", one - 1) == (0, None)


def test_group_size_bound_reads_the_first_layer_kind():
    from mlsyscalc.calc.memory.inference import InferOptions

    # deepseek-v3 cut to 4 layers, only layer 0 dense, with 1024-wide dense MLPs and 16384-wide
    # experts: under tp 8 the narrowest input is layer 0's down_proj, 1024 / 8 = 128 columns
    # (the MoE layers' narrowest is kv_b_proj's whole 512)
    spec = load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": 1,
                                      "intermediate_size": 1024, "moe_intermediate_size": 16384})
    InferOptions(dtype="int4", group_size=128, tp=8).validate(spec)
    with pytest.raises(MlsysError, match=r"\(128 columns per rank\)"):
        InferOptions(dtype="int4", group_size=256, tp=8).validate(spec)


# ---- training memory -----------------------------------------------------------------------------

def test_world_size_counts_every_dimension():
    from mlsyscalc.calc.memory.training import TrainOptions

    spec = load_model("llama3-8b")
    TrainOptions(dp=2, tp=2, pp=2, cp=2, world_size=16).validate(spec)
    with pytest.raises(MlsysError, match=r"rule tp\*pp\*dp\*cp == gpus: 2\*2\*2\*2 = 16, not --world-size 8"):
        TrainOptions(dp=2, tp=2, pp=2, cp=2, world_size=8).validate(spec)


def test_default_training_layout_is_one_gpu():
    from mlsyscalc.calc.memory.training import train_memory

    r = train_memory(load_model("gpt2"))
    assert r.world_size == 1
    (stage,) = r.stages
    assert stage.cpu_bytes == 0  # nothing offloaded without --offload


def test_zero3_shards_experts_over_the_expert_data_parallel_group(run_cli):
    # mixtral-8x7b, dp 4, ep 2, ZeRO-3, bf16: the dense part (transformers' total minus the routed
    # experts) shards over dp = 4, each rank's half of the experts over dp / ep = 2
    dense = MIXTRAL["total_params"] - MIXTRAL["routed_expert_params"]
    experts = MIXTRAL["routed_expert_params"] // 2
    d = run_cli.json("memory", "train", "mixtral-8x7b", "--dp", "4", "--ep", "2", "--zero", "3")
    assert d["weights_bytes"] == d["gradients_bytes"] == dense * 2 // 4 + experts * 2 // 2
    assert d["cpu_offload_bytes"] == 0


def test_two_expert_model_splits_its_experts_over_ep(run_cli):
    # mixtral cut to 2 experts: ep 2 leaves one expert a layer per rank (32 x 3 x 4096 x 14336),
    # the rest whole; bf16 weights
    expert = 3 * 4096 * 14336
    dense = MIXTRAL["total_params"] - MIXTRAL["routed_expert_params"] - 32 * 4096 * 6  # router 4096 x 2
    d = run_cli.json("memory", "train", "mixtral-8x7b", "--set", "num_local_experts=2", "--dp", "2", "--ep", "2")
    assert d["weights_bytes"] == 2 * (dense + 32 * expert)


def test_capacity_factor_up_to_experts_over_top_k():
    from mlsyscalc.calc.memory.training import TrainOptions

    # mixtral: 8 experts, top-2: a capacity factor of 4 gives every expert a slot for every token
    spec = load_model("mixtral-8x7b")
    TrainOptions(capacity_factor=4.0).validate(spec)
    with pytest.raises(MlsysError, match="at most experts / top-k = 4 "):
        TrainOptions(capacity_factor=4.5).validate(spec)


# Adafactor (Shazeer & Stern 2018): a row and a column accumulator per matrix, vectors whole, fp32
def test_adafactor_states_shard_with_zero(run_cli):
    # llama2-7b's 2,836,992 factors (test_values_memory_serve_rules.py) in 4 bytes, ZeRO-1 over dp 2: half a rank
    d = run_cli.json("memory", "train", "llama2-7b", "--optimizer", "adafactor", "--zero", "1", "--dp", "2")
    assert d["detail"]["optimizer_states_bytes"] == 4 * 2_836_992 // 2


def test_adafactor_factors_of_a_tensor_parallel_rank(run_cli):
    # llama2-7b under tp 2, per rank: column-parallel q, k, v (rows 2048, cols 4096), gate, up
    # (rows 5504, cols 4096); row-parallel o (4096, 2048), down (4096, 5504); two norms of 4096.
    # Outside the layers: half the embedding rows (16000 + 4096), half the lm_head (16000 + 4096)
    # and the final norm (4096)
    layer = 3 * (2048 + 4096) + (4096 + 2048) + 2 * (5504 + 4096) + (4096 + 5504) + 2 * 4096
    factors = 32 * layer + 2 * (16000 + 4096) + 4096
    d = run_cli.json("memory", "train", "llama2-7b", "--optimizer", "adafactor", "--tp", "2")
    assert d["detail"]["optimizer_states_bytes"] == 4 * factors


def test_adafactor_factors_of_opt_projections(run_cli):
    # opt-350m (post-norm, no final norm, tied head, 512-wide embeddings projected to 1024):
    # per layer q, k, v, o 1024 x 1024 with bias (rows + cols + bias rows), fc1 1024 -> 4096 and
    # fc2 4096 -> 1024 with bias, two LayerNorms (weight and bias, 2 x 2 x 1024); outside: the
    # 50272 x 512 embedding, the 2050 x 1024 learned positions (a matrix: rows + cols) and
    # project_in 512 -> 1024 and project_out 1024 -> 512 (no bias)
    layer = 4 * (1024 + 1024 + 1024) + (4096 + 1024 + 4096) + (1024 + 4096 + 1024) + 2 * 2 * 1024
    factors = 24 * layer + (50272 + 512 + 2050 + 1024) + 2 * (512 + 1024)
    d = run_cli.json("memory", "train", "opt-350m", "--optimizer", "adafactor")
    assert d["detail"]["optimizer_states_bytes"] == 4 * factors


# ---- saved activations ---------------------------------------------------------------------------

def test_activations_per_layer_by_region(run_cli):
    # llama3-8b, tp 2 without sequence parallelism, 2048 tokens of bf16: the attention input is
    # whole on every rank, the output projection's input (heads) is split
    d = run_cli.json("memory", "train", "llama3-8b", "--tp", "2")["activation_bytes_per_layer"]
    assert d["q_proj input"] == 2048 * 4096 * 2
    assert d["o_proj input"] == 2048 * 4096 * 2 // 2


def test_router_probabilities_are_fp32(run_cli):
    # mixtral: 8 router probabilities per token, kept in fp32 (4 bytes) whatever the dtype
    d = run_cli.json("memory", "train", "mixtral-8x7b")["activation_bytes_per_layer"]
    assert d["router probabilities (fp32)"] == 2048 * 8 * 4


def test_qk_norm_saves_q_and_k(run_cli):
    # phi-2 with qk_layernorm: the norms read q (32 heads x 80) and k (32 x 80), 2 bytes a token
    d = run_cli.json("memory", "train", "phi-2", "--set", "qk_layernorm=true")["activation_bytes_per_layer"]
    assert d["q/k norm inputs"] == 2048 * (2560 + 2560) * 2


# ---- spec readers --------------------------------------------------------------------------------

def _without(model, key, **extra):
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    raw = {k: v for k, v in builtin_configs()[model].items() if k != key}
    return from_hf_config({**raw, **extra}, name=f"{model}-test", source="test")


def test_config_defaults_follow_transformers():
    # transformers' config classes: PhiConfig qk_layernorm=False, OPTConfig
    # do_layer_norm_before=True (so OPTDecoder keeps its final LayerNorm), DeepseekV3Config
    # tie_word_embeddings=False
    assert _without("phi-2", "qk_layernorm").qk_norm is False
    assert _without("opt-6.7b", "do_layer_norm_before").final_norm is True
    assert _without("deepseek-v3", "tie_word_embeddings").tie_word_embeddings is False


def test_qwen2_window_applies_only_with_use_sliding_window():
    # qwen2.5-7b's config lists a 131072-token sliding_window but use_sliding_window false
    assert load_model("qwen2.5-7b").sliding_window is None
    on = load_model("qwen2.5-7b", {"use_sliding_window": True})
    assert on.sliding_window == 131072


@pytest.mark.parametrize("value", [0, True, 4096.0, "4096"])
def test_config_integers_are_checked(value):
    with pytest.raises(MlsysError, match=r"hidden_size.* must be an integer >= 1, got "):
        _without("llama3-8b", "hidden_size", hidden_size=value)


def test_layer_count_bound_is_inclusive():
    from mlsyscalc.validate import MAX_LAYERS

    # at most MAX_LAYERS (1024) layers: the bound itself is a valid depth
    assert _without("gpt2", "n_layer", n_layer=MAX_LAYERS).num_layers == 1024
    with pytest.raises(MlsysError, match="n_layer.* = 1,025 is beyond what mlsyscalc models"):
        _without("gpt2", "n_layer", n_layer=MAX_LAYERS + 1)


def test_spec_defaults_shown_by_models_show(run_cli):
    # llama3-8b slides no window; Falcon rotates the whole head (transformers' FalconRotaryEmbedding
    # spans head_dim), the spec default of 1.0
    assert run_cli.json("models", "show", "llama3-8b")["sliding_window_layers"] == 0
    # normalisers that never read a window leave the spec default: no sliding layers
    for model in ("gpt2", "falcon-7b", "deepseek-v3", "pythia-1.4b", "opt-350m", "phi-2"):
        d = run_cli.json("models", "show", model)
        assert (d["sliding_window"], d["sliding_window_layers"]) == (None, 0)
    assert run_cli.json("models", "show", "falcon-7b")["rotary_fraction"] == 1.0


def test_dense_layers_of_deepseek_v3():
    # deepseek-v3: 61 layers, the first 3 dense (first_k_dense_replace), 58 MoE
    spec = load_model("deepseek-v3")
    assert (spec.num_dense_layers, spec.num_moe_layers) == (3, 58)


# ---- parameter counts and shapes -----------------------------------------------------------------

@pytest.mark.parametrize("model", ["llama3-8b", "gpt2", "mixtral-8x7b"])
def test_non_embedding_params(model):
    from mlsyscalc.calc.counts.params import count_params

    assert count_params(load_model(model)).non_embedding == HF[model]["total_params"] - HF[model]["embedding_params"]


def test_each_expert_copy_has_its_own_bias():
    from mlsyscalc.calc.counts.layers import Linear

    # 8 routed experts, each a 4096 -> 14336 projection with a 14336 bias
    lin = Linear("up_proj", 4096, 14336, True, "mlp", copies=8, active=2)
    assert (lin.bias_params, lin.params) == (8 * 14336, 8 * (4096 * 14336 + 14336))


@pytest.mark.parametrize("field", ["batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"])
def test_attention_sizes_must_be_positive(field):
    from mlsyscalc.calc.counts.attention import AttentionShape

    sizes = dict(batch=2, heads=8, kv_heads=8, seq_q=16, seq_kv=16, head_dim=64)
    with pytest.raises(MlsysError, match="attention sizes must be positive"):
        AttentionShape(**{**sizes, field: 0})


# ---- tensor- and data-parallel traffic of the roofline -------------------------------------------

H100 = "H100-SXM"


def _tp_opts(**kw):
    from types import SimpleNamespace

    base = dict(tp=2, tokens=1024, phase="prefill", recompute="none", cluster=None, dp=1, zero=0, batch=1,
                seq=1024, activation_dtype="bf16", dp_overlap=False)
    return SimpleNamespace(**{**base, **kw})


def test_ring_estimate_without_a_cluster_spec():
    from mlsyscalc.calc.comm.tp_rows import collective_s

    # H100-PCIe has no built-in cluster: a ring over half its 600 GB/s NVLink bridge (300 GB/s each way) and
    # NCCL's 3.4 us a step; 4 GPUs: all-reduce 2(p-1) = 6 steps and 2(p-1)/p = 1.5 n bytes,
    # all-gather 3 steps and 0.75 n
    gpu, n = load_gpu("H100-PCIe"), 1e8
    assert collective_s("all-reduce", n, gpu, 4)[0] == pytest.approx(1.5 * n / 300e9 + 6 * 3.4e-6, rel=1e-12)
    assert collective_s("all-gather", n, gpu, 4)[0] == pytest.approx(0.75 * n / 300e9 + 3 * 3.4e-6, rel=1e-12)


@pytest.mark.parametrize("size", [1, 2**20])
def test_tp_collective_on_a_full_node_uses_the_cluster(size):
    from mlsyscalc.calc.comm.tp_rows import collective_s

    # tp 8 fills an 8-GPU hgx-h100 node: the collective calculator prices it (fastest algorithm)
    t, how = collective_s("all-reduce", size, load_gpu(H100), 8)
    assert how.startswith("comm calculator") and "hgx-h100" in how
    assert t == pytest.approx(collective_cost("all-reduce", size, 8, "hgx-h100", 1, "auto").time_s, rel=1e-12, abs=0)


def test_tp_rows_of_an_inference_step():
    from mlsyscalc.calc.comm.tp_rows import tp_comm_rows

    # llama3-8b, tp 2, 1024 tokens: 2 all-reduces a layer of 1024 x 4096 x 2 bytes, one for the
    # vocabulary-parallel embedding, and one all-gather of the 1024 x 128256 logits
    rows = tp_comm_rows(load_model("llama3-8b"), load_gpu(H100), _tp_opts(), 2)
    got = {(r.name, r.collective): (r.size_bytes, r.count) for r in rows}
    act = 1024 * 4096 * 2
    assert got == {("layer all-reduce", "all-reduce"): (act, 64), ("embedding all-reduce", "all-reduce"): (act, 1),
                   ("logits all-gather", "all-gather"): (1024 * 128256 * 2, 1)}


def test_dp_gradient_all_reduce_hides_behind_backward():
    from mlsyscalc.calc.comm.tp_rows import dp_comm_rows

    # dp 2, plain DDP: one gradient all-reduce; with overlap it hides behind the backward kernels
    # (here 1 s, longer than it), not behind the forward ones (here none): nothing is exposed
    spec, gpu = load_model("llama3-8b"), load_gpu(H100)
    (plain,) = dp_comm_rows(spec, gpu, _tp_opts(tp=1, dp=2), 0.0, 1.0)
    assert plain.collective == "all-reduce" and plain.hidden_s == 0.0
    assert plain.size_bytes == 2 * HF["llama3-8b"]["total_params"]  # bf16 gradients
    (hid,) = dp_comm_rows(spec, gpu, _tp_opts(tp=1, dp=2, dp_overlap=True), 0.0, 1.0)
    assert hid.hidden_s == hid.total_s == plain.total_s and hid.exposed_s == 0.0


def test_zero3_traffic_hides_behind_forward_and_backward_together():
    from mlsyscalc.calc.comm.tp_rows import dp_comm_rows

    # ZeRO-3, dp 2: gathers and reduce-scatter hide behind forward + backward; with each a quarter
    # of the traffic's time, half of every row is hidden and half exposed
    spec, gpu = load_model("llama3-8b"), load_gpu(H100)
    rows = dp_comm_rows(spec, gpu, _tp_opts(tp=1, dp=2, zero=3), 0.0, 0.0)
    total = sum(r.total_s for r in rows)
    over = dp_comm_rows(spec, gpu, _tp_opts(tp=1, dp=2, zero=3, dp_overlap=True), total / 4, total / 4)
    assert len(over) == len(rows) == 2
    for r, o in zip(rows, over):
        assert o.hidden_s == pytest.approx(r.total_s / 2, rel=1e-12, abs=0)
        assert o.exposed_s == pytest.approx(r.total_s / 2, rel=1e-12, abs=0)


# ---- every collective's alpha-beta terms, by hand ------------------------------------------------
# (Thakur, Rabenseifner & Gropp 2005 table 1; nccl-tests doc/PERFORMANCE.md for the bus bandwidth)

# collective: (steps, bytes each GPU sends as a fraction of n, busbw factor) of a ring of 8 GPUs
RING_8 = {
    "all-reduce": (14, 2 * 7 / 8, 2 * 7 / 8),
    "all-gather": (7, 7 / 8, 7 / 8),
    "reduce-scatter": (7, 7 / 8, 7 / 8),
    "all-to-all": (7, 7 / 8, 7 / 8),
    "broadcast": (7, 1.0, 1.0),
    "reduce": (7, 1.0, 1.0),
    "p2p": (1, 1.0, 1.0),
}


@pytest.mark.parametrize("collective", sorted(RING_8))
def test_ring_terms_of_every_collective_on_one_node(run_cli, collective):
    steps, share, factor = RING_8[collective]
    n = GiB
    d = run_cli.json("comm", collective, "--size", "1GiB", "--gpus", "8")
    (phase,) = d["phases"]
    time = steps * NVL_LAT + share * n / NVL_BW
    assert (phase["steps"], phase["bytes_per_gpu"], d["bytes_per_gpu"]) == (steps, share * n, share * n)
    assert d["time_s"] == pytest.approx(time, rel=1e-12)
    assert d["latency_s"] == pytest.approx(steps * NVL_LAT, rel=1e-12)
    assert d["transfer_s"] == pytest.approx(share * n / NVL_BW, rel=1e-12)
    assert d["busbw_factor"] == pytest.approx(factor, rel=1e-12)
    assert d["algbw_GBps"] == pytest.approx(n / time / 1e9, rel=1e-12)
    assert d["busbw_GBps"] == pytest.approx(n / time * factor / 1e9, rel=1e-12)
    assert d["host_wait_s"] == 0.0 and d["nodes"] == 1


def test_tree_all_reduce_goes_up_and_down():
    # double binary tree over 8 GPUs: 2 ceil(log2 8) = 6 steps and 2 n bytes (Sanders et al. 2009)
    n = GiB
    (phase,) = collective_cost("all-reduce", n, 8, "hgx-h100", algo="tree").phases
    assert (phase.steps, phase.bytes_per_gpu) == (6, 2 * n)
    assert phase.time_s == pytest.approx(6 * NVL_LAT + 2 * n / NVL_BW, rel=1e-12)
    # 5 GPUs: ceil(log2 5) = 3 levels
    (phase,) = collective_cost("broadcast", n, 5, "hgx-h100", algo="tree").phases
    assert phase.steps == 3


def test_all_to_all_across_nodes_splits_nvlink_and_network():
    # 16 GPUs on 2 nodes: each rank sends 7/16 of its buffer to its own node's 7 peers over NVLink
    # and 8/16 to the other node's 8 over its NIC, at once; 15 steps at the slower link's 14 us
    n = GiB
    (phase,) = collective_cost("all-to-all", n, 16, "hgx-h100", nodes=2).phases
    assert (phase.steps, phase.bytes_per_gpu) == (15, 15 / 16 * n)
    transfer = max(7 / 16 * n / NVL_BW, 8 / 16 * n / NIC_BW)
    assert phase.time_s == pytest.approx(15 * NIC_LAT + transfer, rel=1e-12)


# hierarchical over 2 nodes of 8: (stage, steps, bytes each GPU sends, on the NIC?) in order
HIER_2X8 = {
    "all-reduce": [(7, 7 / 8, False), (2, 2 * 1 / 2 / 8, True), (7, 7 / 8, False)],
    "all-gather": [(1, 1 / 2 / 8, True), (7, 7 / 8, False)],
    "broadcast": [(1, 1.0, True), (7, 1.0, False)],
    "reduce": [(7, 1.0, False), (1, 1.0, True)],
}


@pytest.mark.parametrize("collective", sorted(HIER_2X8))
def test_hierarchical_phases_over_two_nodes(collective):
    n = GiB
    cost = collective_cost(collective, n, 16, "hgx-h100", nodes=2, algo="hierarchical")
    want = HIER_2X8[collective]
    assert [(p.steps, p.bytes_per_gpu) for p in cost.phases] == [(s, f * n) for s, f, _ in want]
    assert [p.gpus for p in cost.phases] == [2 if nic else 8 for _, _, nic in want]
    time = sum(s * (NIC_LAT if nic else NVL_LAT) + f * n / (NIC_BW if nic else NVL_BW) for s, f, nic in want)
    assert cost.time_s == pytest.approx(time, rel=1e-12)


def _measured_all_reduce():
    import json
    from pathlib import Path

    import mlsyscalc

    path = Path(mlsyscalc.__file__).parent.parent / "model_specs" / "clusters" / "h200-x2-measured.json"
    return json.loads(path.read_text())["intra_node"]["per_collective"]["all-reduce"]


def test_measured_protocols_and_call_overhead_by_hand():
    # h200-x2-measured, all-reduce on 2 GPUs: 2 ring steps, n bytes each GPU sends. Each protocol p
    # costs base_p + 2 alpha_p + n / B_p, the least wins (NCCL's tuner); a call takes at least the
    # host's call overhead H (figures read straight from the JSON file)
    entry = _measured_all_reduce()
    overhead = entry["call_overhead_us"] * 1e-6
    for n in (1024, GiB):
        times = {p["name"]: p["base_latency_us"] * 1e-6 + 2 * p["latency_us"] * 1e-6 + n / (p["bandwidth_GBps"] * 1e9)
                 for p in entry["protocols"]}
        best = min(times, key=times.__getitem__)
        cost = collective_cost("all-reduce", n, 2, "h200-x2-measured")
        (phase,) = cost.phases
        assert phase.protocol == best
        assert cost.device_s == pytest.approx(times[best], rel=1e-12, abs=0)
        assert cost.time_s == pytest.approx(max(overhead, times[best]), rel=1e-12, abs=0)
        assert cost.host_wait_s == pytest.approx(max(0.0, overhead - times[best]), rel=1e-9, abs=1e-18)
    assert collective_cost("all-reduce", GiB, 2, "h200-x2-measured").phases[0].protocol == "bulk"
    assert collective_cost("all-reduce", 1024, 2, "h200-x2-measured").host_wait_s > 0


@pytest.mark.parametrize("args,message", [
    (("all-reduce", 0, 8), "size must be positive, got 0"),
    (("all-gather", GiB, 8, "hgx-h100", 1, "tree"), "tree is defined for all-reduce, broadcast, reduce, not all-gather"),
    (("all-reduce", GiB, 8, "hgx-h100", 1, "mesh"), "unknown algorithm 'mesh'"),
    (("all-reduce", GiB, 12, "hgx-h100", 1), "12 GPUs per node, but a hgx-h100 node has 8"),
    (("all-reduce", GiB, 12, "hgx-h100", 5), "12 GPUs do not split evenly over 5 nodes"),
    (("all-reduce", GiB, 8, "hgx-h100", 0), "nodes must be at least 1, got 0"),
    (("gather", GiB, 8), "unknown collective 'gather'"),
])
def test_collective_errors_name_the_problem(args, message):
    size_args = args if len(args) > 3 else (*args, "hgx-h100")
    with pytest.raises(MlsysError, match=message.replace("(", r"\(")):
        collective_cost(*size_args)


# ---- every rule of the training step's communication, by hand ------------------------------------
# (rules in the comm_step module docstring: Rajbhandari et al. 2020 for ZeRO, Shoeybi et al. 2019 and
# Korthikanti et al. 2022 for TP/SP, Narayanan et al. 2021 for the bubble)

LLAMA3_P = HF["llama3-8b"]["total_params"]


def _rows(r, dim):
    return [(x.collective, x.message_bytes, x.calls, x.group_size) for x in r.rows if x.dim == dim]


@pytest.mark.parametrize("zero,want", [
    (0, [("all-reduce", 2, 1)]),
    (1, [("reduce-scatter", 2, 1), ("all-gather", 2, 1)]),
    (2, [("reduce-scatter", 2, 4), ("all-gather", 2, 1)]),
    (3, [("all-gather", 2, 8), ("reduce-scatter", 2, 4)]),
])
def test_data_parallel_rows_of_each_zero_stage(zero, want):
    # llama3-8b over dp 4, 4 micro-batches a step, bf16 gradients and parameters (2 bytes each)
    r = step_comm(load_model("llama3-8b"), StepOptions(dp=4, zero=zero, grad_accum=4))
    assert _rows(r, "dp") == [(c, b * LLAMA3_P, calls, 4) for c, b, calls in want]
    # each call sends 2(p-1)/p = 1.5 (all-reduce) or (p-1)/p = 3/4 of the message; per step x calls
    share = {"all-reduce": 1.5, "reduce-scatter": 0.75, "all-gather": 0.75}
    sent = sum(calls * share[c] * b * LLAMA3_P for c, b, calls in want)
    assert r.total_bytes_per_gpu == pytest.approx(sent, rel=1e-12)
    time = sum(calls * ((6 if c == "all-reduce" else 3) * NVL_LAT + share[c] * b * LLAMA3_P / NVL_BW)
               for c, b, calls in want)
    assert r.total_time_s == r.exposed_time_s == pytest.approx(time, rel=1e-12)


def test_dp_gradients_in_their_own_dtype_and_time_by_hand():
    # fp32 gradients (4 bytes) all-reduced over 4 GPUs of one node: 6 steps, 1.5 x message
    r = step_comm(load_model("llama3-8b"), StepOptions(dp=4, grad_dtype="fp32"))
    (row,) = r.rows
    msg = 4 * LLAMA3_P
    assert row.message_bytes == msg and row.sent_bytes_per_call == pytest.approx(1.5 * msg, rel=1e-12)
    assert row.time_s == pytest.approx(6 * NVL_LAT + 1.5 * msg / NVL_BW, rel=1e-12)
    assert r.total_bytes_per_gpu == pytest.approx(1.5 * msg, rel=1e-12)


def test_dp_over_two_nodes_runs_on_the_rails():
    # dp 16 on two 8-GPU nodes: a flat ring over min(370, 8 x 50) GB/s, 30 steps of 14 us
    r = step_comm(load_model("llama3-8b"), StepOptions(dp=16))
    (row,) = r.rows
    msg = 2 * LLAMA3_P
    assert (row.nodes, row.group_size) == (2, 16)
    assert row.time_s == pytest.approx(30 * NIC_LAT + 2 * 15 / 16 * msg / NVL_BW, rel=1e-12)


@pytest.mark.parametrize("model,layers,k", [("llama3-8b", 32, 2), ("pythia-1.4b", 24, 1)])
def test_tensor_parallel_rows(model, layers, k):
    # tp 2, 4 micro-batches of 1 x 2048 tokens: k all-reduces a layer forward and k backward (k = 1
    # where attention and MLP run in parallel, GPT-NeoX), each of 2048 x hidden x 2 bytes
    spec = load_model(model)
    act = 2048 * spec.hidden_size * 2
    r = step_comm(spec, StepOptions(tp=2, grad_accum=4))
    assert _rows(r, "tp") == [("all-reduce", act, 2 * k * layers * 4, 2)]
    sp = step_comm(spec, StepOptions(tp=2, grad_accum=4, sp=True))
    assert _rows(sp, "tp") == [("all-gather", act, 2 * k * layers * 4, 2), ("reduce-scatter", act, 2 * k * layers * 4, 2)]


def test_expert_parallel_all_to_all():
    # mixtral, dp 8 = ep 8, 2 micro-batches: dispatch + combine forward and both backward on each of
    # 32 MoE layers; each moves 2048 tokens x top-2 x 4096 x 2 bytes (with SP over tp 2: half the tokens,
    # then gathered over the etp = tp = 2 expert TP ranks and reduce-scattered back, forward and backward:
    # Megatron-Core's alltoall dispatcher)
    spec = load_model("mixtral-8x7b")
    r = step_comm(spec, StepOptions(dp=8, ep=8, grad_accum=2))
    assert _rows(r, "ep") == [("all-to-all", 2048 * 2 * 4096 * 2, 4 * 32 * 2, 8)]
    r = step_comm(spec, StepOptions(dp=4, ep=4, tp=2, sp=True))
    routed = 1024 * 2 * 4096 * 2
    assert _rows(r, "ep") == [("all-to-all", routed, 4 * 32, 4), ("all-gather", 2 * routed, 2 * 32, 2),
                              ("reduce-scatter", 2 * routed, 2 * 32, 2)]


@pytest.mark.parametrize("interleave,moe_layers", [(1, 4), (2, 3)])
def test_moe_layers_of_the_busiest_stage(interleave, moe_layers):
    # deepseek-v3 cut to 8 layers, the first 3 dense, over pp 2: stage 1 holds layers 4-7 (4 MoE);
    # interleaved in chunks of 2, stage 0 holds 0, 1, 4, 5 (2 MoE) and stage 1 2, 3, 6, 7 (3 MoE)
    spec = load_model("deepseek-v3", {"num_hidden_layers": 8, "first_k_dense_replace": 3})
    r = step_comm(spec, StepOptions(dp=2, ep=2, pp=2, interleave=interleave, grad_accum=2))
    ((_, _, calls, _),) = _rows(r, "ep")
    assert calls == 4 * moe_layers * 2


def test_interleaved_bubble_and_exposed_time():
    # pp 4 with 2 virtual stages, 8 micro-batches: bubble (p-1)/v = 1.5 steps,
    # 1.5 / (8 + 1.5) of the step and 1.5 / 8 of the compute
    r = step_comm(load_model("llama3-8b"), StepOptions(dp=2, pp=4, interleave=2, grad_accum=8, overlap=("dp",)))
    assert r.bubble_fraction == pytest.approx(1.5 / 9.5, rel=1e-12)
    assert r.bubble_ratio == pytest.approx(1.5 / 8, rel=1e-12)
    (pp,) = [x for x in r.rows if x.dim == "pp"]
    assert pp.calls == 2 * 8 * 2  # forward + backward, per micro-batch and model chunk
    # the DP traffic hides behind compute: counted in the total, not in the exposed time
    dp = sum(x.time_s for x in r.rows if x.dim == "dp")
    assert dp > 0 and all(x.overlapped == (x.dim == "dp") for x in r.rows)
    assert r.exposed_time_s == pytest.approx(r.total_time_s - dp, rel=1e-12)
    assert r.total_time_s == pytest.approx(sum(x.calls * x.time_per_call_s for x in r.rows), rel=1e-12)


@pytest.mark.parametrize("opts,message", [
    (dict(zero=4), "--zero must be 0, 1, 2 or 3, got 4"),
    (dict(tp=3), "tp: attention heads: 32 is not divisible by 3"),
    (dict(cp=3, seq=2048), "rule seq % (2*cp) == 0: load-balanced context parallelism splits each sequence into 2*cp chunks: 2048 is not divisible by 6"),
    (dict(ep=2, dp=2), "ep 2: llama3-8b has no routed experts"),
    (dict(order=("tp", "cp", "dp")), "order must list tp, cp, dp, pp once each"),
    (dict(order=("cp", "tp", "dp", "pp")), "order: cp and dp must be neighbours"),
    (dict(overlap=("xp",)), "overlap: unknown dimension"),
    (dict(grad_accum=0), "grad_accum must be at least 1, got 0"),
    (dict(tp=2, sp=True, seq=2047), "rule (seq/cp) % tp == 0 with --sp: 2047 is not divisible by 2"),
])
def test_step_errors_name_the_problem(opts, message):
    with pytest.raises(MlsysError, match=re.escape(message)):
        step_comm(load_model("llama3-8b"), StepOptions(**opts))


# ---- inference memory: quantised weights, KV cache and logits by hand --------------------------------

# llama2-7b per layer: q, k, v, o (4096 -> 4096), gate, up (4096 -> 11008), down (11008 -> 4096);
# outside the projections (bf16 always): 32000 x 4096 embedding and untied head, 65 RMSNorms of 4096
L2_PROJ = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
L2_REST = 2 * 32000 * 4096 + 65 * 4096
assert L2_PROJ + L2_REST == HF["llama2-7b"]["total_params"]


@pytest.mark.parametrize("dtype,elem,groups_per_layer,group_bytes", [
    # GPTQ/AWQ int4: 128 input columns a group, an fp16 scale and a 4-bit zero point each
    ("int4", 0.5, 4 * 32 * 4096 + 2 * 32 * 11008 + 86 * 4096, 2.5),
    # bitsandbytes nf4: blocks of 64, one fp32 absmax each
    ("nf4", 0.5, 4 * 64 * 4096 + 2 * 64 * 11008 + 172 * 4096, 4.0),
    # int8 per output channel, an fp16 scale each
    ("int8", 1.0, 4 * 4096 + 2 * 11008 + 4096, 2.0),
])
def test_quantised_weights_and_their_scales(dtype, elem, groups_per_layer, group_bytes):
    r = _infer("llama2-7b", dtype=dtype)
    assert r.detail["weights_quantised"] == L2_PROJ * elem
    assert r.detail["weights_scales"] == 32 * groups_per_layer * group_bytes
    assert r.detail["weights_unquantised"] == 2 * L2_REST
    assert r.breakdown["weights"] == sum(r.detail[k] for k in ("weights_quantised", "weights_scales",
                                                                "weights_unquantised"))


def test_int4_groups_of_a_tensor_parallel_rank():
    # tp 2: column-parallel q, k, v, gate, up keep 4096 input columns (32 groups) for half their
    # outputs; row-parallel o and down keep half their inputs, 2048 and 5504 columns (16 and
    # ceil(5504 / 128) = 43 groups) for all 4096 outputs
    groups = 3 * 32 * 2048 + 16 * 4096 + 2 * 32 * 5504 + 43 * 4096
    r = _infer("llama2-7b", dtype="int4", tp=2)
    assert r.detail["weights_quantised"] == L2_PROJ // 2 * 0.5
    assert r.detail["weights_scales"] == 32 * groups * 2.5


@pytest.mark.parametrize("tp,kv_dtype,heads_per_rank,elem", [
    (1, "bf16", 8, 2), (2, "bf16", 4, 2), (16, "bf16", 1, 2), (1, "fp8", 8, 1),
])
def test_kv_cache_bytes_of_llama3_8b(tp, kv_dtype, heads_per_rank, elem):
    # 2 sequences x 4096 tokens x 32 layers x K and V of the rank's KV heads x 128; with tp 16 > 8
    # KV heads each rank keeps one (replicated)
    r = _infer("llama3-8b", batch=2, tp=tp, kv_dtype=kv_dtype)
    assert r.breakdown["kv_cache"] == 2 * 4096 * 32 * 2 * heads_per_rank * 128 * elem
    assert r.kv_bytes_per_token == 32 * 2 * heads_per_rank * 128 * elem


@pytest.mark.parametrize("batch,tp", [(1, 1), (3, 1), (3, 2)])
def test_logits_buffer_scales_with_batch(batch, tp):
    # one fp32 row of the vocabulary-parallel logits per sequence: 128256 / tp entries
    assert _infer("llama3-8b", batch=batch, tp=tp).detail["activations_logits"] == batch * 128256 // tp * 4


def test_decode_workspace_holds_one_token_per_sequence():
    # 64 sequences, 16-token prefill chunks: a decode step still runs all 64 tokens through the
    # layer: 64 x (2 x 4096 + 3 x 14336) x 2 bytes (the MLP phase is the wider one, flash on)
    r = _infer("llama3-8b", batch=64, context=1, prefill_chunk=16)
    assert r.detail["activations_workspace"] == 64 * (2 * 4096 + 3 * 14336) * 2


@pytest.mark.parametrize("opts,message", [
    (dict(block_size=-1), "--block-size must be >= 0, got -1"),
    (dict(dtype="tf32"), "--dtype must be one of fp32, bf16, fp16, fp8, int8, int4, nf4"),
    (dict(group_size=64), "--group-size applies to quantised --dtype"),
    (dict(group_size=0, dtype="int4"), "--group-size must be positive, got 0"),
    (dict(batch=0), "--batch must be a positive integer, got 0"),
])
def test_infer_errors_name_the_problem(opts, message):
    with pytest.raises(MlsysError, match=message):
        _infer("llama3-8b", **opts)


# ---- training memory: parameters x bytes of every optimizer, ZeRO stage and offload --------------

GPT2_P = HF["gpt2"]["total_params"]  # 124,439,808
# gpt2 per layer: c_attn 768 -> 2304, c_proj 768 -> 768, c_fc 768 -> 3072, c_proj 3072 -> 768, all
# with bias, and two LayerNorms (weight + bias)
GPT2_LAYER = 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768 + 2 * 2 * 768


def _train(model, **opts):
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

    return train_memory(load_model(model), TrainOptions(**opts))


@pytest.mark.parametrize("opts,weight,grad,optimizer", [
    # bf16 mixed precision: fp32 master (4) + AdamW's two fp32 moments (8) per parameter
    (dict(), 2, 2, 4 + 8),
    (dict(optimizer="sgd-momentum"), 2, 2, 4 + 4),
    (dict(master_weights=False), 2, 2, 2 * 2),  # states in the training dtype, no master copy
    (dict(dtype="fp16"), 2, 2, 4 + 8),
    (dict(dtype="fp32"), 4, 4, 8),
    (dict(dtype="fp32", optimizer="sgd-momentum"), 4, 4, 4),
])
def test_model_state_bytes_per_parameter(opts, weight, grad, optimizer):
    r = _train("gpt2", **opts)
    assert r.breakdown["weights"] == weight * GPT2_P
    assert r.breakdown["gradients"] == grad * GPT2_P
    assert r.breakdown["optimizer"] == optimizer * GPT2_P
    assert r.model_state_bytes_unsharded == (weight + grad + optimizer) * GPT2_P


def test_adam8bit_states():
    # bitsandbytes 8-bit Adam: 2 states of 1 byte plus an fp32 absmax per 2048 elements, + fp32 master
    r = _train("gpt2", optimizer="adam8bit")
    assert r.breakdown["optimizer"] == pytest.approx(GPT2_P * (4 + 2 * (1 + 4 / 2048)), abs=1)


@pytest.mark.parametrize("zero,weights,grads,optimizer", [
    (1, 2, 2, 12 / 4), (2, 2, 2 / 4, 12 / 4), (3, 2 / 4, 2 / 4, 12 / 4),
])
def test_zero_stages_shard_over_dp(zero, weights, grads, optimizer):
    # ZeRO over dp 4 (Rajbhandari et al. 2020): stage 1 shards the optimizer (master + states),
    # stage 2 the gradients too, stage 3 the weights too
    r = _train("gpt2", dp=4, zero=zero)
    assert r.breakdown["weights"] == weights * GPT2_P
    assert r.breakdown["gradients"] == grads * GPT2_P
    assert r.breakdown["optimizer"] == optimizer * GPT2_P


def test_optimizer_offload_moves_master_and_states_to_the_host():
    # ZeRO-Offload over dp 2: the rank's half of the fp32 master and states (12 / 2 bytes a
    # parameter) lives in CPU memory; none stays on the GPU
    r = _train("gpt2", dp=2, zero=1, offload="optimizer")
    (stage,) = r.stages
    assert r.breakdown["optimizer"] == 0
    assert stage.cpu_bytes == 12 * GPT2_P // 2


def test_pipeline_stages_by_hand():
    # gpt2 over pp 2: stage 0 holds 6 layers + token (50257 x 768) and position (1024 x 768)
    # embeddings; stage 1 holds 6 layers + the final LayerNorm + its own copy of the tied head
    r = _train("gpt2", pp=2, grad_accum=4)
    s0, s1 = r.stages
    assert s0.params == 6 * GPT2_LAYER + 50257 * 768 + 1024 * 768
    assert s1.params == 6 * GPT2_LAYER + 2 * 768 + 50257 * 768
    assert (s0.layers, s1.layers) == (6, 6)
    # 1F1B: stage s keeps min(pp - s, micro-batches) micro-batches' activations
    assert (s0.micro_batches_in_flight, s1.micro_batches_in_flight) == (2, 1)
    assert s0.detail["activations_layers"] == 2 * s1.detail["activations_layers"]
    assert s0.breakdown["weights"] == 2 * s0.params and s1.breakdown["optimizer"] == 12 * s1.params
    assert all(s.total == sum(s.breakdown.values()) for s in r.stages)
    assert r.total == max(s.total for s in r.stages)


@pytest.mark.parametrize("opts,message", [
    (dict(zero=4), "--zero must be 0, 1, 2 or 3, got 4"),
    (dict(optimizer="lion"), "--optimizer must be one of adamw, sgd-momentum, adafactor, adam8bit"),
    (dict(dtype="int8"), "--dtype for training: fp32, bf16, fp16, fp8, mxfp8 or nvfp4, not int8"),
    (dict(fp8_params=True), "--fp8-params needs --dtype fp8"),
    (dict(offload="optimizer"), "--offload optimizer needs --zero 1, 2 or 3"),
    (dict(capacity_factor=1.5), "--capacity-factor applies to MoE models; gpt2 has no experts"),
    (dict(ep=2, dp=2), "--ep 2: gpt2 has no routed experts"),
    (dict(cp=3), "rule seq % (2*cp) == 0: load-balanced context parallelism splits each sequence into 2*cp chunks: 2048 is not divisible by 6"),
    (dict(pp=5), "num_layers over --pp: 12 is not divisible by 5"),
])
def test_train_errors_name_the_problem(opts, message):
    with pytest.raises(MlsysError, match=re.escape(message)):
        _train("gpt2", **opts)


# ---- spec readers: each normaliser's rules against its config.json and transformers' semantics -----

@pytest.mark.parametrize("model,expect", [
    # Falcon-7B: old architecture, multi-query (1 KV head), one LayerNorm for parallel attention + MLP
    ("falcon-7b", dict(num_kv_heads=1, norms_per_layer=1, parallel_attention=True, head_dim=4544 // 71,
                       intermediate_size=4 * 4544, position_embedding="rope")),
    # Falcon-40B: new decoder architecture, 8 KV heads, two LayerNorms (ln_attn, ln_mlp)
    ("falcon-40b", dict(num_kv_heads=8, norms_per_layer=2, parallel_attention=True)),
    # Gemma 2: every other layer slides (even ones), 4 norms a layer, tied head
    ("gemma2-9b", dict(sliding_window=4096, sliding_window_layers=21, norms_per_layer=4, tie_word_embeddings=True)),
    # Phi-3-mini: a 2047-token window on every layer
    ("phi3-mini", dict(sliding_window=2047, sliding_window_layers=32)),
    # Pythia: GPT-NeoX rotary on rotary_pct = 25% of each head, parallel residual
    ("pythia-1.4b", dict(rotary_fraction=0.25, parallel_attention=True, qkv_bias=True, o_bias=True)),
    # OPT-350m: 512-wide embeddings projected to 1024, 2 extra learned positions, post-norm
    ("opt-350m", dict(embed_proj_dim=512, learned_positions=2050, final_norm=False)),
    # GPT-2: n_inner null means 4 x n_embd; tied head by default; learned positions
    ("gpt2", dict(intermediate_size=3072, tie_word_embeddings=True, learned_positions=1024,
                  max_position_embeddings=1024, position_embedding="learned")),
    # Qwen2: q/k/v carry a bias, o_proj none; the window is off (use_sliding_window false)
    ("qwen2.5-0.5b", dict(qkv_bias=True, o_bias=False, sliding_window=None, sliding_window_layers=0,
                          tie_word_embeddings=True)),
    # DeepSeek-V3 MLA: K/V per query head, head dim nope 128 + rope 64, rotary on 64 / 192;
    # one shared expert of 2048
    ("deepseek-v3", dict(num_kv_heads=128, head_dim=192, v_head_dim=128, rotary_fraction=64 / 192)),
])
def test_normalised_spec_fields(model, expect):
    spec = load_model(model)
    assert {k: getattr(spec, k) for k in expect} == expect


def test_deepseek_moe_fields():
    moe = load_model("deepseek-v3").moe
    assert (moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size) == (256, 8, 2048)
    assert (moe.num_shared_experts, moe.shared_intermediate_size, moe.first_dense_layers) == (1, 2048, 3)


def test_llama_attention_bias_covers_q_k_v_and_o():
    spec = load_model("llama3-8b", {"attention_bias": True})
    assert (spec.qkv_bias, spec.o_bias, spec.mlp_bias) == (True, True, False)


def test_gpt_neox_partial_rotary_factor_wins_over_rotary_pct():
    spec = load_model("pythia-1.4b", {"partial_rotary_factor": 0.5})
    assert spec.rotary_fraction == 0.5


def test_falcon_without_multi_query_has_a_kv_head_per_query_head():
    assert load_model("falcon-7b", {"multi_query": False}).num_kv_heads == 71


@pytest.mark.parametrize("model,key,value,message", [
    ("llama3-8b", "num_key_value_heads", 5, "32 attention heads are not divisible by 5 key/value heads"),
    ("phi-2", "hidden_size", 2561, "hidden size 2561 is not divisible by 32 heads; set head_dim"),
    ("gpt2", "n_embd", 770, "n_embd 770 is not divisible by n_head 12"),
    ("falcon-7b", "hidden_size", 4545, "hidden_size 4545 is not divisible by 71 heads"),
    ("llama3-8b", "tie_word_embeddings", "no", "tie_word_embeddings.* must be true or false, got 'no'"),
    ("pythia-1.4b", "rotary_pct", "x", "rotary_pct.* must be a number, got 'x'"),
    ("llama3-8b", "hidden_act", 3, "hidden_act.* must be a string, got 3"),
])
def test_config_errors_name_the_key(model, key, value, message):
    with pytest.raises(MlsysError, match=message):
        load_model(model, {key: value})


def test_missing_config_key_is_named():
    with pytest.raises(MlsysError, match="missing key 'vocab_size'"):
        _without("llama3-8b", "vocab_size")


# ---- fit verdicts, byte overrides, spec files: the remaining documented paths ----------------------

def test_fit_verdict_by_hand():
    from mlsyscalc.calc.parallel.shards import verdict

    # H100-SXM: the driver reports 81,559 MiB; a 10% reserve keeps int(capacity x 0.1) back
    gpu = load_gpu("H100-SXM")
    cap = 81559 * 2**20
    usable = cap - int(cap * 10 / 100)
    v = verdict(gpu, usable, "10%")
    assert (v.capacity_bytes, v.reserve_bytes, v.usable_bytes) == (cap, int(cap * 10 / 100), usable)
    assert v.fits and v.headroom_bytes == 0  # an exact fit fits
    v = verdict(gpu, usable + 1, "10%")
    assert not v.fits and v.headroom_bytes == -1
    assert verdict(gpu, 0, "2GiB").reserve_bytes == 2 * 2**30
    assert verdict(gpu, 0, "0").reserve_bytes == 0


@pytest.mark.parametrize("reserve,message", [
    ("100%", r"--reserve: percentage must be in \[0, 100\), got 100%"),
    ("x%", "--reserve: 'x%' is not a percentage"),
    ("90GiB", "--reserve 90GiB: 96,636,764,160 bytes leave nothing of H100-SXM's"),
])
def test_reserve_errors_name_the_problem(reserve, message):
    from mlsyscalc.calc.parallel.shards import verdict

    with pytest.raises(MlsysError, match=message):
        verdict(load_gpu("H100-SXM"), 1, reserve)


def test_byte_overrides_parse_and_apply():
    from mlsyscalc.calc.parallel.shards import merge_bytes, parse_bytes_overrides

    assert parse_bytes_overrides(["weight=1", " kv = 0.5"]) == (("weight", 1.0), ("kv", 0.5))
    assert merge_bytes({"weight": 2.0, "kv": 2.0}, [("kv", 1.0)]) == {"weight": 2.0, "kv": 1.0}
    # any finite value >= 0: half a byte (4-bit KV) and zero (a part left out) are both allowed
    assert merge_bytes({"kv": 2.0, "logits": 4.0}, [("kv", 0.5), ("logits", 0.0)]) == {"kv": 0.5, "logits": 0.0}
    with pytest.raises(MlsysError, match="--bytes kv: must be a finite number >= 0, got -0.5"):
        merge_bytes({"kv": 2.0}, [("kv", -0.5)])
    for items, message in [(["weight"], "--bytes expects KEY=VALUE, got 'weight'"),
                           (["weight=two"], "--bytes weight: 'two' is not a number"),
                           (["weight=-1"], "--bytes weight")]:
        with pytest.raises(MlsysError, match=message):
            parse_bytes_overrides(items)
    with pytest.raises(MlsysError, match="--bytes: unknown key 'w'"):
        merge_bytes({"weight": 2.0}, [("w", 1.0)])


def test_gpu_capacity_and_missing_peaks():
    # A100-40GB: the driver's 40,960 MiB; B200 records only the datasheet's 180 GB; A100 has no fp8
    assert load_gpu("A100-40GB-SXM").memory_bytes == 40960 * 2**20
    assert load_gpu("B200").memory_bytes == 180 * 10**9
    with pytest.raises(MlsysError, match="A100-40GB-SXM: no fp8 peak is published for this GPU"):
        load_gpu("A100-40GB-SXM").peak_flops("fp8")
    from mlsyscalc.specs.gpu import gpu_from_dict

    with pytest.raises(MlsysError, match=r"g.json: malformed GPU spec \(KeyError"):
        gpu_from_dict({"name": "g"}, "g.json")


def test_single_node_cluster_has_no_network():
    spec = load_cluster("h200-x2-measured")
    assert spec.link(across_nodes=False) is spec.intra
    assert spec.intra.beta_s_per_byte == pytest.approx(1 / spec.intra.bandwidth_Bps, rel=1e-12, abs=0)
    with pytest.raises(MlsysError, match="cluster h200-x2-measured has no inter-node link"):
        collective_cost("all-reduce", GiB, 16, spec, nodes=2)


def test_attention_flops_with_a_given_mask_share():
    from mlsyscalc.calc.counts.attention import AttentionShape, attention_flops

    # 2 B Sq Skv H (d_qk + d_v) x the share; backward 2.5 x forward
    shape = AttentionShape(batch=2, heads=8, kv_heads=2, seq_q=16, seq_kv=64, head_dim=64)
    assert attention_flops(shape, fraction=0.25) == 2 * 2 * 16 * 64 * 8 * 128 * 0.25
    assert attention_flops(shape, backward=True, fraction=0.25) == 2.5 * 2 * 2 * 16 * 64 * 8 * 128 * 0.25


def test_mla_without_a_query_latent():
    from mlsyscalc.calc.counts.layers import layer_linears

    # DeepSeek-V2-Lite style: no q_lora_rank, so one q_proj 7168 -> 128 heads x 192
    spec = load_model("deepseek-v3", {"q_lora_rank": None})
    lins = {lin.name: (lin.in_features, lin.out_features) for lin in layer_linears(spec, 0)}
    assert lins["q_proj"] == (7168, 128 * 192) and "q_a_proj" not in lins
    assert lins["kv_b_proj"] == (512, 128 * (128 + 128))


@pytest.mark.parametrize("overrides,message", [
    ({"model_type": "bert"}, "--set model_type: unsupported model_type 'bert'"),
    ({"rope_scaling_x": 1}, "--set rope_scaling_x: not a key the llama normaliser reads"),
])
def test_normaliser_errors_name_the_key(overrides, message):
    with pytest.raises(MlsysError, match=message):
        load_model("llama3-8b", overrides)


def test_falcon_new_architecture_kv_heads_must_divide():
    with pytest.raises(MlsysError, match="128 heads are not divisible by 7 key/value heads"):
        load_model("falcon-40b", {"num_kv_heads": 7})


def test_tp_training_rows_repeat_for_full_recompute():
    from mlsyscalc.calc.comm.tp_rows import tp_comm_rows

    # training: the layer all-reduces run forward and backward (and again in a full recompute), the
    # embedding's once; no logits gather
    spec, gpu = load_model("llama3-8b"), load_gpu(H100)
    rows = tp_comm_rows(spec, gpu, _tp_opts(phase="train", recompute="full", cluster="hgx-h100"), 2)
    assert [(r.name, r.pass_name, r.count) for r in rows] == [
        ("layer all-reduce", "forward", 64), ("embedding all-reduce", "forward", 1),
        ("layer all-reduce", "backward", 64), ("layer all-reduce", "recompute", 64)]
    assert all(r.method.startswith("comm calculator: ") and r.method.endswith(" all-reduce on hgx-h100") for r in rows)


@pytest.mark.parametrize("name", ["hgx-h100", "h200-x2-measured", "dgx-a100"])
def test_cluster_json_round_trips(name):
    # what `bench comm --calibrate` writes (to_dict) reads back as the same spec
    spec = load_cluster(name)
    again = cluster_from_dict(spec.to_dict(), "round-trip")
    _same(again.to_dict(), spec.to_dict())
    for c in ("all-reduce", "all-to-all", "p2p"):
        a, b = again.intra.terms(c), spec.intra.terms(c)
        assert (a.bandwidth_Bps, a.latency_s, a.call_overhead_s) == pytest.approx(
            (b.bandwidth_Bps, b.latency_s, b.call_overhead_s), rel=1e-12, abs=0)
        assert [p.name for p in a.protocols] == [p.name for p in b.protocols]
        for pa, pb in zip(a.protocols, b.protocols):
            assert (pa.bandwidth_Bps, pa.latency_s, pa.base_latency_s) == pytest.approx(
                (pb.bandwidth_Bps, pb.latency_s, pb.base_latency_s), rel=1e-12, abs=0)


def _same(a, b):
    """Equal JSON trees, numbers to 1e-12 (a us -> s -> us round trip rounds)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=0)
    else:
        assert a == b


def test_per_collective_entry_inherits_what_it_leaves_out():
    # an entry naming only a bandwidth keeps the link's latency, protocols and call overhead
    proto = {"name": "LL", "bandwidth_GBps": 20, "latency_us": 1.5, "base_latency_us": 4}
    spec = cluster_from_dict(_cluster(protocols=[proto], call_overhead_us=7,
                                      per_collective={"all-gather": {"bandwidth_GBps": 50}}), "t.json")
    ag, ar = spec.intra.terms("all-gather"), spec.intra.terms("all-reduce")
    assert (ag.bandwidth_Bps, ar.bandwidth_Bps) == (50e9, 100e9)
    assert ag.latency_s == ar.latency_s == pytest.approx(2e-6, rel=1e-12, abs=0)
    assert ag.call_overhead_s == ar.call_overhead_s == pytest.approx(7e-6, rel=1e-12, abs=0)
    assert ag.protocols == ar.protocols and ag.protocols[0].base_latency_s == pytest.approx(4e-6, rel=1e-12, abs=0)
    d = spec.to_dict()["intra_node"]
    assert d["call_overhead_us"] == pytest.approx(7, rel=1e-12) and d["per_collective"]["all-gather"]["latency_us"] == \
        pytest.approx(2, rel=1e-12)


@pytest.mark.parametrize("bad", [dict(bandwidth_GBps=0), dict(latency_us=-1), dict(call_overhead_us=-1),
                                 dict(protocols=[{"name": "LL", "bandwidth_GBps": 0, "latency_us": 1}])])
def test_cluster_figures_are_checked(bad):
    with pytest.raises(MlsysError, match="t.json: malformed cluster spec: .*(bandwidth_GBps|latency_us|call_overhead_us)': must be "):
        cluster_from_dict(_cluster(**bad), "t.json")


# ---- saved activations: the byte rule of each region and recompute policy --------------------------
# (Korthikanti et al. 2022: sequence-parallel regions split over tp only with SP, tensor-parallel
# ones always; attention scores are b x heads x s x s; selective recompute drops them, full recompute
# keeps only the layer input)

NB = {"activation": 2.0, "mask": 1.0}


@pytest.mark.parametrize("region,kind,sp,want", [
    ("seq", "act", False, 1024 * 100 * 2),
    ("seq", "act", True, 1024 * 100 * 2 / 4),
    ("tensor", "act", False, 1024 * 100 * 2 / 4),
    ("kv", "act", False, 1024 * 100 * 2 / 2),
    ("scores", "act", False, 1024 * 100 * 512 * 2 / 4),
    ("seq", "mask", False, 1024 * 100 * 1),
    ("seq", "fp32", True, 1024 * 100 * 4 / 4),
])
def test_item_bytes_by_region(region, kind, sp, want):
    from mlsyscalc.calc.counts.activations import Saved, Split, item_bytes

    # 1024 local tokens, 512 keys a query, tp 4, KV heads split over 2
    split = Split(tokens=1024, keys=512, tp=4, sp=sp, kv_div=2)
    assert item_bytes(Saved("x", 100, region, kind), split, NB) == want


def test_recompute_policies_keep_less():
    from mlsyscalc.calc.counts.activations import Saved, Split, layer_bytes

    split = Split(tokens=1024, keys=1024, tp=1, sp=False, kv_div=1)
    items = [Saved("a", 10, "seq"), Saved("s", 3, "scores"), Saved("m", 5, "seq", "mask")]
    assert layer_bytes(items, split, NB, "none", 64) == 1024 * (10 * 2 + 3 * 1024 * 2 + 5)
    assert layer_bytes(items, split, NB, "selective", 64) == 1024 * (10 * 2 + 5)
    assert layer_bytes(items, split, NB, "full", 64) == 1024 * 64 * 2


def test_dropout_adds_masks_and_flash_drops_scores():
    from mlsyscalc.calc.counts.activations import attention_saved

    spec = load_model("llama3-8b")
    names = lambda items: {i.name: (i.per_token, i.region, i.kind) for i in items}  # noqa: E731
    plain = names(attention_saved(spec, flash=True, dropout=False))
    assert "softmax output" not in plain and not any(k == "mask" for _, _, k in plain.values())
    full = names(attention_saved(spec, flash=False, dropout=True))
    assert full["softmax output"] == (32, "scores", "act")
    assert full["attention dropout mask"] == (32, "scores", "mask")
    assert full["attention dropout output"] == (32, "scores", "act")
    assert full["attention output dropout mask"] == (4096, "seq", "mask")
    # GQA: K and V of 8 KV heads x 128, split by KV heads per rank
    assert (plain["K (after rotary)"], plain["V"]) == ((1024, "kv", "act"), (1024, "kv", "act"))
    assert plain["Q (after rotary)"] == (4096, "tensor", "act")


def test_tree_option_applies_to_all_reduce_only():
    # --algo tree: the gradient all-reduce runs as a double binary tree (2 ceil(log2 4) = 4 steps,
    # 2 n bytes); ZeRO's reduce-scatter and all-gather have no tree and stay rings (3 steps, 3/4 n)
    spec = load_model("llama3-8b")
    msg = 2 * LLAMA3_P
    (ar,) = step_comm(spec, StepOptions(dp=4, algo="tree")).rows
    assert ar.time_per_call_s == pytest.approx(4 * NVL_LAT + 2 * msg / NVL_BW, rel=1e-12)
    rs, ag = step_comm(spec, StepOptions(dp=4, zero=1, algo="tree")).rows
    for row in (rs, ag):
        assert row.time_per_call_s == pytest.approx(3 * NVL_LAT + 3 / 4 * msg / NVL_BW, rel=1e-12)


def test_pipeline_boundary_across_nodes():
    # llama3-8b, dp 8 inside a node, pp 2 across two nodes: the stage boundary is a send/recv
    # between 2 GPUs on different nodes: 1 step of 14 us and the message at 50 GB/s
    r = step_comm(load_model("llama3-8b"), StepOptions(dp=8, pp=2))
    (pp,) = [x for x in r.rows if x.dim == "pp"]
    msg = 2048 * 4096 * 2
    assert (pp.group_size, pp.nodes, pp.message_bytes) == (2, 2, msg)
    assert pp.time_per_call_s == pytest.approx(NIC_LAT + msg / NIC_BW, rel=1e-12)


@pytest.mark.parametrize("order,tp_nodes,dp_nodes", [
    (("tp", "cp", "dp", "pp"), 1, 2),  # Megatron's default: TP inside a node, DP across
    (("dp", "cp", "tp", "pp"), 2, 1),  # DP inner: pairs on a node, TP ranks 2 apart, 4 a node
])
def test_rank_order_places_groups(order, tp_nodes, dp_nodes):
    r = step_comm(load_model("llama3-8b"), StepOptions(dp=2, tp=8, order=order))
    nodes = {x.dim: x.nodes for x in r.rows}
    assert (nodes["tp"], nodes["dp"]) == (tp_nodes, dp_nodes)


# ---- GPU specs: every file's figures in base units ----------------------------------------------

def _gpu_files():
    import json
    from pathlib import Path

    import mlsyscalc

    folder = Path(mlsyscalc.__file__).parent.parent / "model_specs" / "gpus"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


@pytest.mark.parametrize("data", _gpu_files(), ids=lambda d: d["name"])
def test_gpu_spec_units(data):
    # TFLOP/s x 1e12, GB/s x 1e9, MB x 1e6, MHz x 1e6; capacity: the driver's MiB when recorded,
    # else the datasheet's GB; each alias finds the same GPU
    gpu = load_gpu(data["name"])
    scaled = lambda key, unit: None if data.get(key) is None else pytest.approx(data[key] * unit, rel=1e-12)  # noqa: E731
    assert gpu.memory_bandwidth_Bps == scaled("memory_bandwidth_GBps", 1e9)
    assert gpu.nvlink_Bps == scaled("nvlink_GBps", 1e9) and gpu.pcie_Bps == scaled("pcie_GBps", 1e9)
    assert gpu.boost_clock_hz == scaled("boost_clock_MHz", 1e6)
    assert gpu.l2_bytes == (None if data.get("l2_MB") is None else int(data["l2_MB"] * 1e6))
    assert (gpu.sm_count, gpu.tdp_w) == (data.get("sm_count"), data.get("tdp_W"))
    mib = data.get("memory_MiB_reported")
    assert gpu.memory_bytes == (mib * 2**20 if mib else int(data["memory_GB"] * 1e9))
    for dtype, tflops in data["peak_dense_tflops"].items():
        if tflops:
            assert gpu.peak_flops(dtype) == pytest.approx(tflops * 1e12, rel=1e-12)
            assert gpu.ridge_point(dtype) == pytest.approx(tflops * 1e12 / (data["memory_bandwidth_GBps"] * 1e9),
                                                           rel=1e-12)
    for alias in data.get("aliases", []):
        assert load_gpu(alias).name == data["name"]


def test_gpu_name_errors():
    # a family name resolves by one rule (the SXM variant with the most memory; tests/test_gpu_names.py)
    with pytest.warns(UserWarning, match="A100 -> A100-80GB-SXM"):
        assert load_gpu("A100").name == "A100-80GB-SXM"
    with pytest.raises(MlsysError, match="unknown GPU 'Z900'"):
        load_gpu("Z900")
    with pytest.raises(MlsysError, match="empty GPU name"):
        load_gpu("  ")


@pytest.mark.parametrize("target,usable", [("batch", 40 * 10**9), ("context", 20 * 10**9), ("batch", 17 * 10**9)])
def test_max_search_finds_the_last_fitting_value(target, usable):
    from mlsyscalc.calc.memory.inference import InferOptions, solve_max

    # the largest n whose total fits, and n + 1 does not (memory grows with batch and context)
    spec = load_model("llama3-8b")
    n, result = solve_max(spec, InferOptions(), target, usable)
    assert n >= 1 and result is not None
    assert result.total == _infer("llama3-8b", **{target: n}).total <= usable
    assert _infer("llama3-8b", **{target: n + 1}).total > usable


def test_max_context_of_an_all_sliding_model_is_unbounded():
    from mlsyscalc.calc.memory.inference import InferOptions, solve_max

    # mistral-7b slides a 4096-token window on every layer: memory stops growing with context
    with pytest.raises(MlsysError, match=r"--max context: memory stops growing with context \(every layer keeps "
                                         r"a 4096-token sliding window\)"):
        solve_max(load_model("mistral-7b"), InferOptions(), "context", 80 * 10**9)
    with pytest.raises(MlsysError, match="--max must be batch or context, got 'tp'"):
        solve_max(load_model("mistral-7b"), InferOptions(), "tp", 80 * 10**9)


def test_tp_beyond_a_node_is_refused_and_pcie_fallback_by_hand():
    from dataclasses import replace

    from mlsyscalc.calc.comm.tp_rows import collective_s

    h100 = load_gpu(H100)
    with pytest.raises(MlsysError, match="--tp 16 exceeds the 8 GPUs per node of every built-in H100-SXM cluster"):
        collective_s("all-reduce", GiB, h100, 16)
    with pytest.raises(MlsysError, match="--tp 16 exceeds the 8 GPUs of a hgx-h100 node"):
        collective_s("all-reduce", GiB, h100, 16, "hgx-h100")
    # an explicit cluster prices the call there
    t, how = collective_s("all-gather", GiB, h100, 4, "hgx-h100")
    assert how.endswith("all-gather on hgx-h100")
    assert t == pytest.approx(collective_cost("all-gather", GiB, 4, "hgx-h100", 1, "auto").time_s, rel=1e-12)
    # RTX-4090 (no cluster, no NVLink): a ring over half its 64 GB/s PCIe, 2 GPUs: 2 steps, 1 x n
    t, how = collective_s("all-reduce", 1e8, load_gpu("RTX-4090"), 2)
    assert how.startswith("ring estimate") and t == pytest.approx(1e8 / 32e9 + 2 * 3.4e-6, rel=1e-12)
    with pytest.raises(MlsysError, match="RTX-4090: no NVLink or PCIe bandwidth in its spec for --tp"):
        collective_s("all-reduce", 1e8, replace(load_gpu("RTX-4090"), pcie_Bps=None), 2)


@pytest.mark.parametrize("size,stride,want", [
    (3, 1, (1, 3)), (4, 2, (1, 4)), (8, 2, (2, 4)), (4, 8, (4, 1)), (2, 16, (2, 1)), (16, 1, (2, 8)),
])
def test_placement_of_strided_groups(size, stride, want):
    from mlsyscalc.calc.comm.step import placement

    # (nodes, GPUs a node) of `size` ranks `stride` apart on 8-GPU nodes holding consecutive ranks
    assert placement(size, stride, 8) == want


@pytest.mark.parametrize("size,stride,message", [
    (12, 1, r"the group of 12 ranks \(stride 1\) puts an uneven share on each 8-GPU node"),
    (2, 3, "a group with stride 3 straddles 8-GPU nodes"),
    (2, 12, "a group with stride 12 straddles 8-GPU nodes"),
])
def test_placement_errors(size, stride, message):
    from mlsyscalc.calc.comm.step import placement

    with pytest.raises(MlsysError, match=message):
        placement(size, stride, 8)


def test_call_overhead_is_the_largest_of_the_links_used():
    # intra-node calls cost 10 us to issue, inter-node ones 50 us: a call within a node waits for
    # 10 us, one spanning nodes for 50 us; a tiny message's device time is below both
    data = _cluster(call_overhead_us=10, latency_us=0.5)
    data["inter_node"] = {"link": "net", "bandwidth_GBps": 50, "latency_us": 1.0, "call_overhead_us": 50}
    spec = cluster_from_dict(data, "t.json")
    one = collective_cost("all-reduce", 8, 4, spec, nodes=1)
    two = collective_cost("all-reduce", 8, 4, spec, nodes=2)
    assert one.call_overhead_s == pytest.approx(10e-6, rel=1e-12, abs=0)
    assert two.call_overhead_s == pytest.approx(50e-6, rel=1e-12, abs=0)
    assert one.time_s == pytest.approx(10e-6, rel=1e-12, abs=0) and two.time_s == pytest.approx(50e-6, rel=1e-12, abs=0)
    assert one.host_wait_s == pytest.approx(10e-6 - one.device_s, rel=1e-12, abs=0)


def test_config_errors_name_the_override_or_the_file():
    # a --set value is blamed on --set; a file's own value on the file and key
    with pytest.raises(MlsysError, match=r"^--set hidden_size must be an integer >= 1, got 0$"):
        load_model("llama3-8b", {"hidden_size": 0})
    with pytest.raises(MlsysError, match=r"^--set num_key_value_heads: 32 attention heads are not divisible by 5"):
        load_model("llama3-8b", {"num_key_value_heads": 5})
    with pytest.raises(MlsysError, match=r"^test: 'hidden_size' must be an integer >= 1, got 0$"):
        _without("llama3-8b", "hidden_size", hidden_size=0)
    with pytest.raises(MlsysError, match=r"^--set partial_rotary_factor: inf is too large"):
        load_model("llama3-8b", {"partial_rotary_factor": float("inf")})
    with pytest.raises(MlsysError, match=r"^--set max_position_embeddings must be an integer >= 0, got -1$"):
        load_model("llama3-8b", {"max_position_embeddings": -1})
    assert load_model("llama3-8b", {"max_position_embeddings": 0}).max_position_embeddings == 0


@pytest.mark.parametrize("args,tokens,split", [
    ((), 2048, 1), (("--tp", "2", "--sp"), 2048, 2), (("--cp", "2"), 1024, 1), (("--batch", "2"), 4096, 1),
])
def test_sequence_items_follow_tokens_sp_and_cp(run_cli, args, tokens, split):
    # llama3-8b: the attention input (4096 a token, bf16) is split over tp only with SP; context
    # parallelism keeps seq / cp tokens a rank; the logits buffer (fp32 log-probs, their gradient and
    # the logits' gradient: 12 bytes a vocabulary entry, the documented default) follows the tokens
    d = run_cli.json("memory", "train", "llama3-8b", *args)
    assert d["activation_bytes_per_layer"]["q_proj input"] == tokens * 4096 * 2 // split
    tp = 2 if "--tp" in args else 1
    assert d["detail"]["temporaries_logits_bytes"] == tokens * 128256 // tp * 12
    assert d["detail"]["activations_embedding_head_bytes"] == tokens * 2 * 4096 * 2 // split


@pytest.mark.parametrize("model,overrides,moe_layers", [
    ("deepseek-v3", {}, 58),
    # every 2nd layer after the 3 dense ones: 4, 6, ..., 60
    ("deepseek-v3", {"moe_layer_freq": 2}, 29),
    ("mixtral-8x7b", {}, 32),
    ("llama3-8b", {}, 0),
])
def test_moe_layer_rule(model, overrides, moe_layers):
    spec = load_model(model, overrides)
    assert spec.num_moe_layers == moe_layers and spec.num_dense_layers == spec.num_layers - moe_layers


@pytest.mark.parametrize("model,elements", [
    ("deepseek-v3", 512 + 64),  # MLA caches the latent (kv_lora_rank) and the shared rotary key
    ("llama3-8b", 8 * (128 + 128)),  # K and V of 8 KV heads
    ("falcon-7b", 1 * (64 + 64)),  # multi-query: one KV head of 4544 / 71
])
def test_kv_cache_elements_per_token_per_layer(run_cli, model, elements):
    assert run_cli.json("models", "show", model)["kv_cache_elements_per_token_per_layer"] == elements


def test_recompute_policies_through_the_cli(run_cli):
    # llama3-8b, 32 layers of 2048 tokens. Full recompute keeps each layer's input (4096 a token,
    # bf16) and holds one layer's full activations while it recomputes; selective recompute without
    # flash drops exactly the attention scores, which flash never saves
    none = run_cli.json("memory", "train", "llama3-8b")
    full = run_cli.json("memory", "train", "llama3-8b", "--recompute", "full")
    per_layer = sum(none["activation_bytes_per_layer"].values())
    assert full["detail"]["activations_layers_bytes"] == 32 * 2048 * 4096 * 2
    assert none["detail"]["activations_recompute_working_bytes"] == 0
    # a first pipeline stage (no logits) holds one layer's full activations while recomputing it; at 4
    # sequences those outweigh the embedding's 1 GB gradient at the backward's end
    (stage0, _) = _train("llama3-8b", pp=2, recompute="full", batch=4).stages
    assert stage0.phase == "backward"
    assert stage0.detail["activations_recompute_working"] == pytest.approx(4 * per_layer, abs=4 * len(
        none["activation_bytes_per_layer"]))
    selective = run_cli.json("memory", "train", "llama3-8b", "--recompute", "selective", "--no-flash")
    assert selective["detail"]["activations_layers_bytes"] == none["detail"]["activations_layers_bytes"]
    no_flash = run_cli.json("memory", "train", "llama3-8b", "--no-flash")
    assert no_flash["activation_bytes_per_layer"]["softmax output"] == 32 * 2048 * 2048 * 2


@pytest.mark.parametrize("pp,grad_accum,in_flight", [(2, 1, (1, 1)), (4, 2, (2, 2, 2, 1)), (4, 8, (4, 3, 2, 1))])
def test_micro_batches_in_flight_per_stage(pp, grad_accum, in_flight):
    # 1F1B: stage s holds min(pp - s, micro-batches) micro-batches' activations (Narayanan et al. 2021)
    r = _train("gpt2", pp=pp, grad_accum=grad_accum)
    assert tuple(s.micro_batches_in_flight for s in r.stages) == in_flight


def test_zero3_gathers_two_layers_and_the_root_unit():
    # FSDP with each decoder layer wrapped: the layer in use, the one prefetched and the root unit
    # (gpt2: token and position embeddings, the final LayerNorm; the tied head shares the table),
    # unsharded in bf16
    root = 50257 * 768 + 1024 * 768 + 2 * 768
    (stage,) = _train("gpt2", dp=2, zero=3).stages
    assert stage.detail["temporaries_zero3_gather"] == (2 * GPT2_LAYER + root) * 2
    (stage,) = _train("gpt2", dp=2, zero=2).stages
    assert stage.detail["temporaries_zero3_gather"] == 0


def test_what_if_links_drop_measured_figures_and_add_a_network():
    # h200-x2-measured has no network: a what-if inter-node bandwidth builds one from the NVLink
    # figures (its latency kept), and overriding the NVLink bandwidth drops the fitted
    # per-collective entries and protocols
    base = load_cluster("h200-x2-measured")
    spec = base.with_links(bandwidth_GBps=300, inter_bandwidth_GBps=10)
    assert spec.inter is not None and spec.inter.name == "inter-node (overridden)"
    assert (spec.inter.bandwidth_Bps, spec.inter.latency_s) == (10e9, base.intra.latency_s)
    assert (spec.intra.bandwidth_Bps, spec.intra.latency_s) == (300e9, base.intra.latency_s)
    assert spec.intra.per_collective == {} and spec.intra.protocols == () and spec.intra.call_overhead_s == 0.0
    assert base.with_links() is not None and base.with_links().intra is base.intra
    with pytest.raises(MlsysError, match="latency must be zero or more, got -1"):
        base.with_links(latency_us=-1)


def test_cluster_from_a_file_and_unknown_names(tmp_path):
    import json

    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**_cluster(), "name": "mine"}))
    spec = load_cluster(str(path))
    assert (spec.name, spec.gpus_per_node, spec.inter, spec.intra.bandwidth_Bps) == ("mine", 4, None, 100e9)
    assert load_cluster("DGX-H100").name == "hgx-h100"  # an alias, any case
    with pytest.raises(MlsysError, match="unknown cluster 'hgx-h1000': not a built-in name or alias, nor a JSON file"):
        load_cluster("hgx-h1000")


@pytest.mark.parametrize("model,overrides,expect", [
    # a per-layer list overrides Gemma 2's every-other-layer rule
    ("gemma2-9b", {"layer_types": ["sliding_attention"] * 10 + ["full_attention"] * 32}, (4096, 10)),
    ("phi3-mini", {"sliding_window": None}, (None, 0)),
    ("gemma2-9b", {"sliding_window": None}, (None, 0)),
])
def test_sliding_window_rules(model, overrides, expect):
    spec = load_model(model, overrides)
    assert (spec.sliding_window, spec.sliding_window_layers) == expect


@pytest.mark.parametrize("overrides,expect", [
    # FalconDecoderLayer: two LayerNorms unless attention and MLP run in parallel off one
    ({"parallel_attn": False}, dict(norms_per_layer=2, parallel_attention=False)),
    ({"new_decoder_architecture": True, "num_kv_heads": 71, "num_ln_in_parallel_attn": 1},
     dict(norms_per_layer=1, num_kv_heads=71)),
    ({"alibi": True, "bias": True}, dict(position_embedding="alibi", qkv_bias=True, mlp_bias=True)),
    ({"ffn_hidden_size": 10000}, dict(intermediate_size=10000)),
])
def test_falcon_options(overrides, expect):
    spec = load_model("falcon-7b", overrides)
    assert {k: getattr(spec, k) for k in expect} == expect


def test_cluster_spec_keeps_its_sources_and_line_rate():
    import json
    from pathlib import Path

    import mlsyscalc

    path = Path(mlsyscalc.__file__).parent.parent / "model_specs" / "clusters" / "hgx-h100.json"
    data = json.loads(path.read_text())
    spec = load_cluster("hgx-h100")
    assert spec.source == tuple(data["source"]) and len(spec.source) == 3
    assert spec.intra.line_rate_Bps == 450e9 and spec.to_dict()["intra_node"]["line_rate_GBps"] == 450
    assert spec.aliases == tuple(data["aliases"]) and spec.gpu == "H100-SXM"


def test_missing_max_position_embeddings_reads_as_zero():
    # no limit recorded: 0 (the calculators then fall back to learned positions or none)
    assert _without("llama3-8b", "max_position_embeddings").max_position_embeddings == 0
    assert _without("falcon-7b", "max_position_embeddings").max_position_embeddings == 0
    assert _without("pythia-1.4b", "max_position_embeddings").max_position_embeddings == 0
    assert _without("phi-2", "max_position_embeddings").max_position_embeddings == 0
    for model in ("pythia-1.4b", "phi-2", "falcon-7b"):
        assert load_model(model, {"max_position_embeddings": 0}).max_position_embeddings == 0


def test_smallest_group_and_reserve_bounds():
    from mlsyscalc.calc.parallel.shards import verdict

    # a group of one column is a valid (if costly) quantisation group: one scale per weight
    r = _infer("llama2-7b", dtype="int8", group_size=1)
    assert r.detail["weights_scales"] == L2_PROJ * 2.0
    # a reserve of the whole card leaves nothing
    with pytest.raises(MlsysError, match="--reserve 81559MiB: .* bytes leave nothing of H100-SXM's"):
        verdict(load_gpu("H100-SXM"), 1, "81559MiB")


def test_ring_estimate_says_how_it_was_computed():
    from mlsyscalc.calc.comm.tp_rows import collective_s

    _, how = collective_s("all-reduce", 1e8, load_gpu("H100-PCIe"), 4)
    assert how == "ring estimate (no cluster spec for H100-PCIe): 1.5 n / 300 GB/s + 6 x 3.4 us"


def test_tp_rows_of_a_parallel_attention_model():
    from mlsyscalc.calc.comm.tp_rows import tp_comm_rows

    # pythia-1.4b runs attention and MLP in parallel: one all-reduce a layer (24), of 1024 x 2048 x 2
    rows = tp_comm_rows(load_model("pythia-1.4b"), load_gpu(H100), _tp_opts(), 2)
    assert [(r.name, r.size_bytes, r.count) for r in rows][:2] == [
        ("layer all-reduce", 1024 * 2048 * 2, 24), ("embedding all-reduce", 1024 * 2048 * 2, 1)]


def test_tp_activation_of_a_context_parallel_rank():
    # llama3-8b, tp 2 and cp 2: each rank holds 2048 / 2 = 1024 tokens of the sequence, so the TP
    # all-reduce carries 1024 x 4096 x 2 bytes
    r = step_comm(load_model("llama3-8b"), StepOptions(tp=2, cp=2))
    assert _rows(r, "tp") == [("all-reduce", 1024 * 4096 * 2, 2 * 2 * 32, 2)]


def test_expert_gradient_group_with_tp_inside_the_node():
    # mixtral, tp 2, dp 8, ep 2 on two 8-GPU nodes: DP ranks are 2 apart (TP inner), so the replicas of
    # one expert shard, every 2nd DP rank, are ranks 0, 4, 8, 12: two on each node
    r = step_comm(load_model("mixtral-8x7b"), StepOptions(tp=2, dp=8, ep=2))
    rows = {x.rule: x for x in r.rows if x.dim == "dp"}
    experts = rows["gradient all-reduce once per step (routed experts)"]
    assert (experts.group_size, experts.nodes) == (4, 2)
    assert experts.message_bytes == MIXTRAL["routed_expert_params"] // (2 * 2) * 2


def test_adafactor_factors_of_an_expert_parallel_rank(run_cli):
    # mixtral, ep 2 (dp 2): per layer q, o (4096 + 4096), k, v (1024 + 4096), the router (8 + 4096),
    # 8 / 2 = 4 experts of gate, up, down (14336 + 4096 each), two norms of 4096; outside: embedding
    # and untied head (32000 + 4096 each) and the final norm
    layer = 2 * 8192 + 2 * 5120 + (8 + 4096) + 4 * 3 * (14336 + 4096) + 2 * 4096
    factors = 32 * layer + 2 * (32000 + 4096) + 4096
    d = run_cli.json("memory", "train", "mixtral-8x7b", "--optimizer", "adafactor", "--dp", "2", "--ep", "2")
    assert d["detail"]["optimizer_states_bytes"] == 4 * factors


@pytest.mark.parametrize("model,overrides,opts,message", [
    ("llama3-8b", {}, dict(dp=12), "GPUs over hgx-h100 nodes: 12 is not divisible by 8"),
    ("mixtral-8x7b", {}, dict(dp=3, ep=3), "rule experts % ep == 0: routed experts over --ep"),
    ("mixtral-8x7b", {}, dict(dp=2, ep=4), r"rule tp\*cp\*dp % \(etp\*ep\) == 0: .* tp\*cp\*dp = 1\*1\*2 = 2 ranks; etp\*ep = "
                                           r"1\*4 = 4 does not divide it"),
    ("qwen2.5-7b", {"num_key_value_heads": 14}, dict(tp=4), "tp: key/value heads: 14 is not divisible by 4"),
    ("llama3-8b", {}, dict(dp=0), "--dp must be a positive integer, got 0"),
])
def test_step_layout_errors_name_the_problem(model, overrides, opts, message):
    with pytest.raises(MlsysError, match=message):
        step_comm(load_model(model, overrides), StepOptions(**opts))


def test_base_dtype_sets_unquantised_weights_and_activations():
    # fp32 base: embeddings, head and norms in 4 bytes, the workspace too (llama2-7b, 2048-token
    # chunk: 2 x 4096 + 3 x 11008 a token, the MLP phase being wider); int8 KV: 1 byte an element
    r = _infer("llama2-7b", base_dtype="fp32", kv_dtype="int8")
    assert r.detail["weights_unquantised"] == 4 * L2_REST
    assert r.detail["activations_workspace"] == 2048 * (2 * 4096 + 3 * 11008) * 4
    assert r.breakdown["kv_cache"] == 4096 * 32 * 2 * 4096 * 1
    assert r.bytes_per_element["logits"] == 4.0
    with pytest.raises(MlsysError, match="--base-dtype must be fp32, bf16 or fp16"):
        _infer("llama2-7b", base_dtype="fp8")


def test_infer_byte_overrides_apply():
    # --bytes kv=0.5 (a 4-bit KV cache): half a byte an element
    r = _infer("llama2-7b", bytes_overrides=(("kv", 0.5),))
    assert r.breakdown["kv_cache"] == 4096 * 32 * 2 * 4096 // 2


@pytest.mark.parametrize("cf", [1.0, 1.25])
def test_moe_saved_tensors_follow_top_k_and_capacity(run_cli, cf):
    # mixtral, 2048 tokens in bf16: each token goes to top-2 experts, times the capacity factor:
    # dispatched inputs and combine outputs k x cf x h, expert intermediates k x cf x 4 x 14336
    d = run_cli.json("memory", "train", "mixtral-8x7b", "--capacity-factor", str(cf))["activation_bytes_per_layer"]
    routed = 2 * cf
    assert d["dispatched expert inputs (k copies)"] == 2048 * round(routed * 4096) * 2
    assert d["expert outputs for the weighted combine"] == 2048 * round(routed * 4096) * 2
    assert d["expert intermediates (k x 4I)"] == 2048 * round(routed * 4 * 14336) * 2


def test_deepseek_moe_layer_saves_shared_expert_intermediates():
    from mlsyscalc.calc.counts.activations import mlp_saved

    # layer 3 is the first MoE layer: 256 router probabilities (fp32), top-8 routed copies, and the
    # one shared expert's 4 x 2048 intermediates
    spec = load_model("deepseek-v3")
    got = {i.name: (i.per_token, i.region, i.kind) for i in mlp_saved(spec, 3, dropout=False)}
    assert got["router probabilities (fp32)"] == (256, "seq", "fp32")
    assert got["dispatched expert inputs (k copies)"] == (8 * 7168, "expert", "act")  # gathered over etp
    assert got["expert intermediates (k x 4I)"] == (8 * 4 * 2048, "tensor", "act")
    assert got["shared expert intermediates (4I)"] == (4 * 2048, "tensor", "act")
    dense = {i.name: i.per_token for i in mlp_saved(spec, 0, dropout=True)}
    assert dense["gate, act(gate), up, product (4I)"] == 4 * 18432 and dense["mlp output dropout mask"] == 7168


@pytest.mark.parametrize("model,q_dim,kv_dim,attn_out,embed", [
    ("gemma2-9b", 16 * 256, 8 * 256, 16 * 256, 3584),  # head_dim 256: q wider than hidden 3584
    ("deepseek-v3", 128 * 192, 128 * 192, 128 * 128, 7168),  # MLA: 128 + 64 for q/k, 128 for v
    ("opt-350m", 1024, 1024, 1024, 512),  # embeddings of 512 projected to 1024
    ("qwen2.5-0.5b", 14 * 64, 2 * 64, 14 * 64, 896),
])
def test_derived_widths(run_cli, model, q_dim, kv_dim, attn_out, embed):
    spec = load_model(model)
    assert (spec.q_dim, spec.kv_dim, spec.attn_out_dim, spec.embed_dim) == (q_dim, kv_dim, attn_out, embed)
    d = run_cli.json("models", "show", model)
    assert (d["q_dim"], d["kv_dim"]) == (q_dim, kv_dim)


@pytest.mark.parametrize("overrides,expect", [
    # OPTDecoder: enable_bias on every linear, elementwise-affine LayerNorms, a final LayerNorm
    # unless post-norm or told to remove it
    ({"enable_bias": False}, dict(qkv_bias=False, o_bias=False, mlp_bias=False)),
    ({"layer_norm_elementwise_affine": False}, dict(norm="none")),
    ({"_remove_final_layer_norm": True}, dict(final_norm=False)),
    ({}, dict(qkv_bias=True, norm="layernorm", final_norm=True, embed_proj_dim=None, learned_positions=2050)),
])
def test_opt_options(overrides, expect):
    spec = load_model("opt-6.7b", overrides)
    assert {k: getattr(spec, k) for k in expect} == expect


@pytest.mark.parametrize("model,overrides,expect", [
    ("gpt2", {"n_inner": 1000, "tie_word_embeddings": False}, dict(intermediate_size=1000, tie_word_embeddings=False)),
    ("pythia-1.4b", {"use_parallel_residual": False, "attention_bias": False},
     dict(parallel_attention=False, qkv_bias=False, o_bias=False, mlp_bias=True)),
    ("llama3-8b", {"mlp_bias": True}, dict(mlp_bias=True, qkv_bias=False)),
    ("mixtral-8x7b", {"num_experts_per_tok": 4}, dict(moe_top_k=4)),
    ("phi-2", {}, dict(rotary_fraction=0.4, parallel_attention=True, lm_head_bias=True, norms_per_layer=1)),
])
def test_normaliser_options(model, overrides, expect):
    spec = load_model(model, overrides)
    got = {k: (spec.moe.experts_per_token if k == "moe_top_k" else getattr(spec, k)) for k in expect}
    assert got == expect


def test_phi_partial_rotary_default_is_half():
    # transformers' PhiConfig: partial_rotary_factor defaults to 0.5
    assert _without("phi-2", "partial_rotary_factor").rotary_fraction == 0.5


def test_gpt_neox_without_rotary_pct_rotates_a_quarter_of_each_head():
    """transformers' GPTNeoXConfig defaults rotary_pct / partial_rotary_factor to 0.25 (the value
    pythia-1.4b's config.json also sets); a config that omits both keys gets that default."""
    spec = _without("pythia-1.4b", "rotary_pct")
    assert spec.rotary_fraction == 0.25


def test_deepseek_v3_missing_keys_take_transformers_defaults():
    """A deepseek_v3 config.json without its MLA/MoE keys gets DeepseekV3Config's defaults
    (transformers configuration_deepseek_v3.py: q_lora_rank 1536, kv_lora_rank 512, qk_nope 128,
    qk_rope 64, v_head_dim 128, n_routed_experts 256, top-8, moe_intermediate_size 2048,
    n_shared_experts 1, first_k_dense_replace 3), as loading it with transformers would."""
    from mlsyscalc.specs.hf import from_hf_config
    raw = {"model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": 1024, "num_hidden_layers": 6,
           "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 4096}
    spec = from_hf_config(raw, name="ds", source="test")
    assert spec.mla is not None and spec.moe is not None
    assert (spec.mla.q_lora_rank, spec.mla.kv_lora_rank) == (1536, 512)
    assert (spec.mla.qk_nope_head_dim, spec.mla.qk_rope_head_dim, spec.mla.v_head_dim) == (128, 64, 128)
    assert (spec.head_dim, spec.v_head_dim) == (128 + 64, 128)
    moe = spec.moe
    assert (moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size) == (256, 8, 2048)
    assert (moe.num_shared_experts, moe.shared_intermediate_size, moe.first_dense_layers) == (1, 2048, 3)
    # an explicit null q_lora_rank (DeepSeek-V2-Lite style) means queries are not compressed
    assert from_hf_config({**raw, "q_lora_rank": None}, name="ds", source="test").mla.q_lora_rank is None
