"""The cases scripts/validate/ground_truth_hf.py measures beyond the built-ins themselves (docs/ground_truth.md).

Each is data: a built-in with `--set`-style overrides, a family's transformers config-class defaults,
or a small copy of a built-in whose MoE routing has to run on real weights.
"""

# Forward passes on the meta device: model -> (batch, seq).
DENSE_FLOPS = {
    "llama2-7b": (1, 2048), "gpt2": (2, 128), "pythia-1.4b": (1, 512), "opt-6.7b": (1, 256),
    "falcon-7b": (1, 256), "phi-2": (1, 256), "phi3-mini": (1, 256), "gemma2-9b": (1, 256),
    "qwen2.5-7b": (1, 256), "llama3-8b": (2, 128), "opt-350m": (1, 128), "falcon-40b": (1, 128),
    # added with the 2025-26 families
    "llama3.1-8b": (1, 256), "qwen3-8b": (1, 256), "qwen3-0.6b": (2, 128), "gemma3-27b": (1, 256),
    "minitron-4b": (1, 256), "mistral-small-3.1-24b": (1, 128), "qwen2.5-72b": (1, 64),
    # Llama 4's experts run every token through every expert (dense bmm): countable on meta
    "llama4-scout": (1, 128), "llama4-maverick": (1, 64),
}
# One new token after a prefill of `context` into a DynamicCache: model -> context. Past a window
# or chunk, transformers' cache holds its last W - 1 (C - 1) tokens on those layers.
DECODE = {"llama2-7b": 100, "gemma3-27b": 1100, "mistral-7b": 4200, "llama4-scout": 8300}
TRAIN = {"gpt2": (2, 128), "llama3-8b": (1, 128)}  # forward + backward of the logits' sum

# Built-ins with overrides (other sizes of the same families, keys a user would --set): parameters
# on the meta device. key -> (built-in, overrides).
VARIANTS = {
    "llama3.1-8b-4layers-gqa4": ("llama3.1-8b", {"num_hidden_layers": 4, "num_key_value_heads": 4}),
    "qwen3-8b-tied-bias": ("qwen3-8b", {"tie_word_embeddings": True, "attention_bias": True}),
    "qwen3-8b-window": ("qwen3-8b", {"use_sliding_window": True, "sliding_window": 512, "max_window_layers": 30}),
    "gemma3-27b-12layers-pattern3": ("gemma3-27b", {"num_hidden_layers": 12, "sliding_window_pattern": 3}),
    "minitron-4b-mha-bias": ("minitron-4b", {"num_key_value_heads": 24, "attention_bias": True, "mlp_bias": True}),
    "mistral-small-3.1-24b-20layers": ("mistral-small-3.1-24b", {"num_hidden_layers": 20}),
    # DeepSeek-V2-Lite's shape (its model card): no query compression, 27 layers, 64 experts of 1408
    "deepseek-v2-lite-shape": ("deepseek-v2", {
        "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
        "q_lora_rank": None, "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
        "num_experts_per_tok": 6}),
    "qwen3-30b-a3b-sparse-step2": ("qwen3-30b-a3b", {"decoder_sparse_step": 2, "mlp_only_layers": [1]}),
    "qwen3-235b-a22b-top4": ("qwen3-235b-a22b", {"num_experts_per_tok": 4, "num_hidden_layers": 12}),
    "gpt-oss-20b-8layers": ("gpt-oss-20b", {"num_hidden_layers": 8, "layer_types": ["sliding_attention", "full_attention"] * 4,
                                            "num_local_experts": 8, "num_experts_per_tok": 2}),
    "gpt-oss-120b-all-full": ("gpt-oss-120b", {"layer_types": ["full_attention"] * 36}),
    "llama4-scout-interleave2": ("llama4-scout", {"interleave_moe_layer_step": 2, "num_hidden_layers": 8,
                                                  "use_qk_norm": False}),
    "llama4-maverick-no-chunk": ("llama4-maverick", {"attention_chunk_size": None, "num_hidden_layers": 8}),
    "mixtral-8x22b-top1": ("mixtral-8x22b", {"num_experts_per_tok": 1}),
}

# Families without a built-in (no public config.json was found to store as-is): the config each
# family's transformers class builds by default, saved as transformers saves it (to_dict); the
# documented checkpoint shape of that class. model_type -> overrides (only where the class has no
# usable default).
FAMILY_DEFAULTS = {
    "olmo2": {}, "granite": {}, "phimoe": {}, "glm4_moe": {"head_dim": 128}, "ministral": {"head_dim": 128},
    "ministral3": {}, "gemma3_text": {}, "llama4_text": {}, "deepseek_v2": {"num_experts_per_tok": 6},
    "nemotron": {"num_key_value_heads": 8}, "qwen3_moe": {}, "gpt_oss": {},
}

# Forward FLOPs of the dense family defaults on meta: model_type -> (batch, seq).
FAMILY_FLOPS = {"olmo2": (1, 128), "granite": (1, 128), "ministral": (1, 128), "ministral3": (1, 128),
                "nemotron": (1, 128), "gemma3_text": (1, 128)}

# MoE routing is data dependent: shrunk copies with real random weights run on the CPU.
# key -> (built-in or "family:<model_type>", (batch, seq), overrides, decode context or None)
_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
SHRUNK_MOE = {
    "mixtral-8x7b-shrunk": ("mixtral-8x7b", (2, 16), {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}, None),
    "deepseek-v3-shrunk": ("deepseek-v3", (2, 16), {
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 512}, None),
    "deepseek-v2-shrunk": ("deepseek-v2", (2, 16), {
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": None, "kv_lora_rank": 16,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 512,
        "n_group": 8, "topk_group": 3}, None),
    "qwen3-30b-a3b-shrunk": ("qwen3-30b-a3b", (2, 16), {
        **_TINY, "head_dim": 16, "moe_intermediate_size": 32, "num_hidden_layers": 3, "vocab_size": 512,
        "decoder_sparse_step": 1, "mlp_only_layers": [0]}, None),
    # gpt-oss: 4 layers (window, full, window, full) of a 12-token window, sinks and biases; the decode
    # after 20 tokens passes the window
    "gpt-oss-20b-shrunk": ("gpt-oss-20b", (2, 16), {
        **_TINY, "head_dim": 16, "num_hidden_layers": 4, "vocab_size": 512, "pad_token_id": 0, "sliding_window": 12,
        "layer_types": ["sliding_attention", "full_attention"] * 2}, 20),
    "phimoe-shrunk": ("family:phimoe", (2, 16), {**_TINY, "num_hidden_layers": 2, "vocab_size": 512}, None),
    "glm4_moe-shrunk": ("family:glm4_moe", (2, 16), {
        **_TINY, "head_dim": 16, "moe_intermediate_size": 32, "num_hidden_layers": 3, "vocab_size": 512,
        "use_qk_norm": True, "first_k_dense_replace": 1}, None),
}
