"""Builds `mlsys report`'s sections: validates the options, resolves the hardware, and runs every
section builder (model_report_sections) with a cached command runner. The types live in model_report."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ..errors import MlsysError
from .model_report import DEFAULT_GPU, Context, Report, ReportOptions, Runner, Section
from .model_report_sections import SECTIONS


def build_report(options: ReportOptions, runner: Runner, available: Sequence[str], header: Mapping[str, Any],
                 builders: Sequence[tuple[str, str, Callable[[Context, Section], None]]] | None = None,
                 step: Callable[[str], None] | None = None) -> Report:
    """Run every section builder; a missing command or a failing one turns its section into one line.

    step(title), when given, is called as each section starts (the CLI draws a progress line with it).
    """
    options, capped = _fit_to_model(options, _validate(options))
    gpu, per_node = _resolve_hardware(options)
    ctx = Context(options, gpu, per_node, frozenset(available), _cached(runner))
    sections = []
    for key, title, build in builders or SECTIONS:
        if step is not None:
            step(title)
        section = Section(key, title, ctx.runner)
        try:
            build(ctx, section)
        except MlsysError as exc:
            section.unavailable = str(exc)
        sections.append(section)
    return Report(options, {**header, "gpu": gpu, **_hardware_source(options, gpu), "capped": capped},
                  tuple(sections))


def _validate(options: ReportOptions):
    """Bad input stops the report (exit 2) instead of turning every section into an error line: the model,
    the dtype, the layout (tp over the heads and widths, pp over the layers, tp x pp over --gpus), --top and
    the --measured folder."""
    from ..calc.plan.space import MAX_TOP
    from ..calc.parallel.tensor_parallel import check_tp
    from ..dtypes import dtype_name
    from ..errors import require
    from ..readers.measured import measured_records
    from ..specs.lookup import load_model, parse_overrides
    from ..validate import check_gpus

    spec = load_model(options.model, parse_overrides(options.overrides) or None)
    dtype_name(options.dtype)
    check_gpus(options.gpus, "--gpus")
    split = (options.tp or 1) * (options.pp or 1)
    require(options.gpus % split == 0, f"--gpus {options.gpus} is not a multiple of tp x pp = {split}")
    if options.tp:
        check_tp(spec, options.tp)
    require((options.pp or 1) <= spec.num_layers, f"--pp {options.pp}: {spec.name} has {spec.num_layers} layers")
    require(options.top <= MAX_TOP, f"--top: {options.top:,} is above the cap of {MAX_TOP} (docs/cli.md)")
    if options.measured is not None:
        measured_records(options.measured)  # a malformed rows file stops the report; others are skipped
    return spec


def _fit_to_model(options: ReportOptions, spec) -> tuple[ReportOptions, str | None]:
    """A model with learned position embeddings (GPT-2, OPT) has no position beyond its table: the
    sequence, the decode context (plus the new token) and a served request (prompt + output - 1
    positions) are capped to it, and the header says so."""
    limit = spec.max_position_embeddings
    serving = options.prompt_len + options.output_len - 1
    if not spec.learned_positions or not limit or (options.seq <= limit and options.context < limit and serving <= limit):
        return options, None
    from dataclasses import replace

    output = min(options.output_len, limit // 4)
    capped = replace(options, seq=min(options.seq, limit), context=min(options.context, limit - 1),
                     output_len=output, prompt_len=min(options.prompt_len, limit - output))
    return capped, f"sequence, context and served requests capped to {spec.name}'s {limit:,} learned positions"


def _cached(runner: Runner) -> Runner:
    """The same command twice in one report (e.g. `mlsys params` in two sections) runs once."""
    seen: dict[tuple[str, ...], dict] = {}

    def run(argv: Sequence[str]) -> dict:
        key = tuple(argv)
        if key not in seen:
            seen[key] = runner(list(argv))
        return seen[key]
    return run


def _resolve_hardware(options: ReportOptions) -> tuple[str, int]:
    from ..specs.cluster import load_cluster
    from ..specs.gpu import load_gpu

    if options.cluster:
        cluster = load_cluster(options.cluster)
        return load_gpu(options.gpu or cluster.gpu).name, cluster.scale_up_gpus  # TP choices: the NVLink domain
    return load_gpu(options.gpu or DEFAULT_GPU).name, 8


def _hardware_source(options: ReportOptions, gpu: str) -> dict[str, Any]:
    from ..specs.cluster import load_cluster
    from ..specs.gpu import load_gpu

    spec = load_gpu(gpu)
    out: dict[str, Any] = {"gpu_source": list(spec.source), "gpu_calibrated": spec.calibrated}
    if options.cluster:
        cluster = load_cluster(options.cluster)
        out.update(cluster=cluster.name, cluster_source=list(cluster.source), cluster_measured=cluster.measured)
    return out
