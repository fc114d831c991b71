"""`mlsys serve MODEL --rate R | --trace FILE`: latency and throughput under load (calc.serve.simulator)."""

from __future__ import annotations

import functools
import math

import click

from ..calc.serve.simulator import PREEMPTION, ServeOptions, WorkloadSpec, simulate, sweep_rates
from ..calc.serve.engine import POLICIES
from ..calc.serve import limits as serve_limits
from ..calc.serve.limits import check_requests
from ..calc.roofline.options import ALL_REDUCES
from ..calc.roofline.paged import MAX_SPLITS
from ..calc.roofline.steady import CLOCKS
from ..calc.serve.min_gpus import DEFAULT_BUDGET_GPUS, MAX_BUDGET_GPUS
from ..calc.serve.slo import FORM as SLO_FORM, parse_slo
from ..calc.serve.workload import LengthDist, from_trace, parse_length
from ..errors import MlsysError, require
from ..readers.trace import read_length_column, read_trace
from ..validate import MAX_FLOAT
from .cost_views import price_option, with_serving_cost
from .hardware_notes import with_ceilings_note
from . import render
from .intervals import with_interval
from .options import ceilings_from_options, given, model_argument, reject_unused, resolve_model
from .serve_views import serve_output, sweep_output

D = ServeOptions()
SEARCH_GPUS = 8  # --search's budget when --max-gpus is not given
LENGTH_HELP = "N, uniform:a,b, normal:mu,sd, lognormal:mu,sigma or csv:FILE:COLUMN."


def _length(text: str, what: str) -> LengthDist:
    if text.startswith("csv:"):
        path, sep, column = text[4:].rpartition(":")
        require(bool(sep and path and column), f"{what}: expected csv:FILE:COLUMN, got {text!r}")
        return parse_length(text, what, read_length_column(path, column, what, serve_limits.MAX_REQUESTS))
    return parse_length(text, what)


def _trace(path: str, prefix: int = 0, concurrency: int = 0):
    return from_trace(read_trace(path, serve_limits.MAX_REQUESTS), f"trace {path}", prefix, concurrency)


def _sweep(text: str | None) -> tuple[float, ...] | None:
    if not text:
        return None
    key, sep, values = text.partition("=")
    require(bool(sep) and key.strip() == "rate", f"--sweep expects rate=R1,R2,..., got {text!r}")
    items, cap = values.split(","), serve_limits.MAX_SIMULATIONS
    require(len(items) <= cap, f"--sweep: {len(items):,} rates; at most {cap} (each is a whole simulation)")
    try:
        rates = tuple(float(v) for v in items)
    except ValueError:
        raise MlsysError(f"--sweep: cannot parse the rates in {text!r}") from None
    for r in rates:
        require(math.isfinite(r) and 0 < r <= MAX_FLOAT, f"--sweep: a rate must be a positive finite number, got {r:g}")
    return rates


def chunk_budget_schedulers() -> str:
    """The schedulers whose per-iteration token budget is --chunk (the chunk_budget rows of POLICIES)."""
    return ", ".join(name for name, policy in POLICIES.items() if policy.chunk_budget)


def _reject_unused(scheduler: str, trace: bool, draft: bool, search: bool, min_gpus: bool) -> None:
    """Options given that this call would ignore (docs/cli.md, "options that do not apply"), by the scheduler's
    policy flags (calc.serve.engine.POLICIES), never by its name."""
    ctx = click.get_current_context()
    policy = POLICIES[scheduler]
    unused = {"spec_k": "without --draft", "accept": "without --draft"} if not draft else {}
    if not policy.chunk_budget:
        unused["chunk"] = (f"with --scheduler {scheduler} (its prefill budget is not --chunk: "
                           f"{chunk_budget_schedulers()}'s is)")
    if policy.chunk_budget or not policy.iteration_level:
        unused["max_batch_tokens"] = f"with --scheduler {scheduler} (its token budget is not --max-batch-tokens)"
    if not policy.paged or draft:
        unused["preemption"] = ("with --draft (KV is reserved for prompt + output)" if draft else
                                f"with --scheduler {scheduler} (only the paged schedulers preempt)")
    if trace:
        unused |= {k: "with --trace (the trace gives every request)" for k in
                   ("prompt_len", "output_len", "requests", "seed", "burstiness")}
    if not (search or min_gpus):
        unused["max_gpus"] = "without --search or --min-gpus"
    reject_unused(ctx, unused)
    for name, other in (("rate", "sweep"), ("disagg", "search")):
        if given(ctx, name) and given(ctx, other):
            raise click.UsageError(f"--{name} and --{other} conflict: give one of them", ctx)


def engine_options(func):
    """Scheduler and KV options shared by `mlsys serve` and its scripts."""
    @click.option("--scheduler", type=click.Choice(tuple(POLICIES)), default=D.scheduler, show_default=True,
                  help="static batching, orca (iteration-level), vllm (V0: paged, prefill first), sarathi (chunked, "
                  "--chunk budget), vllm-v1 (chunked prefill mixed with decodes under --max-batch-tokens).")
    @click.option("--max-batch-tokens", type=click.IntRange(min=1), default=D.max_batch_tokens,
                  help="Tokens per iteration (default: vllm-v1 takes vLLM V1's for the card, 8192 on cards of "
                  ">= 70 GiB other than A100, else 2048; the other schedulers 8192).")
    @click.option("--max-seqs", type=click.IntRange(min=1), default=D.max_seqs,
                  help="Running sequences at most (default: vllm-v1 1024 or 256 by card as above; else 256).")
    @click.option("--chunk", type=click.IntRange(min=1), default=D.chunk, show_default=True,
                  help=f"{chunk_budget_schedulers()}: token budget per iteration.")
    @click.option("--block-size", type=click.IntRange(min=1), default=D.block_size, show_default=True,
                  help="Tokens per KV block.")
    @click.option("--gpu-memory-utilization", type=float, default=D.gpu_memory_utilization, show_default=True,
                  help="Share of GPU memory for weights, workspace and KV cache.")
    @click.option("--preemption", type=click.Choice(PREEMPTION), default=D.preemption, show_default=True,
                  help="Paged schedulers: recompute the KV later, or swap it to host memory.")
    @click.option("--kv-blocks", type=click.IntRange(min=1), default=None, help="Override the KV capacity (blocks).")
    @click.option("--iteration-overhead-us", type=click.FloatRange(min=0), default=D.iteration_overhead_s * 1e6,
                  show_default=True, help="Host time every iteration pays on top of its kernels (scheduling, "
                  "sampling, detokenising), in microseconds.")
    @click.option("--iteration-overhead-per-seq-us", type=click.FloatRange(min=0),
                  default=D.iteration_overhead_per_seq_s * 1e6, show_default=True,
                  help="And host time per sequence that samples a token in the iteration, in microseconds.")
    @click.option("--frontend-ms", type=click.FloatRange(min=0, max=1e6), default=D.frontend_s * 1e3, show_default=True,
                  help="The API server's time per request before the scheduler sees it, one request at a time "
                  "(parsing, chat template, tokenising, a proxy in front), in milliseconds; 0: none.")
    @click.option("--clocks", type=click.Choice(CLOCKS), default=D.clocks, show_default=True,
                  help="The card's clocks for every iteration: burst (short kernels' efficiencies) or sustained (the "
                  "steady state under the power cap of a server kept busy; docs/roofline.md, \"Sustained clocks\").")
    @click.option("--all-reduce", type=click.Choice(ALL_REDUCES), default=D.all_reduce, show_default=True,
                  help="TP all-reduces on the one-shot custom kernel (vLLM, SGLang, current TensorRT-LLM) or on NCCL.")
    @click.option("--max-decode-splits", type=click.IntRange(min=1, max=MAX_SPLITS), default=D.max_decode_splits,
                  show_default=True, help="KV splits of a decode attention pass at most (FlashAttention's split "
                  "rule below it); 1: an engine whose decode kernel never splits (TensorRT-LLM 0.9 without "
                  "multi-block mode).")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


@click.command()
@model_argument
@click.option("--gpu", default=None, help="GPU name or alias (`mlsys gpus`); default H100-SXM or the cluster's GPU.")
@click.option("--cluster", default=None, help="Cluster spec (name or JSON) for the TP collectives and the GPU.")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None,
              help="Measured ceilings from `mlsys bench ceilings`.")
@click.option("--efficiency", "efficiency", multiple=True, metavar="KIND=FRACTION",
              help="Override an efficiency ceiling (matmul, attention, memory), e.g. --efficiency memory=0.8.")
@click.option("--launch-us", type=click.FloatRange(min=0), default=None, help="Fixed cost per kernel in microseconds.")
@click.option("--gap-us", type=click.FloatRange(min=0, max=1e6), default=None,
              help="Idle microseconds on the stream before each kernel (default 0.5, or the calibration's).")
@click.option("--tp", type=click.IntRange(min=1), default=D.tp, show_default=True, help="Tensor-parallel GPUs per engine.")
@click.option("--dtype", default=D.dtype, show_default=True,
              help="Weights and compute dtype (nvfp4/mxfp4: block-scaled FP4 weights and activations, docs/formats.md).")
@click.option("--matmul-dtype", default=None,
              help="The GEMMs' activation dtype when not --dtype's: --dtype nvfp4 --matmul-dtype bf16 serves FP4 "
                   "weights only (W4A16), fp8 W4A8.")
@click.option("--kv-dtype", default=None, help="KV cache dtype (default: the activation dtype).")
@click.option("--rate", type=float, default=None, help="Arrivals per second (Poisson, or gamma with --burstiness).")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False), default=None,
              help="CSV with arrival_s, prompt_len, output_len columns instead of --rate.")
@click.option("--prompt-len", default="512", show_default=True, help="Prompt tokens: " + LENGTH_HELP)
@click.option("--output-len", default="128", show_default=True, help="Output tokens: " + LENGTH_HELP)
@click.option("--requests", type=click.IntRange(min=1), default=1000, show_default=True, help="Requests to simulate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload draws.")
@click.option("--burstiness", type=float, default=1.0, show_default=True,
              help="Gamma shape of the inter-arrival times: 1 Poisson, < 1 burstier.")
@click.option("--concurrency", type=click.IntRange(min=0), default=0, show_default=True,
              help="A closed loop of this many clients: each sends its next request when its last one finishes "
              "(with --rate: not before its arrival); 0: open loop.")
@engine_options
@click.option("--prefix-len", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens of a prefix every prompt shares (added before --prompt-len draws; a trace's prompts include it).")
@click.option("--prefix-caching", is_flag=True, help="Keep the shared prefix's KV blocks cached (vLLM prefix caching).")
@click.option("--draft", default=None, help="Draft MODEL for speculative decoding (same vocabulary).")
@click.option("--spec-k", type=click.IntRange(min=1), default=D.spec_k, show_default=True,
              help="Draft tokens proposed per speculative step.")
@click.option("--accept", type=float, default=D.accept, show_default=True,
              help="Per-token acceptance rate of the draft's proposals, in [0, 1].")
@click.option("--disagg", default=None, metavar="P:D",
              help="Disaggregate: P prefill and D decode instances of --tp GPUs each, KV moved over the cluster.")
@click.option("--search", is_flag=True, help="Search the P:D split and TP per role for goodput per GPU under --slo.")
@click.option("--max-gpus", type=click.IntRange(min=1), default=None,
              help=f"GPU budget: of --search (default {SEARCH_GPUS}, at most {serve_limits.MAX_SEARCH_GPUS}) or "
              f"--min-gpus (default {DEFAULT_BUDGET_GPUS}, at most {MAX_BUDGET_GPUS:,}).")
@click.option("--max-rate", "max_rate", is_flag=True,
              help="Find the highest request rate whose simulated percentiles meet every --slo target.")
@click.option("--min-gpus", "min_gpus", is_flag=True,
              help="Find the fewest GPUs (replicas x --tp choices) that serve --rate within every --slo target.")
@click.option("--slo", default=None, help="Latency targets in seconds: " + SLO_FORM + " (METRIC=SECONDS: a goodput threshold only).")
@click.option("--sweep", default=None, help="rate=R1,R2,...: one simulation per rate.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write latency-vs-rate (with --sweep) or latency CDFs (PNG or SVG).")
@price_option
@render.output_options
def serve(model, overrides, gpu, cluster, calibration, efficiency, launch_us, gap_us, tp, dtype, matmul_dtype, kv_dtype, rate,
          trace_file, prompt_len, output_len, requests, seed, burstiness, concurrency, scheduler, max_batch_tokens, max_seqs,
          chunk, block_size, gpu_memory_utilization, preemption, kv_blocks, iteration_overhead_us,
          iteration_overhead_per_seq_us, frontend_ms, clocks, all_reduce, max_decode_splits, prefix_len, prefix_caching, draft, spec_k, accept, disagg, search, max_gpus,
          max_rate, min_gpus, slo, sweep, plot, price_per_gpu_hour, fmt, as_json):
    """Simulate serving MODEL under load: TTFT, TPOT, latency percentiles, throughput and goodput.

    A discrete-event simulation of the engine's scheduler whose every iteration costs the roofline
    time of the batch it forms; KV capacity in blocks from the memory calculator. See docs/serving.md.
    """
    _reject_unused(scheduler, trace_file is not None, draft is not None, search, min_gpus)
    if trace_file is None:
        check_requests(requests)
    spec = resolve_model(model, overrides)
    if gpu is None and cluster is not None:
        from ..specs.cluster import load_cluster

        gpu = load_cluster(cluster).gpu
    ceilings = ceilings_from_options(gpu, calibration, efficiency, launch_us, gap_us)
    opts = ServeOptions(scheduler=scheduler, max_batch_tokens=max_batch_tokens, max_seqs=max_seqs, chunk=chunk,
                        block_size=block_size, gpu_memory_utilization=gpu_memory_utilization, preemption=preemption,
                        kv_blocks=kv_blocks, tp=tp, dtype=dtype, matmul_dtype=matmul_dtype, kv_dtype=kv_dtype, cluster=cluster, slo=parse_slo(slo),
                        spec_k=spec_k, accept=accept, prefix_caching=prefix_caching,
                        iteration_overhead_s=iteration_overhead_us * 1e-6,
                        iteration_overhead_per_seq_s=iteration_overhead_per_seq_us * 1e-6,
                        frontend_s=frontend_ms * 1e-3, clocks=clocks, all_reduce=all_reduce,
                        max_decode_splits=max_decode_splits)
    draft_spec = resolve_model(draft, ()) if draft else None
    if max_rate or min_gpus:
        require(not (max_rate and min_gpus), "--max-rate and --min-gpus ask different questions: give one of them")
        require(not (disagg or search or sweep or plot or price_per_gpu_hour is not None),
                "--max-rate/--min-gpus do not combine with --disagg, --search, --sweep, --plot or --price-per-gpu-hour")
        recipe = WorkloadSpec(_length(prompt_len, "--prompt-len"), _length(output_len, "--output-len"),
                              rate or 1.0, requests, seed, burstiness, prefix_len, concurrency)
        return render.emit(_capacity(spec, ceilings, recipe, opts, draft_spec, max_rate, rate, trace_file, max_gpus),
                           fmt, as_json)
    rates = _sweep(sweep)
    require(not (rates and trace_file), "--sweep varies --rate: it does not combine with --trace")
    if concurrency and rate is None and trace_file is None and rates is None:
        rate = float("inf")  # a closed loop alone: every client starts at time 0
    require((rate is None) != (trace_file is None) or (rates is not None and trace_file is None),
            "give exactly one of --rate R or --trace FILE (or --sweep rate=...)")
    if disagg or search:
        require(not (draft or sweep or plot), "--disagg/--search do not combine with --draft, --sweep or --plot")
        work = _trace(trace_file, prefix_len, concurrency) if trace_file else WorkloadSpec(
            _length(prompt_len, "--prompt-len"), _length(output_len, "--output-len"), rate, requests, seed,
            burstiness, prefix_len, concurrency).build()
        require(price_per_gpu_hour is None or not search, "--price-per-gpu-hour prices one layout: not with --search")
        out = _disagg(spec, ceilings, work, opts, disagg, search, max_gpus or SEARCH_GPUS)
        if price_per_gpu_hour is not None:
            out = with_serving_cost(out, out.data, out.data["gpus"], price_per_gpu_hour)
        return render.emit(out, fmt, as_json)
    if trace_file:
        result = simulate(spec, ceilings, _trace(trace_file, prefix_len, concurrency), opts, draft=draft_spec)
        out = with_serving_cost(serve_output(result), result.metrics, opts.tp, price_per_gpu_hour)
        return render.emit(_plot(plot, [result], None, out), fmt, as_json)
    work = WorkloadSpec(_length(prompt_len, "--prompt-len"), _length(output_len, "--output-len"),
                        rate if rate is not None else 1.0, requests, seed, burstiness, prefix_len, concurrency)
    if rates:
        require(price_per_gpu_hour is None, "--price-per-gpu-hour prices one rate: not with --sweep")
        results = sweep_rates(spec, ceilings, work, rates, opts, draft_spec)
        return render.emit(_plot(plot, list(results), rates, sweep_output(results, rates)), fmt, as_json)
    result = simulate(spec, ceilings, work.build(), opts, draft=draft_spec)
    out = with_serving_cost(serve_output(result), result.metrics, opts.tp, price_per_gpu_hour)
    out = _with_intervals(out)
    render.emit(_plot(plot, [result], None, with_ceilings_note(out, ceilings)), fmt, as_json)


def _with_intervals(out: render.Output) -> render.Output:
    """The held-out ranges beside TTFT p50 and TPOT p50 (mlsyscalc.specs.intervals)."""
    for key, field in (("serve_ttft", "ttft_p50_s"), ("serve_tpot", "tpot_p50_s")):
        if out.data.get(field):
            out = with_interval(out, key, out.data[field], field=f"interval_{field}", label=field)
    return out


def _capacity(spec, ceilings, work, opts, draft, max_rate, rate, trace_file, max_gpus):
    """--max-rate (the rate is searched) or --min-gpus (at --rate R or a --trace)."""
    from ..calc.serve.capacity import max_rate as search_rate
    from ..calc.serve.min_gpus import min_gpus
    from .serve_capacity_views import capacity_output, min_gpus_output

    if max_rate:
        require(rate is None and trace_file is None, "--max-rate searches the rate: it does not take --rate or --trace")
        require(max_gpus is None, "--max-gpus is the budget of --search or --min-gpus, not of --max-rate")
        return capacity_output(search_rate(spec, ceilings, work, opts, draft))
    require(rate is not None or trace_file is not None, "--min-gpus needs the rate to serve: --rate R or --trace FILE")
    workload = _trace(trace_file, work.prefix, work.concurrency) if trace_file else work.build()
    found = min_gpus(spec, ceilings, workload, opts, max_gpus or DEFAULT_BUDGET_GPUS, draft)
    return min_gpus_output(found, spec.name, ceilings.gpu.name, opts.slo, workload.source)


def _disagg(spec, ceilings, work, opts, layout, search, max_gpus):
    from ..calc.serve.disagg import cluster_for, parse_layout, search_layouts, simulate_disagg
    from .serve_views import disagg_output, search_output

    cluster = cluster_for(ceilings, opts.cluster)
    if search:
        return search_output(search_layouts(spec, ceilings, work, opts, cluster, max_gpus))
    return disagg_output(simulate_disagg(spec, ceilings, work, opts, parse_layout(layout, opts.tp), cluster), spec.name,
                         ceilings.gpu.name)


def _plot(path, results, rates, output):
    """`output` as it is, or with the figure drawn and its path added (JSON `plot`, a note)."""
    if not path:
        return output
    from ..report.serve_plots import plot_serving
    from .plots import with_plot

    plot_serving(results, rates, path)
    return with_plot(output, path)
