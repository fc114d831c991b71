"""What the scripts that score `mlsys serve` on a published set share: predictions that name a clean commit,
error statistics, the page's tail and the cases / predict / score steps."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def write_predictions(path: Path, variants: Any, predictions: dict, code_paths: tuple[str, ...],
                      extra: dict | None = None, hint: str = "; commit it before scoring") -> None:
    """Write {commit, variants, **extra, predictions}; refused while `code_paths` have uncommitted changes, since
    the predictions name the commit that made them."""
    if git("status", "--porcelain", "--", *code_paths):
        raise SystemExit("commit the code first: predictions name the commit that made them")
    path.write_text(json.dumps({"commit": git("rev-parse", "HEAD"), "variants": variants, **(extra or {}),
                                "predictions": predictions}, indent=1) + "\n")
    print(f"wrote {path} ({len(predictions)} cases x {len(variants)} variants){hint}")


def replace_cases(path: Path, cases: list[dict]) -> None:
    """Put `cases` into the cases file at `path`, keeping its other keys (sources, method, findings)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data["cases"] = cases
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


def error_stats(errors: list[float]) -> list[str]:
    """cases, median |error|, worst |error|, median signed error, as table cells."""
    if not errors:
        return ["0", "-", "-", "-"]
    return [str(len(errors)), f"{100 * statistics.median(abs(e) for e in errors):.1f}%",
            f"{100 * max(abs(e) for e in errors):.0f}%", f"{100 * statistics.median(errors):+.1f}%"]


def write_page(page: Path, lines: list[str], data: dict) -> None:
    """The page, with the set's `findings_after_scoring` (written after the scores were seen) under their own head."""
    findings = data.get("findings_after_scoring", [])
    if findings:
        lines = [*lines, "", "## What the scores say", "", *(f"- {f}" for f in findings)]
    page.write_text("\n".join(lines) + "\n")
    print(f"wrote {page}")


def run_steps(description: str, src_help: str, cases: Callable[[Path], None], predict: Callable[[], None],
              score: Callable[[], None]) -> None:
    """`cases SRC` (build the cases file from the source), `predict` (commit-named predictions) or `score`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("step", choices=("cases", "predict", "score"))
    parser.add_argument("src", nargs="?", help=src_help)
    args = parser.parse_args()
    if args.step == "cases":
        if not args.src:
            parser.error("cases needs SRC")
        cases(Path(args.src))
    else:
        {"predict": predict, "score": score}[args.step]()
