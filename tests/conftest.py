"""Shared test helpers: run the CLI in-process and parse its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

DATA = Path(__file__).parent / "data"


def load_data(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.fixture
def run_cli():
    """run_cli(*args) -> (exit_code, stdout, stderr); run_cli.json(*args) -> parsed JSON."""
    from mlsyscalc.cli.main import cli

    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    def as_json(*args: str):
        code, out, err = invoke(*args, "--json")
        assert code == 0, f"exit {code}: {err}"
        return json.loads(out)

    invoke.json = as_json
    return invoke
