"""The `mlsys` entry point: each kind of failure's exit code and one line, --debug, the unknown-command
suggestion, GPU family names noted once on stderr, and numpy's floating-point warnings kept off stderr."""

from __future__ import annotations

import warnings

import click
import pytest
from click.testing import CliRunner

from mlsyscalc.cli import main as cli_main
from mlsyscalc.errors import MlsysError


def _raising(exc: BaseException):
    @click.command()
    def boom():
        raise exc
    return boom


FAILURES = {
    "mlsys-error": (MlsysError("--size 'x' is not a size"), 2, "error: --size 'x' is not a size\n"),
    "overflow": (OverflowError("(34, 'Numerical result out of range')"), 2,
                 "error: these inputs are too large to compute with ((34, 'Numerical result out of range')); use "
                 "smaller sizes\n"),
    "missing-file": (FileNotFoundError(2, "No such file or directory", "t.csv"), 2,
                     "error: t.csv: No such file or directory\n"),
    "os-error": (OSError("disk on fire"), 2, "error: cannot use a file given: disk on fire\n"),
    "not-utf8": (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2,
                 "error: a file given is not UTF-8 text (byte 0: invalid start byte)\n"),
    "bug": (ValueError("row has 8 cells"), 1,
            "unexpected error (ValueError): row has 8 cells [rerun with --debug for a traceback]\n"),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_each_failure_exits_with_its_code_and_one_line(name, monkeypatch):
    exc, code, line = FAILURES[name]
    monkeypatch.setitem(cli_main.MainGroup.lazy_commands, "boom", "tests.test_cli_main:BOOM")
    monkeypatch.setattr(__import__("tests.test_cli_main", fromlist=["BOOM"]), "BOOM", _raising(exc), raising=False)
    result = CliRunner().invoke(cli_main.cli, ["boom"])
    assert (result.exit_code, result.stderr, result.stdout) == (code, line, "")
    debug = CliRunner().invoke(cli_main.cli, ["--debug", "boom"])
    assert debug.exception is exc   # --debug lets the exception through


def test_unknown_command_suggests_the_close_ones():
    result = CliRunner().invoke(cli_main.cli, ["parms"])
    assert result.exit_code == 2 and "no such command 'parms' (did you mean: params, compare?)" in result.stderr
    result = CliRunner().invoke(cli_main.cli, ["zzzz"])
    assert result.exit_code == 2 and "no such command 'zzzz'" in result.stderr and "did you mean" not in result.stderr
    assert cli_main.cli.list_commands(None) == sorted(cli_main.COMMANDS)
    assert cli_main.cli.get_command(None, "nothing") is None


def test_gpu_family_names_are_noted_once_and_numpy_warnings_dropped(monkeypatch):
    from mlsyscalc.specs.gpu import NameResolved

    @click.command()
    def warn():
        warnings.warn("a100 -> A100-80GB-SXM", NameResolved, stacklevel=1)
        warnings.warn("a100 -> A100-80GB-SXM", NameResolved, stacklevel=1)
        warnings.warn("h20 -> H20", NameResolved, stacklevel=1)
        warnings.warn("overflow encountered in multiply", RuntimeWarning, stacklevel=1)
        click.echo("done")

    monkeypatch.setitem(cli_main.MainGroup.lazy_commands, "warn", "tests.test_cli_main:WARN")
    monkeypatch.setattr(__import__("tests.test_cli_main", fromlist=["WARN"]), "WARN", warn, raising=False)
    result = CliRunner().invoke(cli_main.cli, ["warn"])
    assert result.exit_code == 0 and result.stdout == "done\n"
    assert result.stderr == "note: a100 -> A100-80GB-SXM\nnote: h20 -> H20\n"


def test_a_real_command_names_a_missing_file(run_cli, tmp_path):
    code, out, err = run_cli("serve", "llama2-7b", "--trace", str(tmp_path / "none.csv"))
    assert code == 2 and out == "" and err.startswith("error: ") and "none.csv" in err
