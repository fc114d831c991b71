"""Ground truth for mlsyscalc's parameter and FLOP counters, measured with Hugging Face transformers.

Builds every built-in model in model_specs/models with transformers (on the meta device: no weights
are allocated) and records

  tests/data/hf_params.json  total / embedding / lm_head / active (MoE) parameters and per-category sums
  tests/data/hf_flops.json   forward FLOPs counted by torch.utils.flop_counter.FlopCounterMode

Needs torch and transformers (not run in CI). Regenerate with
    python scripts/ground_truth_hf.py
See docs/ground_truth.md for what each number means.
"""
import copy
import json
import pathlib
import re

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = ROOT / "model_specs" / "models"
DATA = ROOT / "tests" / "data"

# Parameter (and module) name -> category; the first pattern that matches wins.
CATEGORIES = (
    ("lm_head", r"^(lm_head|embed_out)\."),
    ("embedding_projection", r"\.(project_in|project_out)\."),  # OPT-350m: 512 <-> 1024
    ("embeddings", r"\.(embed_tokens|embed_in|wte|wpe|embed_positions|word_embeddings)\."),
    ("norms", r"(norm|\.ln_)"),  # LayerNorm / RMSNorm, incl. MLA's q_a_layernorm, kv_a_layernorm
    ("attention", r"\.(self_attn|attn|attention|self_attention)\."),
    ("mlp", r"\.(mlp|fc1|fc2)\."),  # dense MLP, MoE router, routed and shared experts
)
POSITION_EMBEDDINGS = r"\.(wpe|embed_positions)\."  # learned absolute position embeddings

# Forward passes on the meta device: model -> (batch, seq).
DENSE_FLOPS = {
    "llama2-7b": (1, 2048), "gpt2": (2, 128), "pythia-1.4b": (1, 512), "opt-6.7b": (1, 256),
    "falcon-7b": (1, 256), "phi-2": (1, 256), "phi3-mini": (1, 256), "gemma2-9b": (1, 256),
    "qwen2.5-7b": (1, 256), "llama3-8b": (2, 128), "opt-350m": (1, 128), "falcon-40b": (1, 128),
}
DECODE = ("llama2-7b", 100)
TRAIN = {"gpt2": (2, 128), "llama3-8b": (1, 128)}  # forward + backward of the logits' sum  # prefill this many tokens into a cache, then count one new token

# MoE routing is data dependent: shrunk copies with real random weights run on the CPU.
SHRUNK_MOE = {
    "mixtral-8x7b": ((2, 16), {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}),
    "deepseek-v3": ((2, 16), {
        "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
        "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 512}),
}


def load_config(name):
    """The built-in's HF config as a dict, without the keys starting with '_'."""
    raw = json.loads((MODELS / f"{name}.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def build(cfg, device="meta"):
    """Eager attention (scores and p@v as plain matmuls) and eager experts (a loop of F.linear over the
    experts hit; the default grouped_mm kernel is invisible to FlopCounterMode)."""
    kwargs = copy.deepcopy({k: v for k, v in cfg.items() if k != "model_type"})  # HF edits nested dicts
    config = transformers.AutoConfig.for_model(cfg["model_type"], **kwargs)
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", experts_implementation="eager")


def category(name):
    for cat, pattern in CATEGORIES:
        if re.search(pattern, name):
            return cat
    raise ValueError(f"no category for {name!r}")


def count_params(model, cfg):
    """Counts over named_parameters(), which lists a tied weight once (under its first name)."""
    named = dict(model.named_parameters())
    by_cat = {cat: 0 for cat, _ in CATEGORIES}
    for name, p in named.items():
        by_cat[category(name)] += p.numel()
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(by_cat.values())
    token = model.get_input_embeddings().weight.numel()
    position = sum(p.numel() for n, p in named.items() if re.search(POSITION_EMBEDDINGS, n))
    rec = {"total_params": total, "embedding_params": token + position,
           "token_embedding_params": token, "position_embedding_params": position,
           "lm_head_params": by_cat["lm_head"], "tied_embeddings": by_cat["lm_head"] == 0,
           "by_category": by_cat}
    rec.update(moe_active(model, cfg, total))
    return rec


def moe_active(model, cfg, total):
    """Active params per token: each MoE layer's routed experts count k/E of their parameters."""
    n_experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    if not n_experts:
        return {"active_params": total}
    top_k = cfg["num_experts_per_tok"]
    routed, inactive, layers = 0, 0, 0
    for name, module in model.named_modules():
        if name.endswith(".experts"):  # fused routed experts (E, ...); not shared_experts
            n = sum(p.numel() for p in module.parameters())
            assert all(p.shape[0] == n_experts for p in module.parameters()), name
            assert n * (n_experts - top_k) % n_experts == 0
            routed, inactive, layers = routed + n, inactive + n * (n_experts - top_k) // n_experts, layers + 1
    return {"active_params": total - inactive, "routed_expert_params": routed, "moe_layers": layers,
            "num_experts": n_experts, "experts_per_token": top_k}


def flop_breakdown(model, counter):
    """Split FlopCounterMode's per-module counts: modules that own weights (nn.Linear, Conv1D, the fused
    experts, the router) by category; the rest is attention core (the eager q@k^T and p@v matmuls run in
    the attention module itself)."""
    counts = counter.get_flop_counts()
    prefix = type(model).__name__ + "."
    leaves = {n for n, m in model.named_modules() if n and any(True for _ in m.parameters(recurse=False))}
    parts = {"attention_projections": 0, "attention_core": 0, "mlp": 0, "lm_head": 0,
             "embedding_projection": 0}
    for key, ops in counts.items():
        name = key[len(prefix):] if key.startswith(prefix) else None
        if name in leaves:
            cat = category(name + ".")
            parts["attention_projections" if cat == "attention" else cat] += sum(ops.values())
    total = counter.get_total_flops()
    parts["attention_core"] = total - sum(parts.values())
    assert parts["attention_core"] == counts["Global"].get(torch.ops.aten.bmm, 0), parts
    return parts


def count_flops(model, input_ids, **kwargs):
    with FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids, **kwargs)
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    rec = {"forward_flops": counter.get_total_flops(), "by_op": by_op,
           "breakdown": flop_breakdown(model, counter)}
    return rec


def dense_flops(name, batch, seq):
    model = build(load_config(name))
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    rec = count_flops(model, ids)
    return {"model": name, "batch": batch, "seq": seq, "phase": "prefill", "device": "meta", **rec}


def decode_flops(name, context):
    """One new token per sequence (batch 1) after a prefill of `context` tokens into a DynamicCache."""
    model = build(load_config(name))
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, context, dtype=torch.long, device="meta"), use_cache=True)
        cache = out.cache  # transformers 5 name (was past_key_values)
        assert cache.get_seq_length() == context
        rec = count_flops(model, torch.zeros(1, 1, dtype=torch.long, device="meta"), cache=cache,
                          use_cache=True)
    return {"batch": 1, "seq": 1, "phase": "decode", "context": context,
            "attended_kv_len": cache.get_seq_length(), "device": "meta", **rec}


def train_flops(name, batch, seq):
    """Forward and backward FLOPs of one step (backward of the logits' sum: the loss adds no matmul)."""
    model = build(load_config(name))
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        logits = model(input_ids=ids).logits
        forward = counter.get_total_flops()
        logits.float().sum().backward()
    return {"model": name, "batch": batch, "seq": seq, "phase": "train", "device": "meta",
            "forward_flops": forward, "backward_flops": counter.get_total_flops() - forward}


def shrunk_moe_flops(name, shape, overrides):
    cfg = {**load_config(name), **overrides}
    cfg.pop("quantization_config", None)  # DeepSeek-V3's FP8 block quantisation: not for CPU weights
    torch.manual_seed(0)
    model = build(cfg, device="cpu").eval()
    ids = torch.randint(0, cfg["vocab_size"], shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rec = count_flops(model, ids)
    params = count_params(model, cfg)
    return {"batch": shape[0], "seq": shape[1], "phase": "prefill", "device": "cpu", "shrunk": True,
            "config": cfg, "total_params": params["total_params"],
            "active_params": params["active_params"], **rec}


def write(path, models):
    doc = {"models": models,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "generated_by": "scripts/ground_truth_hf.py"}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", path.relative_to(ROOT))


def main():
    params = {}
    for path in sorted(MODELS.glob("*.json")):
        cfg = load_config(path.stem)
        params[path.stem] = count_params(build(cfg), cfg)
        print(f"{path.stem:16s} {params[path.stem]['total_params']:>18,d}")
    write(DATA / "hf_params.json", params)

    flops = {}
    for name, (batch, seq) in DENSE_FLOPS.items():
        flops[name] = dense_flops(name, batch, seq)
        print(f"{name:16s} {batch}x{seq:<5d} {flops[name]['forward_flops']:>22,d}")
    name, context = DECODE
    flops[f"{name}-decode"] = {"model": name, **decode_flops(name, context)}
    for name, (batch, seq) in TRAIN.items():
        flops[f"{name}-train"] = train_flops(name, batch, seq)
    for name, (shape, overrides) in SHRUNK_MOE.items():
        flops[f"{name}-shrunk"] = {"model": name, **shrunk_moe_flops(name, shape, overrides)}
    write(DATA / "hf_flops.json", flops)


if __name__ == "__main__":
    main()
