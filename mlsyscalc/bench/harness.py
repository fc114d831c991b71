"""The GPU harness core: backend selection, environment metadata, correctness gate, timing.

Every benchmark goes through the same four steps (ARCHITECTURE.md, "Data flow"):

1. `use_backend(interpret)` picks the CUDA card, or the Triton interpreter on the CPU
   (`TRITON_INTERPRET=1`, set before triton is imported); without either it raises MlsysError.
2. The kernel runs on fresh random non-zero inputs and `check_close` compares it with a torch
   reference in higher precision (relative Frobenius error, tolerance per dtype).
3. Only a kernel that passed is timed: `time_ms` = `triton.testing.do_bench(..., return_mode=
   "median")`, which flushes L2 before every call. The torch baseline is timed the same way in the
   same process.
4. The result becomes a `Row` (see `rows.py`) appended to a `ResultStore` at once.

torch and triton are imported inside functions: importing this module costs nothing.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import MlsysError

# Relative Frobenius error ||out - ref|| / ||ref|| allowed per dtype of the kernel's operands or
# output, whichever is coarser. Orders of magnitude (unit roundoffs of the formats): fp32 far below 1e-3, tf32 (Triton's
# default fp32 dot) near 3e-4, bf16 operands 1e-3..1e-2 (8 mantissa bits: unit roundoff 3.9e-3).
# fp8/int8/int4 kernels are checked against a reference built from the *same quantised inputs*, so
# their error is output rounding plus accumulation order, not quantisation error.
TOLERANCES = {
    "float32": 2e-3,
    "tf32": 2e-3,
    "float16": 5e-3,
    "bfloat16": 2e-2,
    "fp8": 3e-2,
    "int8": 2e-2,
    "int4": 2e-2,
}


def use_backend(interpret: bool) -> str:
    """Select where kernels run: 'cuda', or 'interpret' (Triton interpreter on the CPU).

    Raises MlsysError (exit 2 in the CLI) when no CUDA GPU is present and `interpret` is off.
    """
    if interpret:
        if "triton" in _imported() and os.environ.get("TRITON_INTERPRET") != "1":
            raise MlsysError("--interpret must be chosen before triton is imported (set TRITON_INTERPRET=1)")
        os.environ["TRITON_INTERPRET"] = "1"
        _import_or_fail()
        return "interpret"
    torch = _import_or_fail()
    if not torch.cuda.is_available():
        raise MlsysError(
            "mlsys bench needs a CUDA GPU (none found); "
            "use --interpret for a small CPU smoke run through TRITON_INTERPRET=1"
        )
    return "cuda"


def _imported() -> set[str]:
    import sys

    return {name.split(".")[0] for name in sys.modules}


def _import_or_fail():
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        raise MlsysError(f"mlsys bench needs torch and triton ({exc}); pip install 'mlsyscalc[gpu]'") from exc
    return torch


def device() -> str:
    """The torch device kernels run on: 'cuda' on a GPU, 'cpu' under the interpreter."""
    return "cpu" if interpreting() else "cuda"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class Check:
    """Outcome of the correctness gate."""

    ok: bool
    rel_err: float
    tol: float
    message: str


def check_close(out, ref, dtype: str, tol: float | None = None) -> Check:
    """Relative Frobenius error of `out` against `ref` (both upcast to float64), gated by dtype.

    NaN/inf anywhere, a shape mismatch, or an all-zero reference fails the gate. The sums run on out's
    device (`_square_sums`).
    """
    tol = TOLERANCES[dtype] if tol is None else tol
    if tuple(out.shape) != tuple(ref.shape):
        return Check(False, float("nan"), tol, f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    finite, err_sq, ref_sq = _square_sums(out, ref)
    if not finite:
        return Check(False, float("nan"), tol, "output has NaN/inf (unwritten or overflowed elements)")
    if ref_sq == 0.0:
        return Check(False, float("nan"), tol, "reference is all zeros: the check would prove nothing")
    err = math.sqrt(err_sq / ref_sq)
    ok = err <= tol
    return Check(ok, err, tol, "ok" if ok else f"relative error {err:.3e} > tolerance {tol:.1e}")


GATE_CHUNK = 1 << 26   # elements upcast to float64 at a time (512 MB): a 1G-element output stays on its card


def _square_sums(out, ref) -> tuple[bool, float, float]:
    """(all of out finite, ||out - ref||^2, ||ref||^2) in float64, on out's device, GATE_CHUNK elements at a
    time: the 1G-element outputs of the fused sweeps gate in well under a second, where a float64 copy
    to the host took seconds."""
    import torch

    o, r = out.detach().reshape(-1), ref.detach().reshape(-1).to(out.device)
    finite = torch.ones((), dtype=torch.bool, device=o.device)
    err_sq = torch.zeros((), dtype=torch.float64, device=o.device)
    ref_sq = torch.zeros((), dtype=torch.float64, device=o.device)
    for start in range(0, o.numel(), GATE_CHUNK):
        oc, rc = o[start:start + GATE_CHUNK].double(), r[start:start + GATE_CHUNK].double()
        finite &= torch.isfinite(oc).all()
        err_sq += torch.linalg.vector_norm(oc - rc) ** 2
        ref_sq += torch.linalg.vector_norm(rc) ** 2
    return bool(finite.item()), err_sq.item(), ref_sq.item()


def time_ms(fn: Callable[[], Any], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median milliseconds per call of `fn`.

    On the GPU: `triton.testing.do_bench(return_mode="median")` (CUDA events, L2 flushed before
    each call, so the CPU launch cost hides behind the flush). Under the interpreter: the median
    of a few wall-clock calls, which only shows the path runs (never report it as a speed).
    """
    if interpreting():
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return sorted(samples)[1]
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def graphed(fn: Callable[[], Any]) -> tuple[Callable[[], Any], str]:
    """(a call that replays a CUDA graph of `fn`, "graph"), so that do_bench times the GPU and not the host's
    launch path (a Python launcher's 20-150 us would otherwise pace a small kernel); `fn` itself and the reason
    where it cannot be captured (the interpreter, an op that refuses capture), with "eager: <reason>"."""
    if interpreting():
        return fn, "eager: interpreter"
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the capture: compiles, allocator pools
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - an op that cannot be captured is timed as it is
        torch.cuda.synchronize()
        return fn, f"eager: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    return graph.replay, "graph"


@functools.lru_cache(maxsize=1)
def env_metadata() -> dict[str, Any]:
    """GPU name, SM count, clocks (if nvidia-smi answers), driver, CUDA, torch, triton, commit."""
    import torch
    import triton

    env: dict[str, Any] = {
        "backend": "interpret" if interpreting() else "cuda",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "git_commit": git_commit(),
        "hostname": os.uname().nodename,
    }
    if not interpreting() and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sm_count=props.multi_processor_count,
                   memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}")
        env.update(_nvidia_smi())
    else:
        env.update(gpu="cpu (triton interpreter)", sm_count=os.cpu_count())
    return env


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _nvidia_smi() -> dict[str, Any]:
    fields = "driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    keys = ("driver", "sm_clock_MHz", "max_sm_clock_MHz", "mem_clock_MHz", "power_limit_W")
    return dict(zip(keys, values))


def git_commit() -> str | None:
    """HEAD of the checkout (or $MLSYS_GIT_COMMIT where the copy has no .git), '+dirty' if changed."""
    if os.environ.get("MLSYS_GIT_COMMIT"):
        return os.environ["MLSYS_GIT_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")
