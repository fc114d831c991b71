"""`mlsys report MODEL -o DIR`: one document (markdown, figures, self-contained HTML) for a model.

The sections run `mlsys` commands in this process and quote them; the runner below is the only
place that turns an argv into JSON. Commands missing from this installation (COMMANDS) leave a
one-line note in their section.
"""

from __future__ import annotations

import json
import shlex
import time

import click

from ..report.model_report import CommandFailed, ReportOptions
from . import render
from .options import model_argument, positive_int
from .progress import progress

DEFAULTS = ReportOptions  # defaults live in ReportOptions


def json_runner():
    """argv -> the command's JSON (it adds --json); a non-zero exit raises CommandFailed with its stderr."""
    from click.testing import CliRunner

    from .main import cli

    runner = CliRunner()

    def run(argv):
        result = runner.invoke(cli, [*argv, "--json"])
        if result.exit_code != 0:
            message = (result.stderr or result.output).strip().splitlines() or [repr(result.exception)]
            raise CommandFailed(f"`mlsys {shlex.join(argv)}` failed: {message[-1].removeprefix('error: ')}")
        return json.loads(result.stdout)
    return run


def _command_line(params: dict) -> str:
    """The `mlsys report` line that rewrites this page: every option that differs from its default."""
    argv = ["report", params["model"]]
    for item in params["overrides"]:
        argv += ["--set", item]
    for name, value in params.items():
        flag = "--" + name.replace("_", "-")
        if name in ("model", "overrides", "fmt", "as_json") or value in (None, ()):
            continue
        if name == "out_dir":
            argv += ["-o", value]
        elif name == "no_figures":
            argv += ["--no-figures"] if value else []
        elif name == "name":
            argv += [] if value == "README.md" else ["--name", value]
        elif getattr(DEFAULTS, name, None) != value:
            argv += [flag, str(value)]
    return "mlsys " + shlex.join(argv)


@click.command()
@model_argument
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write into.")
@click.option("--name", default="README.md", show_default=True, help="File name of the markdown page.")
@click.option("--gpu", default=None, help="GPU name or alias (`mlsys gpus`); default the cluster's GPU, else H100-SXM.")
@click.option("--cluster", default=None, help="Cluster spec for communication (`model_specs/clusters`).")
@positive_int("--gpus", DEFAULTS.gpus, "GPUs for training (data parallel unless --tp/--pp).")
@positive_int("--seq", DEFAULTS.seq, "Training and prefill tokens per sequence.")
@positive_int("--context", DEFAULTS.context, "Decode: tokens already in the KV cache.")
@click.option("--dtype", default=DEFAULTS.dtype, show_default=True, help="Inference weights and compute dtype.")
@positive_int("--micro-batch", DEFAULTS.micro_batch, "Training micro-batch (sequences).")
@positive_int("--global-batch", DEFAULTS.global_batch, "Training global batch (sequences), for train/plan.")
@click.option("--tp", type=click.IntRange(min=1), default=None, help="Training layout: tensor-parallel size.")
@click.option("--pp", type=click.IntRange(min=1), default=None, help="Training layout: pipeline stages.")
@positive_int("--top", DEFAULTS.top, "Layouts listed from `mlsys plan`.")
@click.option("--measured", type=click.Path(file_okay=False), default=None,
              help="Folder of `mlsys bench` rows (JSONL/CSV) to set beside the predictions.")
@click.option("--no-figures", is_flag=True, help="Markdown and HTML only (figures need matplotlib).")
@render.output_options
def report(model, overrides, out_dir, name, gpu, cluster, gpus, seq, context, dtype, micro_batch, global_batch, tp, pp,
           top, measured, no_figures, fmt, as_json):
    """Write DIR/README.md, figures (SVG + PNG), a self-contained report.html and report.json for MODEL:
    the model, training memory and step time, inference, serving, scaling and measurements, each
    section quoting the `mlsys` commands its numbers come from.
    """
    from importlib.metadata import version

    from ..bench.harness import git_commit, now
    from ..report.model_report_build import build_report
    from ..report.model_report_sections import SECTIONS
    from ..report.model_report_write import check_output, write_report
    from .main import COMMANDS

    started = time.perf_counter()
    check_output(out_dir, name)
    options = ReportOptions(model=model, overrides=overrides, gpu=gpu, cluster=cluster, gpus=gpus, seq=seq,
                            context=context, dtype=dtype, micro_batch=micro_batch, global_batch=global_batch, tp=tp,
                            pp=pp, top=top, measured=measured, figures=not no_figures)
    header = {"version": version("mlsyscalc"), "commit": git_commit(), "time": now()}
    with progress[object](f"mlsys report {model}", total=len(SECTIONS) + 1) as step:
        built = build_report(options, json_runner(), list(COMMANDS), header, step=step)
        step("writing the page" + (" and figures" if options.figures else ""))
        line = _command_line(click.get_current_context().params)
        written = write_report(built, out_dir, name, line)
    elapsed = time.perf_counter() - started
    sections = {s.key: s.unavailable or "ok" for s in built.sections}
    data = {"out_dir": out_dir, "markdown": str(written.markdown), "html": str(written.html), "json": str(written.json),
            "figures": [str(p) for p in written.figures], "sections": sections, "elapsed_s": elapsed,
            "command": line}
    rows = [[k, v] for k, v in sections.items()]
    notes = [f"Wrote {written.markdown}, {written.html}, {written.json} and {len(written.figures)} figure files "
             f"in {elapsed:.2f} s."]
    if written.figures_note:
        notes.append(f"No figures: {written.figures_note}.")
    render.emit(render.Output(data, (render.table(f"mlsys report {model}", ["section", "status"], rows),),
                              tuple(notes)), fmt, as_json)

