"""The plain-torch model builder (bench.torch_models) on tiny versions of every built-in family:
its parameter count equals `calc.counts.params` (an independent count from the spec), and its KV-cached
decode reproduces the full forward's logits position by position."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mlsyscalc.bench.torch_models import build_model  # noqa: E402
from mlsyscalc.calc.counts.params import count_params  # noqa: E402
from mlsyscalc.errors import MlsysError  # noqa: E402
from mlsyscalc.specs.lookup import builtin_configs, load_model  # noqa: E402

_HF = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
       "intermediate_size": 96, "vocab_size": 97, "max_position_embeddings": 64}
# per model_type: the config keys that make a 2-layer, 64-wide version of the family
TINY = {
    "llama": _HF, "mistral": _HF, "qwen2": _HF, "phi3": {**_HF, "num_key_value_heads": 4},
    "mixtral": {**_HF, "num_local_experts": 4},
    "gemma2": {**_HF, "head_dim": 16},
    "phi": {**_HF, "num_key_value_heads": 4},
    "gpt_neox": {k: v for k, v in _HF.items() if k != "num_key_value_heads"},
    "falcon": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_kv_heads": 2, "vocab_size": 97},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 97, "n_positions": 64},
    "opt": {"hidden_size": 64, "ffn_dim": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 97,
            "max_position_embeddings": 64, "word_embed_proj_dim": 32},
    "deepseek_v3": {**_HF, "num_hidden_layers": 3, "first_k_dense_replace": 1, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "num_key_value_heads": 4,
                    "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                    "v_head_dim": 16},
    "mistral3": _HF,  # into its text_config
}
# the built-ins whose family the builder makes (the others, with q/k RMSNorms, sinks, NoPE or chunked
# layers or squared ReLU, it refuses by name: bench.torch_models.require_supported, _torch_layers)
MODELS = sorted(name for name, cfg in builtin_configs().items() if cfg["model_type"] in TINY)


def tiny(name: str):
    model_type = builtin_configs()[name]["model_type"]
    overrides = dict(TINY[model_type])
    if model_type == "falcon" and not builtin_configs()[name].get("new_decoder_architecture"):
        overrides.pop("num_kv_heads")  # falcon-7b: multi-query
    return load_model(name, overrides)


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count_equals_the_calculator(name):
    spec = tiny(name)
    model = build_model(spec, "float32", "cpu")
    assert sum(p.numel() for p in model.parameters()) == count_params(spec).total


@pytest.mark.parametrize("name", MODELS)
def test_kv_cached_decode_equals_the_full_forward(name):
    """Prefill 5 tokens, decode 4 one at a time: each step's logits equal the uncached forward's
    logits at that position (fp32, random weights; MLA decode runs the absorbed form)."""
    spec = tiny(name)
    torch.manual_seed(0)
    model = build_model(spec, "float32", "cpu")
    ids = torch.randint(0, spec.vocab_size, (2, 9))
    full = model.logits(ids)  # (2, 9, V)
    caches = model.new_caches(2, 9)
    last = model.prefill(ids[:, :5], caches)
    torch.testing.assert_close(last, full[:, 4], rtol=1e-4, atol=1e-4)
    for pos in range(5, 9):
        step = model.decode(ids[:, pos:pos + 1], caches, pos)
        torch.testing.assert_close(step, full[:, pos], rtol=1e-4, atol=1e-4)


def test_math_attention_equals_sdpa():
    spec = tiny("llama3-8b")
    torch.manual_seed(1)
    sdpa = build_model(spec, "float32", "cpu", flash=True)
    plain = build_model(spec, "float32", "cpu", flash=False)
    plain.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, spec.vocab_size, (2, 12))
    torch.testing.assert_close(plain.logits(ids), sdpa.logits(ids), rtol=1e-4, atol=1e-4)


def test_one_layer_by_hand():
    """A 1-layer MHA llama written out in plain tensor ops (RMSNorm, rotary, causal softmax,
    SwiGLU) gives the builder's logits."""
    spec = load_model("llama2-7b", {**_HF, "num_hidden_layers": 1, "num_key_value_heads": 4})
    torch.manual_seed(2)
    m = build_model(spec, "float32", "cpu")
    ids = torch.randint(0, spec.vocab_size, (1, 6))
    L = m.layers[0]
    rms = lambda x, w: x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    x = m.embed.weight[ids[0]]  # (S, h)
    s, hd = 6, 16
    inv = 1.0 / 10000.0 ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.outer(torch.arange(s).float(), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rot(t):  # (S, H, D)
        t1, t2 = t[..., :hd // 2], t[..., hd // 2:]
        return t * cos[:, None] + torch.cat([-t2, t1], -1) * sin[:, None]

    a = rms(x, L.input_norm.weight)
    q, k, v = (rot((a @ L.attn.q_proj.weight.T).view(s, 4, hd)), rot((a @ L.attn.k_proj.weight.T).view(s, 4, hd)),
               (a @ L.attn.v_proj.weight.T).view(s, 4, hd))
    scores = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5 + torch.full((s, s), float("-inf")).triu(1)
    att = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(s, 64)
    x = x + att @ L.attn.o_proj.weight.T
    b = rms(x, L.post_norm.weight)
    mlp = torch.nn.functional.silu(b @ L.mlp.gate_proj.weight.T) * (b @ L.mlp.up_proj.weight.T)
    x = x + mlp @ L.mlp.down_proj.weight.T
    want = rms(x, m.norm.weight) @ m.lm_head.weight.T
    torch.testing.assert_close(m.logits(ids)[0], want, rtol=1e-4, atol=1e-4)


def test_unsupported_input_is_a_clear_error():
    with pytest.raises(MlsysError, match="kernels"):
        build_model(tiny("llama2-7b"), "float32", "cpu", kernels="cuda")
    with pytest.raises(MlsysError, match="triton"):
        build_model(tiny("llama2-7b"), "float32", "cpu", quant_bits=4)


@pytest.mark.parametrize("bits,rows", [(4, 1), (4, 20), (8, 1), (8, 20)])
def test_quantized_linear_equals_its_dequantized_weight(bits, rows):
    """QuantLinear (the bench's `--dtype int4|int8` layers) through the project's weight-only kernels
    (Triton's interpreter on a CPU) against x @ W_deq.T in torch, W_deq rebuilt by the reference
    quantizer from the same weight (int4: group 128, scales per group; int8: one scale per row). On a GPU
    the decode path proper: bf16 activations and weights through the compiled kernels (bf16 tolerance)."""
    from mlsyscalc.bench._torch_layers import QuantLinear
    from mlsyscalc.kernels.quant import dequantize_ref, quantize_ref

    gpu = torch.cuda.is_available()
    device, dtype, tol = ("cuda", torch.bfloat16, 2e-2) if gpu else ("cpu", torch.float32, 1e-4)
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 48, bias=True).to(device, dtype)
    x = torch.randn(rows, 256, device=device, dtype=dtype)
    layer = QuantLinear(linear, bits)
    mode, group = ("int4", 128) if bits == 4 else ("int8", None)
    q, scale = quantize_ref(linear.weight.detach(), mode, group, scale_dtype=dtype)  # as QuantLinear quantizes
    want = x.float() @ dequantize_ref(q, scale, mode, group).float().T + linear.bias.detach().float()
    torch.testing.assert_close(layer(x).float(), want, rtol=tol, atol=tol)
    assert layer.q.numel() * layer.q.element_size() == 256 * 48 * bits // 8  # packed bytes: bits per weight


@pytest.mark.parametrize("grad", [False, True])
def test_moe_layer_equals_the_routing_written_out(grad):
    """The bench's MoE layer (grouped GEMMs without autograd, one expert at a time with it on the CPU)
    against y_t = sum over its top-k experts e of w_te * down_e(silu(gate_e x_t) * up_e x_t) + shared(x_t),
    the weights w renormalised over the k picked; 4 experts, top 2, 5 tokens (some experts get none)."""
    from types import SimpleNamespace

    from mlsyscalc.bench._torch_layers import MoE

    spec = SimpleNamespace(hidden_size=16, activation="silu", moe=SimpleNamespace(
        experts_per_token=2, num_experts=4, expert_intermediate_size=8, num_shared_experts=1,
        shared_intermediate_size=12))
    torch.manual_seed(0)
    layer = MoE(spec)
    x = torch.randn(1, 5, 16)
    with torch.set_grad_enabled(grad):
        got = layer(x)[0]
    ex, silu = layer.experts, torch.nn.functional.silu
    probs = (x[0] @ layer.router.weight.T).softmax(-1)
    want = torch.zeros(5, 16)
    for t in range(5):
        top = probs[t].topk(2)
        for w, e in zip(top.values / top.values.sum(), top.indices.tolist()):
            h = silu(x[0, t] @ ex.gate_proj[e].T) * (x[0, t] @ ex.up_proj[e].T)
            want[t] += w * (h @ ex.down_proj[e].T)
    sh = layer.shared
    want += sh.down_proj(silu(sh.gate_proj(x[0])) * sh.up_proj(x[0]))
    torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-5, atol=1e-5)
    if grad:  # the loop path's gradients reach the stacked weights
        got.sum().backward()
        assert ex.gate_proj.grad is not None and ex.gate_proj.grad.abs().sum() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's grouped GEMM runs on CUDA (bf16, Hopper)")
def test_moe_grouped_gemm_on_the_gpu_matches_the_loop_and_is_captured():
    """bf16 on the GPU (grouped GEMMs, forward and backward) against the same weights in fp32 on the CPU
    (one expert at a time), 8 experts, top 2, 6 tokens so that some experts get none; then the forward
    captured in a CUDA graph and replayed equals the eager forward."""
    import copy
    from types import SimpleNamespace

    from mlsyscalc.bench._torch_layers import MoE

    spec = SimpleNamespace(hidden_size=64, activation="silu", moe=SimpleNamespace(
        experts_per_token=2, num_experts=8, expert_intermediate_size=32, num_shared_experts=0,
        shared_intermediate_size=0))
    torch.manual_seed(0)
    ref = MoE(spec)
    gpu = copy.deepcopy(ref).to("cuda", torch.bfloat16)
    x = torch.randn(1, 6, 64)
    want = ref(x)
    got = gpu(x.to("cuda", torch.bfloat16))
    torch.testing.assert_close(got.float().cpu(), want.detach(), rtol=3e-2, atol=3e-2)
    want.sum().backward()
    got.float().sum().backward()
    for name in ("gate_proj", "up_proj", "down_proj"):
        torch.testing.assert_close(getattr(gpu.experts, name).grad.float().cpu(), getattr(ref.experts, name).grad,
                                   rtol=5e-2, atol=5e-2)
    static = x.to("cuda", torch.bfloat16)
    with torch.no_grad():
        eager = gpu(static)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            gpu(static)  # warm-up off the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = gpu(static)
        graph.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(out, eager)
