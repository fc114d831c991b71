"""Render `mlsys serve` results: JSON data (base units), tables and notes. No arithmetic."""

from __future__ import annotations

from dataclasses import asdict

from ..calc.serve.simulator import ServeResult
from ..calc.serve.slo import as_dict as slo_dict, term_name, verdicts
from ..units import fmt_bytes, fmt_seconds
from . import render

LATENCIES = (("ttft", "time to first token"), ("tpot", "time per output token"), ("e2e", "end-to-end latency"),
             ("queue_delay", "queueing delay"))
NOTES = ("Each iteration costs the roofline time of the batch it forms (calc.serve.iteration); KV capacity "
         "from the inference memory calculator; TPOT = (last token - first token) / (output - 1).",
         "TTFT counts from when a request is sent; the API server in front of the scheduler costs --frontend-ms a "
         "request, one at a time (options.frontend_s; default 0: not priced, though published runs behind an "
         "OpenAI-compatible server pay 5-50 ms a request: docs/serving.md).")


def _options(r: ServeResult) -> dict:
    o = asdict(r.options)
    slo = r.options.slo
    o["slo"] = {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s}
    return o


def result_data(r: ServeResult, with_series: bool = True) -> dict:
    data = {"model": r.model, "gpu": r.gpu, "scheduler": r.options.scheduler, "workload": r.workload.source,
            **r.metrics, **r.kv.as_dict(), "slo": slo_dict(r.options.slo, r.metrics), "options": _options(r)}
    if with_series:
        data["series"] = list(r.series)
    return data


def _latency_table(r: ServeResult) -> render.Table:
    m = r.metrics
    rows = [[label, *(fmt_seconds(m[f"{key}_p{q}_s"]) if m[f"{key}_p{q}_s"] is not None else "-" for q in (50, 90, 99)),
             fmt_seconds(m[f"{key}_mean_s"]) if m[f"{key}_mean_s"] is not None else "-"] for key, label in LATENCIES]
    return render.table(f"{r.model} on {r.gpu} ({r.options.scheduler}, tp {r.options.tp}): {r.workload.source}",
                        ["latency", "p50", "p90", "p99", "mean"], rows)


def _rates_table(r: ServeResult) -> render.Table:
    m, kv = r.metrics, r.kv
    rows = [["requests", m["requests"], ""], ["makespan", m["makespan_s"], fmt_seconds(m["makespan_s"])],
            ["throughput (requests/s)", m["throughput_requests_per_s"], ""],
            ["throughput (output tokens/s)", m["throughput_tokens_per_s"], ""],
            _goodput_row(r),
            ["busy fraction", m["busy_fraction"], ""], ["iterations", m["iterations"], ""],
            ["mean batch tokens", m["mean_batch_tokens"], ""],
            ["KV blocks", kv.blocks, f"{fmt_bytes(kv.block_bytes)} each"],
            ["KV utilisation mean / max", m["kv_utilization_mean"], f"max {100 * m['kv_utilization_max']:.1f}%"],
            ["preemptions", m["preemptions"], r.options.preemption]]
    return render.table("throughput and KV cache", ["quantity", "value", "note"], rows)


def _goodput_row(r: ServeResult) -> list:
    m = r.metrics
    if not r.options.slo.given:
        return ["goodput (requests/s within SLO)", "n/a", "no --slo given"]
    return ["goodput (requests/s within SLO)", m["goodput_requests_per_s"], f"{100 * m['slo_attainment']:.1f}% attain"]


def _slo_table(r: ServeResult) -> render.Table:
    rows = [[term_name(v["metric"], v["percentile"]), fmt_seconds(v["limit_s"]),
             "-" if v["value_s"] is None else fmt_seconds(v["value_s"]), "met" if v["met"] else "MISSED"]
            for v in verdicts(r.metrics, r.options.slo)]
    return render.table("SLO targets", ["target", "limit", "simulated", "verdict"], rows)


def _spec_table(r: ServeResult) -> render.Table:
    s = r.metrics["speculative"]
    rows = [[where, v["batch"], fmt_seconds(v["tpot_plain_s"]), fmt_seconds(v["draft_s"]), fmt_seconds(v["verify_s"]),
             v["expected_tokens_per_step"], fmt_seconds(v["tpot_spec_s"]), v["speedup"], v["pays"]]
            for where, v in (("batch 1", s["batch1"]), ("mean batch", s["mean_batch"]))]
    return render.table(f"speculative decoding: draft {s['draft']}, k {s['spec_k']}, acceptance {s['accept']:g}",
                        ["at", "batch", "plain TPOT", "draft steps", "verify pass", "tokens/step", "spec TPOT",
                         "speedup", "pays"], rows)


def serve_output(r: ServeResult) -> render.Output:
    tables = [_latency_table(r), _rates_table(r)]
    if r.options.slo.terms:
        tables.insert(1, _slo_table(r))
    if "speculative" in r.metrics:
        tables.append(_spec_table(r))
    return render.Output(result_data(r), tuple(tables), NOTES)


SWEEP_KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "throughput_requests_per_s",
              "throughput_tokens_per_s", "goodput_requests_per_s", "preemptions")
SWEEP_COLUMNS = ("TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)", "TPOT p99 (ms)", "e2e p99 (ms)", "requests/s",
                 "tokens/s", "goodput (req/s)", "preemptions")


def _ms(value):
    return None if value is None else value * 1e3


def point_row(metrics: dict, keys: tuple[str, ...] = SWEEP_KEYS) -> list:
    """A sweep or search point's cells: seconds as milliseconds, the rest as they are."""
    return [_ms(metrics[k]) if k.endswith("_s") and not k.endswith("_per_s") else metrics[k] for k in keys]


def sweep_output(results: tuple[ServeResult, ...], rates: tuple[float, ...]) -> render.Output:
    first = results[0]
    keys = SWEEP_KEYS if first.options.slo.given else SWEEP_KEYS[:-2] + SWEEP_KEYS[-1:]
    columns = SWEEP_COLUMNS if first.options.slo.given else SWEEP_COLUMNS[:-2] + SWEEP_COLUMNS[-1:]
    rows = [[rate, *point_row(r.metrics, keys)] for rate, r in zip(rates, results)]
    title = f"{first.model} on {first.gpu} ({first.options.scheduler}): rate sweep"
    data = {"model": first.model, "gpu": first.gpu, "scheduler": first.options.scheduler,
            "sweep": [_sweep_point(rate, r) for rate, r in zip(rates, results)]}
    return render.Output(data, (render.table(title, ["rate (req/s)", *columns], rows),), NOTES, records="sweep")


def _sweep_point(rate: float, r: ServeResult) -> dict:
    """The swept rate and the headline metrics first (the CSV's first columns), then everything else."""
    data = result_data(r, with_series=False)
    return {"rate_per_s": rate, **{k: data[k] for k in SWEEP_KEYS}, **data}


DISAGG_KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "goodput_requests_per_s")


def _disagg_data(r) -> dict:
    return {**r.pools, **r.metrics}


def disagg_output(r, model: str, gpu: str) -> render.Output:
    m, p = r.metrics, r.pools
    rows = [[label, *(fmt_seconds(m[f"{key}_p{q}_s"]) if m[f"{key}_p{q}_s"] is not None else "-" for q in (50, 90, 99))]
            for key, label in LATENCIES]
    pools = [["GPUs", p["gpus"]], ["prefill busy fraction", p["prefill_busy_fraction"]],
             ["decode busy fraction", p["decode_busy_fraction"]], ["KV transfer mean", fmt_seconds(p["kv_transfer_mean_s"])],
             ["throughput (requests/s)", m["throughput_requests_per_s"]],
             ["goodput (requests/s within SLO)", m["goodput_requests_per_s"]],
             ["goodput per GPU", p["goodput_per_gpu_requests_per_s"]]]
    tables = (render.table(f"{model} on {gpu}, disaggregated {p['layout']}", ["latency", "p50", "p90", "p99"], rows),
              render.table("pools", ["quantity", "value"], pools))
    return render.Output({"model": model, "gpu": gpu, **_disagg_data(r)}, tables, NOTES)


def search_output(s) -> render.Output:
    base = s.colocated
    rows = [[r.layout.name, r.layout.gpus, r.pools["goodput_per_gpu_requests_per_s"],
             *(r.metrics[k] for k in DISAGG_KEYS)] for r in s.layouts]
    rows.append([f"colocated (one engine, tp {base.options.tp})", base.options.tp,
                 base.metrics["goodput_requests_per_s"] / base.options.tp, *(base.metrics[k] for k in DISAGG_KEYS)])
    data = {"model": base.model, "gpu": base.gpu, "max_gpus": s.max_gpus, "best": _disagg_data(s.layouts[0]),
            "layouts": [_disagg_data(r) for r in s.layouts], "colocated": result_data(base, with_series=False)}
    title = f"{base.model} on {base.gpu}: disaggregated layouts within {s.max_gpus} GPUs, best goodput per GPU first"
    return render.Output(data, (render.table(title, ["layout", "GPUs", "goodput_per_gpu", *DISAGG_KEYS], rows),), NOTES,
                         records="layouts")
