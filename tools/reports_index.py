"""Write reports/README.md: one row per page under reports/ with its family, card, commit and command.

    python tools/reports_index.py            # writes reports/README.md
    python tools/reports_index.py --check    # exits 1 when reports/README.md is not what it would write

The facts come from each page itself, so the index cannot drift from them: the family is the page's
first folder, the card the one its path names (else the cards its opening names most), the commit the
first one its opening names, and the command the first `python ...`, `mlsys ...` or `bash ...` it quotes
in backticks. A page that names none says "-".
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
OPENING_LINES = 40
MAX_COMMAND = 140
CARDS = ("H100", "H200", "H800", "H20", "A100", "B200", "GB200", "L20", "MI355X", "MI300X")
CARD_IN_PATH = re.compile(r"(?<![a-z0-9])(h100|h200|h800|a100|b200|gb200|mi355x)(?:[-_]?x(\d))?", re.I)
CARD_IN_TEXT = re.compile(r"\b(%s)\b" % "|".join(CARDS))
COMMIT = re.compile(r"\bcommit(?:s)?\s+`?([0-9a-f]{7,40})\b|\bat\s+`?([0-9a-f]{7,40})\b|\bcode of\s+`?([0-9a-f]{7,40})\b")
COMMAND = re.compile(r"`((?:python3?|mlsys|bash|OUT=\S+ bash)\s[^`]+)`")


def pages() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "reports/*.md"],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    return sorted(ROOT / p for p in listed if p != "reports/README.md")


def card(path: Path, opening: str) -> str:
    found = CARD_IN_PATH.search(str(path.relative_to(REPORTS)))
    if found:
        return found.group(1).upper() + (f" x {found.group(2)}" if found.group(2) else "")
    counts = Counter(CARD_IN_TEXT.findall(opening))
    return ", ".join(name for name, _ in counts.most_common(2)) or "-"


def commit(opening: str) -> str:
    found = COMMIT.search(opening)
    return next(g for g in found.groups() if g)[:7] if found else "-"


def command(text: str) -> str:
    """The command that wrote the page where a sentence says so, else the first script it quotes, else the first
    mlsys command, one line and at most MAX_COMMAND characters."""
    flat = re.sub(r"\s+", " ", text)
    said = re.search(r"(?:[Rr]egenerat\w*|[Gg]enerated by|[Ww]ritten by|[Ww]rote)[^.`]*" + COMMAND.pattern, flat)
    found = said or re.search(r"`((?:python3?|bash|OUT=\S+ bash)\s[^`]+)`", flat) or COMMAND.search(flat)
    if not found:
        return "-"
    cmd = found.group(1).strip()
    cmd = cmd if len(cmd) <= MAX_COMMAND else cmd[: MAX_COMMAND - 4].rstrip() + " ..."
    return cmd.replace("|", "\\|")


def title(text: str, path: Path) -> str:
    heading = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), path.stem)
    return heading.replace("|", "\\|")


def row(path: Path) -> str:
    text = path.read_text(errors="replace")
    opening = "\n".join(text.splitlines()[:OPENING_LINES])
    rel = path.relative_to(REPORTS).as_posix()
    family = rel.split("/")[0] if "/" in rel else "-"
    cmd = command(text)
    return (f"| {family} | [{rel}]({rel}) | {title(text, path)} | {card(path, opening)} | {commit(opening)} | "
            f"{'`' + cmd + '`' if cmd != '-' else '-'} |")


def index() -> str:
    head = ["# reports/: every page", "",
            "Measured rows and the pages written from them. One row a page: its family (first folder), the card it",
            "measured on (from its path, else the cards its opening names), the commit its opening names, and the",
            "command it quotes first (most pages name the command that wrote them; a page whose rows came from a",
            "device run names that run's recipe, `reports/<family>/runs/<card>-<purpose>/run.sh` where it has one).",
            "Written by `python tools/reports_index.py` (`--check` in tests); edit the pages, not this file.", "",
            "| family | page | title | card | commit | command |", "| --- | --- | --- | --- | --- | --- |"]
    return "\n".join(head + [row(p) for p in pages()]) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with reports/README.md, write nothing")
    args = parser.parse_args(argv)
    out = REPORTS / "README.md"
    text = index()
    if args.check:
        if not out.exists() or out.read_text() != text:
            print("reports/README.md is stale: run python tools/reports_index.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(f"wrote {out.relative_to(ROOT)} ({text.count(chr(10)) - 9} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
