"""Ground truth for mlsyscalc's parameter, FLOP and KV-cache counters, measured with Hugging Face transformers.

Builds every built-in model in model_specs/models with transformers (on the meta device: no weights
are allocated), the variants and family defaults of scripts/validate/ground_truth_cases.py, and records

  tests/data/hf_params.json  total / embedding / lm_head / active (MoE) parameters and per-category sums
  tests/data/hf_flops.json   forward FLOPs counted by torch.utils.flop_counter.FlopCounterMode
  tests/data/hf_kv.json      the DynamicCache a prefill leaves: tokens and bytes per layer

Needs torch and transformers (not run in CI). Regenerate with
    python scripts/validate/ground_truth_hf.py
See docs/ground_truth.md for what each number means.
"""
import copy
import json
import pathlib
import re
import sys

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent), str(pathlib.Path(__file__).resolve().parents[1])]  # validate/, scripts/
from ground_truth_cases import (DECODE, DENSE_FLOPS, FAMILY_DEFAULTS, FAMILY_FLOPS, SHRUNK_MOE,  # noqa: E402
                                TRAIN, VARIANTS)

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "model_specs" / "models"
DATA = ROOT / "tests" / "data"
TEXT_MODELS = ("gemma3", "llama4", "mistral3")  # vision-language configs: the language model is counted

# Parameter (and module) name -> category; the first pattern that matches wins.
CATEGORIES = (
    ("lm_head", r"^(lm_head|embed_out)\."),
    ("embedding_projection", r"\.(project_in|project_out)\."),  # OPT-350m: 512 <-> 1024
    ("embeddings", r"\.(embed_tokens|embed_in|wte|wpe|embed_positions|word_embeddings)\."),
    ("norms", r"(norm|\.ln_)"),  # LayerNorm / RMSNorm, incl. MLA's latent norms and q/k norms
    ("attention", r"\.(self_attn|attn|attention|self_attention)\."),  # incl. gpt-oss's sinks
    ("mlp", r"\.(mlp|fc1|fc2|feed_forward)\."),  # dense MLP, MoE router, routed and shared experts
)
POSITION_EMBEDDINGS = r"\.(wpe|embed_positions)\."  # learned absolute position embeddings
EXPERT_COUNT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


def load_config(name):
    """The built-in's HF config as a dict, without the keys starting with '_'."""
    raw = json.loads((MODELS / f"{name}.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def with_overrides(cfg, overrides):
    """The overrides as `--set` applies them: into text_config for a vision-language config."""
    if cfg["model_type"] in TEXT_MODELS:
        return {**cfg, "text_config": {**cfg["text_config"], **overrides}}
    return {**cfg, **overrides}


def hf_config(cfg):
    kwargs = copy.deepcopy({k: v for k, v in cfg.items() if k != "model_type"})  # HF edits nested dicts
    config = transformers.AutoConfig.for_model(cfg["model_type"], **kwargs)
    return config.text_config if cfg["model_type"] in TEXT_MODELS else config


def text_dict(cfg):
    """The language model's keys (what the expert counts and top-k are read from)."""
    return cfg["text_config"] if cfg["model_type"] in TEXT_MODELS else cfg


def build(cfg, device="meta", experts="eager", dtype=None):
    """Eager attention (scores and p@v as plain matmuls) and eager experts (a loop over the experts
    hit; the default grouped_mm kernel is invisible to FlopCounterMode); a vision-language config
    builds its language model alone."""
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(
            hf_config(cfg), attn_implementation="eager", experts_implementation=experts,
            **({"dtype": dtype} if dtype else {}))


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
    rec.update(moe_active(model, text_dict(cfg), total))
    return rec


def moe_active(model, cfg, total):
    """Active params per token: each MoE layer's routed experts count k/E of their parameters."""
    n_experts = next((cfg[k] for k in EXPERT_COUNT_KEYS if cfg.get(k)), None)
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
    """Split FlopCounterMode's per-module counts: modules that own weights and have no children with
    weights (nn.Linear, Conv1D, the fused experts, the router) by category; the rest is attention core
    (the eager q@k^T and p@v matmuls, which run in the attention module itself)."""
    counts = counter.get_flop_counts()
    prefix = type(model).__name__ + "."
    leaves = {n for n, m in model.named_modules()
              if n and any(True for _ in m.parameters(recurse=False))
              and not any(any(True for _ in c.parameters()) for c in m.children())}
    parts = {"attention_projections": 0, "attention_core": 0, "mlp": 0, "lm_head": 0,
             "embedding_projection": 0}
    leaf_bmm = 0
    for key, ops in counts.items():
        name = key[len(prefix):] if key.startswith(prefix) else None
        if name in leaves:
            cat = category(name + ".")
            parts["attention_projections" if cat == "attention" else cat] += sum(ops.values())
            leaf_bmm += ops.get(torch.ops.aten.bmm, 0)
    total = counter.get_total_flops()
    parts["attention_core"] = total - sum(parts.values())
    assert parts["attention_core"] == counts["Global"].get(torch.ops.aten.bmm, 0) - leaf_bmm, parts
    return parts


def count_flops(model, input_ids, **kwargs):
    with FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids, **kwargs)
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    return {"forward_flops": counter.get_total_flops(), "by_op": by_op, "breakdown": flop_breakdown(model, counter)}


def dense_flops(name, batch, seq, cfg=None):
    """A prefill on meta of a built-in (or of `cfg`, recorded beside the count)."""
    model = build(cfg or load_config(name))
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    rec = {"model": name, "batch": batch, "seq": seq, "phase": "prefill", "device": "meta", **count_flops(model, ids)}
    return {**rec, "config": cfg} if cfg else rec


def decode_flops(model, context, device="meta"):
    """One new token per sequence (batch 1) after a prefill of `context` tokens into a DynamicCache."""
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, context, dtype=torch.long, device=device), use_cache=True)
        cache = out.cache  # transformers 5 name (was past_key_values)
        assert cache.get_seq_length() == context
        held = [layer.keys.shape[-2] for layer in cache.layers]
        rec = count_flops(model, torch.zeros(1, 1, dtype=torch.long, device=device), cache=cache, use_cache=True)
    return {"batch": 1, "seq": 1, "phase": "decode", "context": context,
            "attended_kv_len": cache.get_seq_length(), "cached_tokens_per_layer": held, "device": device, **rec}


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


def family_config(model_type, overrides):
    """The family's transformers config-class defaults, as transformers saves them (to_dict)."""
    cfg = transformers.AutoConfig.for_model(model_type, **copy.deepcopy(overrides)).to_dict()
    drop = [k for k in cfg if k.startswith("_") or k in ("transformers_version",)]
    for k in drop:
        cfg.pop(k)
    return json.loads(json.dumps(cfg))


def shrunk_moe_flops(base, shape, overrides, context):
    cfg = family_config(base.split(":", 1)[1], {}) if base.startswith("family:") else load_config(base)
    cfg = with_overrides(cfg, overrides)
    cfg.pop("quantization_config", None)  # FP8 / MXFP4 checkpoints: not for CPU weights
    torch.manual_seed(0)
    model = build(cfg, device="cpu").eval()
    vocab = text_dict(cfg)["vocab_size"]
    ids = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        rec = count_flops(model, ids)
    params = count_params(model, cfg)
    out = {"model": base, "batch": shape[0], "seq": shape[1], "phase": "prefill", "device": "cpu", "shrunk": True,
           "config": cfg, "total_params": params["total_params"], "active_params": params["active_params"], **rec}
    decode = {**decode_flops(model, context, "cpu"), "config": cfg, "shrunk": True} if context else None
    return out, decode


def kv_cache(cfg, context):
    """Tokens and bytes per layer of the DynamicCache a bf16 prefill of `context` tokens leaves (meta
    device; MoE experts through grouped_mm, or batched_mm where its rows are not 16-byte aligned:
    both run on meta, where the eager experts' data-dependent loop cannot)."""
    moe = any(text_dict(cfg).get(k) for k in EXPERT_COUNT_KEYS) and cfg["model_type"] not in ("llama4", "llama4_text")
    ids = torch.zeros(1, context, dtype=torch.long, device="meta")
    for experts in ("grouped_mm", "batched_mm") if moe else ("eager",):  # grouped_mm wants 16-byte rows
        model = build(cfg, experts=experts, dtype=torch.bfloat16)
        try:
            with torch.no_grad():
                cache = model(input_ids=ids, use_cache=True).cache
            break
        except RuntimeError:
            if experts == "batched_mm":
                raise
    tokens = [layer.keys.shape[-2] for layer in cache.layers]
    nbytes = [layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
              for layer in cache.layers]
    return {"context": context, "dtype": "bf16", "tokens_per_layer": tokens, "bytes_per_layer": nbytes,
            "total_bytes": sum(nbytes)}


def mask_sizes(cfg):
    """The windows and chunks in effect (after the config class's own rules, e.g. Qwen2's use_sliding_window)."""
    config = hf_config(cfg)
    return sorted({s for s in (getattr(config, "sliding_window", None), getattr(config, "attention_chunk_size", None))
                   if s})


def write(path, models, **sections):
    doc = {"models": models, **sections,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "generated_by": "scripts/validate/ground_truth_hf.py"}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", path.relative_to(ROOT))


def params_doc():
    params = {}
    for path in sorted(MODELS.glob("*.json")):
        cfg = load_config(path.stem)
        params[path.stem] = count_params(build(cfg), cfg)
        print(f"{path.stem:24s} {params[path.stem]['total_params']:>18,d}")
    variants = {}
    for key, (base, overrides) in VARIANTS.items():
        cfg = with_overrides(load_config(base), overrides)
        variants[key] = {"model": base, "overrides": overrides, **count_params(build(cfg), cfg)}
    families = {}
    for model_type, overrides in FAMILY_DEFAULTS.items():
        cfg = family_config(model_type, overrides)
        families[model_type] = {"config": cfg, **count_params(build(cfg), cfg)}
    return params, variants, families


def main():
    params, variants, families = params_doc()
    write(DATA / "hf_params.json", params, variants=variants, family_defaults=families)

    flops = {}
    for name, (batch, seq) in DENSE_FLOPS.items():
        flops[name] = dense_flops(name, batch, seq)
        print(f"{name:24s} {batch}x{seq:<5d} {flops[name]['forward_flops']:>22,d}")
    for name, context in DECODE.items():
        flops[f"{name}-decode"] = {"model": name, **decode_flops(build(load_config(name)), context)}
    for model_type, (batch, seq) in FAMILY_FLOPS.items():
        cfg = family_config(model_type, FAMILY_DEFAULTS[model_type])
        flops[f"family:{model_type}"] = dense_flops(f"family:{model_type}", batch, seq, cfg)
    for name, (batch, seq) in TRAIN.items():
        flops[f"{name}-train"] = train_flops(name, batch, seq)
    for key, (base, shape, overrides, context) in SHRUNK_MOE.items():
        flops[key], decode = shrunk_moe_flops(base, shape, overrides, context)
        if decode:
            flops[f"{key}-decode"] = {"model": base, **decode}
    write(DATA / "hf_flops.json", flops)

    kv = {}
    for path in sorted(MODELS.glob("*.json")):
        cfg = load_config(path.stem)
        kv[path.stem] = [kv_cache(cfg, n) for n in (16, *[s + 5 for s in mask_sizes(cfg)])]
    families = {}
    for model_type, overrides in FAMILY_DEFAULTS.items():
        cfg = family_config(model_type, overrides)
        families[model_type] = {"config": cfg, "cases": [kv_cache(cfg, n) for n in (16, *[s + 5 for s in mask_sizes(cfg)])]}
    write(DATA / "hf_kv.json", kv, family_defaults=families)


if __name__ == "__main__":
    main()
