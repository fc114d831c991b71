"""Fit the host costs of `mlsys train --framework torch` (calc.train_host) to measured training steps.

    python scripts/train_host_fit.py ROWS.jsonl --op-us 40 [--cluster hgx-h200] [--calibration FILE]

op_s (host seconds per priced kernel of plain eager PyTorch) is given: it is measured, the profiled
host time of a one-GPU step over the kernels the roofline prices (scripts/trace_summary.py's
host_busy_s; see reports/train/measured.md). The other three are solved, one case each, from the
rows' measured forward+backward and optimizer times, assuming the host paces those steps
(step = host path; calc.train_host):

    dtensor_matmul_s = (fb(tp)   - m ops op_s) / (m matmuls)          the DTensor TP row
    fsdp_layer_s     = (fb(fsdp) - m ops op_s) / (m layers)           the FSDP2 row
    dtensor_param_s  = mean over those two rows of opt / tensors

ops, matmuls, layers and tensors are `mlsys train`'s `host_work` of the row's layout. Prints the
costs as JSON (seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_compare import config_for, train_args  # noqa: E402
from train_published import Runner, cli_runner  # noqa: E402


def host_work(row: dict, cluster: str, runner: Runner, calibration: str | None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return runner(train_args(row, config_for(row["model"], Path(folder)), cluster, calibration))["host_work"]


def fit(rows: list[dict], op_s: float, cluster: str, runner: Runner, calibration: str | None = None) -> dict:
    """The three solved costs (module docstring) from the rows of cases tp and fsdp."""
    by_case = {r["case"]: r for r in rows}
    out, per_tensor = {"op_s": op_s}, []
    for case, key, unit in (("tp", "dtensor_matmul_s", "matmuls"), ("fsdp", "fsdp_layer_s", "layers")):
        row = by_case[case]
        work, m = host_work(row, cluster, runner, calibration), row["micro_batches"]
        out[key] = (row["fwd_bwd_s"] - m * work["ops"] * op_s) / (m * work[unit])
        per_tensor.append(row["optimizer_s"] / work["tensors"])
    out["dtensor_param_s"] = statistics.fmean(per_tensor)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--op-us", type=float, required=True, help="host microseconds per priced kernel (measured)")
    ap.add_argument("--cluster", default="hgx-h200")
    ap.add_argument("--calibration")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    print(json.dumps(fit(rows, args.op_us * 1e-6, args.cluster, cli_runner(), args.calibration), indent=1))


if __name__ == "__main__":
    main()
