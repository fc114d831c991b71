"""Predictions for the 8-GPU run (issue 42), written before any 8-GPU row exists, so that its rows are held out.

    python scripts/validate/predict_8gpu.py [--comm reports/comm/predictions_8gpu.json] [--train reports/train/predictions_8gpu.json]

Collectives: the time per call of every collective and size of the sweep (scripts/validate/eight_gpu_plan.py) at 8 GPUs of
one host, through `collective_cost`, by each predictor:
  h200-nvlink-measured   the committed spec: the shared link fit (`mlsys bench comm --model shared`) of the 2-GPU
                         eager rows of reports/comm/h200-x4-graph (the primary prediction)
  shared-fit-2+4gpu      the same fit of that run's 2- and 4-GPU eager rows, both counts
  h200-x2-measured       the committed per-collective protocol fit of a 2-GPU run (reports/comm/rows.jsonl)
  hgx-h200               the datasheet spec
  graph-fit-2gpu, graph-fit-2+4gpu
                         the device fit of the same form (no host floor, sizes >= 1 MiB) of that run's CUDA-graph rows:
                         the prediction for graph_time_s
Training: `mlsys train --framework torch` on hgx-h200 for each planned case, the flags scripts/validate/train_compare.py
derives from a row (`train_args`: bf16, no recomputation, no sequence parallelism, the case's dp/tp/pp, ZeRO 3
for FSDP2, the vocabulary whole in tp-pp): step time, memory per GPU and the breakdown.
scripts/validate/score_8gpu.py scores the rows of the run against these files as they are committed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

import eight_gpu_plan as plan  # noqa: E402
import train_compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIT_ROWS = "reports/comm/h200-x4-graph/rows.jsonl"  # the committed 2- and 4-GPU rows (eager and CUDA graph)
PRIMARY = "h200-nvlink-measured"
NAMED = {  # built-in cluster spec -> what it is
    "h200-nvlink-measured": "committed spec: shared link fit of the 2-GPU eager rows of " + FIT_ROWS,
    "h200-x2-measured": "committed spec: per-collective protocol fit of a 2-GPU run (reports/comm/rows.jsonl)",
    "hgx-h200": "datasheet spec (NVLink 4, 370 GB/s achievable)",
}


def fitted_predictors(rows: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """Predictors fitted to `rows` with `mlsys bench comm --model shared`'s fits, on the 2-GPU rows and on the 2-
    and 4-GPU rows together: the eager fit (with the host floor) and the device fit of the CUDA-graph rows (sizes
    >= 1 MiB); each {name, timing, what, spec (a ClusterSpec)}. A fit whose rows are not all there is left out."""
    from mlsyscalc.bench.comm_shared_fit import fit_shared, shared_cluster
    from mlsyscalc.report.comm_shared import shared_spec

    out = []
    for counts in ((2,), (2, 4)):
        fitted = [r for r in rows if r.get("ok") and r["gpus"] in counts and r.get("nodes", 1) == 1]
        if {r["gpus"] for r in fitted} != set(counts):
            continue
        label = "+".join(map(str, counts))
        _, spec = shared_spec(fitted, f"shared-fit-{label}gpu", plan.GPUS)
        out.append({"name": spec.name, "timing": "eager", "spec": spec,
                    "what": f"shared link fit of the {label}-GPU eager rows of {source}"})
        graph = [r for r in fitted if r.get("graph_time_s")]
        if {r["gpus"] for r in graph} == set(counts):
            fit = fit_shared(graph, "graph_time_s", host=False, min_size=plan.GOAL_MIN_SIZE)
            name = f"graph-fit-{label}gpu"
            out.append({"name": name, "timing": "graph", "spec": shared_cluster(fit, name, plan.GPUS, "graph fit"),
                        "what": f"device fit (no host floor, sizes >= 1 MiB) of the {label}-GPU CUDA-graph rows of "
                                f"{source}"})
    return out


def predictors() -> list[dict[str, Any]]:
    """Every predictor of the committed file, the primary first."""
    from mlsyscalc.readers.records import read_comm_rows
    from mlsyscalc.calc.comm.collectives import COLLECTIVES
    from mlsyscalc.specs.cluster import load_cluster

    named = [{"name": n, "timing": "eager", "spec": load_cluster(n), "what": w} for n, w in NAMED.items()]
    rows = read_comm_rows(ROOT / FIT_ROWS, tuple(COLLECTIVES))
    # the eager 2-GPU fit of these rows is the committed spec itself (h200-nvlink-measured): not twice
    fitted = {e["name"]: e for e in fitted_predictors(rows, FIT_ROWS) if e["name"] != "shared-fit-2gpu"}
    return [named[0], fitted["shared-fit-2+4gpu"], *named[1:], fitted["graph-fit-2gpu"], fitted["graph-fit-2+4gpu"]]


def comm_predictions(entries: list[dict[str, Any]], gpus: int = plan.GPUS) -> list[dict[str, Any]]:
    """Each predictor's time per call of every collective it prices and every size of the sweep at `gpus`."""
    from mlsyscalc.calc.comm.collectives import COLLECTIVES, collective_cost

    out = []
    for entry in entries:
        spec = entry["spec"]
        priced = spec.intra.per_collective or {}
        for collective in COLLECTIVES:
            if entry["timing"] == "graph" and collective not in priced:
                continue  # a graph fit prices only the collectives that have graph rows (not p2p)
            for size in plan.comm_sizes():
                cost = collective_cost(collective, size, gpus, spec)
                out.append({"predictor": entry["name"], "collective": collective, "size_bytes": size, "gpus": gpus,
                            "time_s": cost.time_s, "device_s": cost.device_s, "busbw_GBps": cost.busbw_Bps / 1e9})
    return out


def comm_file(commit: str) -> dict[str, Any]:
    entries = predictors()
    return {"made_at_commit": commit, "command": "python scripts/validate/predict_8gpu.py", "gpus": plan.GPUS, "card": plan.CARD,
            "primary": PRIMARY, "goal": "time per call within 10% for sizes >= 1 MiB (eager rows: time_s; "
                                        "graph predictors: graph_time_s)",
            "sizes_bytes": plan.comm_sizes(),
            "predictors": [{"name": e["name"], "timing": e["timing"], "what": e["what"], "spec": e["spec"].to_dict()}
                           for e in entries],
            "predictions": comm_predictions(entries)}


def train_predictions(runner: train_compare.Runner | None = None) -> list[dict[str, Any]]:
    """`mlsys train` of every planned case, with the flags scripts/validate/train_compare.py derives from its row."""
    from train_published import cli_runner

    run = runner or cli_runner()
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for case in plan.TRAIN_CASES:
            row = plan.planned_row(case)
            config = train_compare.config_for(row["model"], Path(folder))
            args = train_compare.train_args(row, config, plan.CLUSTER, framework=plan.FRAMEWORK)
            result = run(args)
            out.append({"row": row, "mlsys_args": ["train", "MODEL.json", *args[2:]],
                        "step_time_s": result["step_time_s"], "memory_bytes_per_gpu": result["memory_bytes_per_gpu"],
                        "fits": result.get("fits"), "breakdown": result.get("breakdown", {}),
                        "memory_breakdown": result.get("memory", {})})
    return out


def train_file(commit: str, runner: train_compare.Runner | None = None) -> dict[str, Any]:
    return {"made_at_commit": commit, "command": "python scripts/validate/predict_8gpu.py", "gpus": plan.GPUS, "card": plan.CARD,
            "cluster": plan.CLUSTER, "framework": plan.FRAMEWORK, "model": plan.TRAIN_MODEL,
            "measure_flags": plan.train_flags(), "goal": "step time within 10%, peak memory within 3% (largest rank)",
            "predictions": train_predictions(runner)}


def main(argv: list[str] | None = None) -> None:
    from mlsyscalc.bench.harness import git_commit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comm", type=Path, default=ROOT / "reports/comm/predictions_8gpu.json")
    ap.add_argument("--train", type=Path, default=ROOT / "reports/train/predictions_8gpu.json")
    args = ap.parse_args(argv)
    for path in (args.comm, args.train):
        if not path.parent.is_dir():
            ap.error(f"{path.parent} is not a folder")
    commit = git_commit() or "unknown"
    for path, data in ((args.comm, comm_file(commit)), (args.train, train_file(commit))):
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path} ({len(data['predictions'])} predictions, at {commit[:12]})")


if __name__ == "__main__":
    main()
