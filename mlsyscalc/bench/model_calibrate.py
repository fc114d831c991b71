"""`mlsys calibrate`: fit the roofline's ceilings to `mlsys bench model` rows and check the fit on
models held out of it.

Each usable row (no error; torch kernels; prefill/decode under a CUDA graph, or train) becomes
an Observation:
the roofline's kernel rows for its spec and shapes plus the measured step time. The fit
(calc.roofline.calibration_fit) moves the matmul, attention and memory efficiencies and the per-kernel
fixed cost; the result is a calibration file `--calibration` reads (calc.roofline.calibration).
Eager prefill/decode rows measure the host's launch rate as much as the kernels and are left out.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..calc.roofline.calibration import Ceilings
from ..calc.roofline.calibration_fit import EFFICIENCIES, Observation, Term, fit, predict
from ..calc.roofline.model import RooflineOptions, predict_model
from ..errors import MlsysError, require
from .cases.model import IMPL, ModelCase, reduced_spec, roofline_options

if TYPE_CHECKING:
    from ..specs.model import ModelSpec
    from .rows import Row


@dataclass
class Case:
    row: Row
    spec: ModelSpec  # the (reduced) spec the row ran
    case: ModelCase
    held_out: bool
    fitted: bool = True  # in the fit (not held out, and among the fit rows when those are named)


def _timed_torch_model(row) -> bool:
    return (not row.error and bool(row.median_ms) and row.kernel.startswith("model.")
            and row.extra.get("kernels", "torch") == "torch")


def usable(row) -> bool:
    """A timed torch-kernel row the fit takes: a training step, or a prefill/decode under a CUDA graph."""
    return _timed_torch_model(row) and (row.extra.get("phase") == "train" or row.extra.get("mode") == "graph")


def eager_inference(row) -> bool:
    """A timed torch-kernel prefill/decode row launched eagerly: priced with the host's path, not fitted."""
    return _timed_torch_model(row) and row.extra.get("phase") != "train" and row.extra.get("mode") == "eager"


def load_cases(rows, hold_out: set[str], keep=usable) -> list[Case]:
    from ..specs.lookup import load_model, parse_overrides

    out, specs = [], {}
    for row in filter(keep, rows):
        x = row.extra
        ref = (x.get("model_ref") or x.get("model"), tuple(x.get("overrides") or ()))
        if ref not in specs:
            try:
                specs[ref] = load_model(ref[0], parse_overrides(ref[1]) or None)
            except MlsysError as exc:
                raise MlsysError(f"calibrate: cannot rebuild the spec of row {row.key!r}: {exc}") from None
        case = ModelCase(x["phase"], int(x["batch"]), int(x["seq"]), x.get("mode") == "graph", x.get("kernels", "torch"),
                         row.dtype, int(x["layers"]) if x.get("layers") else None, int(x.get("tp") or 1),
                         int(x.get("dp") or 1))
        out.append(Case(row, reduced_spec(specs[ref], case.layers), case, x.get("model") in hold_out))
    return out


def fit_options(case: ModelCase, impl: str = IMPL) -> RooflineOptions:
    """The roofline options a fit prices a row with: burst clocks, so that the fitted efficiencies take in whatever
    clocks the measured rows ran at (a fitted file is then never derated again: calc.roofline.steady)."""
    return replace(roofline_options(case, impl), clocks="burst")


def observation(c: Case, ceilings: Ceilings, impl: str = IMPL) -> Observation:
    if not c.row.median_ms:  # load_cases keeps only timed rows (usable)
        raise MlsysError(f"calibrate: row {c.row.key!r} has no measured time")
    roof = predict_model(c.spec, ceilings, fit_options(c.case, impl))
    e = ceilings.efficiency
    terms = tuple(_term(r, ceilings, step=True) for r in roof.rows)
    return Observation(c.row.key, c.row.median_ms * 1e-3, terms, tuple(getattr(e, k) for k in EFFICIENCIES),
                       roof.comm_s - roof.comm_hidden_s, roof.host_path_s)


def _term(r, ceilings: Ceilings, step: bool = False) -> Term:
    """One roofline row as a fit term, with the efficiency classes that priced its two times (the memory time
    apart from its per-SM cap, which no efficiency moves); in a step (not a profiler's kernel time) each kernel
    also pays the stream's gap before it."""
    p = r.pred
    memory_s, cap_s = p.memory_s, 0.0
    if p.kind == "memory" and p.memory_class == "memory":  # the class _finish prices with memory_parts
        memory_s, cap_s = ceilings.memory_parts(p.read_bytes, p.write_bytes, cls=p.memory_class, kind=p.kind)
    return Term(r.count, p.kind, p.compute_s, memory_s, p.kind == "matmul", p.compute_class, p.memory_class,
                p.floor_s, p.gap_s if step else 0.0, cap_s)


def _ops(row) -> dict:
    """A row's per-op profile (`extra_ops`); a CSV row carries it as text, which is left out."""
    ops = row.extra.get("ops")
    return ops if isinstance(ops, dict) else {}


def linear_observations(c: Case, ceilings: Ceilings, impl: str = IMPL) -> list[Observation]:
    """One observation per forward linear a row's profile timed (all layers): the roofline rows of
    that name (and their split-K reductions, which run inside the linear's range)."""
    measured = _ops(c.row).get("linears") or {}
    if not measured:
        return []
    roof = predict_model(c.spec, ceilings, fit_options(c.case, impl))
    e = ceilings.efficiency
    terms: dict[str, list[Term]] = {}
    for r in roof.rows:
        name = r.pred.name.removesuffix(".splitk_reduce")
        if r.pass_name == "forward" and (r.pred.kind == "matmul" or name != r.pred.name):
            terms.setdefault(name, []).append(_term(r, ceilings))
    base = tuple(getattr(e, k) for k in EFFICIENCIES)
    return [Observation(f"{c.row.key}|{name}", entry["measured_s"], tuple(terms[name]), base)
            for name, entry in measured.items() if entry.get("measured_s") and name in terms]


def calibrate(rows, ceilings: Ceilings, hold_out: set[str], fit_keys: set[str] | None = None,
              impl: str = IMPL, per_op: bool = True) -> dict:
    """The fitted parameters, the calibration record and every row's error before/after. With
    `fit_keys`, only those rows (of models not held out) are fitted; the others are scored.
    `impl`: the roofline's kernel lists (calc.roofline.torch_kernels) the rows are priced with. The fit
    uses the fitted rows' step times and (per_op) their per-linear profiler times."""
    cases = load_cases(rows, hold_out)
    for c in cases:
        c.fitted = not c.held_out and (fit_keys is None or c.row.key in fit_keys)
    fitted = [c for c in cases if c.fitted]
    require(bool(fitted),
            "calibrate: every usable row is held out (or none is usable: graph-mode prefill/decode, train)")
    obs = {c.row.key: observation(c, ceilings, impl) for c in cases}
    e = ceilings.efficiency
    start = {**{k: getattr(e, k) for k in EFFICIENCIES}, "launch_s": ceilings.launch_s,
             "matmul_floor_s": ceilings.matmul_floor_s}
    ops = [o for c in fitted for o in linear_observations(c, ceilings, impl)] if per_op else []
    fixed: tuple[str, ...] = ()
    if ceilings.memory_launch_s is not None or ops:
        # Step times alone do not tell a memory-bound kernel's fixed cost from a GEMM's (a steps-only
        # fit drives one to its bound): it is freed only with profiled ops, else kept, or tied to launch_s.
        start["memory_launch_s"] = ceilings.overhead_s("memory")
        fixed = () if ops else ("memory_launch_s",)
    params = fit([obs[c.row.key] for c in fitted], start, fixed, ops=ops)
    table = []
    for c in cases:
        o = obs[c.row.key]
        before, after = predict(o, start), predict(o, params)
        table.append({"key": c.row.key, "model": c.row.extra.get("model"), "phase": c.case.phase,
                      "mode": c.case.mode, "shape": c.row.shape, "held_out": c.held_out, "fitted": c.fitted, "measured_s": o.measured_s,
                      "uncalibrated_s": before, "calibrated_s": after,
                      "uncalibrated_error": (o.measured_s - before) / before, "error": (o.measured_s - after) / after})
    return {"params": params, "record": record(ceilings, params, sorted({c.row.extra["model"] for c in fitted})),
            "rows": table, "summary": summary(table)}


def record(ceilings: Ceilings, params: dict, models: list[str]) -> dict:
    """The calibration file: the base ceilings written out, the fitted efficiencies on top."""
    gpu = ceilings.gpu
    return {
        "gpu": gpu.name, "sm_count": ceilings.sm_count, "source": "mlsys calibrate",
        "peak_flops": {k: v for k, v in ceilings.base_flops.items() if v},
        "bandwidth_Bps": {"read": ceilings.read_Bps, "write": ceilings.write_Bps},
        "efficiency": {k: params.get(k, getattr(ceilings.efficiency, k)) for k in EFFICIENCIES},
        "launch_overhead_s": params["launch_s"], "kernel_gap_s": ceilings.gap_s, "matmul_floor_s": params.get("matmul_floor_s", ceilings.matmul_floor_s),
        **({"memory_launch_overhead_s": params["memory_launch_s"]} if "memory_launch_s" in params else {}),
        "fitted_on": models,
        "base": ceilings.source,
    }


def summary(table: list[dict]) -> dict:
    out = {}
    for name, members in (("fitted", [r for r in table if r.get("fitted", not r["held_out"])]),
                          ("held_out", [r for r in table if r["held_out"]])):
        errors = [abs(r["error"]) for r in members]
        before = [abs(r["uncalibrated_error"]) for r in members]
        out[name] = {"rows": len(errors), "median_abs_error": statistics.median(errors) if errors else None,
                     "max_abs_error": max(errors) if errors else None,
                     "uncalibrated_median_abs_error": statistics.median(before) if before else None,
                     "uncalibrated_max_abs_error": max(before) if before else None}
    return out


def write_record(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def op_errors(cases: list[Case], ceilings: Ceilings) -> list[dict]:
    """Per forward linear (profiler range vs roofline rows of that name) and per kernel kind, the
    error of `ceilings`' prediction: (measured - predicted) / predicted."""
    out = []
    for c in cases:
        ops = _ops(c.row)
        roof = predict_model(c.spec, ceilings, roofline_options(c.case))
        linear: dict[str, float] = {}
        kind: dict[str, float] = {}
        for r in roof.rows:
            kind[r.pred.kind] = kind.get(r.pred.kind, 0.0) + r.busy_s
            name = r.pred.name.removesuffix(".splitk_reduce")  # the reduction runs inside the linear's range
            if r.pass_name == "forward" and (r.pred.kind == "matmul" or name != r.pred.name):
                linear[name] = linear.get(name, 0.0) + r.busy_s
        for section, predicted in (("linears", linear), ("kinds", kind)):
            for name, entry in (ops.get(section) or {}).items():
                measured, want = entry.get("measured_s"), predicted.get(name)
                if measured and want:
                    out.append({"key": c.row.key, "model": c.row.extra.get("model"), "phase": c.case.phase,
                                "shape": c.row.shape, "section": section, "op": name, "held_out": c.held_out,
                                "measured_s": measured, "predicted_s": want, "error": (measured - want) / want})
    return out
