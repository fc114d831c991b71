"""Shared test helpers: run the CLI in-process and parse its JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

DATA = Path(__file__).parent / "data"

# Triton picks its CPU interpreter when a kernel is *decorated*, so without a GPU the variable
# must be set before any test module imports triton or a kernel (collection order varies).
try:
    import torch as _torch

    _HAS_GPU = _torch.cuda.is_available()
except ImportError:
    _HAS_GPU = False
if not _HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def load_data(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def load_script(name: str):
    """scripts/<name>.py imported as a module (the scripts directory is not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
