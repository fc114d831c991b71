"""The autotuners' timer: GPU time of one launch with a cold L2, without the host's launch cost.

`triton.testing.do_bench` times each call between two events after an L2-flushing memset. When a
call's host work (the autotuner's own dispatch, the JIT binder, descriptor encoding) outlasts that
memset, the GPU waits for the host inside the timed window, and on small shapes every config then
measures the same host time: the tuner picks by noise. Here the calls are captured once into a CUDA
graph, each preceded by the same flush, and the graph is replayed; a graph of the flushes alone is
timed the same way and subtracted. What remains is the kernels' own time on a cold L2.

Falls back to `do_bench` with short windows when the call cannot be captured (an allocation or
synchronisation that graphs forbid). Calls of LONG_MS or more are timed by `do_bench` itself: the
host cannot show through its window there, it is how the reports time, and on one H200 the graph
replay's per-config times of 0.4-1 ms matmuls strayed from do_bench's by up to 15% in either
direction (experiments/probe_configs.py), enough to reorder configs a few percent apart. The switch is
per call: candidates on both sides of LONG_MS in one comparison are timed by different methods
(both medians; near 0.2 ms they differ little, since host time cannot show there either way).
"""

from __future__ import annotations

import statistics

import torch
import triton

_FLUSH_BYTES = 256 * 1024 * 1024   # larger than any Hopper L2 (50-60 MB), as do_bench's flush
LONG_MS = 0.2                      # from this GPU time per call on, do_bench decides
_flush: dict = {}                  # device index -> flush buffer
_flush_only_ms: dict = {}          # (device index, reps) -> time of a graph of flushes alone


def release_buffers() -> None:
    """Drop the L2-flush buffers (256 MiB a device) that timing keeps between calls; the next timing
    allocates them again. A process measuring its own peak memory calls this once tuning is done."""
    _flush.clear()


def _graph(body, reps: int) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            body()
    return graph


def _replay_ms(graph: torch.cuda.CUDAGraph, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def gpu_time_ms(fn, quantiles=None, reps: int = 8, rounds: int = 5):
    """Median (or the given quantiles, as a list) of fn's GPU time per call in ms, L2 flushed before each."""
    try:
        fn()                                 # compile / allocate outside the capture
        torch.cuda.synchronize()
        dev = torch.cuda.current_device()
        if dev not in _flush:
            _flush[dev] = torch.empty(_FLUSH_BYTES, dtype=torch.int8, device="cuda")
        flush = _flush[dev]

        def body():
            flush.zero_()
            fn()

        graph = _graph(body, reps)
        if (dev, reps) not in _flush_only_ms:
            _flush_only_ms[(dev, reps)] = statistics.median(_replay_ms(_graph(flush.zero_, reps), rounds + 2))
        base = _flush_only_ms[(dev, reps)]
        per_call = [max(t - base, 0.0) / reps for t in _replay_ms(graph, rounds)]
        del graph
    except Exception:   # noqa: BLE001 - anything a graph cannot hold: time it the plain way
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=5, rep=20, quantiles=quantiles, return_mode="median")
    if statistics.median(per_call) >= LONG_MS:
        return triton.testing.do_bench(fn, warmup=10, rep=60, quantiles=quantiles, return_mode="median")
    if quantiles is None:
        return statistics.median(per_call)
    ordered = sorted(per_call)
    return [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in quantiles]
