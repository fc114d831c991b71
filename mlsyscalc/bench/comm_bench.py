"""NCCL collective benchmark: one process per GPU through torch.distributed, launched by torchrun.

    torchrun --nproc_per_node 8 -m mlsyscalc.bench.comm_bench --out comm.jsonl
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-endpoint HOST:PORT -m mlsyscalc.bench.comm_bench ...

(`mlsys bench comm` starts torchrun for one node.) For each collective and size it

1. fills fresh inputs with exact small integers (float32), runs the collective once and checks
   every element of the result on every rank; a wrong result is recorded, never timed;
2. warms up, then times trials of back-to-back calls with CUDA events (wall clock on the CPU/gloo), each
   after a barrier and at least about 10 ms long; a trial's time is its slowest rank's, the row's the
   median trial, with the best, the worst and their spread beside it (mlsyscalc.bench.comm_timing); with
   `--graph` the same calls are also captured in a CUDA graph and replayed (device time, no host);
3. appends a row (rank 0) with algbw/busbw as nccl-tests defines them and the alpha-beta
   prediction (mlsyscalc.calc.comm.collectives) beside it.

NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is forced before NCCL starts.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from ..calc.comm.collectives import COLLECTIVES, busbw_factor, collective_cost
from ..readers.records import read_comm_rows
from ..units import parse_bytes
from .comm_timing import MAX_GRAPH_ITERS, PROBE_CALLS, TRIALS, WARMUP, iters_for, summarize

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GRAPH_SKIP = {"p2p": "batched send/recv is not captured"}  # collectives timed eagerly only
CLUSTER_BY_GPU = (("H200", "hgx-h200"), ("H100", "hgx-h100"), ("A100", "dgx-a100"))


def sizes_between(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo*factor, ... up to hi (inclusive)."""
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def _pattern(torch, numel: int, device, offset: float = 0.0):
    """Exact small integers 0..12 (+offset) in float32: sums of a few ranks stay exact."""
    return (torch.arange(numel, device=device) % 13).to(torch.float32) + offset


def _build(torch, dist, collective: str, numel: int, rank: int, p: int, device) -> tuple[Callable, Callable]:
    """(run, check): run() issues the collective; check() -> True when this rank's result is right."""
    chunk = numel // p
    if collective == "all-reduce":
        buf = _pattern(torch, numel, device, rank)
        want = lambda: _pattern(torch, numel, device) * p + p * (p - 1) / 2  # noqa: E731
        return (lambda: dist.all_reduce(buf)), (lambda: torch.equal(buf, want()))
    if collective == "all-gather":
        inp, out = _pattern(torch, chunk, device, rank), torch.empty(numel, device=device)
        want = lambda: torch.cat([_pattern(torch, chunk, device, r) for r in range(p)])  # noqa: E731
        return (lambda: dist.all_gather_into_tensor(out, inp)), (lambda: torch.equal(out, want()))
    if collective == "reduce-scatter":
        inp, out = _pattern(torch, numel, device, rank), torch.empty(chunk, device=device)
        want = lambda: _pattern(torch, numel, device)[rank * chunk:(rank + 1) * chunk] * p + p * (p - 1) / 2  # noqa: E731
        return (lambda: dist.reduce_scatter_tensor(out, inp)), (lambda: torch.equal(out, want()))
    if collective == "all-to-all":
        inp = torch.cat([_pattern(torch, chunk, device, 16 * rank + j) for j in range(p)])
        out = torch.empty(numel, device=device)
        want = lambda: torch.cat([_pattern(torch, chunk, device, 16 * k + rank) for k in range(p)])  # noqa: E731
        return (lambda: dist.all_to_all_single(out, inp)), (lambda: torch.equal(out, want()))
    if collective == "broadcast":
        buf = _pattern(torch, numel, device, 1) if rank == 0 else torch.zeros(numel, device=device)
        return (lambda: dist.broadcast(buf, src=0)), (lambda: torch.equal(buf, _pattern(torch, numel, device, 1)))
    if collective == "reduce":
        buf = _pattern(torch, numel, device, rank)
        want = lambda: _pattern(torch, numel, device) * p + p * (p - 1) / 2  # noqa: E731
        return (lambda: dist.reduce(buf, dst=0)), (lambda: rank != 0 or torch.equal(buf, want()))
    if collective == "p2p":  # pairs 0<->1, 2<->3, ... all at once: each rank sends n to its partner and receives n
        send, recv, peer = _pattern(torch, numel, device, rank), torch.empty(numel, device=device), rank ^ 1

        def run():
            ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return run, (lambda: torch.equal(recv, _pattern(torch, numel, device, peer)))
    raise ValueError(f"unknown collective {collective!r}")


class _Comm:
    """The process group, its device and the few reductions the benchmark needs."""

    def __init__(self, backend: str):
        for key, value in SAFE_ENV.items():
            os.environ[key] = value
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        cuda = torch.cuda.is_available()
        self.backend = ("nccl" if cuda else "gloo") if backend == "auto" else backend
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.device = torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")
        if self.backend == "nccl":
            torch.cuda.set_device(self.device)
            dist.init_process_group("nccl", device_id=self.device)
        else:
            dist.init_process_group("gloo")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.nodes = max(1, self.world // int(os.environ.get("LOCAL_WORLD_SIZE", self.world)))

    def reduce(self, value: float, op: str) -> float:
        return self.reduce_list([value], op)[0]

    def reduce_list(self, values: list[float], op: str) -> list[float]:
        """Element by element over the ranks (MAX, MIN, SUM)."""
        t = self.torch.tensor([float(v) for v in values], device=self.device, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=getattr(self.dist.ReduceOp, op))
        return [float(v) for v in t.tolist()]

    def sync(self) -> None:
        if self.backend == "nccl":
            self.torch.cuda.synchronize(self.device)

    def fence(self) -> None:
        """Every rank idle and lined up before a trial: the device drained, a barrier, drained again."""
        self.sync()
        self.dist.barrier()
        self.sync()

    def time_loop(self, run: Callable, iters: int) -> tuple[float, float]:
        """(seconds per call on the stream, seconds the host took to issue one) over `iters` back-to-back calls."""
        self.fence()
        if self.backend == "nccl":
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            t0 = time.perf_counter()
            for _ in range(iters):
                run()
            issued = time.perf_counter() - t0
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3 / iters, issued / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            run()
        took = (time.perf_counter() - t0) / iters
        return took, took

    def capture(self, run: Callable, iters: int):
        """A CUDA graph of `iters` calls (captured, not run; nccl backend only)."""
        torch = self.torch
        self.sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for _ in range(iters):
                run()
        self.sync()
        return graph

    def time_graph(self, graph, iters: int) -> float:
        """Seconds per call of one replay of a graph of `iters` calls (CUDA events; no host in the loop)."""
        self.fence()
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / iters


def measure(comm: _Comm, collective: str, size: int, graph: bool = False) -> dict[str, Any]:
    """Check, then time one collective of `size` bytes; the row's numbers are the slowest rank's."""
    torch, p = comm.torch, comm.world
    numel = max(p, size // 4 // p * p)  # float32, divisible by the ranks
    row: dict[str, Any] = {"collective": collective, "size_bytes": numel * 4, "count": numel, "dtype": "float32",
                           "gpus": p, "nodes": comm.nodes, "backend": comm.backend}
    run, check = _build(torch, comm.dist, collective, numel, comm.rank, p, comm.device)
    run()
    comm.sync()
    row["ok"] = comm.reduce(1.0 if check() else 0.0, "MIN") == 1.0
    if not row["ok"]:
        row["error"] = "result differs from the expected values on at least one rank"
        return row
    for _ in range(WARMUP):
        run()
    probe, _ = comm.time_loop(run, PROBE_CALLS)
    iters = iters_for(comm.reduce(probe, "MAX"))
    timed = [comm.time_loop(run, iters) for _ in range(TRIALS)]
    trials = comm.reduce_list([t for t, _ in timed], "MAX")  # each trial's slowest rank
    host = comm.reduce_list([h for _, h in timed], "MAX")
    row.update(summarize(trials), iters=iters, trials=TRIALS, host_issue_s=statistics.median(host))
    if graph:
        row.update(_graph_timing(comm, collective, run, iters))
    algbw = row["size_bytes"] / row["time_s"]
    row.update(algbw_GBps=algbw / 1e9, busbw_GBps=algbw * busbw_factor(collective, p) / 1e9)
    del run, check
    return row


def _graph_timing(comm: _Comm, collective: str, run: Callable, iters: int) -> dict[str, Any]:
    """graph_* keys: the same calls captured in a CUDA graph, replayed TRIALS times (or why not)."""
    if collective in GRAPH_SKIP or comm.backend != "nccl":
        return {"graph_error": GRAPH_SKIP.get(collective, "CUDA graphs need the nccl backend")}
    n, graph, error = min(iters, MAX_GRAPH_ITERS), None, ""
    try:
        graph = comm.capture(run, n)
    except RuntimeError as exc:  # a capture this NCCL/torch build does not support
        error = f"{exc.__class__.__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
    if comm.reduce(0.0 if error else 1.0, "MIN") < 1.0 or graph is None:  # every rank reduces; replay only where all captured
        return {"graph_error": error or "the capture failed on another rank"}
    graph.replay()  # warm-up replay
    trials = comm.reduce_list([comm.time_graph(graph, n) for _ in range(TRIALS)], "MAX")
    del graph
    return summarize(trials, "graph_") | {"graph_iters": n}


def predict(row: dict[str, Any], cluster: str, algo: str = "ring") -> dict[str, Any]:
    """The alpha-beta prediction for a measured row, and its error (measured - predicted) / predicted."""
    cost = collective_cost(row["collective"], row["size_bytes"], row["gpus"], cluster, row["nodes"], algo)
    out = {"cluster": cluster, "algo": algo, "predicted_time_s": cost.time_s,
           "predicted_busbw_GBps": cost.busbw_Bps / 1e9}
    if row.get("time_s"):
        out["prediction_error"] = (row["time_s"] - cost.time_s) / cost.time_s
    return out


def environment(comm: _Comm) -> dict[str, Any]:
    from .harness import git_commit

    torch = comm.torch
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "backend": comm.backend,
                           "world_size": comm.world, "nodes": comm.nodes, "git_commit": git_commit(),
                           "hostname": os.uname().nodename,
                           "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
    if comm.backend == "nccl":
        env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        env["gpu"] = torch.cuda.get_device_name(comm.device)
        env["gpu_count_local"] = torch.cuda.device_count()
    else:
        env["gpu"] = "cpu (gloo)"
    return env


def default_cluster(env: dict[str, Any]) -> str:
    """The built-in cluster whose GPU matches the card (hgx-h100 when none does)."""
    return next((c for key, c in CLUSTER_BY_GPU if key in str(env.get("gpu", ""))), "hgx-h100")


def _done(path: Path, gpus: int, backend: str) -> set[tuple[str, int]]:
    if not path.exists() or not path.stat().st_size:
        return set()
    rows = read_comm_rows(path, tuple(COLLECTIVES))
    return {(r["collective"], r["size_bytes"]) for r in rows
            if r.get("ok") and r.get("gpus") == gpus and r.get("backend") == backend}


def run_sweep(collectives: list[str], sizes: list[int], out: Path, backend: str = "auto",
              cluster: str | None = None, graph: bool = False) -> None:
    """Every rank calls this; rank 0 appends the rows to `out` as they are measured."""
    comm = _Comm(backend)
    env = environment(comm)
    cluster = cluster or default_cluster(env)
    done = _done(out, comm.world, comm.backend) if comm.rank == 0 else set()
    holder = [done]
    comm.dist.broadcast_object_list(holder, src=0)
    done = holder[0]
    for collective in collectives:
        if collective == "p2p" and comm.world % 2:
            if comm.rank == 0:
                print(f"p2p skipped: it pairs ranks 0<->1, 2<->3, ..., and {comm.world} is odd", flush=True)
            continue
        for size in sizes:
            numel = max(comm.world, size // 4 // comm.world * comm.world)
            if (collective, numel * 4) in done:
                continue
            row = measure(comm, collective, size, graph)
            if comm.rank == 0:
                row.update(predict(row, cluster))
                row["measured_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                row["env"] = env
                with out.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                print(f"{collective:>14} {row['size_bytes']:>12} B  "
                      + (f"{row['time_s'] * 1e6:10.1f} us  busbw {row['busbw_GBps']:8.2f} GB/s  "
                         f"model {row['predicted_busbw_GBps']:8.2f}" if row["ok"] else "WRONG RESULT"), flush=True)
    comm.dist.barrier()
    comm.dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="comm_bench.jsonl", help="JSONL file the rows are appended to")
    parser.add_argument("--collective", action="append", choices=COLLECTIVES, help="repeatable; default all")
    parser.add_argument("--min-size", default="8KiB")
    parser.add_argument("--max-size", default="1GiB")
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--cluster", default=None, help="cluster spec for the predictions (default: by GPU name)")
    parser.add_argument("--graph", action="store_true", help="also time the calls replayed from a CUDA graph")
    args = parser.parse_args(argv)
    sizes = sizes_between(parse_bytes(args.min_size), parse_bytes(args.max_size), args.factor)
    run_sweep(args.collective or list(COLLECTIVES), sizes, Path(args.out), args.backend, args.cluster, args.graph)


if __name__ == "__main__":
    main()
