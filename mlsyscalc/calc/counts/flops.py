"""FLOPs of a forward pass, counted the way torch.utils.flop_counter.FlopCounterMode counts them.

Convention: 2 FLOPs per multiply-add; matrix multiplications only (no norms, activations,
softmax, bias adds or rotary); attention scores (QK^T) and attention-times-V over the keys an
eager implementation multiplies: the full S x S_kv rectangle (the mask applied afterwards), where
a sliding-window or chunked layer's cache holds at most W - 1 (C - 1) earlier tokens, as
transformers' DynamicCache keeps them. With `causal` (prefill), each layer counts the pairs its
mask keeps instead (calc.counts.attention.MASKS): half the rectangle on full layers (FlashAttention's
benchmarking convention; the exact count of unmasked pairs is S(S+1)/2), the window's or chunk's
share on the others. MoE experts as routed, top-k per token; attention sinks (gpt-oss) add no
matmul. Backward is 2x forward (gradients w.r.t. inputs and weights); a training step 3x, or 4x
with full activation recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from collections import Counter

from ...errors import MlsysError
from ...specs.model import ModelSpec
from .attention import MASKS, eager_keys
from .layers import head_linears, layer_linears

PHASES = ("prefill", "decode")
BREAKDOWN_KEYS = ("attention_proj", "attention_core", "mlp", "lm_head")


@dataclass(frozen=True)
class FlopOptions:
    batch: int = 1
    seq: int = 2048  # new tokens per sequence (prefill); decode processes 1
    phase: str = "prefill"
    context: int = 0  # tokens already cached (decode: the new token attends to context + 1)
    causal: bool = False

    def validate(self) -> None:
        if self.phase not in PHASES:
            raise MlsysError(f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}")
        for name in ("batch", "seq"):
            if int(getattr(self, name)) < 1:
                raise MlsysError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.context < 0:
            raise MlsysError(f"context must be >= 0, got {self.context}")
        if self.phase == "decode" and self.context < 1:
            raise MlsysError("decode needs --context L >= 1 (tokens already in the KV cache)")

    @property
    def new_tokens(self) -> int:
        """Query tokens per sequence in this forward pass."""
        return 1 if self.phase == "decode" else self.seq

    @property
    def kv_len(self) -> int:
        """Keys each query attends to: cached context plus the new tokens themselves."""
        return self.context + self.new_tokens


@dataclass(frozen=True)
class FlopCount:
    model: str
    options: FlopOptions
    forward: int
    breakdown: Mapping[str, int]  # attention_proj, attention_core, mlp, lm_head: sums to forward
    tokens: int  # query tokens processed: batch x new tokens
    approx_6n: int  # 6 N T, N = active params outside the embedding tables (Kaplan et al. 2020)
    approx_6n_attn: int  # (6 N + 12 L S d_attn) T (PaLM, Chowdhery et al. 2022, appendix B)

    @property
    def backward(self) -> int:
        return 2 * self.forward

    @property
    def train_step(self) -> int:
        return 3 * self.forward

    @property
    def train_step_recompute(self) -> int:
        """Full activation recomputation repeats the forward once in the backward pass."""
        return 4 * self.forward

    @property
    def per_token(self) -> float:
        return self.forward / self.tokens


def check_positions(spec: ModelSpec, kv_len: int, phase: str) -> None:
    """A learned position table has no row past its last: longer sequences cannot be embedded."""
    limit = spec.max_position_embeddings or spec.learned_positions
    if spec.learned_positions and kv_len > limit:
        raise MlsysError(f"{spec.name} has {limit} learned position embeddings; {phase} needs {kv_len} positions "
                         "(--context + --seq, or --context + 1 for decode)")


def layer_kinds(spec: ModelSpec) -> Counter[str]:
    """How many layers of each attention kind (full, sliding, chunked) the model has."""
    return Counter(spec.layer_type(i) for i in range(spec.num_layers))


def attention_layer_flops(spec: ModelSpec, kind: str, batch: int, q_len: int, kv_len: int, causal: bool) -> int:
    """QK^T and PV of one layer of `kind`: 2 * B * Sq * keys * heads * (d_qk + d_v), keys as the
    module docstring says (causal: the mask's kept share of Sq x Skv)."""
    per_key = 2 * batch * q_len * spec.num_heads * (spec.head_dim + spec.v_head_dim)
    size = spec.mask_size(kind)
    if not causal:
        return per_key * eager_keys(kind, size, q_len, kv_len - q_len)
    if size is None:
        return per_key * kv_len // 2
    return round(per_key * kv_len * MASKS[kind].kept(q_len, kv_len, size))


def attention_core_flops(spec: ModelSpec, batch: int, q_len: int, kv_len: int, causal: bool) -> int:
    """QK^T and PV for all layers, each by its attention kind."""
    return sum(count * attention_layer_flops(spec, kind, batch, q_len, kv_len, causal)
               for kind, count in layer_kinds(spec).items())


def count_flops(spec: ModelSpec, options: FlopOptions | None = None) -> FlopCount:
    """Forward FLOPs of `options.batch` sequences (see the module docstring for the convention)."""
    opts = options or FlopOptions()
    opts.validate()
    check_positions(spec, opts.kv_len, opts.phase)
    tokens = opts.batch * opts.new_tokens
    parts = dict.fromkeys(BREAKDOWN_KEYS, 0)
    n_matmul = 0  # active parameters that take part in a matmul per token
    for layer in range(spec.num_layers):
        for lin in layer_linears(spec, layer):
            key = "attention_proj" if lin.group == "attention" else "mlp"
            parts[key] += lin.forward_flops(tokens)
            n_matmul += lin.in_features * lin.out_features * lin.active
    for lin in head_linears(spec):
        parts["lm_head"] += lin.forward_flops(tokens)
        n_matmul += lin.in_features * lin.out_features
    causal = opts.causal and opts.phase == "prefill"
    parts["attention_core"] = attention_core_flops(spec, opts.batch, opts.new_tokens, opts.kv_len, causal)
    d_attn = spec.num_heads * (spec.head_dim + spec.v_head_dim) // 2
    return FlopCount(
        model=spec.name, options=opts, forward=sum(parts.values()), breakdown=parts, tokens=tokens,
        approx_6n=6 * n_matmul * tokens,
        approx_6n_attn=(6 * n_matmul + 12 * spec.num_layers * opts.kv_len * d_attn) * tokens,
    )
