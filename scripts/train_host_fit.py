"""Fit the host costs of `mlsys train --framework torch` (calc.train_host) to measured training steps.

    python scripts/train_host_fit.py ROWS.jsonl (--op-us US | --profiled PROFILED_ROWS.jsonl)
                                     [--profile PROFILE.json] [--cluster hgx-h200] [--calibration FILE]

op_s (host seconds per priced kernel of plain eager PyTorch) is measured, not fitted: from profiled
rows (scripts/device_train.sh DIR profile 2) it is the one-GPU step's host time (trace_summary's
host_busy_s: top-level aten ops, union over threads), less the optimizer's share of the top-level ops
(the script's mixed-precision step issues 2 per parameter tensor, an fp32 gradient copy and the bf16
copy-back, and one fused AdamW per group: a decoder layer, and the rest), times the profiler's
inflation measured on the host-bound TP step (timed step / profiled window), over the forward +
backward kernels the roofline prices:

    op_s = host_busy(single) x (1 - (2 tensors + layers + 1) / host_ops(single))
           x step(tp) / window(tp) / ops

The other three are solved, one case each, from the
rows' measured forward+backward and optimizer times, assuming the host paces those steps
(step = host path; calc.train_host):

    dtensor_matmul_s = (fb(tp)   - m ops op_s) / (m matmuls)          the DTensor TP row
    fsdp_layer_s     = (fb(fsdp) - m ops op_s) / (m layers)           the FSDP2 row
    dtensor_param_s  = mean over those two rows of opt / tensors

ops, matmuls, layers and tensors are `mlsys train`'s `host_work` of the row's layout. With --profile
(reports/train/profile_h200.json: GPU time by kernel class per case), also the interleaved schedule's
p2p_slowdown = compute_busy(pp-interleaved, rank 0) / compute_busy(pp-1f1b, rank 0) - 1. Prints the
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


def profiled_op_s(profiled: list[dict], cluster: str, runner: Runner, calibration: str | None = None) -> float:
    """op_s from the profiled single and tp rows (module docstring)."""
    by_case = {r["case"]: r for r in profiled}
    single, tp = by_case["single"], by_case["tp"]
    work = host_work(single, cluster, runner, calibration)
    prof = single["profile_per_rank"][0]
    share = 1 - (2 * work["tensors"] + work["layers"] + 1) / prof["host_ops"]
    inflation = tp["step_time_s"] / max(r["window_s"] for r in tp["profile_per_rank"])
    return prof["host_busy_s"] * share * inflation / work["ops"]


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
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--op-us", type=float, help="host microseconds per priced kernel")
    how.add_argument("--profiled", type=Path, help="rows with profiles of the single and tp cases (op_s from them)")
    ap.add_argument("--profile", type=Path, help="per-case GPU time by kernel class (p2p_slowdown from it)")
    ap.add_argument("--cluster", default="hgx-h200")
    ap.add_argument("--calibration")
    args = ap.parse_args(argv)
    read = lambda path: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]  # noqa: E731
    runner = cli_runner()
    op_s = (args.op_us * 1e-6 if args.op_us is not None
            else profiled_op_s(read(args.profiled), args.cluster, runner, args.calibration))
    costs = fit(read(args.rows), op_s, args.cluster, runner, args.calibration)
    if args.profile:
        cases = json.loads(args.profile.read_text())["per_case"]
        costs["p2p_slowdown"] = (cases["pp-interleaved_rank0"]["compute_busy_s"]
                                 / cases["pp-1f1b_rank0"]["compute_busy_s"] - 1)
    print(json.dumps(costs, indent=1))


if __name__ == "__main__":
    main()
