"""Normalisation of HF config keys into ModelSpec, family by family."""

from __future__ import annotations

import pytest

from mlsyscalc import MlsysError, load_gpu, load_model
from mlsyscalc.specs.gpu import builtin_gpus
from mlsyscalc.specs.lookup import builtin_configs


def test_aliases_are_unique():
    seen = {}
    for name, cfg in builtin_configs().items():
        for key in (name, *cfg["_aliases"]):
            assert key.lower() not in seen, (key, seen.get(key.lower()))
            seen[key.lower()] = name
        assert cfg["_source"].startswith("https://huggingface.co/")


def test_gqa_and_head_dim():
    l3 = load_model("llama3-8b")
    assert (l3.num_heads, l3.num_kv_heads, l3.head_dim, l3.kv_dim) == (32, 8, 128, 1024)
    g2 = load_model("gemma2-9b")  # head_dim 256 with 16 heads: q width 4096 != hidden 3584
    assert g2.head_dim == 256 and g2.q_dim == 4096 and g2.hidden_size == 3584
    assert g2.sliding_window == 4096 and g2.sliding_window_layers == 21
    assert load_model("mistral-7b").sliding_window == 4096


def test_biases_and_tied_embeddings():
    qwen = load_model("qwen2.5-7b")
    assert qwen.qkv_bias and not qwen.o_bias and not qwen.tie_word_embeddings
    assert load_model("qwen2.5-0.5b").tie_word_embeddings
    phi = load_model("phi-2")
    assert phi.qkv_bias and phi.o_bias and phi.lm_head_bias and phi.parallel_attention
    assert phi.rotary_fraction == pytest.approx(0.4)
    assert load_model("pythia-1.4b").rotary_fraction == pytest.approx(0.25)


def test_falcon_architectures():
    f7 = load_model("falcon-7b")  # multi-query, one LayerNorm feeding attention and MLP
    assert (f7.num_kv_heads, f7.norms_per_layer, f7.parallel_attention) == (1, 1, True)
    f40 = load_model("falcon-40b")  # new decoder architecture: 8 KV groups, ln_attn + ln_mlp
    assert (f40.num_kv_heads, f40.norms_per_layer) == (8, 2)


def test_opt_projection_and_positions():
    opt = load_model("opt-350m")
    assert opt.embed_proj_dim == 512 and opt.embed_dim == 512
    assert opt.learned_positions == 2048 + 2
    assert not opt.final_norm  # post-norm OPT drops the final LayerNorm
    assert load_model("opt-6.7b").embed_proj_dim is None


def test_moe_and_mla():
    ds = load_model("deepseek-v3")
    assert ds.mla.kv_lora_rank == 512 and ds.mla.q_lora_rank == 1536
    assert ds.head_dim == 192 and ds.v_head_dim == 128
    assert ds.num_moe_layers == 58 and ds.moe.first_dense_layers == 3
    assert ds.moe.num_shared_experts == 1
    # 576 cached elements per token per layer: 61 layers x 576 x 2 bytes = 70,272 bytes in bf16.
    assert ds.kv_cache_elements_per_token * ds.num_layers * 2 == 70_272
    mx = load_model("mixtral-8x7b")
    assert (mx.moe.num_experts, mx.moe.experts_per_token, mx.num_moe_layers) == (8, 2, 32)


def test_overrides_do_not_mutate_builtins():
    before = load_model("llama2-7b")
    load_model("llama2-7b", {"num_hidden_layers": 2})
    assert load_model("llama2-7b") == before
    assert builtin_configs()["llama2-7b"]["num_hidden_layers"] == 32


def test_gpu_lookup():
    assert load_gpu("H100").sm_count == 132
    assert load_gpu("h200").memory_bandwidth_Bps == pytest.approx(4.8e12, rel=0.01)
    with pytest.raises(MlsysError, match="did you mean"):
        load_gpu("h10")
    for spec in builtin_gpus().values():
        assert spec.source, spec.name
        assert spec.memory_bytes > 0 and spec.memory_bandwidth_Bps > 0
        assert spec.peak_flops("bf16") > spec.peak_flops_by_dtype["fp32"]


def test_gpu_missing_dtype_is_an_error():
    with pytest.raises(MlsysError, match="unknown compute dtype"):
        load_gpu("h100").peak_flops("fp4x")


def test_capacity_is_what_the_driver_reports():
    # nvidia-smi on the project's H100 80GB HBM3 machine: 81,559 MiB (more than 80e9 bytes).
    assert load_gpu("h100").memory_bytes == 81_559 * 2**20
    assert load_gpu("MI300X").memory_bytes == 192 * 10**9  # no driver figure recorded: datasheet GB
