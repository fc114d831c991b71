"""Why a timed decode replay runs longer than its profiled kernels plus the gaps between them at B8-B32 (and
shorter at B1): the same CUDA-graph replay timed four ways, one model and batch at a time.

- isolated: CUDA events around one replay, synchronised after each (how `mlsys bench model` times a step);
- back to back: CUDA events around N replays issued without a synchronisation, divided by N;
- isolated under torch.profiler: as `isolated`, with the profiler recording (its own cost on the kernels);
- profiled span: first kernel start to last kernel end of each replay, from the profiler's kernel records,
  and the kernels' busy time inside it;
- the host's cudaGraphLaunch call of an isolated replay, and the delay from its start to the first kernel
  (under the profiler, which slows the call), the replay call's host time without it, and an isolated replay
  queued behind a spin kernel that hides the launch.

Also the SM and memory clocks (NVML through torch.cuda, when it answers) right after each way.

    python experiments/replay_timing.py MODEL --batch 1,8,32 [--context 2048] [--set KEY=VALUE ...] --out timing.json
"""

from __future__ import annotations

import statistics


def _events(fn, reps: int) -> list[float]:
    import torch

    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return out


def _clocks() -> dict:
    import torch

    try:
        return {"sm_mhz": torch.cuda.clock_rate(), "power_w": torch.cuda.power_draw() / 1000}
    except Exception as exc:  # NVML missing or not permitted: say so, keep the timings
        return {"clocks": f"unavailable: {type(exc).__name__}"}


def _launch(step, reps: int) -> dict:
    """Isolated replays under the profiler with the host's API calls: how long cudaGraphLaunch runs on the host,
    and how long after it starts the replay's first kernel starts (medians, us)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _events(step, reps)
    events = prof.events()
    launches = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == "cudaGraphLaunch")
    kernels = sorted(e.time_range.start for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    first = [next((k for k in kernels if k >= start), None) for start, _ in launches]
    return {"graph_launch_host_us": statistics.median(e - s for s, e in launches) if launches else None,
            "launch_to_first_kernel_us": statistics.median(f - s for (s, _), f in zip(launches, first) if f is not None)
            if launches else None, "graph_launches_seen": len(launches)}


def _hidden_launch(step, reps: int) -> dict:
    """Without the profiler: the host's time in one replay call (synchronised before it, not after), and an isolated
    replay queued behind a 2 ms spin kernel, so that the host's launch hides under it (the step: the whole minus the
    spin kernel alone)."""
    import time

    import torch

    host = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    cycles = int(2e-3 * torch.cuda.clock_rate() * 1e6) if hasattr(torch.cuda, "clock_rate") else 3_000_000

    def spin():
        torch.cuda._sleep(cycles)

    def spin_then_step():
        spin()
        step()
    alone, both = statistics.median(_events(spin, reps)), statistics.median(_events(spin_then_step, reps))
    return {"replay_call_host_us": statistics.median(host), "spin_us": alone, "behind_spin_us": both - alone}


def measure(step, reps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mlsyscalc.bench.cases.model import _back_to_back_s

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    isolated = _events(step, reps)
    after_isolated = _clocks()
    back_to_back = _back_to_back_s(step, reps) * 1e6
    after_b2b = _clocks()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        profiled = _events(step, reps)
    kernels = sorted(((e.time_range.start, e.time_range.end) for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA))
    spans, busy, replay = [], [], []
    for k in kernels:  # a replay ends where the next kernel starts more than 50 us later
        if replay and k[0] - replay[-1][1] > 50:
            spans.append(replay[-1][1] - replay[0][0])
            busy.append(sum(e - s for s, e in replay))
            replay = []
        replay.append(k)
    if replay:
        spans.append(replay[-1][1] - replay[0][0])
        busy.append(sum(e - s for s, e in replay))
    launch = _launch(step, reps)
    launch.update(_hidden_launch(step, reps))
    return {**launch, "isolated_us": statistics.median(isolated), "isolated_min_us": min(isolated),
            "back_to_back_us": back_to_back, "isolated_profiled_us": statistics.median(profiled),
            "profiled_span_us": statistics.median(spans), "profiled_busy_us": statistics.median(busy),
            "replays_seen": len(spans), "kernels_per_replay": len(kernels) / max(1, len(spans)),
            "clocks_after_isolated": after_isolated, "clocks_after_back_to_back": after_b2b}


def main() -> None:
    from graph_gaps import decode_parser, each_batch  # this folder's sibling script

    ap = decode_parser(__doc__, "1,8,32")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    each_batch(args, lambda step: measure(step, args.reps))


if __name__ == "__main__":
    main()
