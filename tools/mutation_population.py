"""The whole population's score: every mutation site of calc/ and specs/ at today's code, each with
the status the result files give it.

A site is *killed* when some row of the files killed it (or stopped it by timeout: kills carry over
from earlier commits because tests are only ever added), *equivalent* when its diff is explained in
tools/mutation_equivalents.json, *survived* when rows ran it and none killed it, and *not run* otherwise.
Sites are matched by module, change and source-line text (tools/mutation_sample.py), so rows
written before lines moved still count.

    python tools/mutation_population.py reports/mutation/*.jsonl
    MUTATION_KINDS=fresh python tools/mutation_population.py reports/mutation/fresh_heldout_seed20261128*.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from mutation import ROOT, _equivalent, module_key, sites, target_paths
from mutation_sample import earlier_keys, key, killed_keys


def statuses(files: list[Path]) -> dict:
    """Site -> killed | equivalent | survived | not run, over every site of today's code."""
    killed, ran = killed_keys(ROOT, files), earlier_keys(ROOT, files, ("survived",))
    paths = target_paths()
    out = {}
    for site in (s for p in paths for s in sites(p)):
        k = key(ROOT, "", site.path, site.line, site.change)
        out[site] = ("killed" if k in killed else "equivalent" if _equivalent(site)
                     else "survived" if k in ran else "not run")
    return out


def render(status: dict) -> str:
    by_module: dict[str, Counter] = {}
    for site, state in status.items():
        by_module.setdefault(module_key(site.path), Counter())[state] += 1
    total = sum(by_module.values(), Counter())
    lines = ["| module | sites | killed | survived | equivalent | not run | score |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, c in sorted(by_module.items()) + [("**all**", total)]:
        scored = c["killed"] + c["survived"]
        score = f"{100 * c['killed'] / scored:.1f}%" if scored else "-"
        lines.append(f"| {name} | {sum(c.values())} | {c['killed']} | {c['survived']} | {c['equivalent']} | "
                     f"{c['not run']} | {score} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+", help="result files (plan files are skipped)")
    ap.add_argument("--survivors", type=Path, help="also write the surviving sites to this JSONL file")
    opts = ap.parse_args()
    status = statuses([f for f in opts.files if not f.name.endswith("_plan.jsonl")])
    print(render(status))
    if opts.survivors:
        opts.survivors.write_text("".join(json.dumps({"path": s.path, "index": s.index, "line": s.line, "change": s.change,
                                                      "text": key(ROOT, "", s.path, s.line, s.change)[2]}) + "\n"
                                          for s, state in status.items() if state in ("survived", "not run")))


if __name__ == "__main__":
    main()
