"""tools/reports_regen.py: which commands it runs and what it calls different (the regeneration itself is not run)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("reports_regen", ROOT / "tools" / "reports_regen.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)


def test_commands_are_bench_report_then_each_models_page_own_command():
    commands = regen.page_commands(ROOT / "reports")
    assert commands[0] == [sys.executable, "-m", "mlsyscalc", "bench", "report", "reports"]
    modules = [c[2] for c in commands[1:]]
    assert modules and set(modules) == {"mlsyscalc.report.models_report"}
    assert any(c[3] == "reports/models/h200.jsonl" for c in commands[1:])   # the H200 page's rows come first
    assert all(c[1] == "-m" for c in commands[1:])


def test_differing_lists_changed_new_and_gone_files(tmp_path):
    before, after = tmp_path / "a", tmp_path / "b"
    for root in (before, after):
        (root / "x").mkdir(parents=True)
        (root / "x" / "same.md").write_text("one\n")
    (before / "x" / "page.md").write_text("1.0\n")
    (after / "x" / "page.md").write_text("1.1\n")
    (before / "gone.md").write_text("")
    (after / "new.png").write_bytes(b"\x89")
    assert regen.differing(before, after) == ["gone.md", "new.png", "x/page.md"]
    assert regen.differing(before, before) == []
