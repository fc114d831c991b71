"""Inference and serving sections: weights by dtype, KV cache vs context, what fits, prefill and
decode roofline curves over batch with the per-op share at one point, latency vs request rate."""

from __future__ import annotations

from .markdown import markdown_table
from .model_report import (CommandFailed, Context, Figure, ReportOptions, Section, commands_block, lookup,
                           require_command)
from .model_report_system import roofline_hardware

TP_CHOICES = (1, 2, 4, 8)
WEIGHT_DTYPES = ("bf16", "fp8", "int8", "int4")
CONTEXTS = (1024, 4096, 16384, 65536, 131072)
PREFILL_BATCHES = (1, 2, 4, 8, 16, 32)
MAX_DECODE_BATCH = 1024
TOP_OPS = 8
UNFIT_DECODE_BATCH = 64  # the decode sweep's end when nothing fits (a what-if under --no-fit-check)
MIN_SERVING_BATCH = 16  # the tensor-parallel size chosen is the smallest that fits this many sequences


def _infer(sect: Section, ctx: Context, tp: int, *extra: str):
    return sect.run("memory", "infer", *ctx.model_args(), "--tp", str(tp), "--gpu", ctx.gpu, *extra)


def _pick_tp(ctx: Context, sect: Section) -> tuple[int, list]:
    """The smallest tensor-parallel size (within a node) that fits MIN_SERVING_BATCH sequences, else the
    smallest that fits one, else the largest tried."""
    o = ctx.options
    tried = []
    for tp in (t for t in TP_CHOICES if t <= min(ctx.gpus_per_node, o.gpus)):
        call = _infer(sect, ctx, tp, "--dtype", o.dtype, "--context", str(o.context), "--max", "batch")
        tried.append((tp, call))
        if call.data["max_batch"] >= MIN_SERVING_BATCH:
            return tp, tried
    fitting = [t for t, c in tried if c.data["fits"]]
    return (fitting[0] if fitting else tried[-1][0]), tried


def inference_section(ctx: Context, sect: Section) -> None:
    o = ctx.options
    tp, tried = _pick_tp(ctx, sect)
    rows = [(t, sect.q(c, "max_batch", "int"), sect.q(c, "weights_bytes", "GiB"), sect.q(c, "fits", "yes"))
            for t, c in tried]
    longest = _infer(sect, ctx, tp, "--dtype", o.dtype, "--batch", "1", "--max", "context")
    sect.add(f"Largest batch at {o.context:,} tokens of context ({o.dtype} weights and KV cache, {ctx.gpu}); the "
             f"smallest tensor-parallel size that fits a batch of {MIN_SERVING_BATCH} is used below (tp {tp}):", "",
             *markdown_table(["tp", "largest batch", "weights per GPU (GiB)", "fits"], rows), "",
             f"Longest context for one sequence at tp {tp}: {sect.q(longest, 'max_context', 'int')} tokens.", "")
    by_dtype = {d: _infer(sect, ctx, tp, "--dtype", d, "--batch", "1", "--context", str(o.context))
                for d in dict.fromkeys((o.dtype, *WEIGHT_DTYPES))}
    sect.add(*markdown_table(["weights dtype", "weights per GPU (GiB)", "KV cache per sequence (GiB)", "fits"],
                             [(d, sect.q(c, "weights_bytes", "GiB"), sect.q(c, "kv_cache_bytes", "GiB"),
                               sect.q(c, "fits", "yes")) for d, c in by_dtype.items()]), "")
    contexts = {n: _infer(sect, ctx, tp, "--dtype", o.dtype, "--batch", "1", "--context", str(n)) for n in CONTEXTS}
    sect.add(*markdown_table(["context (tokens)", "KV cache per sequence (GiB)", "weights + KV + workspace (GiB)",
                              "fits"], [(f"{n:,}", sect.q(c, "kv_cache_bytes", "GiB"), sect.q(c, "total_bytes", "GiB"),
                                         sect.q(c, "fits", "yes")) for n, c in contexts.items()]), "")
    sect.figures.append(Figure("inference_memory", "inference_memory",
                               f"{o.model}: inference memory per GPU on {ctx.gpu}, tp {tp}",
                               {"dtypes": {d: c.data["weights_bytes"] for d, c in by_dtype.items()},
                                "usable_bytes": by_dtype[o.dtype].data["usable_bytes"],
                                "contexts": {n: c.data["kv_cache_bytes"] for n, c in contexts.items()}}))
    chosen = next(c for t, c in tried if t == tp).data
    if not chosen["fits"]:
        sect.add(f"**{o.model} does not fit {o.context:,} tokens of context on tp {tp} x {ctx.gpu} in {o.dtype}**; the "
                 "roofline below is what it would take if it did (`--no-fit-check`).", "")
    _roofline_curves(ctx, sect, tp, chosen["max_batch"] if chosen["fits"] else UNFIT_DECODE_BATCH, chosen["fits"])
    sect.add(*[f"- {n}" for n in longest.data.get("notes", [])], "")
    commands_block(sect, sect.calls)


def _sweep_table(sect: Section, call, latency: str) -> list[str]:
    rows = [(p["batch"], sect.q(call, f"sweep.{i}.predicted_s", "ms"), sect.q(call, f"sweep.{i}.tokens_per_s", "rate"),
             sect.q(call, f"sweep.{i}.mfu", "pct"), sect.q(call, f"sweep.{i}.mbu", "pct"), p["bound"])
            for i, p in enumerate(call.data["sweep"])]
    return markdown_table(["batch", f"{latency} (ms)", "tokens/s", "MFU", "MBU", "bound"], rows)


def _roofline_curves(ctx: Context, sect: Section, tp: int, max_batch: int, fits: bool) -> None:
    o = ctx.options
    common = [*ctx.model_args(), "--tp", str(tp), "--dtype", o.dtype, *roofline_hardware(ctx),
              *([] if fits else ["--no-fit-check"])]
    decode_batches = [b for b in (2**i for i in range(11)) if b <= min(max_batch, MAX_DECODE_BATCH)]
    decode = sect.run("roofline", *common, "--phase", "decode", "--context", str(o.context),
                      "--sweep", "batch=" + ",".join(map(str, decode_batches)))
    prefill = sect.run("roofline", *common, "--phase", "prefill", "--seq", str(o.seq), *(["--no-fit-check"] * fits),
                       "--sweep", "batch=" + ",".join(map(str, PREFILL_BATCHES)))
    sect.add(f"Roofline prediction on tp {tp} x {ctx.gpu}, decode at {o.context:,} tokens of context "
             f"({'batches that fit' if fits else 'fit not checked'}), time per output token:", "", *_sweep_table(sect, decode, "time per output token"), "",
             f"Prefill of {o.seq:,}-token prompts, time to first token:", "",
             *_sweep_table(sect, prefill, "time to first token"), "")
    sect.figures.append(Figure("roofline_curves", "roofline_curves",
                               f"{o.model} on tp {tp} x {ctx.gpu}: throughput and latency vs batch "
                               f"(prefill {o.seq} tokens, decode at context {o.context})",
                               {"decode": decode.data["sweep"], "prefill": prefill.data["sweep"]}))
    fitting = [p["batch"] for p in decode.data["sweep"] if p["fits"]]
    point = fitting[-1] if fitting else decode_batches[0]
    decode_at = sect.run("roofline", *common, "--phase", "decode", "--context", str(o.context), "--batch", str(point),
                         *(["--no-fit-check"] * (fits and not fitting)))
    prefill_at = sect.run("roofline", *common, "--phase", "prefill", "--seq", str(o.seq), "--batch", "1",
                          *(["--no-fit-check"] * fits))
    shares = {}
    for label, call in ((f"decode, batch {point}", decode_at), ("prefill, batch 1", prefill_at)):
        shares[label] = _op_shares(sect, call)
    sect.figures.append(Figure("op_share", "op_share", f"{o.model} on tp {tp} x {ctx.gpu}: share of step time by "
                               f"kernel (decode batch {point} at context {o.context}; prefill batch 1 x {o.seq})",
                               shares))


def _op_shares(sect: Section, call) -> list:
    """The largest kernels (layers x count) and collectives by their share of the step; a table per point."""
    items = [(f"{op['name']}" + (" (head)" if op["layers"] == "head" else ""), f"ops.{i}", op["total_s"])
             for i, op in enumerate(call.data["ops"])]
    items += [(c["name"], f"comm.{i}", c["exposed_s"]) for i, c in enumerate(call.data["comm"])]
    items.sort(key=lambda item: -item[2])
    rows, shares = [], []
    for name, path, _ in items[:TOP_OPS]:
        key = f"{path}.{'total_s' if path.startswith('ops') else 'exposed_s'}"
        rows.append((name, sect.q(call, key, "ms"), sect.q(call, f"{key}/predicted_s", "pct")))
        shares.append((name, lookup(call.data, f"{key}/predicted_s")))
    o = call.data
    sect.add(f"Where the time goes, {o['phase']} batch {o['batch']} "
             f"({sect.q(call, 'predicted_s', 'ms')} ms, {sect.q(call, 'bound', 'text')}-bound):", "",
             *markdown_table(["kernel or collective", "total (ms)", "share"], rows), "")
    return shares


SERVE_KEYS = (("ttft_p50_s", "TTFT p50", "ms"), ("ttft_p99_s", "TTFT p99", "ms"), ("tpot_p50_s", "TPOT p50", "ms"),
              ("tpot_p99_s", "TPOT p99", "ms"), ("e2e_p50_s", "e2e p50", "ms"), ("e2e_p99_s", "e2e p99", "ms"),
              ("throughput_requests_per_s", "requests/s", "g"), ("throughput_tokens_per_s", "tokens/s", "rate"),
              ("goodput_requests_per_s", "goodput (requests/s)", "g"))


RATE_FRACTIONS = (0.25, 0.5, 0.75, 1.0, 1.25)  # of the highest rate within the SLO: the knee sits inside
FALLBACK_RATES = (0.5, 1.0, 2.0, 4.0, 8.0)  # requests/s, where no rate meets the SLO (or every rate does)


def _serving_rates(sect: Section, base: list[str], o: ReportOptions) -> tuple[tuple[float, ...], str]:
    """The rates to simulate and a sentence saying how they were chosen."""
    if o.rates:
        return tuple(o.rates), "at the rates asked for"
    try:
        search = sect.run(*base, "--max-rate")
    except CommandFailed as exc:
        return FALLBACK_RATES, f"at fixed rates: the capacity search under `--slo {o.serve_slo}` found no rate ({exc})"
    best = search.data["max_rate_requests_per_s"]
    rates = tuple(float(f"{f * best:.3g}") for f in RATE_FRACTIONS)
    return rates, (f"at {RATE_FRACTIONS[0]:g}x to {RATE_FRACTIONS[-1]:g}x the highest rate whose p99 TTFT and TPOT meet "
                   f"`--slo {o.serve_slo}`, {sect.q(search, 'max_rate_requests_per_s', 'g')} requests/s (`mlsys serve "
                   f"--max-rate`: bisection over the simulator to {search.data['tolerance']:.0%}, "
                   f"{sect.q(search, 'simulations', 'int')} simulations), so the knee lies inside the table")


def serving_section(ctx: Context, sect: Section) -> None:
    require_command(ctx, "serve")
    o = ctx.options
    tp, _ = _pick_tp(ctx, sect)  # the inference section's tensor-parallel size (its commands, cached)
    tp_args = ["--tp", str(tp)] if tp > 1 else []
    base = ["serve", *ctx.model_args(), "--gpu", ctx.gpu, *tp_args, "--prompt-len", str(o.prompt_len), "--output-len",
            str(o.output_len), "--requests", str(o.serve_requests), "--slo", o.serve_slo]
    rates, how = _serving_rates(sect, base, o)
    calls = [sect.run(*base, "--rate", f"{r:g}") for r in rates]
    keys = [k for k in SERVE_KEYS if k[0] in calls[0].data]
    rows = [(f"{r:g}", *[sect.q(c, k, f) for k, _, f in keys]) for r, c in zip(rates, calls)]
    engine = f"{ctx.gpu}" + (f", tensor parallel {tp} per engine" if tp > 1 else "")
    sect.add(f"Simulated serving on {engine}: {o.prompt_len:,}-token prompts, {o.output_len:,} output tokens, "
             f"{o.serve_requests:,} requests with Poisson arrivals {how}; goodput counts the requests within the SLO's "
             "limits (latencies in ms):", "",
             *markdown_table(["rate (requests/s)", *[label for _, label, _ in keys]], rows), "")
    sect.figures.append(Figure("serving_latency", "serving_latency",
                               f"{o.model} served on {ctx.gpu}: latency vs request rate "
                               f"(prompt {o.prompt_len}, output {o.output_len} tokens)",
                               {"rates": list(rates), "points": [c.data for c in calls]}))
    commands_block(sect, sect.calls)
