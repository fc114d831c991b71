"""Fit the costs of `mlsys train --framework torch` (calc.train.host) to measured training steps.

    python scripts/train_host_fit.py ROWS.jsonl [--profiled PROFILED_ROWS.jsonl] [--profile PROFILE.json]
                                     [--cluster hgx-h200] [--calibration FILE]

The rows' host-bound cases (tp: DTensor TP, fsdp: FSDP2, fsdp-tp: both) are assumed paced by the host
(step = host path), which makes their measured forward+backward times linear in the host costs:

    fb(case) = m ( ops op_s + matmuls dtensor_matmul_s [tp > 1] + layers fsdp_layer_s [ZeRO-3] )

three rows, three unknowns, solved exactly; dtensor_param_s is the mean over the three rows of the
optimizer time per parameter tensor. ops, matmuls, layers and tensors are `mlsys train`'s `host_work`
of the row's layout.

--profiled (rows of `scripts/device_train.sh DIR profile 2`) adds a measured bound on op_s: the
one-GPU step's host time (trace_summary's host_busy_s: top-level aten ops, union over threads), less
the optimizer's share of its top-level ops (2 per parameter tensor, the fp32 gradient copy and the
bf16 copy-back, and a fused AdamW per group: a decoder layer, and the rest), times the profiler's
inflation on the host-bound TP step (timed step / profiled window), over the priced kernels:

    op_s_profiled = host_busy(single) x (1 - (2 tensors + layers + 1) / host_ops(single))
                    x step(tp) / window(tp) / ops

an upper bound: the host's busy time includes the loss's .item(), which blocks until the GPU has run
the backward, so a GPU-bound step's host time reads as the GPU's. --profile (per-case GPU time by
kernel class, reports/train/profile_h200.json) adds the interleaved schedule's
p2p_slowdown = compute_busy(pp-interleaved, rank 0) / compute_busy(pp-1f1b, rank 0) - 1.
Prints the costs as JSON (seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent / "validate")]  # scripts/, validate/

from train_compare import config_for, train_args  # noqa: E402
from train_published import Runner, cli_runner  # noqa: E402

HOST_BOUND = ("tp", "fsdp", "fsdp-tp")


def host_work(row: dict, cluster: str, runner: Runner, calibration: str | None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return runner(train_args(row, config_for(row["model"], Path(folder)), cluster, calibration))["host_work"]


def fit(rows: list[dict], cluster: str, runner: Runner, calibration: str | None = None) -> dict:
    """op_s, dtensor_matmul_s, fsdp_layer_s solved from the tp, fsdp and fsdp-tp rows; dtensor_param_s."""
    import numpy as np

    by_case = {r["case"]: r for r in rows}
    matrix, fb, per_tensor = [], [], []
    for case in HOST_BOUND:
        row = by_case[case]
        work, m = host_work(row, cluster, runner, calibration), row["micro_batches"]
        matrix.append([m * work["ops"], m * work["matmuls"] * (row["tp"] > 1),
                       m * work["layers"] * (case in ("fsdp", "fsdp-tp"))])
        fb.append(row["fwd_bwd_s"])
        per_tensor.append(row["optimizer_s"] / work["tensors"])
    op_s, matmul_s, layer_s = (float(x) for x in np.linalg.solve(np.array(matrix, float), np.array(fb)))
    return {"op_s": op_s, "dtensor_matmul_s": matmul_s, "fsdp_layer_s": layer_s,
            "dtensor_param_s": statistics.fmean(per_tensor)}


def profiled_op_s(profiled: list[dict], cluster: str, runner: Runner, calibration: str | None = None) -> float:
    """The profiled upper bound of op_s from the single and tp rows (module docstring)."""
    by_case = {r["case"]: r for r in profiled}
    single, tp = by_case["single"], by_case["tp"]
    work = host_work(single, cluster, runner, calibration)
    prof = single["profile_per_rank"][0]
    share = 1 - (2 * work["tensors"] + work["layers"] + 1) / prof["host_ops"]
    inflation = tp["step_time_s"] / max(r["window_s"] for r in tp["profile_per_rank"])
    return prof["host_busy_s"] * share * inflation / work["ops"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--profiled", type=Path, help="rows with profiles of the single and tp cases (op_s bound)")
    ap.add_argument("--profile", type=Path, help="per-case GPU time by kernel class (p2p_slowdown from it)")
    ap.add_argument("--cluster", default="hgx-h200")
    ap.add_argument("--calibration")
    args = ap.parse_args(argv)
    read = lambda path: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]  # noqa: E731
    runner = cli_runner()
    costs = fit(read(args.rows), args.cluster, runner, args.calibration)
    if args.profiled:
        costs["op_s_profiled_upper_bound"] = profiled_op_s(read(args.profiled), args.cluster, runner, args.calibration)
    if args.profile:
        cases = json.loads(args.profile.read_text())["per_case"]
        costs["p2p_slowdown"] = (cases["pp-interleaved_rank0"]["compute_busy_s"]
                                 / cases["pp-1f1b_rank0"]["compute_busy_s"] - 1)
    print(json.dumps(costs, indent=1))


if __name__ == "__main__":
    main()
