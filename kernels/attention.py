"""Flash attention in Triton: forward, backward and paged decode, with plain-torch references.

    from mlsyscalc.kernels import attention
    o = attention.attention(q, k, v, causal=True)            # differentiable (B, H, S, D)
    o, lse = attention.attention_forward(q, k, v)              # forward + logsumexp
    o = attention.decode_attention(q, k_cache, v_cache, seqlens, block_table)

The kernels live in attention_fwd.py (FlashAttention-2 forward), attention_bwd.py (dQ/dK/dV
and the autograd Function) and attention_decode.py (split-KV flash-decoding, paged or not).
Benchmarks: `mlsys bench attention` (mlsyscalc/bench/cases/attention.py).
"""

from .attention_bwd import FlashAttention, attention, attention_backward
from .attention_decode import choose_splits, decode_attention, decode_ref, gather_paged, stream_read
from .attention_fwd import attention_forward, attention_ref, can_use_descriptors, chosen_path, interpreting

__all__ = [
    "FlashAttention",
    "attention",
    "attention_backward",
    "attention_forward",
    "attention_ref",
    "can_use_descriptors",
    "choose_splits",
    "chosen_path",
    "decode_attention",
    "decode_ref",
    "gather_paged",
    "interpreting",
    "stream_read",
]
