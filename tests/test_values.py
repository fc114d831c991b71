"""Documented outputs against hand arithmetic written out here, where GQA, MoE, MLA, biases and
quantised weights meet the parallel dimensions that shard them.

Every expected number is derived in the comments from the model's config.json (model_specs/) and
the formula the docs cite; none is computed by the code under test.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc import count_params, load_model
from mlsyscalc.calc.counts.activations import layer_saved
from mlsyscalc.calc.comm.collectives import collective_cost
from mlsyscalc.calc.counts.flops import count_flops
from mlsyscalc.calc.parallel.shards import stage_params
from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.roofline.ops import (
    predict_attention,
    predict_grouped_matmul,
    predict_matmul,
    predict_memory_op,
    resolve_ceilings,
)
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.gpu import load_gpu
from mlsyscalc.specs.hf import from_hf_config
from mlsyscalc.specs.lookup import builtin_configs

# llama2-7b config.json: hidden 4096, intermediate 11008, 32 layers, 32 heads (MHA), vocab 32000.
# One decoder layer's projections: q, k, v, o = 4 x 4096^2 = 67,108,864; gate, up, down =
# 3 x 4096 x 11008 = 135,266,304; together 202,375,168 weights; all 32 layers 6,476,005,376.
LLAMA2_PROJ = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
# Outside the projections (bf16): embed_tokens and the untied lm_head, 2 x 32000 x 4096, and
# 2 RMSNorm vectors per layer + the final one, 65 x 4096.
LLAMA2_OTHER = 2 * 32000 * 4096 + 65 * 4096


def test_hand_constants():
    assert LLAMA2_PROJ == 6_476_005_376 and LLAMA2_OTHER == 262_410_240


# --- FLOPs: mlsys flops -----------------------------------------------------------------------

def test_flops_per_token_and_recompute_at_batch_4(run_cli):
    # 2 FLOPs per multiply-add; every token passes through the 6,476,005,376 projection weights
    # and the 32000 x 4096 head: 2 x 6,607,077,376 per token. Attention (not causal) per token:
    # 2 x S_kv x heads x (d_qk + d_v) x layers = 2 x 2048 x 32 x 256 x 32 = 1,073,741,824.
    d = run_cli.json("flops", "llama2-7b", "--batch", "4", "--seq", "2048")
    per_token = 2 * (LLAMA2_PROJ + 32000 * 4096) + 2 * 2048 * 32 * 256 * 32
    assert per_token == 14_287_896_576
    assert d["tokens"] == 4 * 2048
    assert d["flops_per_token"] == per_token
    assert d["forward_flops"] == 8192 * per_token
    assert d["backward_flops"] == 2 * 8192 * per_token
    assert d["train_step_flops"] == 3 * 8192 * per_token
    # full recomputation runs the forward twice: 4x forward (Korthikanti et al. 2022, section 5)
    assert d["train_step_recompute_flops"] == 4 * 8192 * per_token
    assert d["train_flops_per_token"] == 3 * per_token


def test_causal_flops_halve_the_attention_core_at_batch_2(run_cli):
    d = run_cli.json("flops", "llama3-8b", "--batch", "2", "--seq", "4096", "--causal")
    # llama3-8b: 32 heads of 128, 32 layers; QK^T and PV over S x S halved by the mask
    assert d["breakdown"]["attention_core"] == 2 * 2 * 4096 * 4096 * 32 * 256 * 32 // 2


def test_flop_defaults_are_one_sequence_of_2048_tokens():
    # the documented defaults of `mlsys flops` (batch 1, seq 2048, prefill, not causal)
    got = count_flops(load_model("llama2-7b"))
    assert got.tokens == 2048 and got.forward == 2048 * 14_287_896_576


def test_phi_qk_layernorm_adds_two_torch_layernorms_per_layer():
    # transformers' PhiAttention with qk_layernorm=True adds LayerNorm(head_dim) for q and for k;
    # phi-2: head_dim 2560 / 32 = 80, 32 layers. The oracle is torch's own parameter count.
    torch = pytest.importorskip("torch")
    per_layer = sum(p.numel() for _ in range(2) for p in torch.nn.LayerNorm(80).parameters())
    base = count_params(load_model("phi-2")).total
    with_qk = count_params(load_model("phi-2", {"qk_layernorm": True})).total
    assert with_qk - base == 32 * per_layer == 32 * 320


# --- inference memory: mlsys memory infer -----------------------------------------------------

def test_nf4_weights_are_half_a_byte_plus_an_fp32_absmax_per_64(run_cli):
    # QLoRA (Dettmers et al. 2023, section 3): NF4 stores 4 bits per weight and one fp32 absmax
    # per block of 64 weights (32/64 = 0.5 bit per weight without double quantisation).
    d = run_cli.json("memory", "infer", "llama2-7b", "--dtype", "nf4", "--batch", "8")
    assert d["detail"]["weights_quantised_bytes"] == LLAMA2_PROJ // 2 == 3_238_002_688
    assert d["detail"]["weights_scales_bytes"] == LLAMA2_PROJ // 64 * 4 == 404_750_336
    assert d["detail"]["weights_unquantised_bytes"] == LLAMA2_OTHER * 2
    assert d["weights_bytes"] == 3_238_002_688 + 404_750_336 + 524_820_480 == 4_167_573_504


def test_nf4_under_tp_2_halves_weights_and_blocks(run_cli):
    d = run_cli.json("memory", "infer", "llama2-7b", "--dtype", "nf4", "--tp", "2")
    assert d["detail"]["weights_quantised_bytes"] == LLAMA2_PROJ // 2 // 2
    assert d["detail"]["weights_scales_bytes"] == LLAMA2_PROJ // 2 // 64 * 4


def test_int8_per_channel_scales_follow_the_tp_split(run_cli):
    # int8 (LLM.int8 / SmoothQuant): one fp16 scale per output channel. Column-parallel q, k, v,
    # gate, up keep out/tp channels per rank; row-parallel o and down keep all their output
    # channels (their input columns are split). Per layer, tp=1: 4 x 4096 + 2 x 11008 + 4096;
    # tp=2: 3 x 2048 + 4096 + 2 x 5504 + 4096.
    one = run_cli.json("memory", "infer", "llama2-7b", "--dtype", "int8")["detail"]["weights_scales_bytes"]
    two = run_cli.json("memory", "infer", "llama2-7b", "--dtype", "int8", "--tp", "2")["detail"]["weights_scales_bytes"]
    assert one == 32 * (4 * 4096 + 2 * 11008 + 4096) * 2 == 2_719_744
    assert two == 32 * (3 * 2048 + 4096 + 2 * 5504 + 4096) * 2 == 1_622_016


def test_int4_group_scales_and_zero_points_under_tp_2(run_cli):
    # GPTQ/AWQ int4: groups of 128 input columns, an fp16 scale and a packed 4-bit zero each
    # (2.5 bytes). Row-parallel o/down split their 4096/11008 columns: 2048/128 = 16 and
    # 5504/128 = 43 groups per row, so every group stays whole; per rank: weights / 2 / 128.
    d = run_cli.json("memory", "infer", "llama2-7b", "--dtype", "int4", "--tp", "2")
    assert d["detail"]["weights_scales_bytes"] == LLAMA2_PROJ // 2 // 128 * 2.5


def test_int4_groups_of_128_on_a_53248_wide_down_proj(run_cli):
    # llama3.1-405b: hidden 16384, intermediate 53248, 8 KV heads of 128, 126 layers. down_proj's
    # 53248 input columns make 416 groups of 128 (a group size of 129 would make 413).
    per_layer = 2 * 16384 * 16384 + 2 * 16384 * 1024 + 3 * 16384 * 53248
    d = run_cli.json("memory", "infer", "llama3.1-405b", "--dtype", "int4")
    assert d["detail"]["weights_quantised_bytes"] == 126 * per_layer // 2
    assert d["detail"]["weights_scales_bytes"] == 126 * per_layer // 128 * 2.5 == 7_844_659_200


def test_moe_prefill_workspace_holds_top_k_routed_copies(run_cli):
    # mixtral-8x7b, one 4096-token sequence, 2048-token prefill chunks: the residual stream and
    # the norm output (2 x 4096) plus the MLP phase, larger than attention (4096 + 2 x 1024 +
    # 4096): gate, up and their product for 2 routed copies of each token, 3 x 2 x 14336; bf16
    d = run_cli.json("memory", "infer", "mixtral-8x7b")
    assert d["detail"]["activations_workspace_bytes"] == 2048 * (2 * 4096 + 3 * 2 * 14336) * 2


@pytest.mark.parametrize("batch, tp", [(1, 1), (8, 1), (8, 2)])
def test_logits_buffer_scales_with_batch_and_vocab_split(run_cli, batch, tp):
    # fp32 logits of the last token of each sequence; vocabulary-parallel head: 32000 / tp rows
    d = run_cli.json("memory", "infer", "llama2-7b", "--batch", str(batch), "--tp", str(tp))
    assert d["detail"]["activations_logits_bytes"] == batch * 32000 // tp * 4


def test_kv_cache_gqa_under_tp_and_mla_replicated():
    # llama3-8b: 8 KV heads x (128 + 128) x 2 bytes x 32 layers = 131,072 bytes a token;
    # tp=4 keeps 2 KV heads a rank, tp=16 (> 8 KV heads) keeps one (replicated, as vLLM does)
    kv = {tp: infer_memory(load_model("llama3-8b"), InferOptions(context=1, tp=tp)).kv_bytes_per_token
          for tp in (1, 4)}
    assert kv == {1: 131_072, 4: 131_072 / 4}
    # deepseek-v3 MLA: kv_lora_rank 512 + rope dim 64 per token and layer, 61 layers, bf16;
    # the latent is not per head, so tp=8 keeps all of it on every rank
    ds = infer_memory(load_model("deepseek-v3"), InferOptions(context=1, tp=8))
    assert ds.kv_bytes_per_token == (512 + 64) * 61 * 2 == 70_272


# --- parameters per rank: biases and experts under TP / EP --------------------------------------

def test_gpt2_row_parallel_biases_are_replicated_under_tp_2():
    # gpt2: hidden 768, 12 layers, every projection with a bias. Megatron splits the column-
    # parallel c_attn (768 x 2304) and c_fc (768 x 3072) with their biases; the row-parallel
    # attn.c_proj (768 x 768) and mlp.c_proj (3072 x 768) split their weights but every rank
    # adds the whole bias after the all-reduce (Shoeybi et al. 2019, section 3).
    weights = (768 * 2304 + 768 * 768 + 2 * 768 * 3072) // 2  # 3,538,944
    biases = 2304 // 2 + 768 + 3072 // 2 + 768  # 4,224
    norms = 2 * (768 + 768)  # ln_1, ln_2 weight and bias, replicated
    layer = weights + biases + norms
    assert layer == 3_546_240
    sp = stage_params(load_model("gpt2"), range(12), True, True, 2, 1, 1)
    assert sp.largest_layer == layer
    # wte split over the vocabulary: ceil(50257 / 2) = 25129 rows; wpe (1024 x 768) and ln_f
    # (768 + 768) replicated; the head is tied to wte
    assert sp.total == 12 * layer + 25129 * 768 + 1024 * 768 + 1536 == 62_641_920


def test_gpt2_tp_2_training_weights_in_bf16(run_cli):
    d = run_cli.json("memory", "train", "gpt2", "--tp", "2")
    assert d["weights_bytes"] == 2 * 62_641_920 and d["stages"][0]["params"] == 62_641_920


def test_qwen_column_parallel_qkv_biases_split_under_tp_2():
    # qwen2.5-0.5b: hidden 896, 14 heads of 64, 2 KV heads, intermediate 4864, 24 layers; only
    # q, k, v carry biases (896 + 128 + 128), split with their columns
    spec = load_model("qwen2.5-0.5b")
    weights = (896 * 896 + 2 * 896 * 128 + 896 * 896 + 3 * 896 * 4864) // 2
    biases = (896 + 128 + 128) // 2
    norms = 2 * 896
    assert stage_params(spec, range(24), True, True, 2, 1, 1).largest_layer == weights + biases + norms


def test_mixtral_experts_split_over_ep_8():
    # mixtral-8x7b: 8 experts of 3 x 4096 x 14336 per layer, 32 layers = 45,097,156,608 expert
    # weights; ep=8 leaves one expert per layer on each rank. The rest (attention, routers,
    # norms, embeddings, head) is 46,702,792,704 - 45,097,156,608 = 1,605,636,096.
    sp = stage_params(load_model("mixtral-8x7b"), range(32), True, True, 1, 8, 1)
    assert sp.expert == 32 * 3 * 4096 * 14336 == 5_637_144_576
    assert sp.dense == 46_702_792_704 - 8 * 5_637_144_576 == 1_605_636_096


def test_mixtral_experts_split_over_tp_2_and_ep_4():
    # ep=4: 2 of the 8 experts per layer on a rank; tp=2 then halves each expert's 3 projections
    sp = stage_params(load_model("mixtral-8x7b"), range(32), True, True, 2, 4, 1)
    assert sp.expert == 32 * 2 * 3 * 4096 * 14336 // 2


def test_gpt2_pipeline_stages_each_hold_the_tied_table(run_cli):
    # gpt2 layer: c_attn 768 x 2304 + 2304, attn.c_proj 768 x 768 + 768, c_fc 768 x 3072 + 3072,
    # mlp.c_proj 3072 x 768 + 768, ln_1 and ln_2 2 x 1536 = 7,087,872. With pp=2 the first stage
    # holds wte (50257 x 768) and wpe (1024 x 768), the last holds ln_f and its own copy of the
    # tied wte for the head (Megatron-LM keeps both copies and all-reduces their gradients).
    layer = 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768 + 2 * 1536
    assert layer == 7_087_872
    d = run_cli.json("memory", "train", "gpt2", "--pp", "2")
    assert [s["params"] for s in d["stages"]] == [
        6 * layer + 50257 * 768 + 1024 * 768, 6 * layer + 1536 + 50257 * 768]


def test_ep_divides_the_dp_x_cp_ranks():
    # experts fold into the tp x cp x dp ranks of a stage (Megatron-Core's MoE parallel folding):
    # ep=8 x etp 1 fits tp 1 x dp=4 x cp=2 = 8 ranks, not dp=2 x cp=2 = 4
    spec = load_model("mixtral-8x7b")
    assert train_memory(spec, TrainOptions(ep=8, dp=4, cp=2)).total > 0
    with pytest.raises(MlsysError, match=r"rule tp\*cp\*dp % \(etp\*ep\) == 0: .* = 4 ranks; etp\*ep = 1\*8 = 8"):
        train_memory(spec, TrainOptions(ep=8, dp=2, cp=2))


def test_opt_pipeline_stages_place_the_projections_at_their_ends(run_cli):
    # opt-350m: hidden 1024, ffn 4096, 24 layers, vocab 50272 embedded at 512 wide
    # (word_embed_proj_dim), learned positions 2048 + 2 offset, no final norm
    # (do_layer_norm_before is false). Layer: 4 x (1024^2 + 1024) + (1024 x 4096 + 4096)
    # + (4096 x 1024 + 1024) + 2 LayerNorms x 2048 = 12,596,224. project_in (512 -> 1024) sits
    # on the first stage, project_out (1024 -> 512) and the tied head's own table on the last.
    layer = 4 * (1024 * 1024 + 1024) + 1024 * 4096 + 4096 + 4096 * 1024 + 1024 + 2 * 2048
    assert layer == 12_596_224
    d = run_cli.json("memory", "train", "opt-350m", "--pp", "2")
    assert [s["params"] for s in d["stages"]] == [
        12 * layer + 50272 * 512 + 2050 * 1024 + 512 * 1024, 12 * layer + 1024 * 512 + 50272 * 512]


def test_adafactor_factors_of_experts_follow_ep():
    # Adafactor (Shazeer & Stern 2018) keeps a row and a column accumulator per matrix: an
    # expert's gate/up (14336 x 4096) and down (4096 x 14336) give 3 x (14336 + 4096). ep=8
    # leaves 1 of the 8 experts of each of mixtral's 32 layers on a rank.
    spec = load_model("mixtral-8x7b")
    one = stage_params(spec, range(32), True, True, 1, 1, 1).matrix_factors
    eight = stage_params(spec, range(32), True, True, 1, 8, 1).matrix_factors
    assert one - eight == 32 * 7 * 3 * (14336 + 4096)


def test_reserve_leaves_the_usable_bytes(run_cli):
    # H100-SXM: 81559 MiB as nvidia-smi reports it; --reserve 10% keeps int(10% of that) back
    d = run_cli.json("memory", "infer", "llama2-7b", "--gpu", "H100-SXM", "--reserve", "10%")
    cap = 81559 * 2**20
    assert d["capacity_bytes"] == cap and d["reserve_bytes"] == cap // 10
    assert d["usable_bytes"] == cap - cap // 10
    assert d["headroom_bytes"] == d["usable_bytes"] - d["total_bytes"]


# --- communication: mlsys comm step -------------------------------------------------------------

def _rows(d: dict, dim: str) -> dict[str, dict]:
    return {r["collective"]: r for r in d["rows"] if r["dim"] == dim}


@pytest.mark.parametrize("tp, kv_heads", [(1, 8), (2, 4)])
def test_context_parallel_gathers_kv_heads_not_query_heads(run_cli, tp, kv_heads):
    # Ring/all-gather context parallelism moves K and V: llama3-8b has 8 KV heads (GQA, 32 query
    # heads), d_k = d_v = 128; one micro-batch of 1 x 2048 tokens in bf16; TP splits the KV heads.
    args = ["comm", "step", "llama3-8b", "--cp", "2"] + (["--tp", str(tp)] if tp > 1 else [])
    d = run_cli.json(*args)
    message = 1 * 2048 * kv_heads * (128 + 128) * 2
    rows = _rows(d, "cp")
    gather, scatter = rows["all-gather"], rows["reduce-scatter"]
    assert gather["message_bytes"] == message == 8_388_608 // (8 // kv_heads)
    assert gather["calls"] == 2 * 32 and scatter["calls"] == 32  # forward + backward; backward
    # an all-gather over 2 ranks sends (p - 1) / p of the message per call
    assert gather["bytes_per_gpu"] == 64 * message / 2 and scatter["bytes_per_gpu"] == 32 * message / 2
    # hgx-h100 NVLink: 3.4 us a step, 370 GB/s achievable (of the 450 GB/s line rate); one ring
    # step on 2 GPUs
    assert gather["time_per_call_s"] == pytest.approx(3.4e-6 + message / 2 / 370e9, rel=1e-12)


def test_tensor_parallel_all_reduce_carries_the_context_shard(run_cli):
    # --cp 2 --tp 2: each GPU holds 2048 / 2 = 1024 tokens of the sequence, so Megatron's two
    # all-reduces per layer (attention, MLP), forward and backward, carry 1024 x 4096 bf16 values
    d = run_cli.json("comm", "step", "llama3-8b", "--cp", "2", "--tp", "2")
    reduce = _rows(d, "tp")["all-reduce"]
    assert reduce["message_bytes"] == 1 * 1024 * 4096 * 2 and reduce["calls"] == 2 * 2 * 32
    assert reduce["group_size"] == 2


# --- roofline: mlsys roofline model -------------------------------------------------------------

def _op(d: dict, name: str) -> dict:
    return next(o for o in d["ops"] if o["name"] == name)


@pytest.mark.parametrize("tp", [1, 2])
def test_decode_attention_reads_kv_head_wide_cache(run_cli, tp):
    # llama3-8b decode, batch 4, 4096 cached tokens + the new one = 4097 keys. Flash-decoding
    # reads Q once (4 x 32 heads x 128) and K, V of the 8 KV heads once (GQA), bf16; per TP rank
    # the heads divide by tp (FlashAttention IO count, Dao et al. 2022, section 3.2).
    args = ["roofline", "model", "llama3-8b", "--phase", "decode", "--context", "4096", "--batch", "4"]
    d = run_cli.json(*args, "--tp", str(tp))
    att = _op(d, "attention")
    q = 4 * 32 // tp * 128 * 2
    kv = 4 * 4097 * 8 // tp * (128 + 128) * 2
    assert att["read_bytes"] == q + kv
    assert att["write_bytes"] == q
    assert att["flops"] == 2 * 4 * 4097 * 32 // tp * 256
    assert att["count"] == 32


def test_fit_check_names_the_sizes(run_cli):
    # llama3.1-405b in bf16: 405,853,388,800 parameters x 2 bytes = 811.7 GB of weights; its KV
    # cache for one 2048-token sequence: 2048 x 126 layers x 8 KV heads x 256 x 2 bytes = 1.06 GB;
    # H100-SXM has 81559 MiB = 85.5 GB
    code, _, err = run_cli("roofline", "model", "llama3.1-405b")
    assert code == 2
    assert "does not fit on one H100-SXM (86 GB): weights 811.7 GB + KV cache 1.1 GB per GPU" in err
    assert run_cli.json("roofline", "model", "llama2-7b")["totals"]["fits"] is True
    assert run_cli.json("roofline", "model", "llama2-7b", "--phase", "train")["totals"]["fits"] is None


@pytest.mark.parametrize("model, adds", [("phi-2", 1), ("llama2-7b", 2)])
def test_parallel_attention_blocks_have_one_residual_add(run_cli, model, adds):
    # phi-2 (parallel attention): x + attn(ln(x)) + mlp(ln(x)) is one add kernel per layer reading
    # two 2048 x 2560 bf16 tensors; llama adds after attention and after the MLP
    d = run_cli.json("roofline", "model", model)
    add = _op(d, "residual_add")
    hidden = {"phi-2": 2560, "llama2-7b": 4096}[model]
    assert add["count"] == 32 * adds and add["read_bytes"] == 2 * 2048 * hidden * 2


def test_moe_activation_op_runs_on_top_k_routed_tokens(run_cli):
    # mixtral-8x7b prefill of 1024 tokens: each token goes through its top-2 of 8 experts of width
    # 14336, so SiLU(gate) * up reads 2 x (1024 x 2 x 14336) bf16 elements and writes one set.
    d = run_cli.json("roofline", "model", "mixtral-8x7b", "--seq", "1024", "--no-fit-check")
    act = _op(d, "mlp_act*up")
    elements = 1024 * 2 * 14336
    assert act["read_bytes"] == 2 * elements * 2 and act["write_bytes"] == elements * 2
    experts = _op(d, "experts.gate_proj")
    assert experts["flops"] == 2 * (1024 * 2) * 14336 * 4096  # routed tokens, not all 8 experts


# --- collectives across nodes: hgx-h100 (NVLink 450 GB/s, 3.4 us; one 50 GB/s NIC a GPU, 14 us) ---

def test_all_to_all_across_two_nodes_by_hand():
    # pairwise all-to-all of 1 GiB over 16 GPUs on 2 nodes: each GPU sends 7/16 of its buffer over
    # NVLink and 8/16 over its NIC at the same time, in 15 steps of the slower link's latency
    n = 2**30
    cost = collective_cost("all-to-all", n, 16, "hgx-h100", nodes=2)
    assert cost.bytes_per_gpu == 7 / 16 * n + 8 / 16 * n
    assert cost.time_s == pytest.approx(15 * 14e-6 + max(7 / 16 * n / 450e9, 8 / 16 * n / 50e9), rel=1e-12)


def test_hierarchical_all_reduce_on_two_nodes_has_three_phases():
    # reduce-scatter inside each node (8 GPUs), all-reduce of the n/8 shard across the 2 nodes,
    # all-gather inside each node
    n = 2**30
    cost = collective_cost("all-reduce", n, 16, "hgx-h100", nodes=2, algo="hierarchical")
    assert [p.gpus for p in cost.phases] == [8, 2, 8]
    intra = 7 * 3.4e-6 + 7 / 8 * n / 370e9  # achievable NVLink rate, not the 450 GB/s line rate
    inter = 2 * 14e-6 + (n / 8) / 50e9  # 2(p-1) steps, 2(p-1)/p x n/8 = n/8 bytes on 2 nodes
    assert cost.time_s == pytest.approx(2 * intra + inter, rel=1e-12)


def test_hierarchical_all_gather_on_two_nodes():
    # all-gather each node's n/8 share across the 2 nodes (1 step, half of n/8 sent), then the
    # whole n inside each node (7 steps, 7/8 of n sent)
    n = 2**30
    cost = collective_cost("all-gather", n, 16, "hgx-h100", nodes=2, algo="hierarchical")
    assert [p.gpus for p in cost.phases] == [2, 8]
    inter = 14e-6 + (n / 8) / 2 / 50e9
    intra = 7 * 3.4e-6 + 7 / 8 * n / 370e9  # achievable NVLink rate (450 GB/s line rate)
    assert cost.time_s == pytest.approx(inter + intra, rel=1e-12)


def test_sequence_parallel_needs_the_context_shard_to_split_over_tp(run_cli):
    # --seq 2052 --cp 2: 1026 tokens per context rank, not divisible by --tp 4
    code, _, err = run_cli("comm", "step", "llama3-8b", "--cp", "2", "--tp", "4", "--sp", "--seq", "2052")
    assert code == 2 and "rule (seq/cp) % tp == 0 with --sp: 1026 is not divisible by 4" in err


def test_host_call_overhead_is_the_largest_of_the_links_used():
    # a 1 ms host cost on the NIC only: a 1 KiB all-reduce over 2 nodes waits for it; on one node
    # it does not
    base = load_cluster("hgx-h100")
    assert base.inter is not None
    spec = replace(base, inter=replace(base.inter, call_overhead_s=1e-3))
    assert collective_cost("all-reduce", 1024, 16, spec, nodes=2).time_s == pytest.approx(1e-3, rel=1e-12)
    assert collective_cost("all-reduce", 1024, 8, spec, nodes=1).time_s < 1e-4


# --- activation memory: shared experts ------------------------------------------------------------

def test_deepseek_shared_expert_saves_4_intermediates():
    # deepseek-v3: one shared expert of moe_intermediate_size 2048 in every MoE layer (3 onwards);
    # backward keeps gate out, act(gate), up out and their product: 4 x 2048 per token
    saved = {s.name: s.per_token for s in layer_saved(load_model("deepseek-v3"), 3, True, False)}
    assert saved["shared expert intermediates (4I)"] == 4 * 2048


def test_a_calibration_record_passed_as_a_dict_sets_the_bandwidth():
    # a measured copy bandwidth of 2 TB/s (calibrated memory efficiency 1.0): 2 GB read + 2 GB
    # written take 1 ms + 1 ms, whatever the GPU's datasheet says
    pred = predict_memory_op("copy", 2e9, 2e9, gpu="H100-SXM", calibration={"bandwidth_Bps": {"copy": 2e12}})
    assert pred.memory_s == pytest.approx(2e-3, rel=1e-12)


def test_decode_gemv_uses_16_row_tiles_with_split_k():
    # a 1 x 4096 x 4096 GEMM (batch-1 decode) cannot fill 132 SMs with 128-row tiles: it takes
    # the 16-row mma.m16n8k16 tile, 4096 / 128 = 32 column tiles x split-K 4 = 128 CTAs in one
    # wave, each 2 x 16 x 128 x (4096 / 4) FLOPs at 1/132 of the achievable bf16 rate
    pred = predict_matmul(1, 4096, 4096)
    t = pred.tiling
    assert t is not None and (t.block_m, t.block_n, t.split, t.units, t.waves) == (16, 128, 4, 128, 1)
    per_sm = resolve_ceilings("H100-SXM").flops_per_s("bf16", "matmul") / 132
    assert pred.compute_s == pytest.approx(2 * 16 * 128 * 1024 / per_sm, rel=1e-12)


def test_narrow_decode_gemm_uses_16x64_tiles():
    # 1 x 2048 x 1024: 16 x 64 tiles give 2048 / 64 = 32 column tiles, split-K 4 (K / 4 = 256,
    # the smallest split allowed) = 128 CTAs in one wave, each 2 x 16 x 64 x 256 FLOPs
    pred = predict_matmul(1, 2048, 1024)
    t = pred.tiling
    assert t is not None and (t.block_m, t.block_n, t.split, t.units, t.waves) == (16, 64, 4, 128, 1)
    per_sm = resolve_ceilings("H100-SXM").flops_per_s("bf16", "matmul") / 132
    assert pred.compute_s == pytest.approx(2 * 16 * 64 * 256 / per_sm, rel=1e-12)


def test_grouped_matmul_shape_label_names_the_groups():
    # 2 experts sharing 512 routed tokens: 256 rows each, "2x(256x14336x4096)"
    assert predict_grouped_matmul(512, 2, 14336, 4096).shape == "2x(256x14336x4096)"
    assert predict_grouped_matmul(512, 1, 14336, 4096).shape == "512x14336x4096"


def test_flash_attention_backward_bytes_and_flops():
    # FlashAttention-2 backward (Dao 2023, algorithm 2) reads Q, K, V, O and dO and writes dQ, dK,
    # dV; 5 matmuls instead of the forward's 2 (x 2.5). llama3-8b shapes: 1 x 2048 tokens, 32
    # query heads and 8 KV heads of 128, bf16, no mask.
    pred = predict_attention(1, 32, 8, 2048, 2048, 128, backward=True)
    q = o = 2048 * 32 * 128 * 2
    kv = 2048 * 8 * (128 + 128) * 2
    assert (pred.read_bytes, pred.write_bytes) == (q + kv + 2 * o, q + kv)
    assert pred.flops == 2.5 * 2 * 2048 * 2048 * 32 * 256


def test_a_write_only_kernel_is_a_memory_op():
    # a fill (cudaMemset-like) reads nothing and writes 1 GB at the write ceiling
    pred = predict_memory_op("fill", 0, 1e9)
    assert pred.memory_s == pytest.approx(1e9 / resolve_ceilings("H100-SXM").write_ceiling_Bps, rel=1e-12)


def test_flash_decoding_splits_down_to_one_128_key_block():
    # decode of llama3-8b under tp=2 (16 query heads, 4 KV heads): 4 KV-head programs; splitting
    # 4096 keys 32 ways gives 128 CTAs of exactly one 128-key block each, one wave on 132 SMs
    t = predict_attention(1, 16, 4, 1, 4096, 128).tiling
    assert t is not None and (t.block_m, t.split, t.units, t.waves) == (16, 32, 128, 1)


# --- specs ---------------------------------------------------------------------------------------

def test_gpu_link_figures_are_in_bytes_per_second():
    # H100-SXM.json: nvlink_GBps 900 (both directions, as NVIDIA prints it)
    assert load_gpu("H100-SXM").nvlink_Bps == 900e9


@pytest.mark.parametrize("shared", [0, 2])
def test_deepseek_shared_experts_scale_the_params(shared):
    # deepseek-v3: 58 MoE layers (61 - 3 dense), one shared expert of 3 x 7168 x 2048 each;
    # n_shared_experts=0 removes it, 2 makes one shared MLP of width 2 x 2048
    base = count_params(load_model("deepseek-v3")).total
    spec = load_model("deepseek-v3", {"n_shared_experts": shared})
    assert spec.moe is not None and spec.moe.shared_intermediate_size == 2048 * shared
    assert count_params(spec).total - base == 58 * 3 * 7168 * 2048 * (shared - 1)


def test_gpt_neox_without_a_tie_key_has_its_own_head():
    # transformers' GPTNeoXConfig defaults tie_word_embeddings to False: pythia-1.4b's config with
    # the key removed still has an untied 50304 x 2048 embed_out
    raw = {k: v for k, v in builtin_configs()["pythia-1.4b"].items() if k != "tie_word_embeddings"}
    spec = from_hf_config(raw, name="pythia-no-tie", source="test")
    assert count_params(spec).lm_head == 50304 * 2048


def test_fp32_training_keeps_no_master_copy():
    # fp32 weights need no fp32 master copy: 4 (weight) + 4 (gradient) + 8 (Adam's two moments)
    # = 16 bytes a parameter, as with mixed precision but split differently
    r = train_memory(load_model("llama2-7b"), TrainOptions(dtype="fp32"))
    n = 6_738_415_616
    assert (r.breakdown["weights"], r.breakdown["gradients"], r.breakdown["optimizer"]) == (4 * n, 4 * n, 8 * n)


def test_decode_with_a_sliding_window_reads_only_the_window():
    # one new token over 8192 cached keys with a 4096-token window: K and V of the last 4096 keys
    # (8 KV heads x (128 + 128) x 2 bytes) plus Q (32 heads x 128 x 2 bytes)
    pred = predict_attention(1, 32, 8, 1, 8192, 128, causal=True, window=4096)
    assert pred.read_bytes == 32 * 128 * 2 + 4096 * 8 * 256 * 2


def test_router_and_training_kv_bytes(run_cli):
    # mixtral prefill of 1024 tokens: the router's top-k reads 1024 x 8 bf16 logits and writes
    # 2 (int32 index + fp32 weight) = 8 bytes per choice; training keeps no KV cache
    d = run_cli.json("roofline", "model", "mixtral-8x7b", "--seq", "1024", "--no-fit-check")
    topk = _op(d, "router_topk")
    assert (topk["read_bytes"], topk["write_bytes"]) == (1024 * 8 * 2, 1024 * 2 * 8)
    assert run_cli.json("roofline", "model", "llama2-7b", "--phase", "train")["totals"]["kv_cache_bytes"] == 0

