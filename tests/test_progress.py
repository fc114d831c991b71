"""cli/progress.py: a bar on stderr on a terminal only; nothing in pipes, files or tests."""

from __future__ import annotations

import json

from click.testing import CliRunner

from mlsyscalc.cli import progress as progress_module
from mlsyscalc.cli.main import cli
from mlsyscalc.cli.progress import progress


def test_off_a_terminal_it_draws_nothing_and_passes_items_through(capsys):
    assert list(progress("items", [3, 1, 2])) == [3, 1, 2]
    with progress("steps", total=2) as step:
        step("first")
        step("second")
    assert capsys.readouterr() == ("", "")


def test_on_a_terminal_it_draws_each_step_on_stderr(monkeypatch, tmp_path):
    monkeypatch.setattr(progress_module, "_terminal", lambda: True)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws on CliRunner's stderr as on a terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    seen = []
    real = progress.__call__
    monkeypatch.setattr(progress, "__call__", lambda self, label="": (seen.append((label, self._bar is not None)),
                                                                      real(self, label)))
    result = CliRunner().invoke(cli, ["report", "llama3-8b", "--no-figures", "-o", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # stdout stays JSON
    labels = [label for label, drawn in seen]
    assert labels[:3] == ["Model", "Training: memory per GPU", "Training: step time and MFU"]
    assert labels[-1] == "writing the page" and all(drawn for _, drawn in seen)
    assert "mlsys report llama3-8b" in result.stderr


def test_report_in_a_pipe_has_no_progress(tmp_path):
    result = CliRunner().invoke(cli, ["report", "llama3-8b", "--no-figures", "-o", str(tmp_path), "--brief"])
    assert result.exit_code == 0 and result.stderr == ""
