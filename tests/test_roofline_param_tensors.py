"""calc.roofline.torch_kernels.param_tensors: the parameter tensors fused AdamW, zero_grad and the gradient
accumulation launch over, against hand counts and the plain-torch module `mlsys bench model` builds."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.torch_kernels import param_tensors, step_param_tensors
from mlsyscalc.specs.lookup import builtin_configs, load_model

GPT2 = {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 97, "n_positions": 64}
DEEPSEEK = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
            "intermediate_size": 96, "vocab_size": 97, "max_position_embeddings": 64, "first_k_dense_replace": 1,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "q_lora_rank": 24,
            "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


def test_tied_lm_head_has_no_tensor_of_its_own():
    """gpt2, 2 layers: wte, wpe; per layer ln_1 (w, b), q/k/v/o (w, b each), ln_2 (w, b), fc (w, b),
    proj (w, b) = 16; ln_f (w, b); the lm_head is wte: 2 + 2 x 16 + 2 = 36."""
    spec = load_model("gpt2", GPT2)
    assert param_tensors(spec, None)[0] == 2 + 2
    assert param_tensors(spec, 0)[0] == 16
    assert step_param_tensors(spec) == 36


def test_mla_latent_norms_are_counted():
    """DeepSeek-V3 shape, 3 layers (1 dense, 2 MoE with 4 routed experts + 1 shared): embedding,
    final norm, lm_head (untied) = 3; attention q_a_proj, q_a_layernorm, q_b_proj,
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj = 7, two layer norms = 2; dense MLP 3;
    MoE: router 1 + 3 stacked expert projections (gate, up, down: each one (4, out, in) tensor) + 3
    shared = 7. 3 + (9 + 3) + 2 x (9 + 7) = 47; the latent norms add 24 + 16 parameters a layer."""
    spec = load_model("deepseek-v3", DEEPSEEK)
    assert step_param_tensors(spec) == 47
    dense_params = param_tensors(spec, 0)[1]
    norms = 2 * 64 + 24 + 16
    linears = 64 * 24 + 24 * 4 * 24 + 64 * (16 + 8) + 16 * 4 * 32 + 4 * 16 * 64 + 3 * 64 * 96
    assert dense_params == norms + linears


def _tiny(name: str):
    """The same 2-3 layer, 64-wide versions as tests/test_bench_model_builder.py's, for the families
    param_tensors had wrong (tied heads, MLA) and two plain ones."""
    cfg = builtin_configs()[name]
    kind = cfg["model_type"]
    if kind == "gpt2":
        return load_model(name, GPT2)
    if kind == "deepseek_v3":
        return load_model(name, DEEPSEEK)
    base = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 96, "vocab_size": 97, "max_position_embeddings": 64}
    if kind == "gemma2":
        base["head_dim"] = 16
    return load_model(name, base)


@pytest.mark.parametrize("name", ["gpt2", "deepseek-v3", "gemma2-9b", "qwen2.5-0.5b", "llama2-7b", "qwen2.5-7b"])
def test_equals_the_built_torch_module(name):
    torch = pytest.importorskip("torch")  # noqa: F841
    from mlsyscalc.bench.torch_models import build_model

    spec = _tiny(name)
    model = build_model(spec, "float32", "cpu")
    assert step_param_tensors(spec) == len(list(model.parameters()))
