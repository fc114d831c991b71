"""The markdown summary of a mutation run: score per module and every surviving mutant with its
diff and, where one is written down, why it survives.

    python tools/mutation_report.py --out reports/mutation/classic_core_stride.jsonl

tools/mutation_equivalents.json holds the survivors that no test can kill because the program's
output does not change ("equivalent", left out of the score) and those no realistic input reaches
("unreached", kept in it), keyed by module and the mutant's diff; each says why.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from mutation import EQUIVALENT, ROOT, UNREACHED, show, sites, target_paths  # tools/mutation.py


def _rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    latest = {(r["path"], r["index"]): r for r in rows}  # a rerun's row replaces the first
    return sorted(latest.values(), key=lambda r: (r["path"], r["index"]))


def render(path: Path) -> str:
    rows = _rows(path)
    by_module: dict[str, Counter] = {}
    for r in rows:
        by_module.setdefault(r["path"], Counter())[r["status"]] += 1
    out = ["| module | mutation sites | mutants run | killed (incl. timeout) | survived | equivalent |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    survivors = []
    totals: Counter = Counter()
    for module, counts in by_module.items():
        left = [r for r in rows if r["path"] == module and r["status"] == "survived"]
        diffs = [(r, show(r["path"], r["index"])) for r in left]
        equivalent = sum((module, d) in EQUIVALENT for _, d in diffs)
        killed = counts["killed"] + counts["timeout"]
        totals.update(mutants=sum(counts.values()), killed=killed, survived=len(left), equivalent=equivalent)
        out.append(f"| {module} | {len(sites(module))} | {sum(counts.values())} | {killed} | "
                   f"{len(left) - equivalent} | {equivalent} |")
        survivors += [(r, d, EQUIVALENT.get((module, d), "")) for r, d in diffs]
    scored = totals["mutants"] - totals["equivalent"]
    score = totals["killed"] / scored if scored else 0.0
    all_sites = sum(len(sites(p)) for p in target_paths())
    untouched = [p for p in target_paths() if p not in by_module and sites(p)]
    out.append(f"| **all run** | {all_sites} in all | {totals['mutants']} | {totals['killed']} | "
               f"{totals['survived'] - totals['equivalent']} | {totals['equivalent']} |")
    out += ["", "Modules with no mutant run: " + (", ".join(f"`{u}`" for u in untouched) or "none") + "."]
    head = [f"Score: **{totals['killed']} / {scored} = {100 * score:.1f}%** of the non-equivalent "
            f"mutants killed ({totals['equivalent']} equivalent mutants left out).", ""]
    tail = ["", "Survivors:", ""]
    for r, diff, why in survivors:
        note = f" (equivalent: {why})" if why else ""
        if not why and (r["path"], diff) in UNREACHED:
            note = f" (survives: {UNREACHED[(r['path'], diff)]})"
        tail.append(f"- `{r['path']}:{r['line']}` {r['change']}{note}")
        tail += ["", "  ```diff", *("  " + line for line in diff.splitlines()), "  ```"]
    return "\n".join(head + out + tail + killers(rows))


def _functions(ids: list[str]) -> set[str]:
    """Test functions among failing test ids: parametrised cases of one function count once."""
    return {i.split("[")[0].removesuffix(" (collection)") for i in ids}


def killers(rows: list[dict]) -> list[str]:
    """How many test functions kill each mutant run with --count-killers (no -x): the table of
    counts and every mutant that rests on one function."""
    counted = [r for r in rows if r.get("counted") and r["status"] == "killed"]
    if not counted:
        return []
    by_count = Counter(min(len(_functions(r["killers"])), 5) for r in counted)
    out = ["", f"Test functions that fail, per killed mutant of the core modules ({len(counted)} mutants "
           "counted; 5 means 5 or more):", "", "| functions | mutants |", "| ---: | ---: |"]
    out += [f"| {k}{'+' if k == 5 else ''} | {by_count[k]} |" for k in sorted(by_count)]
    single = [r for r in counted if len(_functions(r["killers"])) == 1]
    if single:
        out += ["", "Killed by one test function only:", ""]
        out += [f"- `{r['path']}:{r['line']}` {r['change']}: `{next(iter(_functions(r['killers'])))}`"
                for r in single]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports/mutation/classic_core_stride.jsonl",
                        help="the result rows of tools/mutation.py")
    print(render(parser.parse_args().out))


if __name__ == "__main__":
    main()
