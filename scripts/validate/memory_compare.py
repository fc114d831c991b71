"""Every rank's max_memory_allocated in rows of scripts/train_measure.py against `mlsys memory train` per stage.

    python scripts/validate/memory_compare.py reports/train/measured_rows_h200.jsonl [--framework torch] [--out FILE]

Each row's layout becomes TrainOptions (micro-batch, micro-batches, dp, tp, pp, vp; fsdp cases ZeRO-3; pp-gpipe
the GPipe schedule; no sequence parallelism, no recomputation, bf16, flash attention). Pipeline rank r is stage r;
the other cases' ranks hold the same parts (ranks with equal peaks share a line). error = predicted / measured - 1; the parts are the prediction's at
its peak phase (GiB = 2^30 bytes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GIB = 2**30


def options(row: dict, framework: str):
    from mlsyscalc.calc.memory.training import TrainOptions

    return TrainOptions(batch=row["micro_batch"], seq=row["seq"], grad_accum=row["micro_batches"], dp=row["dp"],
                        tp=row["tp"], pp=row["pp"], vp=row["vp"], zero=3 if row["case"] in ("fsdp", "fsdp-tp") else 0,
                        schedule="gpipe" if row["case"] == "pp-gpipe" else "1f1b", framework=framework)


def _ranks(row: dict) -> list[tuple[list[int], int]]:
    """(ranks, measured bytes): pipeline ranks one by one, the other cases' ranks grouped by equal peaks."""
    peaks = row["peak_bytes_per_rank"]
    if row["pp"] > 1:
        return [([r], b) for r, b in enumerate(peaks)]
    return [([r for r, b in enumerate(peaks) if b == value], value) for value in dict.fromkeys(peaks)]


def compare(rows: list[dict], framework: str) -> list[list]:
    from mlsyscalc.calc.memory.training import train_memory
    from mlsyscalc.specs.lookup import load_model

    out = []
    for row in rows:
        spec = load_model(row["model"]["base"], row["model"]["overrides"])
        mem = train_memory(spec, options(row, framework))
        for ranks, measured in _ranks(row):
            stage = mem.stages[ranks[0]] if row["pp"] > 1 else mem.peak_stage
            parts = [f"{stage.breakdown[k] / GIB:.2f}" for k in ("weights", "gradients", "optimizer", "activations",
                                                                  "temporaries")]
            out.append([row["case"], ",".join(map(str, ranks)), f"{measured / GIB:.3f}", f"{stage.total / GIB:.3f}",
                        f"{100 * (stage.total / measured - 1):+.1f}%", stage.phase, stage.micro_batches_in_flight,
                        *parts])
    return out


def table(rows_path: Path, framework: str) -> str:
    from mlsyscalc.report.markdown import markdown_table

    rows = [json.loads(line) for line in Path(rows_path).read_text().splitlines() if line.strip()]
    env = rows[0].get("env", {}) if rows else {}
    head = [f"{env.get('device', '?')}, torch {env.get('torch', '?')}, scripts at {str(env.get('commit', '?'))[:7]}; "
            f"`--framework {framework}`", ""]
    return "\n".join(head + markdown_table(
        ["case", "ranks", "meas (GiB)", "pred (GiB)", "error", "peak phase", "in flight", "weights", "gradients",
         "optimizer", "activations", "temporaries"], compare(rows, framework)) + [""])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--framework", default="torch", choices=("megatron", "torch"))
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    page = table(args.rows, args.framework)
    print(page)
    if args.out:
        args.out.write_text(page)


if __name__ == "__main__":
    main()
