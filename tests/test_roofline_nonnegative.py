"""Every op the roofline prices, over random shapes: counts and times are finite and never negative,
and a causal mask with fewer keys than queries is refused rather than counted (queries are aligned to
the end of the keys; 1 - Sq / (2 Skv) of the rectangle is kept, so Skv < Sq would go below a half and,
for Skv < Sq / 2, negative)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc import MlsysError
from mlsyscalc.calc.roofline.memory_bound import (copy_cast_op, elementwise_op, embedding_op, norm_op, rotary_op,
                                            softmax_op)
from mlsyscalc.calc.roofline.ops import predict_attention, predict_grouped_matmul, predict_matmul

GPUS = st.sampled_from(["H100-SXM", "H200", "A100-80GB-SXM", "L40S", "MI300X"])
DTYPES = st.sampled_from(["bf16", "fp16", "fp8", "fp32"])
SIZE = st.integers(1, 1 << 16)


def _sound(price, *args, **kwargs) -> None:
    """price(*args) is finite and non-negative everywhere, or refused because the card has no peak for
    the dtype (fp8 on an A100): a clear error, never a number."""
    try:
        p = price(*args, **kwargs)
    except MlsysError as exc:
        assert "peak" in str(exc), exc
        return
    fields = (p.flops, p.read_bytes, p.write_bytes, p.compute_s, p.memory_s, p.overhead_s, p.roofline_s,
              p.predicted_s)
    assert all(math.isfinite(x) and x >= 0 for x in fields), p
    assert p.bytes > 0 and p.predicted_s > 0


@settings(max_examples=150, deadline=None)
@given(m=SIZE, n=SIZE, k=SIZE, batch=st.integers(1, 64), dtype=DTYPES, gpu=GPUS)
def test_matmuls(m, n, k, batch, dtype, gpu):
    _sound(predict_matmul, m, n, k, dtype, gpu, batch=batch)
    _sound(predict_grouped_matmul, m, min(8, m), n, k, dtype, gpu)


@settings(max_examples=200, deadline=None)
@given(b=st.integers(1, 256), kv=st.sampled_from([1, 2, 4, 8, 16]), group=st.sampled_from([1, 2, 4, 8]),
       sq=st.integers(1, 1 << 15), skv=st.integers(1, 1 << 15), d=st.sampled_from([64, 96, 128, 192, 256]),
       causal=st.booleans(), backward=st.booleans(), gpu=GPUS)
def test_attention(b, kv, group, sq, skv, d, causal, backward, gpu):
    args = (b, kv * group, kv, sq, skv, d, causal, "bf16", gpu)
    if causal and skv < sq:
        with pytest.raises(MlsysError, match="at least as many keys as queries"):
            predict_attention(*args, backward=backward)
        return
    _sound(predict_attention, *args, backward=backward)
    p = predict_attention(*args, backward=backward)
    full = predict_attention(b, kv * group, kv, sq, skv, d, False, "bf16", gpu, backward=backward)
    assert p.flops <= full.flops  # a mask never adds work


@settings(max_examples=150, deadline=None)
@given(t=SIZE, h=st.integers(1, 1 << 14), heads=st.integers(1, 128), dtype=DTYPES, gpu=GPUS,
       per=st.floats(0, 100))
def test_memory_bound_ops(t, h, heads, dtype, gpu, per):
    _sound(elementwise_op, t * h, 2, 1, per, dtype, gpu)
    _sound(norm_op, t, h, dtype, gpu)
    _sound(softmax_op, t, h, dtype, gpu)
    _sound(rotary_op, t, heads, 2 * max(1, h // 256), dtype, gpu)
    _sound(embedding_op, t, h, dtype, gpu)
    _sound(copy_cast_op, t * h, "fp32", dtype, gpu)
