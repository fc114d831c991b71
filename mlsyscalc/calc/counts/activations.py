"""Activations a decoder layer saves for its backward pass, derived from the per-op shapes of
`calc.counts.layers` (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", arXiv:2205.05198, section 4).

Each op saves the tensors its backward needs; a tensor read by several ops (the norm output
feeding q/k/v) is stored once. For a GPT layer (LayerNorm, MHA, GeLU MLP with 4h, dropout,
no flash) the items below add up to the paper's equation (1): sbh(34 + 5as/h) bytes with
2-byte activations and 1-byte dropout masks. The same rules give gated MLPs (SwiGLU saves
gate, silu(gate), up and their product: 4I), GQA (K and V at kv-head width), MLA (latent
norms and up-projection inputs, K and V materialised per head) and MoE (k routed copies of
each token's input, intermediates and output, per-token router probabilities).

Not counted (below 0.1%): per-token norm statistics (mean/rstd), flash attention's
log-sum-exp, top-k indices, rotary tables; fused norm and rotary kernels (Megatron-LM,
Transformer Engine) save only their input.

FP8 training (`fp8=True`), as Transformer Engine stores it (TE 2.x, transformer_engine/pytorch/module/
linear.py and layernorm_linear.py, the tensors each module's forward saves): an FP8 linear keeps its
input only as the FP8 copy its weight-gradient GEMM reads (1 byte an element: the columnwise copy, or the
rowwise local shard under sequence parallelism, which backward gathers again), so the norm outputs that
feed q/k/v and gate/up, and the down projection's input, are FP8 (kind "fp8"). What other ops save stays
in bf16: norm inputs (the residual stream), Q, K, V and the attention output O (the attention backward
reads O; o_proj keeps its own FP8 copy of it beside, kind "fp8"), the MLP's gate, act(gate) and up. The
router is not an FP8 linear (Megatron-LM runs it outside TE).

Regions decide how parallelism shrinks an item (equations 2-5 of the paper):
  "seq"    replicated across tensor-parallel ranks, split by sequence parallelism
  "tensor" split by tensor parallelism (heads or the MLP's intermediate width)
  "kv"     split by tensor parallelism only as far as the KV heads allow
  "scores" an S x S_kv item per head (dropped by selective recompute and by flash attention)
  "expert" the routed tokens a rank's experts read: its sequence-split tokens gathered over the expert
           tensor-parallel group (x etp / tp; calc.parallel.expert_grid), as Megatron-Core's dispatcher all-gathers
           them after the all-to-all and the experts' fc1 saves that input
"""

from __future__ import annotations

from dataclasses import dataclass

from ...specs.model import ModelSpec
from .layers import attention_linears, mlp_linears

# Which tensor each projection reads (projections reading the same tensor share one copy).
LINEAR_INPUT = {
    "q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in",
    "q_a_proj": "attn_in", "kv_a_proj_with_mqa": "attn_in",
    "q_b_proj": "q_latent", "kv_b_proj": "kv_latent", "o_proj": "attn_out",
    "router": "mlp_in", "gate_proj": "mlp_in", "up_proj": "mlp_in",
}


# Activations whose autograd backward reads the output, not the input (torch: relu's threshold_backward takes
# the result), so the down projection's saved input is the only copy.
OUTPUT_SAVING_ACTIVATIONS = frozenset({"relu"})


@dataclass(frozen=True)
class Saved:
    name: str
    per_token: int  # elements per token ("scores": per token per key, i.e. heads)
    region: str  # "seq", "tensor", "kv" or "scores"
    kind: str = "act"  # which byte assumption applies: "act", "mask" (dropout), "fp32" or "fp8" (FP8 linear input)


def attention_saved(spec: ModelSpec, flash: bool, dropout: bool, fp8: bool = False, layer: int = 0) -> list[Saved]:
    items: dict[str, Saved] = {}
    for lin in attention_linears(spec):
        source = LINEAR_INPUT[lin.name]
        region = "tensor" if source == "attn_out" else "seq"
        if fp8 and source == "attn_out":  # attention keeps O in bf16, o_proj its FP8 copy
            items[source] = Saved("attention output O", lin.in_features, region)
            items["attn_out_fp8"] = Saved(f"{lin.name} input (fp8 copy)", lin.in_features, region, "fp8")
            continue
        items.setdefault(source, Saved(f"{lin.name} input" + (" (fp8)" if fp8 else ""), lin.in_features, region,
                                       "fp8" if fp8 else "act"))
    mla = spec.mla
    if mla is not None:  # RMSNorms on the latents save their inputs (the a-projections' outputs)
        if mla.q_lora_rank:
            items["q_latent_norm"] = Saved("q_a_layernorm input", mla.q_lora_rank, "seq")
        items["kv_latent_norm"] = Saved("kv_a_layernorm input", mla.kv_lora_rank, "seq")
    heads = spec.num_heads
    k_width = heads * spec.head_dim if mla else spec.kv_dim  # MLA broadcasts k_pe to every head
    v_width = heads * spec.v_head_dim if mla else spec.num_kv_heads * spec.v_head_dim
    kv_region = "tensor" if mla else "kv"
    out = list(items.values()) + [
        Saved("Q (after rotary)", spec.q_dim, "tensor"),
        Saved("K (after rotary)", k_width, kv_region),
        Saved("V", v_width, kv_region),
    ]
    if spec.layer_has_qk_norm(layer):  # (llama4: its RoPE layers only)
        out.append(Saved("q/k norm inputs", spec.q_dim + spec.kv_dim, "tensor"))
    if not flash:  # softmax output (also the input of attention-times-V), per head per key
        out.append(Saved("softmax output", heads, "scores"))
        if dropout:
            out += [Saved("attention dropout mask", heads, "scores", "mask"),
                    Saved("attention dropout output", heads, "scores")]
    if dropout:
        out.append(Saved("attention output dropout mask", spec.hidden_size, "seq", "mask"))
    return out


def _intermediates(name: str, total: int, gated: bool, fp8: bool) -> list[Saved]:
    """What the MLP nonlinearity and the down projection save, `total` elements a token: gated 4 x the
    intermediate width (gate, act(gate), up, product), else 2 x (fc1 output, activation output); with fp8
    the last of them, the down projection's input, is its FP8 copy."""
    if not fp8:
        return [Saved(name, total, "tensor")]
    down = round(total / (4 if gated else 2))
    return [Saved(f"{name} less the down_proj input", total - down, "tensor"),
            Saved(f"{name}: down_proj input (fp8 copy)", down, "tensor", "fp8")]


def mlp_saved(spec: ModelSpec, layer: int, dropout: bool, capacity_factor: float = 1.0, fp8: bool = False) -> list[Saved]:
    h = spec.hidden_size
    lin_kind = "fp8" if fp8 else "act"
    moe_layer = spec.layer_is_moe(layer)
    out: list[Saved] = []
    if not spec.parallel_attention:  # else the MLP reads the attention's norm output; the bf16 router keeps it
        kind = "act" if moe_layer else lin_kind
        out.append(Saved("mlp input (norm output" + (", fp8)" if kind == "fp8" else ")"), h, "seq", kind))
    if moe_layer:
        moe = spec.moe
        assert moe is not None
        routed = moe.experts_per_token * capacity_factor
        out += [
            Saved("router probabilities (fp32)", moe.num_experts, "seq", "fp32"),
            Saved("dispatched expert inputs (k copies" + (", fp8)" if fp8 else ")"), round(routed * h), "expert",
                  lin_kind),
            *_intermediates("expert intermediates (k x 4I)", round(routed * 4 * moe.expert_intermediate_size), True, fp8),
            Saved("expert outputs for the weighted combine", round(routed * h), "seq"),
        ]
        if moe.num_shared_experts:
            if fp8:
                out.append(Saved("shared experts input (fp8 copy)", h, "seq", "fp8"))
            out += _intermediates("shared expert intermediates (4I)", 4 * moe.shared_intermediate_size, True, fp8)
    else:
        inter = next(lin.out_features for lin in mlp_linears(spec, layer) if lin.name == "up_proj")
        # gated: gate out (act input), act(gate), up out, product (down input); else fc1 output
        # (activation input), activation output (down input); an activation whose backward reads its
        # output (ReLU) shares that tensor with the down projection: 1I (not under FP8, where the down
        # projection keeps its own FP8 copy beside the bf16 output the activation saves)
        if spec.gated_mlp:
            name, width = "gate, act(gate), up, product (4I)", 4
        elif spec.activation in OUTPUT_SAVING_ACTIVATIONS and not fp8:
            name, width = "activation output = down_proj input (1I)", 1
        else:
            name, width = "fc1 output, activation output (2I)", 2
        out += _intermediates(name, width * inter, spec.gated_mlp, fp8)
    if dropout:
        out.append(Saved("mlp output dropout mask", h, "seq", "mask"))
    return out


def norm_inputs(spec: ModelSpec) -> Saved:
    """Each norm in the layer saves its input (h): 2 pre-norms; gemma2 4; parallel blocks 1."""
    return Saved(f"norm inputs ({spec.norms_per_layer} x h)", spec.norms_per_layer * spec.hidden_size, "seq")


def layer_saved(spec: ModelSpec, layer: int, flash: bool, dropout: bool, capacity_factor: float = 1.0,
                fp8: bool = False) -> list[Saved]:
    return ([norm_inputs(spec)] + attention_saved(spec, flash, dropout, fp8, layer)
            + mlp_saved(spec, layer, dropout, capacity_factor, fp8))


@dataclass(frozen=True)
class Split:
    """How one rank sees a layer: local tokens and the divisors of each region."""

    tokens: int  # micro-batch tokens on this rank (b * s / cp)
    keys: int  # keys each query attends to in one block (s / cp: ring attention's block)
    tp: int
    sp: bool
    kv_div: int  # divisor of "kv" items (kv heads per rank)
    etp: int | None = None  # the routed experts' tensor-parallel size (None: tp)


def item_bytes(item: Saved, split: Split, nbytes: dict[str, float]) -> float:
    per_elem = {"act": nbytes["activation"], "mask": nbytes["mask"], "fp32": 4.0,
                "fp8": nbytes.get("fp8", 1.0)}[item.kind]
    elems = item.per_token * split.tokens
    if item.region == "scores":
        return elems * split.keys * per_elem / split.tp
    if item.region == "expert":  # the etp ranks' sequence shards, gathered (etp = tp without SP: all tokens)
        return elems * per_elem * (split.etp or split.tp) / split.tp
    div = {"seq": split.tp if split.sp else 1, "tensor": split.tp, "kv": split.kv_div}[item.region]
    return elems * per_elem / div


def layer_bytes(items: list[Saved], split: Split, nbytes: dict[str, float], recompute: str, hidden: int) -> float:
    """Bytes one layer keeps until its backward under a recompute policy.

    selective: attention scores are recomputed (paper section 5), everything else is kept;
    full: only the layer input (h per token, paper section 4.1) is kept; the caller adds the
    activations of the one layer being recomputed during backward.
    """
    if recompute == "full":
        return item_bytes(Saved("layer input", hidden, "seq"), split, nbytes)
    kept = [i for i in items if not (recompute == "selective" and i.region == "scores")]
    return sum(item_bytes(i, split, nbytes) for i in kept)
