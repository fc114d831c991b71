"""reports/serving/replay.md from scripts/validate/serve_replay.py results (replay_*.json, newest first): measured
TTFT/TPOT against `mlsys serve`, with datasheet ceilings, with ceilings fitted to the run's isolated
iterations only (memory and matmul efficiency, per-kernel fixed cost; wall time), and -- where the run
recorded GPU times -- with ceilings fitted to the isolated iterations' GPU time plus the host time per
iteration measured in the lowest-rate replay (`--iteration-overhead-us`). The other replays are held out.

    python scripts/validate/serve_replay_report.py reports/serving/replay_h200.json reports/serving/replay_h100.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.roofline.options import RooflineOptions
from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
from mlsyscalc.calc.serve.iteration import Batch, IterationCost
from mlsyscalc.calc.serve.workload import from_trace
from mlsyscalc.report.markdown import markdown_table
from mlsyscalc.specs.lookup import load_model

KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "throughput_tokens_per_s")
GRID = {"memory": [0.45 + 0.05 * i for i in range(10)], "matmul": [0.4 + 0.1 * i for i in range(5)],
        "launch_s": [1e-6 * u for u in (2, 4, 6, 8, 10, 12)]}


def _batch(step: dict) -> Batch:
    if step["kind"] == "prefill":
        return Batch.of(chunks=((step["size"], 0),), samples=1)
    return Batch.of(contexts=(step["context"],) * step["size"])


def fit(spec, ceil, steps: list[dict], key: str = "measured_s", overhead_s: float = 0.0):
    """Grid search of the ceilings that minimise the squared log error over the isolated iterations'
    `key` time (wall "measured_s" or "gpu_s"); the cost returned carries `overhead_s` per iteration."""
    best = None
    for mem, mm, launch in itertools.product(GRID["memory"], GRID["matmul"], GRID["launch_s"]):
        c = ceil.with_efficiency(memory=mem, matmul=mm)
        c = type(c)(**{**c.__dict__, "launch_s": launch})
        cost = IterationCost(spec, c, RooflineOptions(), overhead_s)
        err = sum(math.log((cost.time_s(_batch(s)) - overhead_s) / s[key]) ** 2 for s in steps)
        if best is None or err < best[0]:
            best = (err, c, cost, {"memory": mem, "matmul": mm, "launch_s": launch})
    return best


def _simulate(spec, ceil, run: dict, cost):
    reqs = [tuple(r) for r in run["requests"]]
    batch_tokens = min(p for _, p, _ in reqs)  # one prompt per prefill iteration, as the loop ran
    opts = ServeOptions(scheduler="vllm", max_seqs=64, max_batch_tokens=batch_tokens, kv_blocks=10**7)
    return simulate(spec, ceil, from_trace(reqs, "replay"), opts, cost)


def compare(spec, ceil, run: dict, cost) -> dict:
    return _simulate(spec, ceil, run, cost).metrics


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def ttft_parts(spec, ceil, run: dict, cost) -> list[list]:
    """TTFT = queueing (arrival -> its prefill starts) + service (prefill start -> first token), measured
    against simulated with the fitted ceilings, and the prefill load: rate x mean service (> 1: the
    prompts alone need more than the whole GPU, so the queue grows through the run)."""
    reqs = [tuple(r) for r in run["requests"]]
    t = run["times"]
    lat = _simulate(spec, ceil, run, cost).latencies
    meas = {"queue": [s - a for s, (a, _, _) in zip(t["sched_s"], reqs)],
            "service": [f - s for f, s in zip(t["first_s"], t["sched_s"])]}
    sim = {"queue": lat["queue"], "service": [a - b for a, b in zip(lat["ttft"], lat["queue"])]}
    rows = []
    for name, label in (("queue", "queueing p50 (ms)"), ("service", "prefill service p50 (ms)")):
        m, s = _median(meas[name]), _median(sim[name])
        rows.append([label, f"{m * 1e3:.1f}", f"{s * 1e3:.1f}", f"{100 * (s / m - 1):+.0f}%"])
    load_m = run["rate"] * sum(meas["service"]) / len(reqs)
    load_s = run["rate"] * sum(sim["service"]) / len(reqs)
    rows.append(["prefill load: rate x mean service", f"{load_m:.2f}", f"{load_s:.2f}", f"{100 * (load_s / load_m - 1):+.0f}%"])
    return rows


def _variants(data: dict, spec, ceil) -> list[tuple[str, object, object, str]]:
    """(label, ceilings, cost, how it was fitted) for each way the simulator is run on this result."""
    err, fceil, fcost, params = fit(spec, ceil, data["steps"])
    out = [("datasheet", ceil, IterationCost(spec, ceil, RooflineOptions()), "the default of `mlsys serve`"),
           ("fitted", fceil, fcost, f"fitted to the isolated iterations' wall time: memory efficiency {params['memory']:.2f}, "
            f"matmul {params['matmul']:.1f}, {params['launch_s'] * 1e6:.0f} us per kernel (squared log error {err:.3f})")]
    lowest = min(data["runs"], key=lambda r: r["rate"])
    host = lowest.get("host_overhead", {}).get("all_s")
    if host is not None and all(s.get("gpu_s") for s in data["steps"]):
        err, gceil, gcost, params = fit(spec, ceil, data["steps"], "gpu_s", host)
        out.append(("GPU fit + host", gceil, gcost,
                    f"fitted to the isolated iterations' GPU time (memory {params['memory']:.2f}, matmul "
                    f"{params['matmul']:.1f}, {params['launch_s'] * 1e6:.0f} us per kernel; error {err:.3f}) plus "
                    f"{host * 1e3:.3f} ms per iteration, the median host time (wall - GPU) of the "
                    f"{lowest['rate']:g} requests/s replay's iterations (`--iteration-overhead-us "
                    f"{host * 1e6:.0f}`)"))
    return out


def page(data: dict, path: str, notes: list[str]) -> str:
    spec = load_model(data["model"])
    ceil = resolve_ceilings(data["gpu_spec"])
    variants = _variants(data, spec, ceil)
    lines = [f"## {data['device']}, commit {data['commit']}", "",
             f"`scripts/validate/serve_replay.py` at commit {data['commit']} on one {data['device']} (torch {data['torch']}, "
             f"{data['dtype']}, CUDA graphs {'on' if data.get('cuda_graphs') else 'off'}; simulated as {data['gpu_spec']}): "
             f"{data['model']} with random weights, a paged KV cache read by our Triton decode kernel, the simulator's vllm "
             "policy (one prompt per prefill iteration, up to 64 running sequences), Poisson arrivals, prompts uniform "
             f"512-1000 rounded up to a multiple of 64, outputs uniform 64-256. Data: `{path}`.", "",
             "Simulated with: " + "; ".join(f"**{label}**, {how}" for label, _, _, how in variants)
             + ". The replays are held out of every fit.", ""]
    rows = []
    for st in data["steps"]:
        row = [st["kind"], st["size"], st["context"], f"{st['measured_s'] * 1e3:.2f}",
               f"{st['gpu_s'] * 1e3:.2f}" if st.get("gpu_s") else "-"]
        for _, _, cost, _ in variants:
            t = cost.time_s(_batch(st))
            row += [f"{t * 1e3:.2f}", f"{100 * (t / st['measured_s'] - 1):+.0f}%"]
        rows.append(row)
    head = ["kind", "batch or tokens", "context", "wall ms", "GPU ms"]
    for label, _, _, _ in variants:
        head += [f"{label} ms", "error"]
    lines += ["### Isolated iterations (median of 5)", ""] + markdown_table(head, rows) + [""]
    goals = []
    for run in data["runs"]:
        sims = [_simulate(spec, c, run, cost).metrics for _, c, cost, _ in variants]
        goals.append((run["rate"], [{k: m[k] / run["measured"][k] - 1 for k in KEYS} for m in sims]))
        rows = [[k, f"{run['measured'][k]:.4g}"] + [x for m in sims for x in
                (f"{m[k]:.4g}", f"{100 * (m[k] / run['measured'][k] - 1):+.0f}%")] for k in KEYS]
        head = ["metric", "measured"] + [x for label, _, _, _ in variants for x in (label, "error")]
        h = run.get("host_overhead", {})
        lines += [f"### {run['rate']:g} requests/s, {len(run['requests'])} requests", ""]
        if h.get("all_s") is not None:
            lines += [f"Host time per iteration (wall - GPU, median): all {h['all_s'] * 1e3:.3f} ms, prefill "
                      f"{h['prefill_s'] * 1e3:.3f} ms, decode {h['decode_s'] * 1e3:.3f} ms.", ""]
        lines += markdown_table(head, rows) + [""]
    lines += ["### Where TTFT goes (" + variants[1][0] + " ceilings)", ""]
    for run in data["runs"]:
        lines += [f"{run['rate']:g} requests/s:", ""]
        lines += markdown_table(["part", "measured", "simulated", "error"],
                                ttft_parts(spec, variants[1][1], run, variants[1][2])) + [""]
    return "\n".join(lines + _goals(goals, [v[0] for v in variants]) + notes) + "\n"


def _goals(goals, labels: list[str]) -> list[str]:
    """The issue's targets: p50 TTFT/TPOT within 10%, p99 within 20%, throughput at saturation within 10%."""
    rows = []
    for label, keys, tol in (("p50 TTFT and TPOT within 10%", ("ttft_p50_s", "tpot_p50_s"), 0.10),
                             ("p99 TTFT and TPOT within 20%", ("ttft_p99_s", "tpot_p99_s"), 0.20)):
        for which, name in enumerate(labels):
            ok = sum(abs(g[1][which][k]) <= tol for g in goals for k in keys)
            rows.append([label, name, f"{ok} of {len(goals) * len(keys)}"])
    sat = max(goals, key=lambda g: g[0])
    for which, name in enumerate(labels):
        rows.append([f"throughput at saturation ({sat[0]:g} req/s) within 10%", name,
                     f"{100 * sat[1][which]['throughput_tokens_per_s']:+.0f}%"])
    return ["### Against the targets", ""] + markdown_table(["target", "ceilings", "met"], rows, "lll") + [""]


NOTES = {"replay_h200.json": [
    "Card and versions: one NVIDIA H200 (driver 580.159.04), torch 2.11.0+cu130, triton 3.6.0, commit d4e0abd; "
    "120 requests per rate. Rates 2, 8 and 40 requests/s are the H100 run's traces; 20, 30 and 1000 (every request "
    "queued at once: saturation throughput) are added. All six replays are held out of every fit.", "",
    "Host time, measured: every iteration's wall time minus its GPU time (CUDA events around the forward) has a "
    "median of 0.12-0.54 ms per run, 2-5% of the wall time; over all decode iterations it is about 0.155 ms + 7.5 us "
    "per running sequence (least squares), so a constant per-iteration overhead captures its low-load part only. "
    "Charged as `--iteration-overhead-us 124` (the 2 requests/s replay's median) on top of ceilings fitted to GPU "
    "time, it lifts the p50 TTFT at 40 requests/s from -20% to -19% (from -19% to -13% before the roofline streamed "
    "decode GEMM weights at 0.78 of datasheet bandwidth, which moved the GPU fit's memory efficiency from 0.80 to 0.85): "
    "11 of 12 p50 and 11 of 12 p99 targets met, saturation throughput +7%.", "",
    "Prefill tiles: the per-iteration GPU times showed this engine's prefill time stepping with ceil(prompt / 128) "
    "(cuBLAS tiles): before the simulator counted dense matmuls over whole 128-row tiles (changed after this run "
    "was first compared, at the commit above d4e0abd), prompts of 576, 704 and 832 tokens took 8%, 10% and 14% "
    "longer in the loop than the fitted cost, and the results were 9 of 12 p50 (GPU fit + host), p50 TTFT -16% at 40 "
    "and -12% at 1000 requests/s, saturation throughput +8%. With the tiles the in-loop prefills are within -2% to "
    "+8% of the fitted cost (832 tokens: +8%).", "",
    "What remains: p50 TTFT at 40 requests/s, -19% (prefill service p50 in the loop 22.5 ms against 21.0 with the "
    "wall-time fit; at a prefill load of 0.83 that becomes 74 against 55 ms of p50 queueing). The H100 run's larger "
    "miss at 40 requests/s came from the "
    "same kind of service gap with that card past prefill saturation (load 1.04)."
], "replay_h100.json": [
    "The datasheet ceilings make every iteration 17-38% too fast for this plain-torch engine, so every latency "
    "inherits that gap (it launches more kernels than the roofline counts -- rotary as concatenations, negations and "
    "multiply-adds, index writes into the cache, dtype casts -- and its GEMVs do not reach the datasheet bandwidth x "
    "0.89). With step times fitted to six isolated iterations the queueing and scheduling reproduce the held-out "
    "replays.", "",
    "The largest remaining miss, p50 TTFT at 40 requests/s (-28%; -36% before dense matmuls were counted over whole "
    "128-row tiles), is queueing, not the prefill itself (\"Where TTFT goes\"): each prompt's prefill, timed in the "
    "loop from its start to its first token, takes 14% longer than simulated (p50 28.5 against 25.0 ms). At 2 and 8 "
    "requests/s that costs a few ms of TTFT. At 40 requests/s it decides the regime: the prompts alone need rate x "
    "mean service = 1.04 s of GPU per second as measured, 0.94 as simulated, so the real queue grows through the run "
    "while the simulated one stays below saturation (decode steps run only when no prompt waits), and near "
    "saturation waiting time grows as rho / (1 - rho): 145 against 102 ms of p50 queueing. A constant per-iteration "
    "overhead does not fix it (with the cost before the tiles: 1 ms on every iteration brought this p50 TTFT to -21% "
    "but put p50 TPOT at 2 and 8 requests/s 9-11% high); the H200 run above measures the loop's host time directly.",
    "",
    "An earlier run of the same loop without CUDA graphs (replay_h200_eager.json, commit c920a8d, one H200) took "
    "about 40 ms for every iteration whatever its size: launch-bound on the host, so it is not a test of the "
    "simulator."
]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="replay_*.json, newest first")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "reports" / "serving" / "replay.md"))
    args = parser.parse_args()
    text = ["# `mlsys serve` against a measured replay", "",
            "Regenerate with `python scripts/validate/serve_replay_report.py " + " ".join(args.results) + "`.", ""]
    for path in args.results:
        data = json.loads(Path(path).read_text())
        text.append(page(data, path, NOTES.get(Path(path).name, [])))
    Path(args.out).write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
