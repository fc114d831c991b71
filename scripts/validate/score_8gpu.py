"""Score the 8-GPU run (issue 42) against the predictions committed before it, and write its two pages.

    python scripts/validate/score_8gpu.py RUN [--reports reports] [--comm-predictions FILE] [--train-predictions FILE]

RUN is the folder `scripts/device.sh eight-gpu` wrote ($OUT/eight_gpu: comm/rows.jsonl, train/train_rows.jsonl,
steps.jsonl, machine.txt, log.txt). Pages, each with its rows, machine.txt, steps.jsonl and the recipe (run.sh):
  REPORTS/comm/runs/<card>-x8-heldout/README.md    every predictor of reports/comm/predictions_8gpu.json on the
                                                   8-GPU rows (median / worst |error|, median signed error, per
                                                   collective; sizes >= 1 MiB and below), the primary's signed error
                                                   per size, busbw by GPU count, and the same fits made from this
                                                   run's own 2- and 4-GPU rows
  REPORTS/train/runs/<card>-x8-heldout/README.md   each case of reports/train/predictions_8gpu.json against its row
Both predictions files were committed in dfb38cb (made at 7afe5a6), before any 8-GPU row existed: the pages label
every number against them HELD OUT, and say whether the run's commit descends from the predictions' commit.
Rows of a CPU dry run (gloo) are scored too, but only into a --reports folder outside the repository's reports/.
Bad input (no such folder, no rows, rows of another card, a malformed file) exits 2 with the reason.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

import eight_gpu_plan as plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMM_PREDICTIONS = ROOT / "reports/comm/predictions_8gpu.json"
TRAIN_PREDICTIONS = ROOT / "reports/train/predictions_8gpu.json"


class BadInput(Exception):
    """Input the pages cannot be made from: exit 2 with the message."""


def read_train_rows(path: Path) -> list[dict[str, Any]]:
    """scripts/train_measure.py rows, each checked for what the page reads."""
    from mlsyscalc.readers import schema
    from mlsyscalc.readers.files import read_jsonl

    out = []
    for line in read_jsonl(path, "training rows"):
        r, where = line.record, f"training rows {line.where}"
        schema.string(r, "case", where)
        for key in (*plan.LAYOUT_KEYS, "seq"):
            schema.integer(r, key, where)
        schema.number(r, "step_time_s", where, above=0)
        if not schema.sequence(r, "peak_bytes_per_rank", where):
            raise BadInput(f"{where}: peak_bytes_per_rank is empty")
        schema.mapping(r, "model", where, required=True)
        schema.mapping(r, "env", where)
        out.append(r)
    return out


def read_inputs(run: Path, comm_path: Path, train_path: Path) -> dict[str, Any]:
    """Rows, step outcomes and predictions, read and checked."""
    from mlsyscalc.calc.comm.collectives import COLLECTIVES
    from mlsyscalc.readers.files import read_json, read_jsonl
    from mlsyscalc.readers.records import read_comm_rows

    if not run.is_dir():
        raise BadInput(f"{run} is not a folder (the $OUT/eight_gpu of `scripts/device.sh eight-gpu`)")
    comm_rows, train_rows = run / "comm/rows.jsonl", run / "train/train_rows.jsonl"
    if not comm_rows.is_file() and not train_rows.is_file():
        raise BadInput(f"{run} holds neither comm/rows.jsonl nor train/train_rows.jsonl: nothing to score")
    data = {"comm": read_comm_rows(comm_rows, tuple(COLLECTIVES)) if comm_rows.is_file() else [],
            "train": read_train_rows(train_rows) if train_rows.is_file() else [],
            "steps": [line.record for line in read_jsonl(run / "steps.jsonl", "device steps")]
            if (run / "steps.jsonl").is_file() else []}
    for key, path, needs in (("comm_predictions", comm_path, ("predictors", "predictions", "primary")),
                             ("train_predictions", train_path, ("predictions",))):
        data[key] = read_json(path, "predictions")
        missing = [k for k in needs if not isinstance(data[key], dict) or k not in data[key]]
        if missing:
            raise BadInput(f"predictions {path}: no {', '.join(missing)} (not a file of scripts/validate/predict_8gpu.py)")
        data[key + "_path"] = path
    return data


def card_of(data: dict[str, Any]) -> tuple[str, bool]:
    """(the card the rows ran on, whether they are a CPU dry run); rows of another card than predicted: BadInput."""
    names = {r.get("env", {}).get("gpu") for r in data["comm"]} | {r.get("env", {}).get("device") for r in data["train"]}
    names.discard(None)
    dry = any(r.get("backend") == "gloo" for r in data["comm"]) or "cpu" in names
    cards = {n for n in names if not str(n).startswith("cpu")}
    if len(cards) > 1 or (cards and cards != {plan.CARD}):
        raise BadInput(f"rows from {', '.join(sorted(map(str, cards)))}: the predictions are for {plan.CARD}")
    return (plan.CARD if cards else "cpu"), dry


def slug(card: str) -> str:
    """NVIDIA H200 -> h200 (the folder names of reports/)."""
    return re.sub(r"[^a-z0-9]", "", card.split()[-1].lower()) or "gpu"


def git(*args: str) -> tuple[int, str]:
    """(exit status, stdout) of a git command in this checkout; (1, "") where git cannot run."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return 1, ""
    return done.returncode, done.stdout.strip()


def provenance(path: Path, predictions: dict[str, Any], run_commit: str) -> str:
    """Which commit added the predictions file, and whether the run's commit descends from it."""
    _, added = git("log", "--diff-filter=A", "--format=%h", "-1", "--", str(path))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    made = str(predictions.get("made_at_commit", "?"))[:7]
    if not added:
        return f"predictions: `{rel}` (made at {made}; not committed in this checkout)"
    after = git("merge-base", "--is-ancestor", added, run_commit.split("+")[0])[0] == 0
    when = ("the run's commit descends from it: every number scored against them is HELD OUT" if after else
            "the run's commit does not descend from it (or is unknown here): check before calling them held out")
    return f"predictions: `{rel}`, made at {made} and committed in {added}; {when}"


def header(card: str, rows: list[dict[str, Any]], env_key: str, data: dict[str, Any], key: str) -> list[str]:
    """Card, versions, commits, how to regenerate."""
    env = next((r.get("env", {}) for r in rows if r.get("env")), {})
    commit = str(env.get("git_commit") or env.get("commit") or "unknown")
    gpus = max((r["gpus"] for r in rows), default=plan.GPUS)
    stamps = sorted(r["measured_at"] for r in rows if r.get("measured_at"))
    when = f"; measured {stamps[0]} .. {stamps[-1]}" if stamps else ""
    return [f"- card: {gpus} x {env.get(env_key, card)} on one host ({env.get('hostname', 'machine.txt')}), NCCL "
            f"{env.get('nccl', '?')}, torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, NCCL_NVLS_ENABLE="
            f"{env.get('nccl_nvls_enable', env.get('nvls', '?'))}",
            f"- run: commit {commit}{when}; one call of `scripts/device.sh eight-gpu` (run.sh)",
            f"- {provenance(data[key + '_path'], data[key], commit)}",
            "- error = predicted / measured - 1 (negative: the prediction is faster than the measurement)", ""]


def failures(steps: list[dict[str, Any]], prefix: str) -> list[str]:
    """The device steps of one page that failed or did not run."""
    mine = [s for s in steps if str(s.get("step", "")).startswith(prefix)]
    bad = [s for s in mine if "skipped" in s or s.get("exit", 0) != 0]
    if not bad:
        return [f"Every device step of this page exited 0 ({len(mine)} in steps.jsonl)." if mine else
                "No device step of this page in steps.jsonl.", ""]
    return ["Device steps that failed or did not run (steps.jsonl; exit 124: cut at its timeout; log.txt of the run "
            "has their output):", "",
            *(f"- {s['step']}: " + (f"skipped, {s['skipped']}" if "skipped" in s else
                                    f"exit {s['exit']} after {s.get('wall_s', '?')} s") for s in bad), ""]


def comm_page(card: str, data: dict[str, Any]) -> str:
    import score_8gpu_comm as comm

    rows, preds = data["comm"], data["comm_predictions"]
    wrong = [r for r in rows if not r.get("ok")]
    return "\n".join([
        f"# Collectives on {plan.GPUS} x {card} of one host: the 2- and 4-GPU fits, held out", "",
        "Generated by `python scripts/validate/score_8gpu.py RUN` from rows.jsonl (do not edit by hand).", "",
        *header(card, rows, "gpu", data, "comm_predictions"),
        comm.goal_line(rows, preds), "", *failures(data["steps"], "comm-"),
        *([f"{len(wrong)} rows with a wrong result (not timed): "
           + ", ".join(f"{r['collective']} {r['size_bytes']} B on {r['gpus']}" for r in wrong[:10]), ""] if wrong else []),
        "## Held out: the committed predictions on the 8-GPU rows", "",
        *comm.held_out_lines(rows, preds, "committed before the run"),
        *comm.per_size_lines(rows, preds, preds["primary"]),
        *comm.per_size_lines(rows, preds, "graph-fit-2gpu"),
        *comm.busbw_lines(rows), *comm.refit_lines(rows)])


def train_page(card: str, data: dict[str, Any]) -> str:
    import score_8gpu_train as train
    from predict_8gpu import train_predictions

    rows, preds = data["train"], data["train_predictions"]
    repriced = {p["row"]["case"]: p["step_time_s"] for p in train_predictions()}
    return "\n".join([
        f"# Training layouts on {plan.GPUS} x {card}: `mlsys train --framework torch`, held out", "",
        "Generated by `python scripts/validate/score_8gpu.py RUN` from train_rows.jsonl (do not edit by hand). "
        f"What was priced and is run (scripts/validate/eight_gpu_plan.py): scripts/train_measure.py, one process a case, "
        f"{preds.get('model', '?')}, "
        f"{plan.SEQS_PER_GPU} sequences of {plan.SEQ} tokens of work a GPU, bf16 weights and fp32 master weights and "
        f"AdamW moments, no recomputation; median of {plan.STEPS} steps after {plan.WARMUP} warm-up, slowest rank; "
        f"priced on `{preds.get('cluster', '?')}` at the datasheet ceilings.", "",
        *header(card, rows, "device", data, "train_predictions"), *failures(data["steps"], "train-"),
        *train.train_lines(rows, preds, repriced)])


RECIPE = """#!/usr/bin/env bash
# {gpus} x {card} (device kind nvidia-h200-x8), one call: collectives on 8, 2 and 4 GPUs of the host and the training
# layouts TP 8, FSDP2 8, TP 4 x PP 2, TP 2 x FSDP2 4 (issue 42; what runs: scripts/validate/eight_gpu_plan.py)
#   MLSYS_GIT_COMMIT=<sha> OUT=$OUT bash scripts/device.sh eight-gpu
# then, on any machine: python scripts/validate/score_8gpu.py <fetched OUT>/eight_gpu   (this folder and its twin)
exec bash scripts/device.sh eight-gpu
"""


def write(run: Path, reports: Path, data: dict[str, Any]) -> list[Path]:
    card, dry = card_of(data)
    inside = reports.resolve().is_relative_to((ROOT / "reports").resolve())
    if dry and inside:
        raise BadInput("these are CPU dry-run rows (gloo): write their pages with --reports DIR outside reports/")
    name = f"{slug(card)}-x{plan.GPUS}-heldout"
    written = []
    for family, rows_name, page in (("comm", "rows.jsonl", comm_page), ("train", "train_rows.jsonl", train_page)):
        source = run / family / rows_name
        if not source.is_file():
            continue
        folder = reports / family / "runs" / name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / rows_name)
        for extra in ("machine.txt", "steps.jsonl"):
            if (run / extra).is_file():
                shutil.copyfile(run / extra, folder / extra)
        (folder / "run.sh").write_text(RECIPE.format(gpus=plan.GPUS, card=card))
        (folder / "README.md").write_text(page(card, data) + "\n")
        written.append(folder / "README.md")
    return written


def main(argv: list[str] | None = None) -> None:
    from mlsyscalc.errors import MlsysError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="the eight_gpu folder of the device call")
    ap.add_argument("--reports", type=Path, default=ROOT / "reports")
    ap.add_argument("--comm-predictions", type=Path, default=COMM_PREDICTIONS)
    ap.add_argument("--train-predictions", type=Path, default=TRAIN_PREDICTIONS)
    args = ap.parse_args(argv)
    try:
        data = read_inputs(args.run, args.comm_predictions, args.train_predictions)
        for path in write(args.run, args.reports, data):
            print(f"wrote {path}")
    except (BadInput, MlsysError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
