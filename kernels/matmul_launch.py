"""Launch a Triton kernel again without the autotuner's and the binder's per-call Python work.

`kernel[grid](*args, **consts)` does, on every call: the autotuner builds its key and runs the
config's pre-hook, the JIT binds the arguments, specialises each one (type, 16-byte alignment,
integer == 1 / divisible by 16), hashes that into its kernel-cache key and evaluates the grid.
For a given launch *signature* all of that has one answer, so `launch()` does it once: the first
call goes through `kernel[grid]` (autotuning included) and keeps the returned `CompiledKernel`,
the chosen config's constexprs and the grid under a key; later calls with the same key call
`CompiledKernel.run` directly, as `JITFunction.run` itself does at its end (triton 3.6,
runtime/jit.py). Tensor descriptors still get their CUtensorMap encoded per launch by the
driver's launcher (backends/nvidia/driver.py `make_tensordesc_arg`): that part has no cache.

The key covers everything the JIT specialises on: each tensor's dtype, device type and 16-byte alignment,
each descriptor's dtype, shape and strides, every integer's exact value, the constexprs and the
device. Per-call values must be the leading parameters (`args`); the remaining ones come from
`consts` and the config, and must not change under one key.

`CompiledKernel.run`'s argument list is triton-internal: if a direct launch raises (a different
triton), the cache turns itself off for the process (`disabled` holds why, with a warning) and
every launch goes through `kernel[grid]` again.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from triton import knobs
from triton.runtime.driver import driver
from triton.tools.tensor_descriptor import TensorDescriptor

_MAX_ENTRIES = 4096  # distinct launch signatures kept; the cache is emptied beyond this


@dataclass(frozen=True)
class Entry:
    compiled: Any                        # triton CompiledKernel
    grid: tuple[int, int, int]
    tail: tuple                          # values of the parameters after `args`, in signature order
    names: tuple[str, ...]               # all parameter names, for the config's pre-hook
    pre_hook: Callable | None            # the autotuned config's pre-hook (sets descriptor block shapes)


_ENTRIES: dict[tuple, Entry] = {}
disabled: str | None = None  # set when a direct launch failed: the reason


def _spec(x):
    """What the JIT specialises on for one argument, as a hashable value."""
    if isinstance(x, torch.Tensor):
        return (x.dtype, x.is_cuda, x.data_ptr() % 16 == 0)
    if isinstance(x, TensorDescriptor):
        return (x.base.dtype, tuple(x.shape), tuple(x.strides), x.base.data_ptr() % 16 == 0, x.padding)
    return (type(x), x)


def remember(table: dict, key, value, limit: int = _MAX_ENTRIES):
    """table[key] = value, emptying the table first once it holds `limit` entries (a bounded memo); returns value.
    The launch cache and the callers' per-signature fast paths keep theirs this way."""
    if len(table) >= limit:
        table.clear()
    table[key] = value
    return value


def launch_key(kernel, device: int, args: tuple, consts: dict, grid=None) -> tuple:
    """A launch signature: the kernel, device, what the JIT specialises each argument on, the constexprs,
    and a fixed grid. The grid is part of it because it can depend on sizes that are not arguments (decode
    attention's batch is only its grid's last dimension): without it, a batch of 64 after a batch of 16
    of the same cache layout reused the 16-program grid and left 48 rows unwritten. A callable grid is
    evaluated from the arguments and constexprs, which the key already holds."""
    return (id(kernel), device, *map(_spec, args), *consts.items(), None if grid is None or callable(grid) else tuple(grid))


def make_entry(kernel, compiled, grid, args: tuple, consts: dict) -> Entry:
    """Freeze one launch: the chosen config's constexprs (autotuned kernels) and the grid."""
    config = getattr(kernel, "best_config", None)
    names = tuple(kernel.arg_names)
    merged = {**dict(zip(names, args)), **consts, **(config.kwargs if config is not None else {})}
    missing = [n for n in names[len(args):] if n not in merged]
    if missing:
        raise ValueError(f"launch() needs values for {missing}")
    g = tuple(grid(merged) if callable(grid) else grid)
    return Entry(compiled=compiled, grid=(*g, *(1,) * (3 - len(g))),
                 tail=tuple(merged[n] for n in names[len(args):]), names=names,
                 pre_hook=config.pre_hook if config is not None else None)


def launch(kernel, grid, args: tuple, consts: dict, *, cache: bool = True) -> Entry | None:
    """`kernel[grid](*args, **consts)`; with `cache`, repeated signatures skip straight to the launcher.

    Returns the Entry this launch signature maps to (None when uncached), so a caller can keep it
    under a cheaper key of its own and go through `run_entry` next time.
    """
    if not cache or disabled or not args or not isinstance(args[0], (torch.Tensor, TensorDescriptor)) or \
            not _on_gpu(args[0]):
        kernel[grid](*args, **consts)
        return None
    device = driver.active.get_current_device()
    key = launch_key(kernel, device, args, consts, grid)
    entry = _ENTRIES.get(key)
    if entry is None:
        compiled = kernel[grid](*args, **consts)
        if compiled is not None and not hasattr(compiled, "result"):  # not an async-compile future
            entry = remember(_ENTRIES, key, make_entry(kernel, compiled, grid, args, consts))
        return entry
    try:
        run_entry(entry, args, device)
    except Exception as exc:  # noqa: BLE001 - an internal API that moved: fall back, say so once
        _disable(f"{type(exc).__name__}: {exc}")
        kernel[grid](*args, **consts)
        return None
    return entry


def current_stream(device: int) -> int:
    """The device's current CUDA stream as the driver's handle (cheaper on the host than torch's Stream object)."""
    return driver.active.get_current_stream(device)


def run_entry(entry: Entry, args: tuple, device: int, hook: bool = True, stream: int | None = None) -> None:
    """Launch a remembered entry with new leading arguments (same signature: dtypes, alignment, integers).
    hook=False skips the config's pre-hook, for a caller whose arguments already carry what it sets;
    `stream` (current_stream's handle) saves the lookup for a caller that already made it."""
    full = (*args, *entry.tail)
    if hook and entry.pre_hook is not None:
        entry.pre_hook(dict(zip(entry.names, full)))
    if stream is None:
        stream = driver.active.get_current_stream(device)
    c, (g0, g1, g2) = entry.compiled, entry.grid
    c.run(g0, g1, g2, stream, c.function, c.packed_metadata, c.launch_metadata(entry.grid, stream, *full),
          knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *full)


@functools.lru_cache(maxsize=None)
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (4 elsewhere: the CPU interpreter's stand-in)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _disable(reason: str) -> None:
    global disabled
    import warnings

    disabled = reason
    _ENTRIES.clear()
    warnings.warn(f"matmul launch cache off for this process: {reason}", RuntimeWarning, stacklevel=3)


def _on_gpu(x) -> bool:
    return (x.base if isinstance(x, TensorDescriptor) else x).is_cuda


def clear() -> None:
    _ENTRIES.clear()


_SCRATCH: dict = {}   # (bytes, stream) -> buffer; never dropped


def scratch(size: int, align: int, stream) -> torch.Tensor:
    """Triton's global-scratch allocator (device-built TMA descriptors live there), one buffer kept per
    (size, stream) for the process's life: launches on one stream run in order, so the next launch may
    reuse the buffer, a repeated launch costs no allocation on the host, and a launch captured in a CUDA
    graph keeps a valid address (as quant_gemv's split workspace)."""
    key = (size, stream)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(size + align, dtype=torch.int8, device="cuda")
        offset = (-buf.data_ptr()) % align
        buf = _SCRATCH[key] = buf[offset: offset + size]   # sliced once; a hit returns it as is
    return buf


def use_scratch_allocator() -> None:
    """Install `scratch` as triton's allocator (once; idempotent)."""
    import triton

    if getattr(use_scratch_allocator, "done", False):
        return
    triton.set_allocator(scratch)
    use_scratch_allocator.done = True


def add_host_times(bench, on_gpu: bool) -> None:
    """Record host microseconds per call of a harness Bench's kernel (`host_us`) and baseline
    (`baseline_host_us`, when it has one) in its extras; for inputs off the GPU nothing is recorded.
    Above do_bench's L2-flushing memset (~60 us on an H200) host time shows in the timing."""
    if not on_gpu:
        return
    bench.extra["host_us"] = host_us(bench.run)
    if bench.baseline is not None:
        bench.extra["baseline_host_us"] = host_us(bench.baseline)


def host_us(fn: Callable[[], Any], calls: int = 20) -> float:
    """Host time per call in microseconds: `calls` back-to-back calls with no synchronisation in
    between (enqueue cost: Python, the launcher, allocation), then one synchronise outside the clock.
    """
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6
