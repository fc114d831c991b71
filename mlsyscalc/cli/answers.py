"""The answer line: one or two lines that answer a command's question, printed before its tables.

ANSWERS maps a command (its path under `mlsys`, e.g. "memory train") to a function of the
command's JSON payload that returns those lines; `cli/render.emit` prints them first in table and
markdown output, adds them to JSON as `answer`, and prints only them under `--brief`. The
functions read JSON keys only, so a command module never changes for its answer, and a key a
payload lacks drops the clause that needs it rather than failing.
"""

from __future__ import annotations

from typing import Any, Callable

from .render_units import eng, eng_unit, gib, percent, seconds

Payload = dict[str, Any]


def answer(command: str, data: Payload) -> list[str]:
    """The answer lines for `command`'s payload ([] when the command has none, or its payload lacks a key).

    A payload of another shape (a key renamed, a new mode of a command) loses its answer line, never
    its output: tests/test_answers.py runs every command and fails on a missing line.
    """
    function = lookup(command)
    if function is None:
        return []
    try:
        return [line for line in function(data) if line]
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, StopIteration):
        return []


def lookup(command: str) -> Callable[[Payload], list[str]] | None:
    """The answer function of command or of the longest group above it ("roofline op matmul" -> "roofline op")."""
    words = command.split()
    for end in range(len(words), 0, -1):
        function = ANSWERS.get(" ".join(words[:end]))
        if function is not None:
            return function
    return None


def _params(d: Payload) -> list[str]:
    total, active = d["total_params"], d["active_params"]
    line = f"params: {eng(total)} total ({total:,})"
    if active != total:
        line += f", {eng(active)} active per token ({active:,}, {percent(active / total)})"
    return [line]


def _flops(d: Payload) -> list[str]:
    fwd = d["forward_flops"]
    per_token = eng_unit(d["flops_per_token"], "FLOP")
    line = f"forward {eng_unit(fwd, 'FLOP')} ({fwd:,}) for {d['tokens']:,} tokens, {per_token} per token"
    if d.get("phase") == "decode":
        return [line]
    return [line, f"train step {eng_unit(d['train_step_flops'], 'FLOP')} (forward + backward = 3 x forward)"]


def _models(d: Payload) -> list[str]:
    return [f"{len(d['models'])} built-in models (names and aliases below; `mlsys models show NAME` for one)"]


def _model_show(d: Payload) -> list[str]:
    line = (f"{d['name']}: {d['model_type']}, {d['num_layers']} layers, hidden {d['hidden_size']:,}, "
            f"{d['num_heads']} heads ({d['num_kv_heads']} KV), vocab {d['vocab_size']:,}")
    if d.get("moe"):
        moe = d["moe"]
        line += f", MoE {moe.get('num_experts', '?')} experts ({moe.get('experts_per_token', moe.get('top_k', '?'))} a token)"
    return [line]


def _gpus(d: Payload) -> list[str]:
    return [f"{len(d['gpus'])} built-in GPUs (datasheet figures below; docs/hardware.md cites each)"]


def _clusters(d: Payload) -> list[str]:
    return [f"{len(d['clusters'])} built-in clusters"]


def fit_line(needed_bytes: float, d: Payload, per: str = "per GPU") -> str:
    """fits: yes, 61.2 GiB of 71.7 GiB usable on H100-SXM (85%) / does not fit: needs ..., 1.9x the ..."""
    fits, usable, gpu = d.get("fits"), d.get("usable_bytes"), d.get("gpu", "the GPU")
    if fits is None or not usable:
        return f"needs {gib(needed_bytes)} {per} (give --gpu for a fit check)"
    if fits:
        return f"fits: yes, {gib(needed_bytes)} {per} of {gib(usable)} usable on {gpu} ({percent(needed_bytes / usable)})"
    return (f"does not fit: needs {gib(needed_bytes)} {per}, {needed_bytes / usable:.3g}x the "
            f"{gib(usable)} usable on {gpu}")


def _memory_train(d: Payload) -> list[str]:
    return [fit_line(d["peak_bytes"] if "peak_bytes" in d else d["total_bytes"], d)]


def _memory_infer(d: Payload) -> list[str]:
    lines = [fit_line(d["total_bytes"], d)]
    solved = d.get("solved_for")
    if solved:
        lines.append(f"largest {solved} that fits: {d['max_value']:,} (batch {d['batch']:,}, context {d['context']:,})")
    return lines


def _roofline_op(d: Payload) -> list[str]:
    line = f"{d['name']} {d.get('shape', '')}".rstrip() + f": {seconds(d['predicted_s'])}, {d['bound']}-bound"
    if d["bound"] == "memory":
        return [f"{line}, {d['intensity_flops_per_byte']:.3g} FLOP/byte (ridge {d['ridge_flops_per_byte']:.3g})"]
    return [f"{line}, {eng_unit(d['attained_flops_per_s'], 'FLOP/s')} on {d['gpu']}"]


_PHASE_TIME = {"prefill": "prefill (TTFT)", "decode": "decode step (TPOT)", "train": "train step"}


def _roofline_model(d: Payload) -> list[str]:
    if "sweep" in d:
        points = d["sweep"]
        first, last = points[0], points[-1]
        key = next(k for k in first if k not in ("predicted_s", "tokens_per_s", "bound", "compute_s", "memory_s",
                                                "comm_s", "mfu", "mbu", "fits"))
        return [f"{d['phase']} over {key} {first[key]}..{last[key]}: {seconds(first['predicted_s'])} -> "
                f"{seconds(last['predicted_s'])}, {eng(first['tokens_per_s'])} -> {eng(last['tokens_per_s'])} tok/s"]
    what = _PHASE_TIME.get(d["phase"], d["phase"])
    return [f"{what} {seconds(d['predicted_s'])}, {d['bound']}-bound, MFU {percent(d['mfu'])}, MBU {percent(d['mbu'])}, "
            f"{eng(d['tokens_per_s'])} tok/s on {d['gpu']}"]


def _collective(d: Payload) -> list[str]:
    return [f"{d['collective']} of {gib(d['size_bytes'])} on {d['gpus']} GPUs: {seconds(d['time_s'])}, "
            f"busbw {eng(d['busbw_GBps'])} GB/s (algbw {eng(d['algbw_GBps'])} GB/s)"]


def _comm_step(d: Payload) -> list[str]:
    return [f"{gib(d['total_bytes_per_gpu'])} per GPU per step in {seconds(d['total_time_s'])} of collectives, "
            f"{seconds(d['exposed_time_s'])} exposed; bubble {percent(d['bubble_fraction'])}"]


def _layout(layout: dict[str, Any]) -> str:
    parts = [f"{axis}{layout[axis]}" for axis in ("tp", "pp", "dp", "cp", "ep") if layout.get(axis, 1) != 1 or axis == "dp"]
    if layout.get("vp", 1) != 1:
        parts.append(f"vp{layout['vp']}")
    extra = [f"mb{layout['micro_batch']}"] if "micro_batch" in layout else []
    if layout.get("zero"):
        extra.append(f"zero{layout['zero']}")
    if layout.get("recompute", "none") != "none":
        extra.append(f"recompute {layout['recompute']}")
    return " x ".join(parts) + (f" ({', '.join(extra)})" if extra else "")


def step_line(d: Payload) -> str:
    """step 11.8 s, MFU 63%, 81.1k tok/s, 48.2 GiB/GPU (fits)"""
    memory = d["memory_bytes_per_gpu"]
    usable = d.get("usable_bytes")
    if d.get("fits"):
        fit = "fits"
    elif usable:
        fit = f"does not fit: {memory / usable:.3g}x the {gib(usable)} usable"
    else:
        fit = "no fit check"
    return (f"step {seconds(d['step_time_s'])}, MFU {percent(d['mfu'])}, {eng(d['tokens_per_s'])} tok/s, "
            f"{gib(memory)}/GPU ({fit})")


def _train(d: Payload) -> list[str]:
    lines = [step_line(d)]
    if d.get("fits") is False:
        lines.append(f"this layout ({_layout(d['layout'])}) needs more memory than the GPU has: "
                     "`mlsys plan` finds the fastest one that fits")
    return lines


def _plan(d: Payload) -> list[str]:
    candidates = [c for c in d.get("candidates", []) if c.get("fits", True)]
    if not candidates:
        return [f"no layout of {d['gpus']} GPUs fits ({d.get('feasible', 0):,} of {d.get('searched', 0):,} valid)"]
    best = candidates[0]
    return [f"best layout of {d.get('searched', 0):,} searched: {_layout(best['layout'])}", step_line(best)]


def _serve(d: Payload) -> list[str]:
    if "sweep" in d:
        return _serve_sweep(d)
    if "best" in d:
        best = d["best"]
        return [f"best split: {best['layout']} on {best['gpus']} GPUs, goodput "
                f"{eng(best['goodput_per_gpu_requests_per_s'])} req/s per GPU", _latencies(best)]
    rates = f"{eng(d['throughput_requests_per_s'])} req/s, {eng(d['throughput_tokens_per_s'])} tok/s"
    where = f" on {d['layout']}" if "layout" in d else ""
    verdict = _slo_verdict(d)
    return [_latencies(d), f"{verdict}; {rates}{where}" if verdict else f"throughput {rates}{where}"]


def _latencies(d: Payload) -> str:
    return (f"TTFT p50/p99 {seconds(d['ttft_p50_s'])} / {seconds(d['ttft_p99_s'])}, "
            f"TPOT p50/p99 {seconds(d['tpot_p50_s'])} / {seconds(d['tpot_p99_s'])}")


def _slo_targets(d: Payload) -> dict[str, float]:
    """{"ttft": seconds, "tpot": seconds} of the --slo given (empty when none)."""
    slo = (d.get("options") or {}).get("slo") or d.get("slo") or {}
    out = {}
    for key, value in slo.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key.split("_")[0]] = float(value)
    return out


def _slo_verdict(d: Payload) -> str:
    """The serve command's own verdict where --slo named percentile targets (its JSON `slo.terms`);
    per-request thresholds alone (`--slo ttft=S`) are read at p99."""
    share = f" ({percent(d['slo_attainment'])} of requests within)" if "slo_attainment" in d else ""
    judged = [t for t in (d.get("slo") or {}).get("terms", []) if "met" in t]
    if judged:
        missed = [f"{t['metric']} p{t['percentile']} {seconds(t['value_s'])} > {seconds(t['limit_s'])}"
                  for t in judged if not t["met"]]
        held = ", ".join(f"{t['metric']} p{t['percentile']}" for t in judged)
        return f"SLO missed: {', '.join(missed)}{share}" if missed else f"SLO met ({held}){share}"
    targets = _slo_targets(d)
    if not targets:
        return ""
    missed = [f"{name} p99 {seconds(d[f'{name}_p99_s'])} > {seconds(limit)}"
              for name, limit in targets.items() if d.get(f"{name}_p99_s", 0) > limit]
    return f"SLO missed: {', '.join(missed)}{share}" if missed else f"SLO met at p99{share}"


def _serve_sweep(d: Payload) -> list[str]:
    points = d["sweep"]
    first, last = points[0], points[-1]
    return [f"rate {eng(first['rate_per_s'])} -> {eng(last['rate_per_s'])} req/s: TTFT p99 "
            f"{seconds(first['ttft_p99_s'])} -> {seconds(last['ttft_p99_s'])}, TPOT p99 "
            f"{seconds(first['tpot_p99_s'])} -> {seconds(last['tpot_p99_s'])}"]


def _scaling_optimal(d: Payload) -> list[str]:
    return [f"compute-optimal at {eng_unit(d['compute_flops'], 'FLOP')}: {eng(d['params'])} params on {eng(d['tokens'])} tokens "
            f"({d['tokens_per_param']:.3g} tokens/param), loss {d['loss']:.4g}"]


def _scaling_loss(d: Payload) -> list[str]:
    return [f"loss {d['loss']:.4g} for {eng(d['params'])} params on {eng(d['tokens'])} tokens; the optimum at "
            f"{eng_unit(d['compute_flops'], 'FLOP')} reaches {d['optimal_loss']:.4g} ({eng(d['optimal_params'])} params)"]


def _scaling_budget(d: Payload) -> list[str]:
    line = (f"{eng_unit(d['compute_flops'], 'FLOP')} = {eng(d['gpu_hours'])} GPU-hours = {eng(d['wall_days'])} days on "
            f"{d['gpus']:,} GPU{'s' if d['gpus'] != 1 else ''} at MFU {percent(d['mfu'])}")
    if d.get("cost") is not None:
        line += f", cost {eng(d['cost'])}"
    return [line]


def _scaling_table(d: Payload) -> list[str]:
    ratios = [r["params_ratio"] for r in d["rows"] if r.get("params_ratio")]
    spread = f": params within {min(ratios):.3g}-{max(ratios):.3g}x of the paper's" if ratios else ""
    law = "every law" if d["law"] == "all" else d["law"]
    return [f"{len(d['rows'])} rows of Chinchilla's tables recomputed by {law}{spread}"]


def _scaling_fit(d: Payload) -> list[str]:
    return [f"fit over {d['n_runs']} runs: L = {d['E']:.4g} + {d['A']:.4g}/N^{d['alpha']:.3g} + "
            f"{d['B']:.4g}/D^{d['beta']:.3g}",
            f"optimum at {eng_unit(d['compute_flops'], 'FLOP')}: {eng(d['params'])} params on {eng(d['tokens'])} tokens"]


def _compare(d: Payload) -> list[str]:
    cards = [c for c in d["cards"] if not c.get("error")]
    if not cards:
        return ["no card could run this task (see the errors below)"]
    if all(c.get("time_s") is None for c in cards):
        fitting = [c["card"] for c in cards if c.get("fits")]
        return [f"fits on {len(fitting)} of {len(cards)} cards" + (f": {', '.join(fitting)}" if fitting else "")]
    timed = sorted((c for c in cards if c.get("time_s") is not None), key=lambda c: c["time_s"])
    lines = ["fastest: " + ", ".join(f"{c['card']} {seconds(c['time_s'])}" for c in timed[:3])]
    costs = [c for c in timed if isinstance(c.get("cost"), dict) and "cost_per_million_tokens" in c["cost"]]
    if costs:
        cheap = min(costs, key=lambda c: c["cost"]["cost_per_million_tokens"])
        lines.append(f"cheapest: {cheap['card']} at {cheap['cost']['cost_per_million_tokens']:.3g} per million tokens")
    return lines


def _report(d: Payload) -> list[str]:
    sections = d.get("sections", {})
    ok = sum(1 for status in sections.values() if status == "ok")
    return [f"wrote {d['markdown']} ({ok} of {len(sections)} sections, {len(d.get('figures', []))} figure files) "
            f"in {seconds(d['elapsed_s'])}"]


ANSWERS: dict[str, Callable[[Payload], list[str]]] = {
    "params": _params,
    "flops": _flops,
    "models": _models,
    "models show": _model_show,
    "gpus": _gpus,
    "memory train": _memory_train,
    "memory infer": _memory_infer,
    "roofline op": _roofline_op,
    "roofline model": _roofline_model,
    **{f"comm {name}": _collective for name in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                                "broadcast", "reduce", "p2p")},
    "comm step": _comm_step,
    "comm clusters": _clusters,
    "train": _train,
    "plan": _plan,
    "serve": _serve,
    "scaling optimal": _scaling_optimal,
    "scaling loss": _scaling_loss,
    "scaling budget": _scaling_budget,
    "scaling table": _scaling_table,
    "scaling fit": _scaling_fit,
    "compare": _compare,
    "report": _report,
}
