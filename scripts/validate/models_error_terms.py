"""Split each held-out row's calibrated step error by term: matmul, attention and memory-bound
kernels (profiler times against the roofline rows of that kind, each kernel's fixed cost
included: a profiled kernel's duration holds its prologue and tail) and the idle gaps between
kernels (step - profiled kernel time; the roofline prices none apart from the fixed cost, or the
host path where it sets an eager step).

    python scripts/validate/models_error_terms.py reports/models/calibration.json ROWS.jsonl ... [--gpu H100-SXM]

Each term is (measured - predicted) / predicted step, so the terms add up to the step error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mlsyscalc.bench.cases.model import roofline_options
from mlsyscalc.bench.model_calibrate import load_cases, usable
from mlsyscalc.bench.rows import ResultStore
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.model import predict_model
from mlsyscalc.report.models_report import latest_rows

KINDS = ("matmul", "attention", "memory")


def pct(v: float) -> str:
    return f"{v * 100:+.1f}%"


def terms(c, ceilings) -> dict:
    roof = predict_model(c.spec, ceilings, roofline_options(c.case))
    kernels = {k: 0.0 for k in KINDS}
    fixed = 0.0
    for r in roof.rows:
        kernels[r.pred.kind] += r.total_s  # the fixed cost per kernel included: the profiler's time holds it
        fixed += r.count * r.pred.overhead_s
    predicted = max(sum(kernels.values()), roof.host_path_s)
    measured = c.row.median_ms * 1e-3
    kinds = (c.row.extra.get("ops") or {}).get("kinds") or {}
    x = c.row.extra
    label = f"{x.get('model')} {c.case.phase} {c.row.shape}"
    out = {"key": label, "measured_s": measured, "predicted_s": predicted, "error": measured / predicted - 1}
    got = 0.0
    for k in KINDS:
        m = (kinds.get(k) or {}).get("measured_s") or 0.0
        got += m
        out[k] = (m - kernels[k]) / predicted
    out["gaps"] = (measured - got) / predicted  # idle time between kernels (the host's, where eager)
    out["host_bound"] = roof.host_path_s > sum(kernels.values())
    out["fixed"] = fixed / predicted
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("calibration")
    p.add_argument("rows", nargs="+", type=Path)
    p.add_argument("--gpu", default="H100-SXM")
    p.add_argument("--hold-out", default="falcon-7b,gemma2-9b,llama3-8b,mistral-7b,phi-2")
    p.add_argument("--all", action="store_true", help="every held-out row, not only the misses (|error| > 5%)")
    a = p.parse_args(argv)
    rows = latest_rows([r for path in a.rows for r in ResultStore(path).rows()])
    cal = load_ceilings(a.gpu, json.loads(Path(a.calibration).read_text()))
    base = load_ceilings(a.gpu)
    print("| row | error (datasheet) | error (calibrated) | matmul | attention | memory | gaps | fixed cost share |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in load_cases(rows, set(a.hold_out.split(",")), usable):
        if not c.held_out:
            continue
        t, t0 = terms(c, cal), terms(c, base)
        if not a.all and abs(t["error"]) <= 0.05:
            continue
        print(f"| {t['key']} | {pct(t0['error'])} | {pct(t['error'])} | " + " | ".join(
            f"{pct(t0[k])} -> {pct(t[k])}" for k in (*KINDS, "gaps")) + (" (host)" if t["host_bound"] else "")
              + f" | {t0['fixed'] * 100:.0f}% -> {t['fixed'] * 100:.0f}% |")


if __name__ == "__main__":
    main()
