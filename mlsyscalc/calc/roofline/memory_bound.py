"""Byte and FLOP counts of the memory-bound kernels of a transformer, as roofline predictions.

Each reads its inputs once and writes its outputs once (`a` = bytes per activation element).
FLOPs are CUDA-core operations, counted roughly (they never decide the time: these kernels sit
far below the ridge point): 1 per add, 4 per normalised element (square, sum, scale, weight),
5 per softmax or SiLU-gate element, 3 per rotated element.
"""

from __future__ import annotations

from typing import Any

from ...errors import require
from ...dtypes import bytes_per_element
from .ops import OpPrediction, predict_memory_op
from ...specs.gpu import DEFAULT_GPU


def pass_memory_op(name: str, read: float, write: float, p: Any, shape: str = "", cls: str = "memory") -> OpPrediction:
    """A memory-bound kernel of a roofline pass `p` (its store dtype and ceilings): `read` and `write` bytes."""
    return predict_memory_op(name, read, write, 0.0, p.store, p.ceil, shape=shape, cls=cls)


def pass_strided_op(name: str, read: float, write: float, p: Any, shape: str = "") -> OpPrediction:
    """A broadcasting or strided kernel TensorIterator cannot vectorise (efficiency.memory_broadcast)."""
    return pass_memory_op(name, read, write, p, shape, "memory_broadcast")

def elementwise_op(elements: float, inputs: int = 1, outputs: int = 1, flops_per_element: float = 1.0,
                   dtype: str = "bf16", gpu: Any = DEFAULT_GPU, calibration: Any = None,
                   name: str = "elementwise", cls: str = "memory") -> OpPrediction:
    """y = f(x1, ..., xn) over `elements`: read inputs x elements, write outputs x elements; `cls` the efficiency
    class of its bytes (memory_fused: the fused list's kernels)."""
    require(elements >= 1 and inputs >= 0 and outputs >= 0, f"{name}: sizes must be positive")
    a = bytes_per_element(dtype)
    return predict_memory_op(name, inputs * elements * a, outputs * elements * a, flops_per_element * elements,
                             dtype, gpu, calibration, shape=f"{elements:.0f} {inputs}->{outputs}", cls=cls)


def norm_op(tokens: int, hidden: int, dtype: str = "bf16", gpu: Any = DEFAULT_GPU, calibration: Any = None,
            name: str = "norm", cls: str = "memory") -> OpPrediction:
    """RMSNorm/LayerNorm: read x (tokens, hidden) and the weight, write y."""
    a = bytes_per_element(dtype)
    return predict_memory_op(name, (tokens + 1) * hidden * a, tokens * hidden * a, 4.0 * tokens * hidden,
                             dtype, gpu, calibration, shape=f"{tokens}x{hidden}", cls=cls)


def softmax_op(rows: int, cols: int, dtype: str = "bf16", gpu: Any = DEFAULT_GPU, calibration: Any = None,
               name: str = "softmax") -> OpPrediction:
    """Row softmax of (rows, cols): read once, write once (one pass, online max and sum)."""
    a = bytes_per_element(dtype)
    return predict_memory_op(name, rows * cols * a, rows * cols * a, 5.0 * rows * cols, dtype, gpu,
                             calibration, shape=f"{rows}x{cols}")


def rotary_op(tokens: int, heads: int, rotary_dim: int, dtype: str = "bf16", gpu: Any = DEFAULT_GPU,
              calibration: Any = None, positions: int | None = None, name: str = "rotary",
              cls: str = "memory") -> OpPrediction:
    """RoPE (Su et al. 2021) on `heads` (query + key heads) of `rotary_dim` dims: read x and the
    cos/sin tables for `positions` positions (default: tokens), write x."""
    a = bytes_per_element(dtype)
    elements = tokens * heads * rotary_dim
    table = 2 * (positions or tokens) * rotary_dim * a
    return predict_memory_op(name, elements * a + table, elements * a, 3.0 * elements, dtype, gpu, calibration,
                             shape=f"{tokens}x{heads}x{rotary_dim}", cls=cls)


def embedding_op(tokens: int, hidden: int, dtype: str = "bf16", gpu: Any = DEFAULT_GPU, calibration: Any = None,
                 extra_width: int = 0, name: str = "embedding") -> OpPrediction:
    """Gather `tokens` rows of the table (only those rows are read), plus learned positions."""
    a = bytes_per_element(dtype)
    return predict_memory_op(name, tokens * (hidden + extra_width) * a, tokens * hidden * a, 0.0, dtype, gpu,
                             calibration, shape=f"{tokens}x{hidden}")


def copy_cast_op(elements: float, dtype_in: str, dtype_out: str, gpu: Any = DEFAULT_GPU, calibration: Any = None,
                 name: str = "kv_cache_write") -> OpPrediction:
    """Write `elements` in another dtype (e.g. new K/V into an fp8 cache)."""
    return predict_memory_op(name, elements * bytes_per_element(dtype_in), elements * bytes_per_element(dtype_out),
                             0.0, dtype_in, gpu, calibration, shape=f"{elements:.0f}")
