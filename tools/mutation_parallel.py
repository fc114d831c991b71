"""Run a planned set of mutants over several processes (tools/mutation.py, one scratch copy each).

The plan is a `mutation.py --plan-out` file. Its sites are grouped by the test files that test
their module and cut into contiguous chunks, so each process pays the unmutated baseline of few
test sets; within a chunk the plan's order is kept (a `--shuffle`d draw stays random, so a time
budget cuts each chunk uniformly). The chunks' result files are joined into --out.

    python tools/mutation.py --seed 1 --count 100000 --shuffle --exclude reports/mutation/*.jsonl \\
        --plan-out /tmp/plan.jsonl
    python tools/mutation_parallel.py /tmp/plan.jsonl --jobs 16 --budget-s 480 --out $OUT/rows.jsonl
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
from mutation import TESTS, module_key  # noqa: E402  (tools/mutation.py)


def module_costs(files: list[Path]) -> dict[str, float]:
    """Mean seconds of one mutant of each module over earlier result files (their `seconds`)."""
    seconds: dict[str, list[float]] = {}
    for file in files:
        for line in file.read_text().splitlines():
            r = json.loads(line) if line.strip() else {}
            if isinstance(r.get("seconds"), (int, float)):
                seconds.setdefault(module_key(r["path"]), []).append(r["seconds"])
    return {stem: sum(v) / len(v) for stem, v in seconds.items()}


def chunks(rows: list[dict], jobs: int, costs: dict[str, float] | None = None) -> list[list[dict]]:
    """`jobs` contiguous slices of the rows sorted by test set (stable: plan order kept), cut so each
    slice has about the same estimated seconds (a module's mean from `costs`, else the mean of all);
    without costs, near-equal counts."""
    ordered = sorted(rows, key=lambda r: tuple(TESTS[module_key(r["path"])]))
    default = sum(costs.values()) / len(costs) if costs else 1.0
    weight = [costs.get(module_key(r["path"]), default) if costs else 1.0 for r in ordered]
    total = sum(weight)
    out: list[list[dict]] = [[] for _ in range(jobs)]
    done = 0.0
    for r, w in zip(ordered, weight):
        k = min(jobs - 1, int(jobs * (done + w / 2) / total)) if total > 0 else 0
        out[k].append(r)
        done += w
    return [c for c in out if c]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path, help="a mutation.py --plan-out file")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="each process starts no mutant after this")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count-killers", action="store_true")
    ap.add_argument("--costs", type=Path, nargs="*", default=sorted((HERE.parent / "reports/mutation").glob("*.jsonl")),
                    help="earlier result files whose seconds per mutant balance the chunks (default: reports/mutation)")
    opts = ap.parse_args()
    rows = [json.loads(line) for line in opts.plan.read_text().splitlines() if line.strip()]
    work = Path(tempfile.mkdtemp(prefix="mutation_parallel_"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    for k, chunk in enumerate(chunks(rows, opts.jobs, module_costs(opts.costs))):
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
