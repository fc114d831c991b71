"""Normalisation of the 2025-26 families: the shape keys each honours, what it refuses, and lookup."""

from __future__ import annotations

import pytest

from mlsyscalc import MlsysError, count_params, load_model
from mlsyscalc.specs.hf import REFUSED, from_hf_config


def test_gemma3_text_part_window_pattern_and_qk_norm():
    g = load_model("gemma3-27b")  # text_config of google/gemma-3-27b-it
    assert (g.model_type, g.num_layers, g.head_dim, g.vocab_size) == ("gemma3", 62, 128, 262_208)
    assert g.sliding_window == 1024 and g.sliding_window_layers == 52  # five of every six layers
    assert [g.layer_type(i) for i in (4, 5, 11)] == ["sliding_attention", "full_attention", "full_attention"]
    assert (g.qk_norm, g.qk_norm_type, g.norms_per_layer, g.tie_word_embeddings) == (True, "rmsnorm", 4, True)
    bidirectional = load_model("gemma3-27b", {"use_bidirectional_attention": True})
    assert bidirectional.sliding_window == 513  # Gemma3TextConfig: W // 2 + 1


def test_llama4_chunked_nope_and_interleaved_moe():
    scout, maverick = load_model("llama4-scout"), load_model("llama4-maverick")
    assert scout.attention_chunk_size == 8192 and scout.nope_layers == tuple(range(3, 48, 4))
    assert scout.layer_types.count("chunked_attention") == 36  # the RoPE layers
    assert scout.qk_norm_type == "l2" and scout.qk_norm_layers == tuple(i for i in range(48) if (i + 1) % 4)
    assert not maverick.qk_norm  # use_qk_norm false
    assert scout.num_moe_layers == 48 and maverick.num_moe_layers == 24  # interleave_moe_layer_step 2
    assert maverick.intermediate_size == 16384 and maverick.moe.expert_intermediate_size == 8192  # dense vs expert
    assert maverick.moe.num_shared_experts == 1 and maverick.moe.shared_intermediate_size == 8192


def test_gpt_oss_sinks_biases_and_alternating_window():
    g = load_model("gpt-oss-120b")
    assert g.attention_sinks and g.qkv_bias and g.o_bias and g.moe.router_bias and g.moe.expert_bias
    assert (g.sliding_window, g.sliding_window_layers, g.layer_type(0), g.layer_type(1)) == (
        128, 18, "sliding_attention", "full_attention")
    assert (g.moe.num_experts, g.moe.experts_per_token, g.head_dim) == (128, 4, 64)


def test_qwen3_and_qwen3_moe():
    q = load_model("qwen3-8b")
    assert (q.head_dim, q.qk_norm, q.qk_norm_type, q.qkv_bias) == (128, True, "rmsnorm", False)
    m = load_model("qwen3-235b-a22b")  # head_dim 128 with 64 heads over a 4096 hidden
    assert (m.q_dim, m.hidden_size, m.moe.num_experts, m.moe.experts_per_token) == (8192, 4096, 128, 8)
    sparse = load_model("qwen3-30b-a3b", {"decoder_sparse_step": 2, "mlp_only_layers": [1]})
    assert [sparse.layer_is_moe(i) for i in range(4)] == [False, False, False, True]
    assert load_model("qwen3-0.6b").tie_word_embeddings


def test_nemotron_squared_relu_partial_rotary_layernorm():
    n = load_model("minitron-4b")
    assert (n.activation, n.gated_mlp, n.norm, n.norm_bias, n.rotary_fraction) == ("relu2", False, "layernorm", True, 0.5)
    raw = {k: v for k, v in n.raw_config.items() if k != "num_key_value_heads"}
    with pytest.raises(MlsysError, match="^cfg.json: missing key 'num_key_value_heads'"):  # NemotronConfig: none
        from_hf_config(raw, name="x", source="cfg.json")


def test_deepseek_v2_and_its_lite_shape():
    v2 = load_model("deepseek-v2")
    assert (v2.mla.q_lora_rank, v2.moe.num_experts, v2.moe.num_shared_experts, v2.num_moe_layers) == (1536, 160, 2, 59)
    lite = load_model("deepseek-v2", {"q_lora_rank": None})
    assert lite.mla.q_lora_rank is None  # V2-Lite: a plain q_proj
    raw = {k: v for k, v in v2.raw_config.items() if k != "num_experts_per_tok"}
    with pytest.raises(MlsysError, match="missing key 'num_experts_per_tok'"):  # DeepseekV2Config has no default
        from_hf_config(raw, name="x", source="cfg.json")


def test_mistral3_is_its_language_model():
    m = load_model("mistral-small-3.1-24b")
    assert (m.model_type, m.num_layers, m.head_dim, m.sliding_window, m.tie_word_embeddings) == ("mistral3", 40, 128, None, False)
    assert load_model("mistral-small-3.1-24b", {"num_hidden_layers": 4}).num_layers == 4  # --set reaches text_config


@pytest.mark.parametrize("model, top_k, experts", [("mixtral-8x7b", 9, 8), ("deepseek-v3", 300, 256),
                                                    ("gpt-oss-20b", 33, 32), ("qwen3-30b-a3b", 129, 128)])
def test_top_k_above_the_expert_count_is_refused_naming_the_key(run_cli, model, top_k, experts):
    for argv in (["params", model], ["flops", model], ["memory", "infer", model], ["serve", model, "--rate", "1"]):
        code, _, err = run_cli(*argv, "--set", f"num_experts_per_tok={top_k}")
        assert code == 2, argv
        assert err.startswith(f"error: --set num_experts_per_tok: num_experts_per_tok = {top_k} routes each token to "
                              f"more experts than the {experts} there are"), err


@pytest.mark.parametrize("model_type", ["nemotron_h", "jamba", "qwen3_next", "mamba", "falcon_h1"])
def test_hybrid_layers_are_refused_by_name(run_cli, tmp_path, model_type):
    path = tmp_path / "config.json"
    path.write_text(f'{{"model_type": "{model_type}", "hidden_size": 64}}')
    code, _, err = run_cli("params", str(path))
    assert code == 2 and f"model_type {model_type!r} is refused: it has " in err and "attention + MLP only" in err
    assert model_type in REFUSED


def test_unknown_model_type_names_the_file_and_lists_both_tables(run_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "mamba3000"}')
    code, _, err = run_cli("params", str(path))
    assert code == 2 and err.startswith(f"error: {path}: unsupported model_type 'mamba3000' (supported: ")
    assert "qwen3_moe" in err and "refused by name: " in err and "nemotron_h" in err


def test_layer_types_must_list_every_layer():
    with pytest.raises(MlsysError, match=r"^--set num_hidden_layers: layer_types lists 24 layers but num_hidden_layers is 4"):
        load_model("gpt-oss-20b", {"num_hidden_layers": 4})


@pytest.mark.parametrize("ref, name", [
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3-8b"), ("Meta-Llama-3-8B-Instruct", "llama3-8b"),
    ("Llama-2-7b-chat-hf", "llama2-7b"), ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b"),
    ("Qwen3-235B-A22B", "qwen3-235b-a22b"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("google/gemma-3-27b-it", "gemma3-27b"), ("Llama-4-Maverick-17B-128E-Instruct", "llama4-maverick"),
])
def test_instruct_chat_and_base_names_are_aliases_of_one_shape(ref, name):
    assert load_model(ref).name == name


def test_a_miss_suggests_the_names_and_aliases_near_it():
    with pytest.raises(MlsysError, match=r"did you mean: .*llama-3-8b-instruct"):
        load_model("Meta-Llama-3-8B-Instrukt")


@pytest.mark.parametrize("name, total, active, rel", [
    # model cards: gpt-oss (OpenAI, 2025): 116.8B total / 5.1B active, 20.9B / 3.6B, active counting the
    # unembedding but not the embedding; Qwen3 (Qwen, 2025): 235B / 22B, 30.5B / 3.3B; Llama 4 (Meta, 2025):
    # 17B active; DeepSeek-V2 (arXiv:2405.04434): 236B / 21B; Mixtral 8x22B (Mistral AI, 2024): 141B / 39B
    ("gpt-oss-120b", 116.8e9, 5.1e9, 0.01), ("gpt-oss-20b", 20.9e9, 3.6e9, 0.01),
    ("qwen3-235b-a22b", 235e9, 22e9, 0.01), ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),
    ("deepseek-v2", 236e9, 21e9, 0.02), ("mixtral-8x22b", 141e9, 39e9, 0.005),
    ("llama4-scout", None, 17e9, 0.02), ("llama4-maverick", None, 17e9, 0.02),
])
def test_published_sizes(name, total, active, rel):
    got = count_params(load_model(name))
    card_active = got.active - got.embedding if name.startswith("gpt-oss") else got.active
    assert card_active == pytest.approx(active, rel=rel)
    if total:
        assert got.total == pytest.approx(total, rel=rel)
