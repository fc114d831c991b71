"""reports/README.md indexes every page under reports/ (tools/reports_index.py writes it from the pages)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_page_has_a_row():
    index = (ROOT / "reports" / "README.md").read_text()
    pages = [p.relative_to(ROOT / "reports").as_posix() for p in (ROOT / "reports").rglob("*.md") if p.name != "README.md"
             or p.parent != ROOT / "reports"]
    assert len(pages) > 50
    missing = [p for p in pages if f"[{p}]({p})" not in index]
    assert not missing, f"pages missing from reports/README.md (python tools/reports_index.py): {missing}"


def test_the_index_is_what_the_tool_writes():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "reports_index.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_row_carries_family_card_commit_and_command():
    index = (ROOT / "reports" / "README.md").read_text()
    row = next(line for line in index.splitlines() if "[train/published.md]" in line)
    assert row.startswith("| train |") and "2babfff" in row and "`python scripts/validate/train_published.py`" in row
