"""Attention FLOPs/bytes are counted once (calc/counts/attention.py); the roofline and the benchmarks use it."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.counts.attention import AttentionShape, attention_bytes, attention_flops, causal_fraction
from mlsyscalc.calc.roofline.ops import predict_attention
from mlsyscalc.errors import MlsysError


def test_flops_by_hand():
    # B2 H4 S8 d16: QK^T and PV are 8*8*16 multiply-adds each per head and sequence, 2 FLOPs a
    # multiply-add, x 4 heads x 2 sequences
    full = AttentionShape(2, 4, 4, 8, 8, 16)
    assert attention_flops(full) == 2 * (8 * 8 * 16) * 2 * 4 * 2 == 32768
    assert attention_flops(AttentionShape(2, 4, 4, 8, 8, 16, causal=True)) == 32768 / 2
    assert attention_flops(full, backward=True) == 2.5 * 32768


def test_causal_queries_are_end_aligned_and_never_negative():
    # 4 queries at the end of 12 keys see 9, 10, 11, 12 keys: 42 of 48 pairs exactly, the continuous
    # convention counts 1 - 4/24 = 5/6 of 48 = 40 (it halves the diagonal as S^2/2 does S(S+1)/2)
    assert causal_fraction(4, 12) == pytest.approx(5 / 6)
    assert causal_fraction(1, 4096) == pytest.approx(1 - 1 / 8192)        # a decode step sees nearly all keys
    with pytest.raises(MlsysError, match="kv_len 4 < q_len 8"):
        AttentionShape(1, 1, 1, 8, 4, 16, causal=True)
    with pytest.raises(MlsysError, match="kv_len 4 < q_len 8"):
        causal_fraction(8, 4)
    assert attention_flops(AttentionShape(1, 1, 1, 8, 4, 16)) > 0           # no mask: any lengths


def test_bytes_by_hand():
    s = AttentionShape(1, 8, 2, 16, 64, 32)        # GQA: 8 query heads share 2 KV heads
    q = o = 1 * 16 * 8 * 32 * 2                    # bf16
    kv = 1 * 64 * 2 * (32 + 32) * 2
    assert attention_bytes(s) == (q + kv, o)
    assert attention_bytes(s, backward=True) == (q + kv + 2 * o, q + kv)
    assert attention_bytes(s, kv_bytes=1)[0] == q + kv / 2                # fp8 cache


def test_roofline_uses_the_same_counts():
    p = predict_attention(2, 32, 8, 2048, 4096, 128, causal=True, gpu="H100-SXM")
    s = AttentionShape(2, 32, 8, 2048, 4096, 128, causal=True)
    assert p.flops == attention_flops(s)
    assert (p.read_bytes, p.write_bytes) == attention_bytes(s)
    with pytest.raises(MlsysError, match="keys"):
        predict_attention(1, 8, 8, 4096, 1024, 128, causal=True)


def test_benchmarks_use_the_same_counts():
    from mlsyscalc.bench.cases import attention as cases

    s = cases.Shape(4, 32, 8, 4096, 128, causal=True)
    assert cases.forward_flops(s) == 4.0 * 4 * 32 * 4096 * 4096 * 128 / 2    # FlashAttention's benchmark count
    assert cases.backward_flops(s) == 2.5 * cases.forward_flops(s)
    assert cases.forward_bytes(s) == sum(attention_bytes(AttentionShape(4, 32, 8, 4096, 4096, 128, causal=True)))
