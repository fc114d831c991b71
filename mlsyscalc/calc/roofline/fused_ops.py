"""Bytes and FLOPs of the fused memory-bound kernels, per op and pass, and their roofline time.

The ops are those Megatron-LM / Transformer Engine and serving engines fuse, as kernels/ writes
them (norm.py, glu.py, rotary.py, dropout_add.py, cross_entropy.py). Each (op, pass) is one row of
FUSED_OPS: the tensors it must read and write, each counted once (the fewest bytes a kernel can
move), and its CUDA-core FLOPs per element, counted roughly (these kernels sit far below the
ridge point; the FLOPs never set their time). The time is `roofline_ops.predict_memory_op`'s.

Symbols: T = tokens (rows), W = the op's width (below), a = bytes per element of `dtype`,
w = of `weight_dtype` (default: dtype), t = of `table_dtype` (rotary's cos/sin, default fp32),
i = `index_bytes` (positions, targets; default 8: int64), D = `head_dim` (rotary), and
P = `partials`: the programs of a persistent backward, each writing one fp32 partial row of the
weight gradient that a second launch reads back (4 P W bytes written and 4 P W read per gradient).
P defaults to 0, so the counts leave the partials out unless asked: they are what kernels/ spends
for a deterministic reduction, not bytes the op must move.

| op, pass | W | read bytes | write bytes |
| --- | --- | --- | --- |
| rmsnorm_fwd | hidden | x T W a, weight W w | y T W a, rstd 4 T |
| rmsnorm_bwd | hidden | dy, x 2 T W a, weight W w, rstd 4 T, (dweight partials 4 P W) | dx T W a, dweight W w, (dweight partials 4 P W) |
| layernorm_fwd | hidden | x T W a, weight W w, [bias W w] | y T W a, mean 4 T, rstd 4 T |
| layernorm_bwd | hidden | dy, x 2 T W a, weight W w, mean and rstd 8 T, (dweight partials 4 P W), [(dbias partials 4 P W)] | dx T W a, dweight W w, [dbias W w], (the same partials) |
| swiglu_fwd, geglu_fwd | intermediate I | gate, up 2 T W a | y T W a |
| swiglu_bwd, geglu_bwd | intermediate I | dy, gate, up 3 T W a | dgate, dup 2 T W a |
| rotary_fwd, rotary_bwd | heads x D | x (dy) T W a, positions T i, cos and sin 2 T (D/2) t | y (dx) T W a |
| dropout_add_fwd | hidden | x, residual 2 T W a, [bias W a] | out T W a, {mask T W} |
| dropout_add_bwd | hidden | dy T W a, {mask T W}, [(dbias partials 4 P W)] | dx T W a, [dbias W a], [(dbias partials 4 P W)] |
| cross_entropy_fwdbwd | vocab V | logits 2 T V a (two passes), targets T i | gradient T V a (in place), loss 4 T |

( ) zero unless `partials` = P is given; [ ] only with `bias` (default True); { } only with `mask`
(default False: the mask is regenerated from the seed, as kernels/dropout_add.py does; True prices a
saved byte mask, as torch's dropout keeps). The residual's gradient is dy itself (no bytes). Rotary
reads one table row per token (T rows; repeated positions would hit the L2). Cross-entropy counts the
logits read twice: a row of a large vocabulary does not fit a program's registers, so a chunked kernel
reads it once for the online max and sum and once more for the gradient (calc.roofline.head prices the
fused loss with the same 3 T V a bytes).

`predict_fused` prices one isolated call (as `mlsys bench fused` times it): the bytes at the op's efficiency
class, plus ISOLATED_CALL_S for each kernel the call launches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ...dtypes import bytes_per_element, dtype_name
from ...errors import MlsysError, require
from ...specs.gpu import DEFAULT_GPU, GPUSpec
from .calibration import Ceilings
from .ops import OpPrediction, predict_memory_op


@dataclass(frozen=True)
class Term:
    """One tensor an op reads or writes: `size` elements (a FusedShape.elements key) of `unit` bytes each."""

    tensor: str
    size: str     # "TW", "W", "T", "TD" (tokens x head_dim / 2), "PW" (partials x width)
    unit: str     # "a" activation, "w" weight, "f32", "index", "table", "byte"
    when: str = ""   # a FusedShape flag ("bias", "mask") the term needs, "" = always


@dataclass(frozen=True)
class FusedOp:
    width: str                   # what W is for this op
    read: tuple[Term, ...]
    write: tuple[Term, ...]
    flops_per_element: float     # CUDA-core FLOPs per T x W element, roughly
    cls: str = "memory_fused"    # the efficiency class its bytes are priced at (calc.roofline.calibration.Efficiency)
    reduction: str = ""          # a second launch sums the partials: "always", a FusedShape flag ("bias"), "" none


def _t(tensor: str, size: str = "TW", unit: str = "a", when: str = "") -> Term:
    return Term(tensor, size, unit, when)


_PARTIALS = (_t("dweight partials", "PW", "f32"),)
_PARTIALS_BIAS = _PARTIALS + (_t("dbias partials", "PW", "f32", "bias"),)
_GLU_FWD = FusedOp("intermediate", (_t("gate"), _t("up")), (_t("y"),), 6.0)       # SwiGLU's FLOPs
_GLU_BWD = FusedOp("intermediate", (_t("dy"), _t("gate"), _t("up")), (_t("dgate"), _t("dup")), 12.0)
_ROTARY_READ = (_t("positions", "T", "index"), _t("cos", "TD", "table"), _t("sin", "TD", "table"))

FUSED_OPS: dict[str, FusedOp] = {
    "rmsnorm_fwd": FusedOp("hidden", (_t("x"), _t("weight", "W", "w")), (_t("y"), _t("rstd", "T", "f32")), 4.0),
    "rmsnorm_bwd": FusedOp("hidden", (_t("dy"), _t("x"), _t("weight", "W", "w"), _t("rstd", "T", "f32")) + _PARTIALS,
                           (_t("dx"), _t("dweight", "W", "w")) + _PARTIALS, 8.0, cls="memory_fused_norm_bwd",
                           reduction="always"),
    "layernorm_fwd": FusedOp("hidden", (_t("x"), _t("weight", "W", "w"), _t("bias", "W", "w", "bias")),
                             (_t("y"), _t("mean", "T", "f32"), _t("rstd", "T", "f32")), 6.0),
    "layernorm_bwd": FusedOp("hidden", (_t("dy"), _t("x"), _t("weight", "W", "w"), _t("mean", "T", "f32"),
                                        _t("rstd", "T", "f32")) + _PARTIALS_BIAS,
                             (_t("dx"), _t("dweight", "W", "w"), _t("dbias", "W", "w", "bias")) + _PARTIALS_BIAS,
                             11.0, cls="memory_fused_norm_bwd", reduction="always"),
    "swiglu_fwd": _GLU_FWD,
    "swiglu_bwd": _GLU_BWD,
    "geglu_fwd": replace(_GLU_FWD, flops_per_element=11.0),    # tanh's exp and the cubic
    "geglu_bwd": replace(_GLU_BWD, flops_per_element=20.0),
    "rotary_fwd": FusedOp("heads x head_dim", (_t("x"),) + _ROTARY_READ, (_t("y"),), 3.0),
    "rotary_bwd": FusedOp("heads x head_dim", (_t("dy"),) + _ROTARY_READ, (_t("dx"),), 3.0),
    "dropout_add_fwd": FusedOp("hidden", (_t("x"), _t("residual"), _t("bias", "W", "a", "bias")),
                               (_t("out"), _t("mask", "TW", "byte", "mask")), 4.0),
    "dropout_add_bwd": FusedOp("hidden", (_t("dy"), _t("mask", "TW", "byte", "mask"),
                                          _t("dbias partials", "PW", "f32", "bias")),
                               (_t("dx"), _t("dbias", "W", "a", "bias"), _t("dbias partials", "PW", "f32", "bias")),
                               2.0, reduction="bias"),
    "cross_entropy_fwdbwd": FusedOp("vocab", (_t("logits"), _t("logits, second pass"), _t("targets", "T", "index")),
                                    (_t("gradient"), _t("loss", "T", "f32")), 8.0),
}


@dataclass(frozen=True)
class FusedShape:
    """The sizes and options of one fused op's call (see the module docstring for each)."""

    tokens: int
    width: int
    dtype: str = "bf16"
    weight_dtype: str | None = None
    head_dim: int | None = None
    partials: int = 0
    bias: bool = True
    mask: bool = False
    table_dtype: str = "fp32"
    index_bytes: int = 8

    def __post_init__(self) -> None:
        for name in ("tokens", "width"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"fused op: {name} must be a positive integer, got {value!r}")
        require(isinstance(self.partials, int) and self.partials >= 0,
                f"fused op: partials must be a non-negative integer, got {self.partials!r}")
        require(self.index_bytes in (4, 8), f"fused op: index_bytes must be 4 or 8, got {self.index_bytes!r}")
        if self.head_dim is not None:
            require(isinstance(self.head_dim, int) and self.head_dim >= 2 and self.head_dim % 2 == 0
                    and self.width % self.head_dim == 0,
                    f"fused op: head_dim {self.head_dim!r} must be even and divide the width {self.width}")
        for name in ("dtype", "weight_dtype", "table_dtype"):
            if getattr(self, name) is not None:
                dtype_name(getattr(self, name))

    def elements(self, size: str) -> float:
        half_dim = (self.head_dim or 0) / 2
        return {"TW": self.tokens * self.width, "W": self.width, "T": self.tokens,
                "TD": self.tokens * half_dim, "PW": self.partials * self.width}[size]

    def unit_bytes(self, unit: str) -> float:
        return {"a": bytes_per_element(self.dtype), "w": bytes_per_element(self.weight_dtype or self.dtype),
                "f32": 4.0, "index": float(self.index_bytes), "table": bytes_per_element(self.table_dtype),
                "byte": 1.0}[unit]

    def counts(self, term: Term) -> bool:
        return not term.when or bool(getattr(self, term.when))


@dataclass(frozen=True)
class FusedCount:
    """One op's bytes and FLOPs; `parts` = (tensor, "read" | "write", bytes), adding up to the totals."""

    op: str
    read_bytes: float
    write_bytes: float
    flops: float
    parts: tuple[tuple[str, str, float], ...]


_SHAPE_KEYS = tuple(f.name for f in fields(FusedShape) if f.name not in ("tokens", "width", "dtype"))


def fused_shape(op: str, tokens: int, width: int, dtype: str = "bf16", **shape: Any) -> FusedShape:
    """The validated shape of one call of `op` (an FUSED_OPS key); rotary needs head_dim."""
    if op not in FUSED_OPS:
        raise MlsysError(f"unknown fused op {op!r} (use one of: {', '.join(FUSED_OPS)})")
    unknown = sorted(set(shape) - set(_SHAPE_KEYS))
    require(not unknown, f"fused op {op}: unknown option {', '.join(unknown)} (use: {', '.join(_SHAPE_KEYS)})")
    s = FusedShape(tokens, width, dtype, **shape)
    require(not op.startswith("rotary") or s.head_dim is not None, f"fused op {op}: head_dim is needed")
    return s


def fused_count(op: str, tokens: int, width: int, dtype: str = "bf16", **shape: Any) -> FusedCount:
    """Bytes read and written (each tensor once) and CUDA-core FLOPs of one call, with the parts."""
    s = fused_shape(op, tokens, width, dtype, **shape)
    spec = FUSED_OPS[op]
    parts = tuple((term.tensor, way, s.elements(term.size) * s.unit_bytes(term.unit))
                  for way, terms in (("read", spec.read), ("write", spec.write)) for term in terms if s.counts(term))
    read = sum(b for _, way, b in parts if way == "read")
    write = sum(b for _, way, b in parts if way == "write")
    return FusedCount(op, read, write, spec.flops_per_element * tokens * width, parts)


def fused_bytes(op: str, tokens: int, width: int, dtype: str = "bf16", **shape: Any) -> tuple[float, float]:
    """(read bytes, write bytes) of one call: the fewest a kernel must move (module docstring)."""
    count = fused_count(op, tokens, width, dtype, **shape)
    return count.read_bytes, count.write_bytes


# The time one isolated call costs each kernel it launches beyond its bytes: the launch, and the cold start of a
# kernel timed alone after the harness's L2 flush (CUDA-graph replays, do_bench medians). Fitted on the train sweep
# of reports/fused/rows.jsonl (one H200, rows of bd4fa77 with the backwards of 6c3e10a / 41b1173): the median over
# the 170 rows under 16 MB of (measured - bytes at the op's class efficiency of the datasheet bandwidth) / launches,
# 5.73 us. In-sample there; reports/fused/heldout/ scores it on shapes the sweep does not have. It replaces the
# roofline's memory-kernel fixed cost (Ceilings.overhead_s, 2 us on the datasheet) for these calls only: a kernel
# inside a model step pays the step's own fixed costs (calc.roofline.training), not this.
ISOLATED_CALL_S = 5.73e-6
# Each launch after the first (the partial-sum reduction of a persistent backward, wide LayerNorm's dw, db pass): a
# small kernel that follows the first in the same call, fitted with memory_fused_norm_bwd on the norm backwards'
# rows (calc.roofline.calibration): 3.84 us.
PARTIAL_SUM_CALL_S = 3.84e-6

# LayerNorm rows wider than this: the backward computes dx in one launch and dw, db in a second that reads x and
# dy again (kernels/norm.py CHUNKED_WIDTH, the same number; a test keeps the two equal). The bytes above leave that
# second read out, as they leave out the partials: the fewest bytes stay the op's measure; predict_fused adds it.
LAYERNORM_CHUNKED_WIDTH = 8192


def predict_fused(op: str, tokens: int, width: int, dtype: str = "bf16",
                  gpu: str | GPUSpec | Ceilings = DEFAULT_GPU, calibration: Any = None, **shape: Any) -> OpPrediction:
    """The time of one isolated call: its bytes at its class's share of the bandwidth (memory_fused, the norms'
    backward memory_fused_norm_bwd: calc.roofline.calibration, read off these kernels' own rows; wide LayerNorm's
    backward also reads x and dy again), plus ISOLATED_CALL_S for its first launch and
    PARTIAL_SUM_CALL_S for each further one."""
    count = fused_count(op, tokens, width, dtype, **shape)
    spec = FUSED_OPS[op]
    n = launches(op, tokens, width, dtype, **shape)
    read = count.read_bytes
    if op == "layernorm_bwd" and width > LAYERNORM_CHUNKED_WIDTH:   # the dw, db launch reads x and dy again
        parts = {t: b for t, way, b in count.parts if way == "read"}
        read += parts["dy"] + parts["x"]
    pred = predict_memory_op(op, read, count.write_bytes, count.flops, dtype, gpu, calibration,
                             shape=f"{tokens}x{width}", cls=spec.cls)
    return replace(pred, overhead_s=ISOLATED_CALL_S + (n - 1) * PARTIAL_SUM_CALL_S)


def launches(op: str, tokens: int, width: int, dtype: str = "bf16", **shape: Any) -> int:
    """Kernels one call of `op` launches: one, and a second that sums a persistent backward's partials (or, for
    LayerNorm's backward of rows wider than LAYERNORM_CHUNKED_WIDTH, sums dw and db over the rows)."""
    spec, s = FUSED_OPS[op], fused_shape(op, tokens, width, dtype, **shape)
    return 1 + (spec.reduction == "always" or (bool(spec.reduction) and bool(getattr(s, spec.reduction, False))))
