"""FLOPs and bytes of one attention call, counted once for the roofline and the benchmarks.

Convention (the one `mlsys flops` documents): 2 FLOPs per multiply-add; QK^T and PV over the
Sq x Skv score rectangle, times the share a causal mask keeps. Causal queries are aligned to the
END of the keys (query i of Sq sees the first Skv - Sq + i + 1 keys, as a prefill chunk after a
cached prefix does), and the share is the continuous 1 - Sq / (2 Skv): 1/2 when Sq = Skv
(FlashAttention's benchmark convention), never negative, since a causal call with fewer keys than
queries is rejected. Backward: FlashAttention-2's 5 matmuls against the forward's 2 (x 2.5;
Dao 2023, algorithm 2). Bytes: the IO-aware minimum (Dao et al. 2022, section 3.2): Q, K, V read
once and O written once; backward reads Q, K, V, O, dO and writes dQ, dK, dV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...errors import require

BACKWARD_FLOPS_FACTOR = 2.5   # FlashAttention-2: 5 matmuls in backward against 2 in forward


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    v_head_dim: int | None = None   # defaults to head_dim
    causal: bool = False

    def __post_init__(self) -> None:
        require(min(self.batch, self.heads, self.kv_heads, self.seq_q, self.seq_kv, self.head_dim) >= 1,
                f"attention sizes must be positive: {self}")
        require(self.heads % self.kv_heads == 0, f"heads {self.heads} not divisible by kv_heads {self.kv_heads}")
        require(not self.causal or self.seq_kv >= self.seq_q,
                f"a causal mask needs at least as many keys as queries (queries end-aligned): "
                f"kv_len {self.seq_kv} < q_len {self.seq_q}")

    @property
    def dv(self) -> int:
        return self.v_head_dim or self.head_dim


def causal_fraction(seq_q: int, seq_kv: int) -> float:
    """Share of the Sq x Skv rectangle a causal mask keeps, queries end-aligned: 1 - Sq / (2 Skv)."""
    require(seq_kv >= seq_q >= 1, f"a causal mask needs at least as many keys as queries: kv_len {seq_kv} < q_len {seq_q}")
    return 1.0 - seq_q / (2.0 * seq_kv)


def attention_flops(shape: AttentionShape, backward: bool = False, fraction: float | None = None) -> float:
    """2 * B * Sq * Skv * H * (d_qk + d_v) x the mask's share (x 2.5 for backward). `fraction`
    replaces the causal share (e.g. a sliding window's)."""
    if fraction is None:
        fraction = causal_fraction(shape.seq_q, shape.seq_kv) if shape.causal else 1.0
    flops = 2.0 * shape.batch * shape.seq_q * shape.seq_kv * shape.heads * (shape.head_dim + shape.dv) * fraction
    return flops * (BACKWARD_FLOPS_FACTOR if backward else 1.0)


def attention_bytes(shape: AttentionShape, act_bytes: float = 2, kv_bytes: float | None = None,
                    backward: bool = False, keys: int | None = None, v_in_k: bool = False) -> tuple[float, float]:
    """(read, write) bytes: act_bytes per element of Q, O (and dO, dQ), kv_bytes per element of K, V.
    keys: the keys actually read (a sliding window reads fewer than seq_kv); v_in_k: V is a slice of
    the cached K (absorbed MLA decode), read once."""
    kv_bytes = act_bytes if kv_bytes is None else kv_bytes
    q = shape.batch * shape.seq_q * shape.heads * shape.head_dim * act_bytes
    o = shape.batch * shape.seq_q * shape.heads * shape.dv * act_bytes
    kv = shape.batch * (keys or shape.seq_kv) * shape.kv_heads * (shape.head_dim if v_in_k else shape.head_dim + shape.dv) \
        * kv_bytes
    if backward:
        return q + kv + 2 * o, q + kv
    return q + kv, o


# ---- attention kinds: which keys a query sees ---------------------------------------------------
# Queries are end-aligned: a call of Sq queries over Skv keys holds positions Skv - Sq .. Skv - 1. The
# shares use the continuous convention of causal_fraction (a W or C at least Skv gives its 1 - Sq/(2 Skv)).

def window_fraction(seq_q: int, seq_kv: int, window: int) -> float:
    """Share of the Sq x Skv score rectangle a causal sliding-window kernel computes when it skips
    KV tiles outside the window (FlashAttention-2's `window_size`): query at position p sees
    min(p, W) keys, so the area is the integral of min(p, W) over p in [Skv - Sq, Skv] (the
    continuous convention of causal_fraction, which it equals for W >= Skv; S x W - W^2/2 for
    Sq = Skv = S > W)."""
    a, b, w = seq_kv - seq_q, seq_kv, window
    if w >= b:
        area = (b * b - a * a) / 2.0
    elif w <= a:
        area = w * (b - a)
    else:
        area = (w * w - a * a) / 2.0 + w * (b - w)
    return area / (seq_q * seq_kv)


def chunk_fraction(seq_q: int, seq_kv: int, chunk: int) -> float:
    """Share of the Sq x Skv rectangle a chunked-attention kernel computes (Llama 4): query at
    position p sees the keys of its own chunk, p mod C of them; the area is the integral of p mod C
    over p in [Skv - Sq, Skv] (causal_fraction's convention, which it equals for C >= Skv)."""
    def area(x: int) -> float:
        return (x // chunk) * chunk * chunk / 2.0 + (x % chunk) ** 2 / 2.0
    return (area(seq_kv) - area(seq_kv - seq_q)) / (seq_q * seq_kv)


@dataclass(frozen=True)
class Mask:
    """One attention kind, priced by its size (window W, chunk C; None for full attention)."""

    kept: Callable[[int, int, Any], float]  # share of the Sq x Skv rectangle a tile-skipping kernel computes
    first_key: Callable[[int, Any], int]  # earliest key the query at position p sees
    held: Callable[[int, Any], int]  # KV tokens a sequence of L tokens keeps at a step (its newest included)


MASKS = {
    "full_attention": Mask(lambda q, k, _: causal_fraction(q, k), lambda p, _: 0, lambda n, _: n),
    "sliding_attention": Mask(window_fraction, lambda p, w: max(0, p - w + 1), lambda n, w: min(n, w)),
    "chunked_attention": Mask(chunk_fraction, lambda p, c: p // c * c, lambda n, c: min(n, c)),
}


def keys_read(kind: str, size: int | None, seq_q: int, seq_kv: int) -> int:
    """Keys a kernel that skips masked tiles reads for Sq end-aligned queries over Skv keys."""
    return seq_kv - MASKS[kind].first_key(seq_kv - seq_q, size)


def eager_keys(kind: str, size: int | None, new: int, context: int) -> int:
    """Keys an eager (masking) implementation multiplies: transformers' DynamicCache keeps the last
    size - 1 tokens of a windowed or chunked layer between steps (DynamicSlidingWindowLayer), all
    tokens of a full one; a step attends over those plus its `new` tokens."""
    return (context if size is None else min(context, size - 1)) + new
