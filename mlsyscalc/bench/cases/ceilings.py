"""Achievable ceilings of the card: matmul peak per dtype (cuBLAS) and HBM bandwidth.

The roofline calculator reads the JSON this writes (`mlsys bench ceilings --out FILE`) in place
of datasheet numbers. Peak = the best of a few large matmuls per dtype (torch.matmul for
bf16/fp16/tf32, torch._scaled_mm for fp8 e4m3, torch._int_mm for int8); bandwidth = a large
buffer read (sum), written (fill_) and copied (copy_, bytes read + bytes written).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .. import harness
from ..rows import Row

PEAK_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192))
SMALL_SHAPES = ((256, 256, 256),)          # --interpret: the code path, not a speed
BANDWIDTH_BYTES = 2 * 1024**3              # far above L2 (50 MB on H100) so HBM is what is timed


def _matmul_fn(dtype: str, m: int, n: int, k: int) -> Callable[[], Any]:
    import torch

    dev = harness.device()
    if dtype in ("bf16", "fp16", "tf32"):
        tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dtype]
        a = torch.randn(m, k, device=dev, dtype=tdtype)
        b = torch.randn(n, k, device=dev, dtype=tdtype).T
        return lambda: torch.matmul(a, b)
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).T
        one = torch.ones((), device=dev)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if dtype == "int8":
        a = torch.randint(-127, 128, (m, k), device=dev, dtype=torch.int8)
        b = torch.randint(-127, 128, (n, k), device=dev, dtype=torch.int8).T
        return lambda: torch._int_mm(a, b)
    raise ValueError(dtype)


def peak_flops(dtypes=("bf16", "fp16", "fp8", "int8", "tf32"), shapes=PEAK_SHAPES) -> tuple[dict, list]:
    """Best FLOP/s per dtype over `shapes`, and every (dtype, shape, ms, FLOP/s or error) tried."""
    import torch

    best: dict[str, float | None] = {}
    tried = []
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    for dtype in dtypes:
        best[dtype] = None
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        for m, n, k in shapes:
            entry = {"dtype": dtype, "shape": f"{m}x{n}x{k}"}
            try:
                ms = harness.time_ms(_matmul_fn(dtype, m, n, k))
                entry.update(median_ms=ms, flops_per_s=2.0 * m * n * k / (ms * 1e-3))
                best[dtype] = max(best[dtype] or 0.0, entry["flops_per_s"])
            except Exception as exc:  # noqa: BLE001 - e.g. no fp8 on this card: record and go on
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            tried.append(entry)
    torch.backends.cuda.matmul.allow_tf32 = tf32_before
    return best, tried


def bandwidth(nbytes: int = BANDWIDTH_BYTES) -> dict[str, float]:
    """Bytes/s for read (sum), write (fill_) and copy (copy_; read + write bytes counted)."""
    import torch

    dev = harness.device()
    n = nbytes // 4
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    read_ms = harness.time_ms(lambda: src.sum())
    write_ms = harness.time_ms(lambda: dst.fill_(1.5))
    copy_ms = harness.time_ms(lambda: dst.copy_(src))
    return {"read": nbytes / (read_ms * 1e-3), "write": nbytes / (write_ms * 1e-3),
            "copy": 2 * nbytes / (copy_ms * 1e-3)}


def measure(small: bool = False) -> dict[str, Any]:
    """The calibration record (see docs/bench.md, "Calibration file")."""
    env = dict(harness.env_metadata())
    dtypes = ("bf16", "fp16", "tf32") if small else ("bf16", "fp16", "fp8", "int8", "tf32")
    best, tried = peak_flops(dtypes, SMALL_SHAPES if small else PEAK_SHAPES)
    return {
        "gpu": env.get("gpu"),
        "sm_count": env.get("sm_count"),
        "peak_flops": best,
        "bandwidth_Bps": bandwidth(8 * 1024**2 if small else BANDWIDTH_BYTES),
        "matmul_runs": tried,
        "env": env,
        "measured_at": harness.now(),
    }


def to_rows(record: dict[str, Any]) -> list[Row]:
    """A calibration record in the shared row shape: one row per matmul tried (kernel
    `ceiling_matmul`, dtype, shape) and one per bandwidth access (kernel `ceiling_<access>`);
    `from_rows` rebuilds the record (peaks = the best run per dtype)."""
    env, measured_at = dict(record.get("env") or {}), record.get("measured_at")
    rows = [Row(kernel="ceiling_matmul", baseline="", shape=run["shape"], dtype=run["dtype"], ok="error" not in run,
                median_ms=run.get("median_ms"), flops=2.0 * math.prod(int(d) for d in run["shape"].split("x")),
                error=run.get("error"), env=env, measured_at=measured_at).finish()
            for run in record.get("matmul_runs", [])]
    rows += [Row(kernel=f"ceiling_{access}", baseline="", shape="", dtype="float32", ok=True, extra={"Bps": rate},
                 env=env, measured_at=measured_at)
             for access, rate in record.get("bandwidth_Bps", {}).items()]
    return rows


def _flops_per_s(row: Row) -> float | None:
    """FLOP/s of a timed matmul row; None where its FLOPs or time are missing."""
    if row.flops is None or not row.median_ms:
        return None
    return row.flops / (row.median_ms * 1e-3)


def from_rows(rows: list[Row]) -> dict[str, Any]:
    runs = [r for r in rows if r.kernel == "ceiling_matmul"]
    peaks: dict[str, float | None] = {}
    for r in runs:
        peaks.setdefault(r.dtype, None)
        rate = _flops_per_s(r)
        if r.ok and rate is not None:
            peaks[r.dtype] = max(peaks[r.dtype] or 0.0, rate)
    env = rows[0].env if rows else {}
    return {"gpu": env.get("gpu"), "sm_count": env.get("sm_count"), "peak_flops": peaks,
            "bandwidth_Bps": {r.kernel[len("ceiling_"):]: r.extra["Bps"] for r in rows if r.kernel != "ceiling_matmul"},
            "matmul_runs": [{"dtype": r.dtype, "shape": r.shape,
                             **({"error": r.error} if r.error else
                                {"median_ms": r.median_ms, "flops_per_s": _flops_per_s(r)})}
                            for r in runs],
            "env": dict(env), "measured_at": rows[0].measured_at if rows else None}
