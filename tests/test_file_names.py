"""Files are named by what they hold, not by the run, round or commit that wrote them (issue 38).

A name says what its rows are (card, family, purpose, the sample's seed); the commit and the call that
wrote them are in the rows and on the page that cites them. tools/refile_paths.py holds the renames
made so far and rewrites references to them; its `check` finds a reference still to an old path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("scripts", "reports", "tests", "experiments", "tools")
# a development round or rerun (check2, memcheck3, final7, second, *_rerun, unkilled, discovery2, heldout2,
# fresh3), or a commit id of 7-40 hex digits with a digit and a letter in it
HISTORY = re.compile(
    r"(?i)(?:check|memcheck)\d|(?:^|[_-])(?:rerun|final\d*|second|third|fourth|fifth|sixth|seventh|round\d*|"
    r"fresh\d|unkilled|discovery\d|heldout\d)(?=[_.-]|$)|(?:^|[_-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?=[_.-]|$)")
# names that carry a version of their content, not of this project's history
CONTENT_VERSIONS = {
    "reports/train/llm_foundry_fitset/llm_foundry_5e85bd62_tables.md": "a verbatim copy of llm-foundry's tables at its commit",
}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", *FOLDERS], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.split()


def _historic(path: str) -> bool:
    return any(HISTORY.search(part) for part in path.split("/"))


def test_the_rule_reads_history_and_not_content():
    assert [_historic(p) for p in ("reports/models/h100_check2.jsonl", "reports/mutation/discovery3_rerun.jsonl",
                                   "reports/train/measured_h200x4_heldout_1234abc_log.txt", "tests/test_values_second.py",
                                   "reports/x/final7/log.md")] == [True] * 5
    assert [_historic(p) for p in ("reports/mutation/classic_heldout_seed20261127_plan.jsonl",
                                   "reports/train/runs/h200x4-host-probe/call3_rows.jsonl", "reports/models/h200_tp2.jsonl",
                                   "reports/comm/h200-x4-host2/SUMMARY.md", "tests/test_gpus_2026.py",
                                   "scripts/validate/score_8gpu.py")] == [False] * 6


def test_no_file_is_named_after_a_run_or_round():
    named = [p for p in _tracked() if _historic(p) and p not in CONTENT_VERSIONS]
    assert len(_tracked()) > 500  # the listing worked
    assert not named, f"named by history, not content: {named}"


def test_no_reference_to_a_renamed_path_is_left():
    import importlib.util

    spec = importlib.util.spec_from_file_location("refile_paths", ROOT / "tools" / "refile_paths.py")
    refile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refile)
    assert len(refile.MOVES) > 80
    assert all(not (ROOT / old).exists() and (ROOT / new).exists() for old, new in refile.MOVES.items())
    assert refile.check() == 0
