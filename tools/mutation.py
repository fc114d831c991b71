"""Mutation testing of the calculators: plant one small bug at a time and see whether a test fails.

Each mutant changes one AST node of one module under mlsyscalc/calc/ or mlsyscalc/specs/:
an arithmetic operator (+ -, * /, // *, ** *), a comparison (< <=, > >=, == !=), a boolean
operator (and or), a unary minus or `not` dropped, a number (n -> n + 1, x -> 2x), a bool
flipped, or min() swapped with max(). The mutated module is written into a scratch copy of the
repository and the module's test subset (TESTS below) runs against it with `-x`; a failing test
or a timeout kills the mutant, an all-green run lets it survive.

The heavy imports (torch, numpy, pytest, hypothesis) are loaded once and every mutant runs in a
forked child, so a mutant costs its tests' time, not an interpreter start. Results are appended
to a JSONL file as they come (a rerun skips mutants already there); `--report` turns the file
into the markdown table of docs/mutation.md.

    nice -n 10 python tools/mutation.py --out reports/mutation/classic_core_stride.jsonl
    python tools/mutation.py --out reports/mutation/classic_core_stride.jsonl --report
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("mlsyscalc/calc", "mlsyscalc/specs")
# survivors no test can kill (the output does not change) and ones no input reaches, each with why
NOTES = Path(__file__).resolve().with_name("mutation_equivalents.json")
# --outside: the code around the calculators (views, report writer, bench summaries, readers, units). The bench
# harness's torch and GPU modules and the GPU commands are left out: the CPU suite cannot run their code.
OUTSIDE = ("mlsyscalc/cli", "mlsyscalc/report", "mlsyscalc/bench", "mlsyscalc/readers")
OUTSIDE_FILES = ("mlsyscalc/units.py",)
OUTSIDE_SKIP = {"_torch_attention", "_torch_decoder", "_torch_layers", "torch_models", "torch_alloc", "model_parallel",
                "model_profile", "comm_bench", "harness", "summary", "bench_attention", "bench_ceilings", "bench_host",
                "bench_kernels", "bench_model", "comm_timing"}

# module (module_key) -> the test files that test it directly (kept small: a surviving mutant runs all
# of them, on two shared cores). A mutant some other file would kill counts as a survivor here,
# so the score is a lower bound. VALUES first: they hold the targeted value tests.
SAMPLED = ["test_values_collectives_and_kv.py", "test_values_memory_serve_rules.py",  # tests written for sampled survivors
           "test_values_comm_memory.py", "test_values_plan_calib.py", "test_values_roofline.py",
           "test_values_counts_and_fits.py", "test_values_training_step.py",
           "test_values_kernel_lists.py", "test_values_train_memory.py",
           "test_values_roofline_serve.py", "test_values_validation_messages.py"]
VALUES = ["test_values.py", *SAMPLED]  # the targeted value tests, first
MEMORY = [*VALUES, "test_memory_train.py", "test_memory_infer.py", "test_memory_properties.py"]
ROOFLINE = [*VALUES, "test_roofline_ops.py", "test_roofline_model.py", "test_roofline_bad_inputs.py"]
COMM = [*VALUES, "test_comm_collectives.py", "test_comm_protocols.py", "test_comm_step.py",
        "test_comm_step_edges.py"]
SCALING = ["test_values_serve_scaling.py", *SAMPLED, "test_scaling.py", "test_scaling_fit.py", "test_scaling_edges.py"]
SERVE = ["test_values_serve_scaling.py", "test_values_serve.py", *SAMPLED, "test_serve_cost.py", "test_serve_spec.py", "test_serve_disagg.py",
         "test_serve_published.py", "test_serve_cli.py", "test_serve_properties.py"]
TRAIN = [*SAMPLED, "test_train.py", "test_train_published.py", "test_plan.py", "test_train_host.py"]
PLAN = [*SAMPLED, "test_plan.py", "test_train.py"]
TESTS: dict[str, list[str]] = {
    "calc/counts/params": [*VALUES, "test_params.py", "test_flops.py"],
    "calc/counts/layers": [*VALUES, "test_params.py", "test_flops.py", "test_memory_train.py",
               "test_memory_infer.py"],
    "calc/counts/flops": [*VALUES, "test_flops.py", "test_roofline_ops.py"],
    "specs/hf": [*VALUES, "test_params.py", "test_specs.py", "test_flops.py",
           "test_properties_foundation.py"],
    "specs/model": [*VALUES, "test_specs.py", "test_params.py", "test_memory_infer.py"],
    "specs/lookup": [*VALUES, "test_specs.py", "test_params.py", "test_cli_foundation.py"],
    "calc/counts/attention": [*VALUES, "test_attention_counts.py", "test_params.py", "test_flops.py",
                  "test_roofline_ops.py"],
    "specs/gpu": [*VALUES, "test_specs.py", "test_roofline_ops.py", "test_memory_infer.py"],
    "specs/cluster": [*VALUES, "test_comm_collectives.py", "test_comm_protocols.py", "test_specs.py"],
    "calc/counts/activations": [*VALUES, "test_memory_train.py", "test_memory_torch.py"],
    "calc/parallel/shards": MEMORY, "calc/memory/inference": MEMORY + ["test_memory_cli.py"],
    "calc/memory/training": MEMORY + ["test_memory_cli.py"],
    "calc/parallel/tensor_parallel": MEMORY + ["test_comm_step.py"],
    "calc/comm/collectives": COMM, "calc/comm/step": COMM + ["test_comm_cli.py"],
    "calc/roofline/calibration": ROOFLINE + ["test_calibrate_models.py"],
    "calc/roofline/calibration_fit": [*SAMPLED, "test_calibrate_models.py"],
    "calc/comm/tp_rows": ROOFLINE, "calc/roofline/memory_bound": ROOFLINE + ["test_roofline_nonnegative.py"],
    "calc/roofline/model": ROOFLINE + ["test_roofline_cli.py"], "calc/roofline/notes": ROOFLINE + ["test_roofline_cli.py"],
    "calc/roofline/ops": ROOFLINE, "calc/roofline/options": ROOFLINE + ["test_serve_cost.py"],
    "calc/roofline/sweep": ROOFLINE + ["test_roofline_cli.py"], "calc/roofline/training": ROOFLINE + ["test_train.py"],
    "calc/roofline/torch_kernels": ROOFLINE + ["test_roofline_torch.py", "test_calibrate_models.py"],
    "calc/roofline/host": ROOFLINE + ["test_roofline_host.py", "test_roofline_torch.py", "test_calibrate_models.py"],
    "calc/train/attention_time": [*TRAIN, "test_train_attention.py"],
    "calc/scaling/calculators": SCALING, "calc/scaling/fit": SCALING, "calc/scaling/laws": SCALING,
    "calc/scaling/fit_batch": SCALING,
    "calc/plan/search": PLAN, "calc/plan/memory": PLAN, "calc/plan/space": PLAN,
    "calc/train/step": TRAIN, "calc/comm/exposed": TRAIN, "calc/train/options": TRAIN, "calc/train/parts": TRAIN,
    "calc/train/host": [*TRAIN, "test_train_host_fit.py"],
    "calc/memory/schedule": MEMORY + ["test_memory_schedule.py"],
    **{m: SERVE for m in ("calc/serve/simulator", "calc/serve/iteration", "calc/serve/disagg", "calc/serve/engine", "calc/serve/metrics",
                          "calc/serve/spec", "calc/serve/static", "calc/serve/workload")},
}
# Value tests written for the survivors of the whole-population run (reports/mutation/classic_population_not_killed*.jsonl),
# one file per area, run first for the modules of their area.
AREA_TESTS = {
    "test_values_plan_search.py": ["calc/plan/memory", "calc/plan/search", "calc/plan/space"],
    "test_values_roofline_torch_ops.py": ["calc/roofline/torch_kernels", "calc/roofline/notes", "calc/roofline/training", "calc/roofline/host",
                                          "calc/roofline/memory_bound", "calc/comm/tp_rows", "calc/roofline/sweep", "calc/roofline/options"],
    "test_values_roofline_calibration.py": ["calc/roofline/model", "calc/roofline/ops", "calc/roofline/calibration_fit", "calc/roofline/calibration"],
    "test_values_serving_cost.py": ["calc/serve/iteration", "calc/serve/engine", "calc/serve/simulator", "calc/serve/disagg", "calc/serve/spec",
                                    "calc/serve/static", "calc/serve/metrics", "calc/serve/workload"],
    "test_values_scaling_specs.py": ["calc/scaling/fit", "calc/scaling/fit_batch", "calc/scaling/laws", "calc/scaling/calculators", "specs/lookup", "specs/hf",
                                     "specs/gpu", "specs/cluster", "specs/model"],
    "test_values_training_memory.py": ["calc/train/host", "calc/memory/training", "calc/train/step", "calc/memory/inference", "calc/comm/step",
                                       "calc/train/options", "calc/train/parts", "calc/memory/schedule", "calc/counts/layers", "calc/parallel/shards",
                                       "calc/train/attention_time", "calc/comm/exposed", "calc/comm/collectives", "calc/parallel/tensor_parallel",
                                       "calc/counts/activations", "calc/counts/params", "calc/counts/flops", "calc/counts/attention"],
    # second, independent tests for core kills that rested on one test function
    "test_values_memory_cli.py": ["calc/memory/training", "calc/memory/inference", "calc/train/step", "calc/comm/step", "calc/parallel/shards",
                                      "calc/counts/layers", "calc/counts/flops", "calc/counts/activations", "calc/counts/params", "calc/counts/attention", "calc/parallel/tensor_parallel",
                                      "calc/comm/collectives"],
    # tests for the survivors of the fresh family's train half (reports/mutation/fresh_train_half_seed5501.jsonl)
    "test_values_shapes_and_layouts.py": sorted(TESTS),
}
for _file, _stems in AREA_TESTS.items():
    for _stem in _stems:
        TESTS[_stem] = [_file, *TESTS[_stem]]

# test files of the --outside modules, by path prefix (the first that matches); tools/mutation_planted.py
# runs its hand-planted bugs against the same lists
VIEWS = ["test_cli_render.py", "test_cli_answers.py", "test_cli_options.py", "test_cli_tables.py", "test_values_views.py", "test_values_pages.py", "test_serve_cli.py", "test_csv_tidy.py", "test_render_80col.py"]
SYSTEM = ["test_fuzz_system.py", "test_fuzz_inputs.py", "test_cli_foundation.py", "test_readers.py"]
REPORT = ["test_values_report_text.py", "test_values_pages.py", "test_report.py", "test_report_sections.py",
          "test_report_markdown.py"]
READERS = ["test_readers_records.py", "test_readers.py", "test_fuzz_system.py", "test_rows_families.py", "test_bench_report.py"]
BENCH = ["test_bench_summaries.py", "test_bench_shapes.py", "test_values_views.py", "test_bench_model_cli.py", "test_rows_families.py", "test_bench_harness.py",
         "test_bench_report.py"]
COMM_PAGES = ["test_bench_comm_fit.py", "test_comm_bench.py", "test_comm_shared.py", "test_comm_shared_fit.py", "test_comm_transfer.py"]
# the figures' value tests (tests/test_report_figures.py) first: they read each figure's data, the others
# check that a figure is written
FIGURES = ["test_report_figures.py", *REPORT, "test_report_plots.py", "test_serve_cli.py"]
OUTSIDE_TESTS: list[tuple[str, list[str]]] = [
    ("mlsyscalc/readers/", READERS + SYSTEM),
    ("mlsyscalc/report/comm", ["test_report_comm_page.py", *COMM_PAGES, "test_bench_report.py"]),
    ("mlsyscalc/report/models_report", ["test_report_models_page.py", "test_models_report_fresh.py", "test_models_report_memory.py"]),
    ("mlsyscalc/report/kernels.py", ["test_report_kernel_pages.py", "test_values_pages.py", "test_bench_report.py", "test_rows_families.py"]),
    ("mlsyscalc/report/attention.py", ["test_report_attention_page.py", "test_values_pages.py", "test_bench_report.py"]),
    ("mlsyscalc/report/memory_plot.py", ["test_report_figures.py", "test_bench_report.py", "test_report_plots.py"]),
    ("mlsyscalc/report/memory.py", ["test_report_memory_page.py", "test_bench_report.py", "test_report_plots.py"]),
    ("mlsyscalc/report/memory", ["test_bench_report.py", "test_report_plots.py"]),
    *((f"mlsyscalc/report/{stem}.py", FIGURES) for stem in ("roofline_plots", "scaling_plots", "serve_plots",
                                                            "compare_plot", "model_report_figures", "plotting")),
    ("mlsyscalc/report/bench.py", ["test_report_building.py", "test_bench_report.py", *SYSTEM]),
    ("mlsyscalc/report/model_report_build.py", ["test_report_building.py", *REPORT, *SYSTEM]),
    ("mlsyscalc/report/model_report.py", ["test_report_building.py", *REPORT, "test_report_plots.py",
                                          "test_serve_cli.py"]),
    ("mlsyscalc/report/model_report_html.py", ["test_report_html.py", *REPORT]),
    ("mlsyscalc/report/markdown.py", ["test_report_markdown.py", "test_report_html.py", *REPORT]),
    ("mlsyscalc/report/fused.py", ["test_report_fused_page.py", "test_bench_fused.py", *REPORT]),
    ("mlsyscalc/report/model_report_write.py", ["test_report_writer.py", *REPORT]),
    ("mlsyscalc/report/model_report_more.py", ["test_report_scaling_measured_sections.py", *REPORT]),
    ("mlsyscalc/report/model_report_s", ["test_report_training_section.py", *REPORT, "test_report_plots.py",
                                         "test_serve_cli.py"]),  # model_report_sections.py and _system.py
    ("mlsyscalc/report/model_report_infer.py", ["test_report_inference_section.py", *REPORT, "test_report_plots.py",
                                                "test_serve_cli.py"]),
    ("mlsyscalc/report/", REPORT + ["test_report_plots.py", "test_serve_cli.py"]),
    ("mlsyscalc/bench/comm", [*COMM_PAGES]),
    ("mlsyscalc/bench/model_calibrate.py", ["test_bench_calibrate_rows.py", "test_values_pages.py", "test_calibrate_models.py",
                                            "test_calibration_split.py", "test_readers.py"]),
    ("mlsyscalc/bench/", BENCH + READERS),
    ("mlsyscalc/cli/plan.py", ["test_cli_plan_view.py"] + VIEWS + ["test_plan.py"] + SYSTEM),
    ("mlsyscalc/cli/train.py", ["test_cli_train_notes.py", "test_cli_cost_compare.py"] + VIEWS + ["test_train.py", "test_train_fp8.py"] + SYSTEM),
    ("mlsyscalc/cli/scaling.py", ["test_cli_scaling_views.py", "test_cli_answers.py", "test_scaling_cli.py", *SYSTEM]),
    ("mlsyscalc/cli/comm.py", ["test_comm_cli.py", *VIEWS, *SYSTEM]),
    ("mlsyscalc/cli/bench_comm.py", ["test_cli_bench_comm.py", *COMM_PAGES, "test_bench_report.py", *SYSTEM]),
    ("mlsyscalc/cli/bench", [*COMM_PAGES, "test_bench_report.py", *BENCH, *SYSTEM]),
    ("mlsyscalc/cli/calibrate.py", ["test_bench_calibrate_rows.py", "test_calibrate_models.py", *SYSTEM]),
    ("mlsyscalc/cli/report.py", ["test_cli_report_command.py"] + REPORT + SYSTEM),
    ("mlsyscalc/cli/serve_capacity_views.py", ["test_cli_serve_capacity.py", *VIEWS, *SYSTEM]),
    ("mlsyscalc/cli/serve.py", ["test_cli_serve_options.py", "test_cli_serve_capacity.py", "test_cli_cost_compare.py", *VIEWS, *SYSTEM, "test_memory_cli.py", "test_roofline_cli.py"]),
    ("mlsyscalc/cli/roofline", ["test_cli_roofline_views.py", *VIEWS, *SYSTEM, "test_memory_cli.py", "test_roofline_cli.py"]),
    ("mlsyscalc/cli/memory.py", ["test_cli_memory_views.py", *VIEWS, *SYSTEM, "test_memory_cli.py"]),
    ("mlsyscalc/cli/train_fit.py", ["test_cli_train_fit.py", *VIEWS, *SYSTEM]),
    ("mlsyscalc/cli/main.py", ["test_cli_main.py", *VIEWS, *SYSTEM]),
    ("mlsyscalc/cli/compare.py", ["test_cli_cost_compare.py", *VIEWS, *SYSTEM]),
    ("mlsyscalc/cli/cost_views.py", ["test_cli_cost_compare.py", *VIEWS, *SYSTEM]),
    ("mlsyscalc/cli/", VIEWS + SYSTEM + ["test_memory_cli.py", "test_roofline_cli.py"]),
    ("mlsyscalc/units.py", VIEWS + SYSTEM + REPORT),
]


def module_key(path: str) -> str:
    """`mlsyscalc/calc/parallel/shards.py` -> `calc/parallel/shards`: how TESTS, CORE and --modules name a module."""
    return Path(path).with_suffix("").as_posix().removeprefix("mlsyscalc/")


def target_paths(folders: tuple[str, ...] = TARGETS) -> list[str]:
    """Every module under `folders` (sub-packages included), as paths from the repository root."""
    return sorted(str(p.relative_to(ROOT)) for t in folders for p in (ROOT / t).rglob("*.py")
                  if p.stem not in ("__init__", "_face"))


def tests_for(path: str) -> list[str]:
    """The test files a mutant of `path` runs: TESTS by module for calc/ and specs/, OUTSIDE_TESTS elsewhere."""
    if path.startswith(TARGETS):
        return TESTS[module_key(path)]
    return next(files for prefix, files in OUTSIDE_TESTS if path.startswith(prefix))


# wall-clock checks: they measure the machine, not the calculators, and fail on a loaded box
DESELECT = ["tests/test_cli_foundation.py::test_cli_is_import_light_and_fast",
            "tests/test_roofline_model.py::test_compute_bound_crossing_and_sweep_speed",
            # reads the committed figures, which the scratch copy leaves out (*.png, *.svg)
            "tests/test_report.py::test_committed_sample_links_its_figures_and_fetches_nothing"]

# the modules behind the core quantities (params, FLOPs, memory parts, KV bytes, collective
# bytes, op times): mutated first, so a time budget spends itself on them
CORE = {"calc/counts/params", "calc/counts/layers", "calc/counts/flops", "specs/hf", "specs/model", "calc/parallel/shards", "calc/memory/inference", "calc/memory/training",
        "calc/counts/activations", "calc/parallel/tensor_parallel", "calc/comm/collectives", "calc/comm/step", "calc/roofline/ops",
        "calc/roofline/model", "specs/cluster", "specs/gpu"}

# the modules behind params, FLOPs, memory parts, KV bytes, collective bytes and the pipeline
# bubble: with --count-killers their mutants run every selected test (no -x) so the report can
# say how many tests catch each
KILL_COUNT = {"calc/counts/params", "calc/counts/layers", "calc/counts/flops", "calc/counts/attention", "calc/counts/activations", "calc/parallel/shards", "calc/memory/inference",
              "calc/memory/training", "calc/parallel/tensor_parallel", "calc/comm/collectives", "calc/comm/step", "calc/train/step"}

SWAP_OPS: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.And: ast.Or, ast.Or: ast.And,
}
SWAP_CALLS = {"min": "max", "max": "min"}

# --kinds fresh (MUTATION_KINDS=fresh): a second, disjoint family of planted bugs, the kinds a reviewer
# plants by hand and the classic operators above never make: a term or factor dropped (`a + b` -> `a`),
# one field read for its look-alike (query heads for KV heads, TP for PP), two arguments swapped.
KINDS = os.environ.get("MUTATION_KINDS", "classic")
DROP_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv)
LOOKALIKE: dict[str, str] = {
    "num_heads": "num_kv_heads", "num_kv_heads": "num_heads", "head_dim": "v_head_dim", "v_head_dim": "head_dim",
    "hidden_size": "intermediate_size", "intermediate_size": "hidden_size", "q_dim": "kv_dim", "kv_dim": "q_dim",
    "num_experts": "experts_per_token", "experts_per_token": "num_experts",
    "expert_intermediate_size": "shared_intermediate_size", "shared_intermediate_size": "expert_intermediate_size",
    "qk_rope_head_dim": "qk_nope_head_dim", "qk_nope_head_dim": "qk_rope_head_dim",
    "qkv_bias": "o_bias", "o_bias": "qkv_bias", "tp": "pp", "pp": "tp", "dp": "cp", "cp": "dp", "ep": "tp",
    "vp": "pp", "batch": "micro_batch", "micro_batch": "batch", "seq": "context", "context": "seq",
    "num_micro_batches": "num_layers", "num_layers": "num_micro_batches", "node_size": "world_size",
    "world_size": "node_size",
}
SYMMETRIC_CALLS = {"min", "max", "hypot", "gcd", "lcm", "isclose", "zip", "print"}


@dataclass(frozen=True)
class Site:
    path: str  # relative to the repository root
    index: int  # position among the module's mutation sites, in ast.walk order
    line: int
    change: str  # what the mutant does, e.g. "Mult -> Div"


def _skipped(tree: ast.Module) -> set[int]:
    """ids of nodes never mutated: docstrings, annotations, decorators, __all__/__slots__."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        parts: list[ast.AST] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            parts += node.decorator_list
            if not isinstance(node, ast.ClassDef) and node.returns is not None:
                parts.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            parts.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            parts.append(node.annotation)
        for part in parts:
            skip.update(id(n) for n in ast.walk(part))
    return skip


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _fresh_changes(node: ast.AST) -> list[tuple[str, object]]:
    """The --kinds fresh mutations this node takes (a BinOp can take two: keep either side)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, DROP_OPS) and not (_is_text(node.left) or _is_text(node.right)):
        name = type(node.op).__name__
        out: list[tuple[str, object]] = [(f"keep left of {name}", ("keep", "left"))]
        if isinstance(node.op, (ast.Add, ast.Mult)):
            out.append((f"keep right of {name}", ("keep", "right")))
        return out
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in LOOKALIKE:
        return [(f".{node.attr} -> .{LOOKALIKE[node.attr]}", ("attr", LOOKALIKE[node.attr]))]
    if (isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2])
            and not (isinstance(node.func, ast.Name) and node.func.id in SYMMETRIC_CALLS)
            and ast.dump(node.args[0]) != ast.dump(node.args[1])):
        return [(f"swap arguments 1 and 2 of {ast.unparse(node.func)[:40]}", ("args", None))]
    return []


def _change(node: ast.AST) -> tuple[str, object] | None:
    """The mutation this node takes, as (description, how) or None."""
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)) and type(node.op) in SWAP_OPS:
        new = SWAP_OPS[type(node.op)]
        return f"{type(node.op).__name__} -> {new.__name__}", ("op", new)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAP_OPS:
        new = SWAP_OPS[type(node.ops[0])]
        return f"{type(node.ops[0]).__name__} -> {new.__name__}", ("cmp", new)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        return f"drop {type(node.op).__name__}", ("unary", None)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        value = node.value
        if isinstance(value, bool):
            new_value: object = not value
        elif isinstance(value, int):
            new_value = value + 1
        else:
            new_value = value * 2 if value else 1.0
        return f"{value!r} -> {new_value!r}", ("const", new_value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in SWAP_CALLS):
        return f"{node.func.id} -> {SWAP_CALLS[node.func.id]}", ("call", SWAP_CALLS[node.func.id])
    return None


def _nodes(tree: ast.Module) -> list[tuple[ast.AST, str, object]]:
    skip = _skipped(tree)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip or id(node) in docstrings:
            continue
        if KINDS == "fresh":
            out += [(node, desc, how) for desc, how in _fresh_changes(node)]
            continue
        found = _change(node)
        if found is not None:
            out.append((node, found[0], found[1]))
    return out


def sites(path: str, root: Path = ROOT) -> list[Site]:
    tree = ast.parse((root / path).read_text())
    return [Site(path, i, getattr(node, "lineno", 0), desc)
            for i, (node, desc, _) in enumerate(_nodes(tree))]


def mutant_source(path: str, index: int, root: Path = ROOT) -> str:
    tree = ast.parse((root / path).read_text())
    node, _, (kind, new) = _nodes(tree)[index]
    if kind == "op":
        node.op = new()
    elif kind == "cmp":
        node.ops = [new()]
    elif kind == "const":
        node.value = new
    elif kind == "call":
        node.func.id = new
    elif kind == "attr":
        node.attr = new
    elif kind == "args":
        node.args[0], node.args[1] = node.args[1], node.args[0]
    elif kind == "keep":  # a term or factor dropped: the BinOp becomes one of its operands
        _replace(tree, node, node.left if new == "left" else node.right)
    else:  # drop the unary operator: replace the UnaryOp by its operand in its parent
        _replace(tree, node, node.operand)
    return ast.unparse(ast.fix_missing_locations(tree))


def _replace(tree: ast.Module, node: ast.AST, by: ast.AST) -> None:
    """Put `by` where `node` sits in its parent."""
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, field, by)
            elif isinstance(value, list) and any(v is node for v in value):
                value[[i for i, v in enumerate(value) if v is node][0]] = by


def show(path: str, index: int) -> str:
    """The changed lines of one mutant (both sides unparsed, so only the mutation differs)."""
    import difflib

    before = ast.unparse(ast.parse((ROOT / path).read_text())).splitlines()
    after = mutant_source(path, index).splitlines()
    return "\n".join(line for line in difflib.unified_diff(before, after, path, path, n=0, lineterm="")
                     if not line.startswith(("---", "+++", "@@")))


def prepare_copy(scratch: Path) -> None:
    """A copy of the repository the mutants are written into (the worktree is never touched)."""
    if scratch.exists():
        shutil.rmtree(scratch)
    ignore = shutil.ignore_patterns(".git", "__pycache__", "*.png", "*.svg", ".ruff_cache", ".mypy_cache",
                                    ".hypothesis", ".devcopy", "experiments")
    shutil.copytree(ROOT, scratch, ignore=ignore, symlinks=True)
    for name in ("model_specs", "kernels"):  # the package namespace an install would give
        link = scratch / "mlsyscalc" / name
        if not link.exists():
            link.symlink_to(scratch / name)


class _Failures:
    """pytest plugin: the node ids of the tests that fail (a collection error counts as its file)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001 (pytest's hook)
        if report.failed and report.nodeid not in self.ids:
            self.ids.append(report.nodeid)

    def pytest_collectreport(self, report) -> None:  # noqa: ANN001
        if report.failed:
            self.ids.append(f"{report.nodeid} (collection)")


def run_tests(scratch: Path, tests: list[str], timeout_s: float,
              all_failures: bool = False) -> tuple[str, list[str]]:
    """('killed' | 'survived' | 'timeout' | 'errorN', failing test ids): run in a forked child.

    With all_failures every file runs in full (no -x) and every failing test is listed;
    otherwise the first failure ends the run and the list holds that one test.
    """
    args = ["-q", "-p", "no:cacheprovider", "--no-header", "-W", "ignore"] + ([] if all_failures else ["-x"])
    args += [f"--deselect={test}" for test in DESELECT]
    files = [f"tests/{t}" for t in dict.fromkeys(tests) if (scratch / "tests" / t).exists()]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: import the package fresh from the scratch copy and run pytest
        try:
            os.close(read_fd)
            os.chdir(scratch)
            sys.path.insert(0, str(scratch))
            if not os.environ.get("MUTATION_VERBOSE"):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
            import mlsyscalc
            import pytest
            if not mlsyscalc.__file__.startswith(str(scratch)):
                os._exit(4)  # the tests would see the unmutated worktree
            failures, worst = _Failures(), 0
            for file in files:  # one file at a time: a kill rarely needs more than the first
                code = int(pytest.main([*args, file], plugins=[failures]))
                code = 0 if code == 5 else code  # 5: the file has no tests (yet)
                worst = worst or code
                if code and not all_failures:
                    break
            os.write(write_fd, json.dumps(failures.ids).encode())
            os._exit(worst if worst in (0, 1, 2) else worst)
        except BaseException:
            os._exit(3)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    os.set_blocking(read_fd, False)
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
            chunks.append(chunk)
        except BlockingIOError:
            pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            os.set_blocking(read_fd, True)
            chunks.append(os.read(read_fd, 1 << 20))
            os.close(read_fd)
            raw = b"".join(chunks)
            ids = json.loads(raw) if raw else []
            code = os.waitstatus_to_exitcode(status)
            state = "survived" if code == 0 else "killed" if code in (1, 2) else f"error{code}"
            return state, ids
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            return "timeout", []
        time.sleep(0.02)


def _warm_imports() -> None:
    """Load the expensive third-party modules once, before any fork (mlsyscalc is not loaded)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # the calculators' tests are CPU tests; a GPU test in a forked child cannot initialise CUDA
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import click  # noqa: F401
    import hypothesis  # noqa: F401
    import numpy  # noqa: F401
    import pytest  # noqa: F401
    import rich  # noqa: F401
    import torch  # noqa: F401


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports/mutation/classic_core_stride.jsonl")
    parser.add_argument("--modules", nargs="*", help="modules to mutate, as calc/parallel/shards or specs/hf (default: all)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/mlsys_mutation"))
    parser.add_argument("--rerun", choices=["survived", "single"],
                        help="run the survivors again, or the counted kills that rest on one test function")
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="stop after this")
    parser.add_argument("--sample", type=int, default=1, help="mutate every Nth site of a module")
    parser.add_argument("--offset", type=int, default=0, help="start the sample at this site")
    parser.add_argument("--seed", type=int, help="draw a random sample with this seed (needs --count)")
    parser.add_argument("--count", type=int, default=60, help="how many sites the seeded draw takes")
    parser.add_argument("--exclude", type=Path, nargs="*", default=[],
                        help="result files of earlier runs: their mutants are not drawn again")
    parser.add_argument("--not-killed-in", type=Path, nargs="*",
                        help="plan every site that no row of these result files killed (less the EQUIVALENT ones)")
    parser.add_argument("--count-killers", action="store_true",
                        help="run every selected test of the KILL_COUNT modules' mutants (no -x)")
    parser.add_argument("--shard", help="K/N: run only every Nth planned site from the Kth (parallel runs)")
    parser.add_argument("--shuffle", action="store_true",
                        help="keep the seeded draw's random order (a time budget then cuts uniformly)")
    parser.add_argument("--plan-out", type=Path, help="write the planned sites to this JSONL file, run nothing")
    parser.add_argument("--sites", type=Path,
                        help="run exactly the sites of this JSONL file (matched by module, change, line text)")
    parser.add_argument("--kinds", choices=["classic", "fresh"], default=KINDS,
                        help="classic operators (default) or the fresh family: dropped terms, look-alike fields, "
                             "swapped arguments (sets MUTATION_KINDS for child processes)")
    parser.add_argument("--half", choices=["train", "holdout"],
                        help="only the sites of this half of the fixed hash split (mutation_sample.half_of)")
    parser.add_argument("--outside", action="store_true",
                        help="mutate the modules around the calculators (OUTSIDE: cli, report, bench, readers, units)")
    parser.add_argument("--only-tests", nargs="+", metavar="FILE",
                        help="run only these test files (those of them the module lists, else all of them): what a "
                             "set of new files kills on its own, a lower bound on the full lists' score")
    parser.add_argument("--show", nargs=2, metavar=("PATH", "INDEX"), help="print one mutant's diff")
    opts = parser.parse_args()
    if opts.kinds != KINDS:
        os.environ["MUTATION_KINDS"] = opts.kinds
        os.execv(sys.executable, [sys.executable, *sys.argv])  # module constants read the variable at import
    if opts.show:
        print(show(opts.show[0], int(opts.show[1])))
        return
    run(opts)


def _load(out: Path) -> dict[tuple[str, int], dict]:
    if not out.exists():
        return {}
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["path"], r["index"]): r for r in rows}  # the last row of a mutant wins


def _notes(kind: str) -> dict[tuple[str, str], str]:
    """tools/mutation_equivalents.json's `kind` list ("equivalent" or "unreached") keyed by (module path, diff)."""
    rows = json.loads(NOTES.read_text())[kind]
    return {(r["path"], "\n".join(r["diff"])): r["why"] for r in rows}


EQUIVALENT = _notes("equivalent")
UNREACHED = _notes("unreached")


def _equivalent(site: Site) -> bool:
    return (site.path, show(site.path, site.index)) in EQUIVALENT


def _wanted(previous: dict | None, rerun: str | None) -> bool:
    """Whether a site runs: never run yet (no rerun), or its earlier row is what --rerun asks for."""
    if previous is None or rerun is None:
        return previous is None and rerun is None
    if rerun == "single":
        functions = {i.split("[")[0] for i in previous.get("killers", [])}
        return bool(previous.get("counted")) and previous["status"] == "killed" and len(functions) == 1
    return previous["status"] == rerun


def _plan(opts: argparse.Namespace) -> list[Site]:
    """The sites this run mutates, CORE modules first: a seeded random draw over every module
    (--seed, --count, --exclude; --modules then picks among the drawn sites, so the draw stays
    the same) or every Nth site of each selected module (--sample, --offset)."""
    if opts.outside:
        paths = sorted([*(str(p.relative_to(ROOT)) for t in OUTSIDE for p in (ROOT / t).glob("*.py")), *OUTSIDE_FILES])
        paths = [p for p in paths if Path(p).stem not in OUTSIDE_SKIP]
    else:
        paths = sorted(target_paths(), key=lambda p: (module_key(p) not in CORE, p))
    paths = [p for p in paths if Path(p).stem != "__init__"]
    selected = [p for p in paths if not opts.modules or module_key(p) in opts.modules]
    if opts.sites is not None:
        return _listed_sites(opts.sites, selected)
    from mutation_sample import draw, in_half, not_killed  # tools/mutation_sample.py

    if opts.not_killed_in:
        return [s for s in not_killed(ROOT, [s for p in selected for s in sites(p)], opts.not_killed_in)
                if not _equivalent(s)]
    if opts.seed is None:
        return in_half(ROOT, [s for p in selected for s in sites(p)[opts.offset::opts.sample]], opts.half)
    population = in_half(ROOT, [s for p in paths for s in sites(p)], opts.half)
    chosen = draw(ROOT, population, opts.seed, opts.count, opts.exclude)
    if opts.shuffle:
        return [s for s in chosen if s.path in selected]
    order = {p: i for i, p in enumerate(paths)}
    return sorted((s for s in chosen if s.path in selected), key=lambda s: (order[s.path], s.index))


def _listed_sites(listing: Path, paths: list[str]) -> list[Site]:
    """The sites of a --plan-out file at today's code: same module, change and line text; where
    several sites share that key, the one whose index is nearest the listed index."""
    groups: dict[tuple[str, str, str], list[Site]] = {}
    for s in (s for p in paths for s in sites(p)):
        groups.setdefault((s.path, s.change, _text(s)), []).append(s)
    found: list[Site] = []
    for raw in listing.read_text().splitlines():
        r = json.loads(raw) if raw.strip() else None
        free = [s for s in groups.get((r["path"], r["change"], r["text"]), []) if s not in found] if r else []
        if free:
            found.append(min(free, key=lambda s: abs(s.index - r["index"])))
    return found


def _text(site: Site) -> str:
    """The mutated line's stripped source text: with path and change, the key that finds the site again."""
    lines = (ROOT / site.path).read_text().splitlines()
    return lines[site.line - 1].strip() if 0 < site.line <= len(lines) else f"#{site.line}"


def _shard(plan: list[Site], shard: str | None) -> list[Site]:
    if shard is None:
        return plan
    k, n = (int(x) for x in shard.split("/"))
    if not 0 <= k < n:
        raise SystemExit(f"--shard K/N needs 0 <= K < N, got {shard}")
    return plan[k::n]


def run(opts: argparse.Namespace) -> None:
    sys.dont_write_bytecode = True  # a stale .pyc of a same-size mutant must never be reused
    done = _load(opts.out)
    plan = _shard(_plan(opts), opts.shard)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or os.environ.get("MLSYS_GIT_COMMIT", "")[:7]
    if opts.plan_out is not None:
        opts.plan_out.parent.mkdir(parents=True, exist_ok=True)
        opts.plan_out.write_text("".join(json.dumps({"path": s.path, "index": s.index, "line": s.line,
                                                     "change": s.change, "text": _text(s), "status": "planned", "commit": commit,
                                                     "seed": opts.seed}) + "\n" for s in plan))
        print(f"{len(plan)} sites planned -> {opts.plan_out}")
        return
    prepare_copy(opts.scratch)
    _warm_imports()
    baselines: dict[tuple[str, ...], tuple[str, float]] = {}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for site in plan:
        path, stem = site.path, module_key(site.path)
        previous = done.get((path, site.index))
        if not _wanted(previous, opts.rerun):
            continue  # done already, or a rerun of others
        if opts.rerun == "survived" and _equivalent(site):
            continue  # explained in tools/mutation_equivalents.json: no test can kill it
        tests = tests_for(path)
        if opts.only_tests:  # a subset's own kills: its files among the module's, else all of it
            tests = [t for t in tests if t in opts.only_tests] or list(opts.only_tests)
        if tuple(tests) not in baselines:
            t0 = time.monotonic()
            state = run_tests(opts.scratch, tests, 900)[0]
            baselines[tuple(tests)] = state, time.monotonic() - t0
        baseline, seconds = baselines[tuple(tests)]
        if baseline != "survived":  # rerun with MUTATION_VERBOSE=1 to see why
            print(f"SKIPPED {path}:{site.line}: its tests fail without any mutant ({baseline})", flush=True)
            continue
        if time.monotonic() - start > opts.budget_s:
            return
        counting = opts.count_killers and stem in KILL_COUNT
        target = opts.scratch / path
        original = target.read_text()
        target.write_text(mutant_source(path, site.index, opts.scratch))
        t1 = time.monotonic()
        try:
            status, killers = run_tests(opts.scratch, tests, 3 * seconds + 10, counting)
        finally:
            target.write_text(original)
        row = {"path": path, "index": site.index, "line": site.line, "change": site.change, "text": _text(site),
               "status": status, "seconds": round(time.monotonic() - t1, 2), "commit": commit,
               "seed": opts.seed, "killers": killers if counting else killers[:1], "counted": counting}
        with opts.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{status:9s} {path}:{site.line} {site.change}" + (f"  [{len(killers)} tests]" if counting else ""),
              flush=True)


if __name__ == "__main__":
    main()
