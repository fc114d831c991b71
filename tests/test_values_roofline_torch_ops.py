"""Value tests for `mlsys roofline --impl torch` (calc.roofline.torch_kernels, calc.roofline.training and
calc.roofline.notes): parameter tensors, zero_grad and fused AdamW launches, bias and loss kernels,
split-K reductions and the notes a training roofline prints.

Oracles: hand counts from the HF config.json files in model_specs/models/ (DeepSeek-V3's MLA shapes,
LlamaForCausalLM's parameter list), ATen's multi-tensor limits (MultiTensorApply.cuh:
depth_to_max_tensors = {110, 64, 48, 36, 30}, kChunkSize 65536, depth_to_max_blocks 320), the
parameter total of calc.counts.params (another module counting the same weights) and properties that must
hold (a backward kernel per forward kernel, a head kernel once a step)."""

from __future__ import annotations

import math

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.counts.params import count_params
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.notes import model_notes
from mlsyscalc.calc.roofline.ops import predict_matmul
from mlsyscalc.calc.roofline.torch_kernels import cublas_splits, param_tensors, step_param_tensors
from mlsyscalc.specs.lookup import load_model

H200 = load_ceilings("H200")
CHUNKS = 320 * 65536  # elements one multi-tensor launch covers (depth_to_max_blocks x kChunkSize)
# a small Llama: 9 tensors a layer (q, k, v, o, gate, up, down, 2 RMSNorms) + embed, final norm, lm_head
TINY = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": 1000}


def _tiny(layers: int):
    return load_model("llama2-7b", {**TINY, "num_hidden_layers": layers})


def _torch(spec, **kw):
    return predict_model(spec, H200, RooflineOptions(impl="torch", check_fit=False, **kw))


def _rows(result, name: str, pass_name: str | None = None) -> list:
    return [r for r in result.rows if r.pred.name == name and (pass_name is None or r.pass_name == pass_name)]


# --- parameter tensors -------------------------------------------------------------------------

V3_DENSE = {"num_hidden_layers": 1, "first_k_dense_replace": 1}
# DeepSeek-V3 config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128,
# qk_rope 64, v_head_dim 128, dense intermediate 18432
V3_COMMON = (7168 * 576 + 512 + 512 * 128 * (128 + 128)  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
             + 128 * 128 * 7168 + 2 * 7168 + 3 * 7168 * 18432)  # o_proj, two RMSNorms, gate/up/down


def test_mla_layer_with_query_lora_counts_its_latent_norms():
    """A dense DeepSeek-V3 layer: q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj, o_proj, input/post-attention norms, gate/up/down = 12 tensors;
    parameters 7168 x 1536 + 1536 + 1536 x 128 x 192 + the rest = 583,483,392."""
    spec = load_model("deepseek-v3", {**V3_DENSE, "q_lora_rank": 1536})
    params = 7168 * 1536 + 1536 + 1536 * 128 * 192 + V3_COMMON
    assert param_tensors(spec, 0) == (12, params) == (12, 583_483_392)


def test_mla_layer_without_query_lora_has_one_latent_norm():
    """q_lora_rank null (DeepSeek-V2-Lite's layout): q_proj 7168 x 128 x 192 replaces q_a/q_b and
    their norm: 10 tensors, 710,883,840 parameters; only kv_a_layernorm's 512 weights remain."""
    spec = load_model("deepseek-v3", {**V3_DENSE, "q_lora_rank": None})
    params = 7168 * 128 * 192 + V3_COMMON
    assert param_tensors(spec, 0) == (10, params) == (10, 710_883_840)


@pytest.mark.parametrize("name", ["deepseek-v3", "phi-2", "qwen2.5-0.5b", "opt-350m", "llama2-7b"])
def test_param_tensors_sum_to_the_parameter_count(name):
    """The head's and every layer's parameters of param_tensors add up to calc.counts.params' total
    (counted there from the same config by another route)."""
    spec = load_model(name)
    total = param_tensors(spec, None)[1] + sum(param_tensors(spec, i)[1] for i in range(spec.num_layers))
    assert total == count_params(spec).total


@pytest.mark.parametrize("name,tensors", [
    ("llama2-7b", 3 + 32 * 9),  # LlamaForCausalLM: embed, 32 x (q, k, v, o, gate, up, down, 2 norms), norm, lm_head
    # Qwen2ForCausalLM, tied: embed, norm; 24 x (q, k, v with biases, o, gate, up, down, 2 norms)
    ("qwen2.5-0.5b", 2 + 24 * (6 + 1 + 3 + 2)),
])
def test_step_param_tensors_match_the_hf_parameter_list(name, tensors):
    """len(list(model.parameters())) of the transformers model: a tied lm_head adds no tensor."""
    assert step_param_tensors(load_model(name)) == tensors


def test_affine_free_layernorm_holds_no_tensors():
    """OPT with layer_norm_elementwise_affine false: nn.LayerNorm(elementwise_affine=False) has no
    parameters, so a layer holds q, k, v, o, fc1, fc2 with their biases only: 12 tensors."""
    spec = load_model("opt-350m", {"layer_norm_elementwise_affine": False})
    tensors, params = param_tensors(spec, 0)
    assert tensors == 12
    h, f = 1024, 4096
    assert params == 4 * (h * h + h) + 2 * h * f + f + h


# --- norm kernels forward and backward --------------------------------------------------------

@pytest.mark.parametrize("affine", [True, False])
def test_norm_kernels_with_and_without_affine_weights(affine):
    """opt-350m training: two LayerNorms in each of its 24 layers. nn.LayerNorm(elementwise_affine=
    False) (config layer_norm_elementwise_affine false) still normalises, so --impl torch and the
    fused roofline both run 48 norm kernels forward and 48 input-gradient kernels backward; only
    the weight gradients (one per norm with affine weights) go away."""
    spec = load_model("opt-350m", {"layer_norm_elementwise_affine": affine})
    opts = {"phase": "train", "seq": 16, "check_fit": False}
    fused = predict_model(spec, H200, RooflineOptions(**opts))
    torch = predict_model(spec, H200, RooflineOptions(impl="torch", **opts))
    for r in (fused, torch):
        assert sum(x.count for x in _rows(r, "norm", "forward")) == 2 * 24
    assert sum(x.count for x in _rows(torch, "norm.bwd_input", "backward")) == 2 * 24
    assert sum(x.count for x in _rows(torch, "norm.bwd_weight", "backward")) == (2 * 24 if affine else 0)


@pytest.mark.parametrize("impl", ["fused", "torch"])
def test_affine_free_final_norm_still_runs(impl):
    """opt-6.7b is pre-norm (do_layer_norm_before): OPTDecoder's final LayerNorm runs with or
    without affine weights, once a step; its backward (impl torch) too."""
    spec = load_model("opt-6.7b", {"layer_norm_elementwise_affine": False})
    r = predict_model(spec, H200, RooflineOptions(impl=impl, phase="train", seq=16, check_fit=False))
    assert [x.count for x in _rows(r, "final_norm", "forward")] == [1]
    assert len(_rows(r, "final_norm.bwd", "backward")) == 1


# --- zero_grad and fused AdamW launches --------------------------------------------------------

@pytest.mark.parametrize("layers,launches", [(11, 1), (12, 2), (24, 2), (25, 3)])
def test_zero_grad_launches_take_110_tensors_each(layers, launches):
    """torch._foreach_zero_ (depth 1) takes at most 110 tensors a launch: the tiny Llama holds
    3 + 9 x layers tensors (102, 111, 219, 228) and far fewer than 320 x 65536 elements."""
    spec = _tiny(layers)
    tensors = 3 + 9 * layers
    assert step_param_tensors(spec) == tensors and math.ceil(tensors / 110) == launches
    (row,) = _rows(_torch(spec, phase="train", seq=16), "grad.zero")
    total = count_params(spec).total
    assert row.count == launches and row.pass_name == "optimizer"
    assert row.pred.read_bytes == 0  # a fill reads nothing
    assert row.pred.write_bytes == total * 2 / launches  # bf16 gradients split over the launches
    assert row.pred.shape == f"{tensors} tensors"


def test_zero_grad_launches_of_a_tensor_parallel_shard():
    """llama2-7b, tp 2: each GPU zeroes ceil(6,738,415,616 / 2) gradients, 161 launches of at most
    320 x 65536 elements (its 291 tensors need only 3)."""
    total = 6_738_415_616
    local = math.ceil(total / 2)
    (row,) = _rows(_torch(load_model("llama2-7b"), phase="train", seq=16, tp=2), "grad.zero")
    assert row.count == math.ceil(local / CHUNKS) == 161
    assert row.pred.write_bytes == local * 2 / 161


def test_fused_adamw_launch_holds_its_share_of_parameters():
    """gpt2 (124,439,808 parameters): fused AdamW in 6 launches of ceil(124,439,808 / 6) =
    20,739,968 parameters, each reading 16 B and writing 12 + 2 B a parameter (fp32 master)."""
    (row,) = _rows(_torch(load_model("gpt2"), phase="train", seq=16), "adamw")
    per = math.ceil(124_439_808 / 6)
    assert row.count == 6 and row.pred.shape == f"{per} params" == "20739968 params"
    assert row.pred.read_bytes == 16 * per and row.pred.write_bytes == 14 * per


@pytest.mark.parametrize("tp,launches", [(1, 4), (2, 2)])
def test_fused_adamw_launches_of_a_shard_count_its_tensors(tp, launches):
    """Fused AdamW (depth 4) takes at most 36 tensors a launch: the 12-layer tiny Llama's 111
    tensors need 4 launches; with tp 2 each GPU holds ceil(111 / 2) = 56 tensors: 2 launches."""
    spec = _tiny(12)
    (row,) = _rows(_torch(spec, phase="train", seq=16, tp=tp), "adamw")
    assert row.count == launches == math.ceil(math.ceil(111 / tp) / 36)
    params = math.ceil(count_params(spec).total / tp)
    assert row.pred.shape == f"{math.ceil(params / launches)} params"


# --- bias gradients, loss and head kernels ----------------------------------------------------

@pytest.mark.parametrize("tp", [1, 2])
def test_lm_head_bias_gradient_is_one_reduction_of_its_shard(tp):
    """phi-2's lm_head has a bias (51,200 = vocab): its gradient sums dY (16 tokens x 51,200 / tp,
    bf16) into 51,200 / tp values, once a step."""
    r = _torch(load_model("phi-2"), phase="train", seq=16, tp=tp)
    (row,) = [x for x in _rows(r, "bias.bwd_sum") if x.layers == "head"]
    assert row.count == 1 and row.pred.shape == "16x51200"
    assert row.pred.read_bytes == 16 * 51200 * 2 / tp
    assert row.pred.write_bytes == 51200 * 2 / tp


def test_head_backward_kernels_run_once_a_step():
    """Loss, final norm and embedding backward kernels belong to the head: one each a step."""
    r = _torch(load_model("phi-2"), phase="train", seq=16)
    head = [x for x in r.rows if x.layers == "head" and x.pass_name == "backward" and x.pred.name != "grad.accumulate"]
    assert {x.pred.name for x in head} >= {"loss.bwd_log_softmax", "final_norm.bwd", "embedding.bwd_scatter",
                                           "bias.bwd_sum"}
    assert all(x.count == 1 for x in head)


def test_cross_entropy_reads_the_fp32_logits_three_times_each_way():
    """llama2-7b B1 S16, vocab 32,000: log_softmax forward reads each fp32 row for its max, its sum
    of exps and the output (3 x 16 x 32000 x 4 B) and writes it once; its backward reads the
    incoming gradient for its sum, then it and the output (3 reads) and writes once."""
    r = _torch(load_model("llama2-7b"), phase="train", seq=16)
    tv4 = 16 * 32000 * 4
    (fwd,) = _rows(r, "loss.log_softmax")
    (bwd,) = _rows(r, "loss.bwd_log_softmax")
    assert (fwd.pred.read_bytes, fwd.pred.write_bytes) == (3 * tv4, tv4)
    assert (bwd.pred.read_bytes, bwd.pred.write_bytes) == (3 * tv4, tv4)


def test_gated_mlp_backward_products_are_one_multiply_each():
    """SwiGLU backward: d_up = dY * act and d_act = dY * up read two tensors, write one and do one
    multiply an element (llama2-7b S16: 16 x 11,008 elements, bf16)."""
    r = _torch(load_model("llama2-7b"), phase="train", seq=16)
    n = 16 * 11008
    for name in ("mlp_mul.bwd_up", "mlp_mul.bwd_act"):
        (row,) = _rows(r, name)
        assert row.pred.flops == n and row.pred.read_bytes == 2 * n * 2 and row.pred.write_bytes == n * 2


def test_partial_rotary_backward_copies_the_unrotated_part():
    """pythia-1.4b rotates 32 of its 128 head dims (rotary_pct 0.25): the backward copies the other
    96 of each of 16 tokens x 16 heads = 256 rows (bf16: 256 x 96 x 2 B read and written)."""
    r = _torch(load_model("pythia-1.4b"), phase="train", seq=16)
    rows = _rows(r, "rotary.bwd_pass_copy")
    assert len(rows) == 2 and all(x.pred.shape == "256x96" for x in rows)
    assert all(x.pred.read_bytes == x.pred.write_bytes == 256 * 96 * 2 for x in rows)


# --- backward rows of calc.roofline.training -----------------------------------------------------

def test_fused_memory_kernel_backward_reads_input_and_gradient():
    """impl fused: a memory-bound kernel's backward reads what its forward read plus the incoming
    gradient (the forward's output) and writes the input gradient (the forward's input)."""
    r = predict_model(load_model("gpt2"), H200, RooflineOptions(phase="train", seq=16, check_fit=False))
    (fwd,) = [x for x in _rows(r, "norm", "forward") if x.layers == "layers"]
    (bwd,) = _rows(r, "norm.bwd", "backward")
    assert bwd.pred.read_bytes == fwd.pred.read_bytes + fwd.pred.write_bytes
    assert bwd.pred.write_bytes == fwd.pred.read_bytes
    assert bwd.count == fwd.count


def test_torch_backward_keeps_attention_and_drops_generic_memory_rows():
    """impl torch: the attention backward is a row of its own, and memory kernels get their own
    backward kernels (norm.bwd_input ...), not the generic '<name>.bwd' rows of impl fused."""
    r = _torch(load_model("llama2-7b"), phase="train", seq=16)
    assert [x.count for x in r.rows if x.pass_name == "backward" and x.pred.kind == "attention"] == [32]
    assert not _rows(r, "norm.bwd") and not _rows(r, "rotary.mul_cos.bwd")


def test_backward_dgrad_of_a_square_gemm_splits_like_its_forward():
    """llama2-7b B1 S16: q_proj forward and its dgrad are both 16 x 4096 x 4096 GEMMs (64 output
    tiles < 132 / 2, K >= 2048), so cuBLAS adds a split-K reduction to each."""
    r = _torch(load_model("llama2-7b"), phase="train", seq=16)
    assert _rows(r, "q_proj.splitk_reduce", "forward")
    (dgrad,) = _rows(r, "q_proj.dgrad.splitk_reduce", "backward")
    assert dgrad.count == 32


@pytest.mark.parametrize("m,n,k,splits", [
    (32, 4096, 4096, False),  # 64 x 2 = 128 tiles of 64 x 16 (llama2-7b decode B32, H100: q/k/v/o not split)
    (32, 4096, 1024, False),  # K shorter than 2048
    (16, 8192, 4096, False),  # 128 tiles, K < 2N
    (1, 8192, 16384, True),  # K >= 2N
])
def test_cublas_splits_a_two_way_split(m, n, k, splits):
    """The tiling's two-way split-K launches a reduction when cuBLAS's rule holds (fewer than SMs / 2
    = 66 output tiles of 64 x 16 and K >= 3584 from 9 rows, or K >= 2N and K >= 2048)."""
    pred = predict_matmul(m, n, k, "bf16", H200)
    if k >= 2048:
        assert pred.tiling.split == 2
    assert cublas_splits(pred, H200.sm_count) is splits


# --- notes -------------------------------------------------------------------------------------

HOST_NOTE = "eager training on one GPU"


@pytest.mark.parametrize("kw,shown", [
    ({"phase": "train"}, True),
    ({"phase": "prefill"}, False),
    ({"phase": "decode", "context": 16}, False),
    ({"phase": "train", "tp": 2}, False),
    ({"phase": "train", "dp": 2}, False),
    ({"phase": "train", "tp": 2, "dp": 2}, False),
])
def test_host_path_note_only_for_single_gpu_eager_training(kw, shown):
    """The host-path note (29 us a kernel) applies to --impl torch training on one GPU only."""
    notes = model_notes(load_model("llama2-7b"), RooflineOptions(impl="torch", **kw))
    assert any(HOST_NOTE in n for n in notes) is shown
    fused = model_notes(load_model("llama2-7b"), RooflineOptions(**kw))
    assert not any(HOST_NOTE in n for n in fused)


# --- neighbouring kernels of a training step ---------------------------------------------------

def _llama3_train():
    return _torch(load_model("llama3-8b"), phase="train", seq=16)


def test_gqa_backward_sums_dk_dv_over_each_kv_heads_queries():
    """llama3-8b (32 query heads, 8 KV heads, d 128), 16 tokens: cuDNN's head reduction reads dK
    (dV) per query head, 16 x 32 x 128 x 2 B, and writes it per KV head, 16 x 8 x 128 x 2 B;
    llama2-7b (32 KV heads, no grouping) has none."""
    r = _llama3_train()
    for x in ("k", "v"):
        (row,) = _rows(r, f"attention.bwd_reduce_head.{x}")
        assert (row.pred.read_bytes, row.pred.write_bytes, row.count) == (16 * 32 * 128 * 2, 16 * 8 * 128 * 2, 32)
    assert not _rows(_torch(load_model("llama2-7b"), phase="train", seq=16), "attention.bwd_reduce_head.k")


def test_attention_backward_preprocess_kernels():
    """FlashAttention's backward preprocessing, 16 tokens x 32 heads x 128: rowsum(dO * O) reads dO and
    O (bf16) and writes one fp32 a row; dQ is accumulated in fp32 and converted to bf16."""
    r = _llama3_train()
    (dot,) = _rows(r, "attention.bwd_dot_do_o")
    (dq,) = _rows(r, "attention.bwd_dq_convert")
    out = 16 * 32 * 128
    assert (dot.pred.read_bytes, dot.pred.write_bytes) == (2 * out * 2, 16 * 32 * 4)
    assert (dq.pred.read_bytes, dq.pred.write_bytes) == (out * 4, out * 2)


def test_head_backward_bytes_by_hand():
    """llama3-8b B1 S16, vocab 128,256, hidden 4096, bf16: the loss backward fills the fp32 logits'
    gradient, scatters -1/N into 16 targets (int64 read, fp32 written) and casts it back to bf16;
    the embedding backward sorts 16 int64 indices (with their positions), zero-fills the whole bf16
    table and scatters 16 rows into it."""
    r = _llama3_train()
    tv = 16 * 128256
    expect = {"loss.bwd_fill": (0, tv * 4), "loss.bwd_nll": (16 * 8, 16 * 4), "loss.bwd_cast": (tv * 4, tv * 2),
              "embedding.bwd_sort": (16 * 16, 16 * 16), "embedding.bwd_fill": (0, 128256 * 4096 * 2),
              "embedding.bwd_scatter": (16 * 4096 * 2 + 16 * 8, 16 * 4096 * 2)}
    for name, (read, write) in expect.items():
        (row,) = _rows(r, name)
        assert (row.pred.read_bytes, row.pred.write_bytes, row.count) == (read, write, 1), name


def test_gradient_accumulation_adds_one_kernel_per_tensor():
    """llama3-8b: autograd adds each of a layer's 9 tensors into its kept .grad (read grad + new,
    write grad): 32 x 9 launches moving 3 x 2 B of the layer's 218,112,000 parameters
    (q/o 4096^2, k/v 4096 x 1024, gate/up/down 4096 x 14336, 2 norms of 4096)."""
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert per_layer == 218_112_000
    (row,) = [x for x in _rows(_llama3_train(), "grad.accumulate") if x.layers == "layers"]
    assert row.count == 32 * 9 and row.pred.shape == "9 tensors"
    assert row.pred.read_bytes == pytest.approx(2 * per_layer * 2 / 9, rel=1e-12, abs=0)
    assert row.pred.write_bytes == pytest.approx(per_layer * 2 / 9, rel=1e-12, abs=0)


def test_fan_out_gradient_adds_per_layer():
    """A Llama layer's backward adds gradients where a tensor feeds several ops: the two residual
    branch points, q/k/v reading the same normed input (2 adds) and gate/up (1 add): 5 a layer."""
    assert sum(x.count for x in _rows(_llama3_train(), "grad_accumulate")) == 32 * 5


# --- the AdamW step of calc.roofline.training -----------------------------------------------------

@pytest.mark.parametrize("kw,shards", [({}, 1), ({"dp": 4}, 1), ({"dp": 4, "zero": 1}, 4),
                                       ({"dp": 4, "zero": 3}, 4), ({"tp": 2, "dp": 4, "zero": 1}, 8)])
def test_adamw_updates_the_local_shard(kw, shards):
    """Fused AdamW (impl fused: one launch) over total / tp parameters, / dp more with ZeRO >= 1
    (Rajbhandari et al. 2020: stage 1 shards the optimizer states); llama2-7b has 6,738,415,616."""
    r = predict_model(load_model("llama2-7b"), H200, RooflineOptions(phase="train", seq=16, check_fit=False, **kw))
    (row,) = _rows(r, "adamw")
    params = math.ceil(6_738_415_616 / shards)
    assert row.count == 1 and row.pred.shape == f"{params} params"
    assert (row.pred.read_bytes, row.pred.write_bytes) == (16 * params, 14 * params)


def test_adamw_without_master_weights_moves_model_dtype_states():
    """--no-master-weights, bf16: AdamW reads weight, gradient, m, v (4 x 2 B) and writes weight, m,
    v (3 x 2 B) a parameter; gpt2 has 124,439,808."""
    r = predict_model(load_model("gpt2"), H200, RooflineOptions(phase="train", seq=16, master_weights=False))
    (row,) = _rows(r, "adamw")
    assert (row.pred.read_bytes, row.pred.write_bytes) == (8 * 124_439_808, 6 * 124_439_808)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recompute_rows(mode):
    """Selective recomputation runs the attention core again; full runs every layer kernel again
    (not the head): the recompute rows are those forward rows with the same counts."""
    r = predict_model(load_model("llama2-7b"), H200, RooflineOptions(phase="train", seq=16, recompute=mode))
    again = [(x.pred.name, x.count) for x in r.rows if x.pass_name == "recompute"]
    fwd = [x for x in r.rows if x.pass_name == "forward"]
    if mode == "selective":
        expect = [(x.pred.name, x.count) for x in fwd if x.pred.kind == "attention"]
    else:
        expect = [(x.pred.name, x.count) for x in fwd if x.layers != "head"]
    assert again == expect and len(expect) >= 1
    assert all(x.layers != "head" for x in r.rows if x.pass_name == "recompute")


# --- the other notes ---------------------------------------------------------------------------

def _notes(name="llama2-7b", **kw):
    return model_notes(load_model(name), RooflineOptions(**kw))


@pytest.mark.parametrize("mode,text", [("none", "no activation recomputation"),
                                       ("selective", "selective recomputation"), ("full", "full recomputation")])
def test_training_notes_name_the_recomputation(mode, text):
    notes = _notes(phase="train", recompute=mode)
    assert notes[0].startswith(text)
    assert not any("recomputation" in n for n in _notes(phase="prefill"))


def test_logits_last_note_only_in_prefill():
    """--logits last shortens prefill's lm_head; decode runs one position anyway."""
    assert any("--logits last" in n for n in _notes(phase="prefill", logits="last"))
    assert not any("--logits last" in n for n in _notes(phase="prefill"))
    assert not any("--logits last" in n for n in _notes(phase="decode", context=16, logits="last"))


def test_master_weight_and_data_parallel_notes():
    """--no-master-weights and dp > 1 each add a training note; ZeRO >= 1 says AdamW covers 1/dp;
    --dp-overlap says the traffic hides behind kernels."""
    assert any("--no-master-weights" in n for n in _notes(phase="train", master_weights=False))
    assert not any("--no-master-weights" in n for n in _notes(phase="train"))
    assert not any("data parallel" in n for n in _notes(phase="train"))
    (dp0,) = [n for n in _notes(phase="train", dp=2) if "data parallel" in n]
    assert dp0.startswith("data parallel x2, ZeRO-0") and "1/dp" not in dp0 and "not overlapped" in dp0
    (dp1,) = [n for n in _notes(phase="train", dp=4, zero=1, dp_overlap=True) if "data parallel" in n]
    assert dp1.startswith("data parallel x4, ZeRO-1") and dp1.endswith("AdamW over 1/dp of the parameters")
    assert "only the excess is added" in dp1


def test_model_shape_notes():
    """MLA (deepseek-v3), MoE (mixtral) and --impl torch each add their note; llama2-7b fused none."""
    assert any(n.startswith("MLA:") for n in _notes("deepseek-v3"))
    assert any(n.startswith("MoE:") for n in _notes("mixtral-8x7b"))
    assert any("--impl torch" in n for n in _notes(impl="torch"))
    assert _notes() == ()


@pytest.mark.parametrize("window,text", [("skip", "kernels skip KV tiles"), ("full", "counted over the full causal")])
def test_sliding_window_note_counts_the_windowed_layers(window, text):
    """gemma2-9b alternates local (4096-token window) and global layers: 21 of its 42 are windowed."""
    (note,) = [n for n in _notes("gemma2-9b", window=window) if n.startswith("sliding window")]
    assert note.startswith(f"sliding window 4096 on 21 of 42 layers: {text}")
