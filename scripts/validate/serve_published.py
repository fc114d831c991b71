"""`mlsys serve` against published serving results: reports/serving/published.json -> published.md.

    python scripts/validate/serve_published.py            # writes reports/serving/published.md
    python scripts/validate/serve_published.py --check    # prints the table, writes nothing

Two sets: published.json (TensorRT-LLM tables) and published_papers.json (research engines and engine
benchmarks, priced as its method section in published.md says; that section is kept verbatim).

Each case is simulated as its benchmark ran it: `batch` requests that all arrive at once, fixed prompt
and output lengths, the case's scheduler (TensorRT-LLM's gptSessionBenchmark runs static batches), TP,
weight and KV dtypes, datasheet ceilings. Throughput per GPU is output tokens / makespan / TP; TTFT is
the p50 of the requests' first-token latency (batch 1: one prefill).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost, simulate
from mlsyscalc.calc.serve.iteration import Batch
from mlsyscalc.calc.serve.workload import from_trace
from mlsyscalc.report.markdown import markdown_table
from mlsyscalc.specs.gpu import gpu_from_dict
from mlsyscalc.specs.lookup import load_model

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "reports" / "serving" / "published.json"
PAPERS = ROOT / "reports" / "serving" / "published_papers.json"
SECOND = "# Second set"
SCORES = "## Second set: scores"
OUT = ROOT / "reports" / "serving" / "published.md"
UTILISATION = 0.95  # TensorRT-LLM's kv_cache_free_gpu_mem_fraction in its tables; 0.9 would not hold batch 1024


def predict(case: dict) -> float:
    w = case["workload"]
    spec, ceil = load_model(case["model"]), resolve_ceilings(case["gpu"])
    n = w.get("requests", w.get("batch"))  # static cases: one batch of `batch` requests
    work = from_trace([(0.0, w["prompt_len"], w["output_len"])] * n, case["id"])
    opts = ServeOptions(scheduler=case["scheduler"], max_seqs=case.get("max_seqs", n), tp=case["tp"],
                        dtype=case["dtype"], kv_dtype=case["kv_dtype"], gpu_memory_utilization=UTILISATION,
                        max_batch_tokens=case.get("max_batch_tokens", max(8192, n * w["prompt_len"])))
    m = simulate(spec, ceil, work, opts).metrics
    return {"output_tokens_per_s_per_gpu": m["throughput_tokens_per_s"] / case["tp"],
            "output_tokens_per_s": m["throughput_tokens_per_s"], "ttft_s": m["ttft_p50_s"]}[case["metric"]]


def _ceilings(gpu: str):
    if gpu.endswith(".json"):
        return resolve_ceilings(gpu_from_dict(json.loads((ROOT / gpu).read_text()), gpu))
    return resolve_ceilings(gpu)


def predict_paper(case: dict) -> float:
    """A published_papers.json case, priced as published.md's method section says."""
    w = case["workload"]
    spec = load_model(str(ROOT / case["model"]) if case["model"].endswith(".json") else case["model"])
    ceil = _ceilings(case["gpu"])
    opts = ServeOptions(scheduler=case["scheduler"], tp=case["tp"], dtype=case["dtype"], kv_dtype=case["kv_dtype"],
                        chunk=case.get("chunk", ServeOptions.chunk), max_seqs=case.get("max_seqs", ServeOptions.max_seqs))
    if case["metric"] == "iteration_s":
        batch = Batch.of(chunks=tuple((c, p) for c, p in w["prefill"]), contexts=tuple(w["decode_contexts"]))
        return iteration_cost(spec, ceil, opts).time_s(batch)  # the simulator's own iteration cost
    res = simulate(spec, ceil, from_trace([(0.0, w["prompt_len"], w["output_len"])] * w["requests"], case["id"]), opts)
    if case["metric"] == "prefill_s":
        return res.metrics["ttft_p50_s"]
    if case["metric"] == "output_tokens_per_s":
        return res.metrics["throughput_tokens_per_s"]
    admitted = sorted(t - q for t, q in zip(res.latencies["ttft"], res.latencies["queue"]))  # ttft_p50_admitted_s
    return statistics.median(admitted)


def rows(cases: list[dict], price=predict) -> tuple[list[list], list[float]]:
    out, errors = [], []
    for c in cases:
        got = price(c)
        err = got / c["value"] - 1
        errors.append(abs(err))
        w = c["workload"]
        n = w.get("requests", w.get("batch"))
        out.append([c["model"], c["gpu"], c["tp"], f"{c['dtype']} {c['scheduler']}", f"{n} x {w['prompt_len']}/{w['output_len']}",
                    c["metric"], f"{c['value']:.4g}", f"{got:.4g}", f"{100 * err:+.1f}%",
                    "yes" if c["measurement"] else "no"])
    return out, errors


def page(cases: list[dict], table: list[list], errors: list[float]) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    by_metric: dict[str, list[float]] = {}
    for c, e in zip(cases, errors):
        by_metric.setdefault(c["metric"], []).append(e)
    lines = ["# `mlsys serve` against published serving results", "",
             f"Generated by `python scripts/validate/serve_published.py` at commit {commit or 'unknown'} from "
             "`reports/serving/published.json` (every case, its source and whether it is a measurement). "
             "Predictions use datasheet ceilings x the default efficiencies (calc/roofline/calibration.py), no calibration.", "",
             f"**Median |error| over {len(errors)} cases: {100 * statistics.median(errors):.1f}%** "
             + "; ".join(f"{k}: {100 * statistics.median(v):.1f}% ({len(v)})" for k, v in by_metric.items()) + ".", ""]
    by_source: dict[str, list[float]] = {}
    for c, e in zip(cases, errors):
        by_source.setdefault(c["source"], []).append(e)
    sources = list(by_source)
    lines += markdown_table(["source", "cases", "median |error|"],
                            [[f"[{k + 1}]", len(by_source[s]), f"{100 * statistics.median(by_source[s]):.1f}%"]
                             for k, s in enumerate(sources)], "lrr") + [""]
    lines += markdown_table(["model", "GPU", "TP", "dtype, scheduler", "requests x in/out", "metric", "published", "predicted",
                             "error", "measured"], table, "llrllllrrrl"[:10])
    lines += ["", "## Sources", ""]
    lines += [f"{k + 1}. {s}" for k, s in enumerate(sources)]
    return "\n".join(lines) + "\n"


def _shape(case: dict) -> str:
    w = case["workload"]
    if "prefill" in w:
        parts = [f"prefill {c}" for c, _ in w["prefill"]] + ([f"{len(w['decode_contexts'])} decodes at {w['decode_contexts'][0]}"]
                                                            if w["decode_contexts"] else [])
        return " + ".join(parts)
    extra = f", chunk {case['chunk']}" if case.get("chunk") else ""
    extra += f", concurrency {case['max_seqs']}" if case.get("max_seqs") else ""
    return f"{w['requests']} x {w['prompt_len']}/{w['output_len']}{extra}"


def second_set(method: str, cases: list[dict], first_errors: list[float]) -> list[str]:
    """The method section (kept verbatim) and the scores of published_papers.json (beside the first set's)."""
    errors, table = [], []
    for c in cases:
        got = predict_paper(c)
        err = got / c["value"] - 1
        errors.append(abs(err))
        table.append([c["set"], Path(c["model"]).stem, Path(c["gpu"]).stem, c["tp"], _shape(c), c["metric"],
                      f"{c['value']:.4g}", f"{got:.4g}", f"{100 * err:+.1f}%"])
    groups: dict[str, list[float]] = {}
    for c, e in zip(cases, errors):
        groups.setdefault(f"{c['set']} {c['metric']}", []).append(e)
    lines = [method.rstrip(), "", SCORES, "",
             f"**Median |error| over the {len(errors)} cases of the second set: {100 * statistics.median(errors):.1f}%**; "
             "over both sets together "
             f"({len(errors) + len(first_errors)} cases): {100 * statistics.median(errors + first_errors):.1f}%.", ""]
    lines += markdown_table(["set, metric", "cases", "median |error|"],
                            [[k, len(v), f"{100 * statistics.median(v):.1f}%"] for k, v in groups.items()], "lrr") + [""]
    lines += markdown_table(["set", "model", "GPU", "TP", "batch or workload", "metric", "published", "predicted", "error"],
                            table, "lllrllrrr")
    findings = json.loads(PAPERS.read_text()).get("findings_after_scoring", [])
    return lines + (["", "### What the scores say", ""] + [f"- {f}" for f in findings] if findings else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print, do not write")
    args = parser.parse_args()
    cases = json.loads(CASES.read_text())["cases"]
    table, errors = rows(cases)
    old = OUT.read_text() if OUT.exists() else ""
    method = old[old.index(SECOND):].split(SCORES)[0] if SECOND in old else SECOND + "\n"
    text = page(cases, table, errors) + "\n" + "\n".join(second_set(method, json.loads(PAPERS.read_text())["cases"], errors)) + "\n"
    if args.check:
        print(text)
    else:
        OUT.write_text(text)
        print(f"wrote {OUT} (median |error| {100 * statistics.median(errors):.1f}%)")


if __name__ == "__main__":
    main()
