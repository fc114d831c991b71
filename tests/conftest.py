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
    """scripts/<name>.py imported as a module (the scripts directory is not a package); `name` may name a
    sub-folder ("validate/train_compare"), the module takes the file's own name."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(Path(name).name, path)
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


# `pytest -m quick`: one or more files per subject (specs, counts, memory, roofline, comm, train, serve,
# scaling, report, readers, the CLI contract and bad input), about 1,900 tests in about a minute on one
# busy core. Left out: the system fuzzers, Triton-interpreter kernels, torch-backed benchmarks, hypothesis
# sweeps, the plan search (34 s) and the import-graph walk (17 s); the full run has them all.
QUICK_FILES = frozenset({
    "test_params.py", "test_specs_families.py", "test_specs.py", "test_validate.py", "test_readers.py",
    "test_flops.py", "test_attention_counts.py", "test_cli_foundation.py", "test_answers.py", "test_render_80col.py",
    "test_render_units.py", "test_csv_tidy.py", "test_memory_cli.py", "test_scaling_cli.py", "test_comm_cli.py",
    "test_serve_cli.py", "test_roofline_cli.py", "test_fuzz_inputs.py", "test_values_comm_memory.py",
    "test_kv_ground_truth.py", "test_comm_protocols.py", "test_values_roofline.py", "test_memory_train.py",
    "test_train.py", "test_scaling.py", "test_report_sections.py", "test_comm_collectives.py", "test_values_serve.py",
    "test_progress.py", "test_report_figures.py",
    "test_report_html.py", "test_report_comm_page.py",
    "test_report_kernel_pages.py", "test_report_attention_page.py",
    "test_report_models_page.py", "test_report_fused_page.py",
    "test_report_memory_page.py", "test_report_inference_section.py",
    "test_report_writer.py", "test_report_training_section.py",
    "test_report_building.py", "test_report_scaling_measured_sections.py",
    "test_cli_render.py", "test_cli_answers.py", "test_bench_summaries.py",
    "test_readers_records.py", "test_cli_tables.py", "test_bench_shapes.py",
    "test_cli_options.py", "test_bench_calibrate_rows.py", "test_cli_serve_options.py", "test_cli_main.py",
    "test_cli_report_command.py", "test_cli_scaling_views.py",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in QUICK_FILES:
            item.add_marker(pytest.mark.quick)
