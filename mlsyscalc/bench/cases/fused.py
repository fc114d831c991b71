"""Benchmark cases for `mlsys bench fused`: the fused memory-bound kernels against the torch paths.

Ops (kernels/): rmsnorm, layernorm (norm.py), swiglu, geglu (glu.py), rotary (rotary.py), dropout_add
(dropout_add.py), each with a forward and a backward pass, and cross_entropy (cross_entropy.py), whose
one kernel is both (pass "fwdbwd"). Each case's bytes and FLOPs are calc/roofline/fused_ops.py's for
"<op>_<pass>" (fewest bytes: each tensor once, weight-gradient partials left out; the partial bytes
our backward adds are in `extra_partial_bytes`), and its predicted time is `predict_fused`'s on the
card's datasheet (the report re-prices with a calibration where the folder holds one). Rows:
kernel `triton_<op>_<pass>`, baseline the torch path (fused_builds.py), shape TOKENSxWIDTH (rotary
TOKENSxHEADSxHEAD_DIM); `extra` holds op, pass, tokens, width, head_dim, read and write bytes. A
`torch_copy` row of the same run measures the card's copy bandwidth, what the report divides by.

Sweeps (`SWEEPS`): "train" = hidden 1024..16384, MLP intermediate sizes 2816..53248 (SwiGLU, GeGLU),
rotary head_dim 128 with 8, 32 and 128 heads, all at 1..65536 tokens; cross-entropy at 1024, 4096 and
16384 tokens x vocabularies 32000..262144; shapes whose largest tensor passes MAX_TENSOR_BYTES are
left out. "goals": 4096 and 16384 tokens at the common sizes. "heldout": 8..32768 tokens at hidden sizes
3072..12288, MLP widths 8960..24576, 16 and 64 rotary heads and vocabularies 49152..256000, none of them
in "train": the shapes predict_fused is scored on after its predictions are committed
(scripts/validate/fused_heldout.py). "fresh": a second held-out grid (2..24576 tokens, hidden 1536..14336,
MLP widths 4864..27648, 4, 24 and 40 rotary heads, vocabularies 65536..202048), in no other sweep and in no probe
of experiments/, for scoring once the heldout shapes had been read; "blind" a third (3..49152 tokens, hidden
1280..6656, MLP widths 3456..20480, 2, 12 and 56 rotary heads, vocabularies 57344..163840), for the kernel changes
chosen after the fresh rows were read; "reserve" a fourth (5..40960 tokens, hidden 1152..9216, MLP widths
3840..23040, 6, 20 and 48 rotary heads, vocabularies 50257..151552), kept unmeasured until a change needs it.
"small": tiny shapes for --interpret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...calc.roofline.fused_ops import fused_count, predict_fused
from ...errors import MlsysError, require
from .. import harness
from ..sweep import Bench, Case

OPS = ("rmsnorm", "layernorm", "swiglu", "geglu", "rotary", "dropout_add", "cross_entropy")
PASSES = ("fwd", "bwd", "fwdbwd")
SWEEPS = ("train", "goals", "heldout", "fresh", "blind", "reserve", "small")
BASELINES = {"rmsnorm": "F.rms_norm", "layernorm": "F.layer_norm", "swiglu": "F.silu(g)*u",
             "geglu": "F.gelu_tanh(g)*u", "rotary": "rotate_half", "dropout_add": "F.dropout+add",
             "cross_entropy": "F.cross_entropy fp32"}
FAMILY = {"rmsnorm": "hidden", "layernorm": "hidden", "dropout_add": "hidden", "swiglu": "mlp", "geglu": "mlp",
          "rotary": "rotary", "cross_entropy": "vocab"}
MAX_TENSOR_BYTES = 4 * 2**30   # larger inputs are left out of the sweeps

TOKENS = (1, 16, 256, 1024, 4096, 16384, 65536)
HIDDEN = (1024, 2048, 4096, 8192, 16384)
INTERMEDIATE = (2816, 5632, 11008, 14336, 28672, 53248)   # llama/mistral/qwen MLP widths (one half)
HEAD_DIM = 128
ROTARY_HEADS = (8, 32, 128)
VOCAB = (32000, 50304, 128256, 151936, 262144)
HELDOUT_TOKENS = (8, 512, 2048, 8192, 32768)   # the heldout sweep: token counts and widths the train sweep lacks
FRESH_TOKENS = (2, 64, 768, 3072, 24576)        # the fresh sweep: in neither sweep above nor in experiments/' probes
BLIND_TOKENS = (3, 48, 1536, 6144, 49152)      # the blind sweep: in none of the above
RESERVE_TOKENS = (5, 96, 1280, 5120, 40960)     # the reserve sweep: in none of the above
Grid = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]
GRIDS: dict[str, Grid] = {   # sweep -> family -> (tokens, widths); rotary widths are heads x head_dim
    "train": {"hidden": (TOKENS, HIDDEN), "mlp": (TOKENS, INTERMEDIATE),
              "rotary": (TOKENS, tuple(h * HEAD_DIM for h in ROTARY_HEADS)), "vocab": ((1024, 4096, 16384), VOCAB)},
    "goals": {"hidden": ((4096, 16384), (4096, 8192)), "mlp": ((4096, 16384), (11008, 14336)),
              "rotary": ((4096, 16384), (32 * HEAD_DIM,)), "vocab": ((4096, 16384), (128256,))},
    "heldout": {"hidden": (HELDOUT_TOKENS, (3072, 5120, 6144, 12288)), "mlp": (HELDOUT_TOKENS, (8960, 13824, 18944, 24576)),
                "rotary": (HELDOUT_TOKENS, (16 * HEAD_DIM, 64 * HEAD_DIM)), "vocab": ((2048, 8192), (49152, 100352, 256000))},
    "fresh": {"hidden": (FRESH_TOKENS, (1536, 2304, 3840, 5376, 14336)), "mlp": (FRESH_TOKENS, (4864, 9216, 21504, 27648)),
              "rotary": (FRESH_TOKENS, (4 * HEAD_DIM, 24 * HEAD_DIM, 40 * HEAD_DIM)),
              "vocab": ((768, 3072), (65536, 92544, 202048))},
    "blind": {"hidden": (BLIND_TOKENS, (1280, 1792, 2816, 4352, 6656)), "mlp": (BLIND_TOKENS, (3456, 7424, 12800, 20480)),
               "rotary": (BLIND_TOKENS, (2 * HEAD_DIM, 12 * HEAD_DIM, 56 * HEAD_DIM)),
               "vocab": ((1536, 6144), (57344, 131072, 163840))},
    "reserve": {"hidden": (RESERVE_TOKENS, (1152, 2688, 3328, 4992, 9216)),
                "mlp": (RESERVE_TOKENS, (3840, 6912, 15360, 23040)),
                "rotary": (RESERVE_TOKENS, (6 * HEAD_DIM, 20 * HEAD_DIM, 48 * HEAD_DIM)),
                "vocab": ((1280, 5120), (50257, 100000, 151552))},
    "small": {"hidden": ((1, 17), (40, 96)), "mlp": ((5,), (72,)), "rotary": ((6,), (3 * 16,)),
              "vocab": ((4,), (300, 5000))},
}
SMALL_HEAD_DIM = 16
COPY_BYTES = {"small": 2**20}   # bytes the torch_copy row copies (default 1 GiB)
TORCH_DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class Shape:
    tokens: int
    width: int
    head_dim: int | None = None   # rotary: width = heads x head_dim

    def label(self) -> str:
        if self.head_dim:
            return f"{self.tokens}x{self.width // self.head_dim}x{self.head_dim}"
        return f"{self.tokens}x{self.width}"

    @property
    def options(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim} if self.head_dim else {}


def passes_of(op: str) -> tuple[str, ...]:
    return ("fwdbwd",) if op == "cross_entropy" else ("fwd", "bwd")


def largest_tensor_bytes(op: str, s: Shape, itemsize: int = 2) -> int:
    """The op's largest tensor: the (tokens, 2 x I) gate|up input of a GLU, else (tokens, width)."""
    return s.tokens * s.width * itemsize * (2 if FAMILY[op] == "mlp" else 1)


def shapes(op: str, sweep: str) -> list[Shape]:
    tokens, widths = GRIDS[sweep][FAMILY[op]]
    head_dim = (SMALL_HEAD_DIM if sweep == "small" else HEAD_DIM) if op == "rotary" else None
    found = [Shape(t, w, head_dim) for w in widths for t in tokens]
    return [s for s in found if largest_tensor_bytes(op, s) <= MAX_TENSOR_BYTES]


def card_of(env: dict[str, Any]) -> str | None:
    """The built-in GPU a row's env names (None under the interpreter or for a card without a spec)."""
    from ...calc.roofline.calibration import match_gpu

    if env.get("backend") != "cuda":
        return None
    try:
        return match_gpu(str(env.get("gpu", ""))).name
    except MlsysError:
        return None


def price_ms(op_pass: str, tokens: int, width: int, dtype: str, gpu: str | None, calibration: Any = None,
             **shape: Any) -> float | None:
    """predict_fused's time in ms on `gpu` (None: no prediction)."""
    if gpu is None:
        return None
    return predict_fused(op_pass, tokens, width, dtype, gpu, calibration, **shape).predicted_s * 1e3


def fused_case(op: str, pass_: str, s: Shape, dtype: str, gpu: str | None) -> Case:
    from .fused_builds import BUILDS

    op_pass = f"{op}_{pass_}"
    count = fused_count(op_pass, s.tokens, s.width, dtype, **s.options)
    extra = {"op": op, "pass": pass_, "tokens": s.tokens, "width": s.width, "head_dim": s.head_dim,
             "read_bytes": count.read_bytes, "write_bytes": count.write_bytes}

    def build() -> Bench:
        import torch

        bench = BUILDS[(op, pass_)](op, s.tokens, s.width, getattr(torch, dtype), **s.options)
        bench.extra.update(extra)
        return bench

    return Case(kernel=f"triton_{op_pass}", baseline=BASELINES[op], shape=s.label(), dtype=dtype, build=build,
                flops=count.flops, bytes=count.read_bytes + count.write_bytes, gate=dtype,
                predicted_ms=price_ms(op_pass, s.tokens, s.width, dtype, gpu, **s.options))


def copy_case(nbytes: int, dtype: str) -> Case:
    """torch's copy of `nbytes` (read + write counted): the copy bandwidth the report compares against."""
    def build() -> Bench:
        import torch

        src = torch.randn(nbytes // torch.empty((), dtype=getattr(torch, dtype)).element_size(),
                          device=harness.device(), dtype=getattr(torch, dtype))
        dst = torch.empty_like(src)
        return Bench(run=lambda: dst.copy_(src), reference=lambda: src, extra={"op": "copy"})

    return Case(kernel="torch_copy", baseline="", shape=f"{nbytes}B", dtype=dtype, build=build,
                bytes=2.0 * nbytes, gate=dtype)


def bench_cases(ops: tuple[str, ...] = OPS, passes: tuple[str, ...] = PASSES, sweep: str | None = None,
                dtype: str | None = None, small: bool = False) -> list[Case]:
    """The copy row, then every chosen (op, pass) over the sweep's shapes; small = under --interpret."""
    sweep = sweep or ("small" if small else "train")
    require(sweep in SWEEPS, f"unknown sweep {sweep!r} (use one of: {', '.join(SWEEPS)})")
    require(not small or sweep == "small", f"--interpret runs the small sweep only, not {sweep!r}")
    require(set(ops) <= set(OPS), f"unknown op {', '.join(sorted(set(ops) - set(OPS)))} (use: {', '.join(OPS)})")
    dtype = dtype or ("float16" if small else "bfloat16")
    require(dtype in TORCH_DTYPES, f"unknown dtype {dtype!r} (use one of: {', '.join(TORCH_DTYPES)})")
    chosen = [(op, p) for op in ops for p in passes_of(op) if p in passes]
    require(bool(chosen), f"none of {', '.join(ops)} has pass {', '.join(passes)} "
                          "(cross_entropy's one kernel is pass fwdbwd; the others have fwd and bwd)")
    gpu = card_of(harness.env_metadata())
    return [copy_case(COPY_BYTES.get(sweep, 2**30), dtype)] + \
        [fused_case(op, p, s, dtype, gpu) for op, p in chosen for s in shapes(op, sweep)]
