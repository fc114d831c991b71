"""A seeded random sample of mutation sites, disjoint from the mutants of earlier runs.

Earlier runs are read from their JSONL files. A site there is recognised by its module, its
change and the text of its source line at the commit the row records, not by its index, so a
site stays excluded after lines above it moved. Two sites with the same change on one line
share a key: the second is excluded too (the samples stay disjoint, at the cost of a site).

    python tools/mutation.py --seed 2211 --count 90 --exclude reports/mutation/*.jsonl
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from functools import lru_cache
from pathlib import Path

Key = tuple[str, str, str]  # (path, change, stripped source line)


@lru_cache(maxsize=None)
def _source_lines(root: Path, commit: str, path: str) -> list[str]:
    if commit:
        text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=root, capture_output=True,
                              text=True).stdout
    else:
        text = (root / path).read_text()
    return text.splitlines()


def key(root: Path, commit: str, path: str, line: int, change: str) -> Key:
    lines = _source_lines(root, commit, path)
    text = lines[line - 1].strip() if 0 < line <= len(lines) else f"#{line}"
    return path, change, text


def earlier_keys(root: Path, files: list[Path], statuses: tuple[str, ...] | None = None) -> set[Key]:
    """Keys of every mutant in these JSONL result files (only rows of `statuses`, when given)."""
    keys: set[Key] = set()
    for file in files:
        for raw in file.read_text().splitlines():
            r = json.loads(raw) if raw.strip() else None
            if r is None or (statuses is not None and r.get("status") not in statuses):
                continue
            if "text" in r:  # the row names its source line itself (rows written since --plan-out)
                keys.add((r["path"], r["change"], r["text"]))
            else:
                keys.add(key(root, r.get("commit", ""), r["path"], r["line"], r["change"]))
    return keys


def killed_keys(root: Path, files: list[Path]) -> set[Key]:
    """Keys of the mutants that some row of these result files killed (or stopped by timeout)."""
    return earlier_keys(root, files, ("killed", "timeout"))


def not_killed(root: Path, population: list, files: list[Path]) -> list:
    """The sites of `population` that no row of these result files killed: never run, or run and
    survived. Kills carry over from earlier commits because tests are only ever added."""
    killed = killed_keys(root, files)
    return [s for s in population if key(root, "", s.path, s.line, s.change) not in killed]


def half_of(k: Key) -> str:
    """"train" or "holdout": a fixed split of the sites by a hash of their key (module, change,
    line text), so the split survives line moves. Tests may be written against sites of the train
    half; a held-out score draws only from the holdout half, which no test writer has run."""
    digest = hashlib.sha256("|".join(k).encode()).digest()
    return "holdout" if digest[0] & 1 else "train"


def in_half(root: Path, population: list, half: str | None) -> list:
    if half is None:
        return population
    return [s for s in population if half_of(key(root, "", s.path, s.line, s.change)) == half]


def draw(root: Path, population: list, seed: int, count: int, exclude: list[Path]) -> list:
    """`count` sites drawn uniformly without replacement from `population` (Site objects at the
    working tree) less those already run in `exclude`; the same seed, files and code give the
    same sample."""
    seen = earlier_keys(root, exclude)
    fresh = [s for s in population if key(root, "", s.path, s.line, s.change) not in seen]
    return random.Random(seed).sample(fresh, min(count, len(fresh)))
