"""Run a planned set of mutants over several processes (scripts/mutation.py, one scratch copy each).

The plan is a `mutation.py --plan-out` file. Its sites are grouped by the test files that test
their module and cut into contiguous chunks, so each process pays the unmutated baseline of few
test sets; within a chunk the plan's order is kept (a `--shuffle`d draw stays random, so a time
budget cuts each chunk uniformly). The chunks' result files are joined into --out.

    python scripts/mutation.py --seed 1 --count 100000 --shuffle --exclude reports/mutation/*.jsonl \\
        --plan-out /tmp/plan.jsonl
    python scripts/mutation_parallel.py /tmp/plan.jsonl --jobs 16 --budget-s 480 --out $OUT/rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from mutation import TESTS  # noqa: E402  (scripts/mutation.py)


def chunks(rows: list[dict], jobs: int) -> list[list[dict]]:
    """`jobs` contiguous, near-equal slices of the rows sorted by test set (stable: plan order kept)."""
    ordered = sorted(rows, key=lambda r: tuple(TESTS[Path(r["path"]).stem]))
    size, extra = divmod(len(ordered), jobs)
    out, start = [], 0
    for k in range(jobs):
        end = start + size + (k < extra)
        out.append(ordered[start:end])
        start = end
    return [c for c in out if c]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path, help="a mutation.py --plan-out file")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="each process starts no mutant after this")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count-killers", action="store_true")
    opts = ap.parse_args()
    rows = [json.loads(line) for line in opts.plan.read_text().splitlines() if line.strip()]
    work = Path(tempfile.mkdtemp(prefix="mutation_parallel_"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    for k, chunk in enumerate(chunks(rows, opts.jobs)):
        listing = work / f"plan_{k}.jsonl"
        listing.write_text("".join(json.dumps(r) + "\n" for r in chunk))
        cmd = [sys.executable, str(HERE / "mutation.py"), "--sites", str(listing), "--scratch", str(work / f"scratch_{k}"),
               "--out", str(work / f"rows_{k}.jsonl"), "--budget-s", str(opts.budget_s)]
        cmd += ["--count-killers"] if opts.count_killers else []
        log = (work / f"log_{k}.txt").open("w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
    for p in procs:
        p.wait()
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    with opts.out.open("a") as out:
        for k in range(len(procs)):
            part = work / f"rows_{k}.jsonl"
            if part.exists():
                out.write(part.read_text())
            print(f"-- chunk {k}", (work / f"log_{k}.txt").read_text()[-2000:], sep="\n")


if __name__ == "__main__":
    main()
