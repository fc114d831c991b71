"""Write a built report: DIR/README.md (or the name given), figures/*.svg + *.png, report.html
(self-contained: figures inline as data URIs) and report.json (the commands and every quoted number)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MlsysError
from .model_report import Report, Section
from .model_report_html import slug
from .plotting import EXTRA_HINT, has_matplotlib

FIGURE_DIR = "figures"


@dataclass(frozen=True)
class Written:
    markdown: Path
    html: Path
    json: Path
    figures: tuple[Path, ...]
    figures_note: str | None  # why there are no figures, if there are none


def _header_lines(report: Report, command_line: str, figures_note: str | None) -> list[str]:
    h = report.header
    o = report.options
    where = f"{h['gpu']} ({', '.join(h['gpu_source']) or 'no source given'})"
    if h.get("cluster"):
        where += f"; cluster {h['cluster']} ({', '.join(h.get('cluster_source') or []) or 'no source given'})"
    lines = [f"# {o.model} on {o.gpus} x {h['gpu']}: what it costs", "",
             f"- Written by mlsyscalc {h['version']}, commit {h.get('commit') or 'unknown'}, at {h['time']}.",
             f"- Hardware: {where}; figures are datasheet ceilings x efficiency unless a calibrated spec is named.",
             f"- Assumptions: training {o.seq:,} tokens per sequence, micro-batch {o.micro_batch}, global batch "
             f"{o.global_batch:,}; inference {o.dtype}, decode at {o.context:,} tokens of context"
             + (f" ({h['capped']})." if h.get("capped") else "."),
             "- Every number below comes from the JSON of the `mlsys` command quoted under its section, run in "
             "the same call; rerunning a command gives the same numbers.",
             f"- Reproduce the whole page: `{command_line}`"]
    if figures_note:
        lines.append(f"- No figures: {figures_note}.")
    lines += ["", "Contents: " + " · ".join(f"[{s.title}](#{slug(s.title)})" for s in report.sections), ""]
    return lines


def _section_lines(sect: Section, figures: dict[str, tuple[Path, Path]], root: Path) -> list[str]:
    lines = [f"## {sect.title}", ""]
    if sect.unavailable:
        return lines + [f"*{sect.unavailable}*", ""]
    body = list(sect.lines)
    images = []
    for fig in sect.figures:
        if fig.name in figures:
            png, svg = (p.relative_to(root).as_posix() for p in figures[fig.name])
            images += [f"![{fig.title}]({png})", "", f"*{fig.title}* ([SVG]({svg}))", ""]
    split = body.index("```bash") if "```bash" in body else len(body)  # figures go above the commands
    return lines + body[:split] + images + body[split:]


def render_markdown(report: Report, command_line: str, figures: dict[str, tuple[Path, Path]], root: Path,
                    figures_note: str | None) -> str:
    lines = _header_lines(report, command_line, figures_note)
    for sect in report.sections:
        lines += _section_lines(sect, figures, root)
    return "\n".join(lines).rstrip() + "\n"


def report_data(report: Report, figures: dict[str, tuple[Path, Path]], root: Path) -> dict[str, Any]:
    """The machine-readable twin of the page: each section's commands and the quotes taken from them."""
    return {
        "header": dict(report.header), "options": {k: v for k, v in vars(report.options).items()},
        "sections": [{"key": s.key, "title": s.title, "unavailable": s.unavailable,
                      "commands": [list(c.argv) for c in s.calls], "command_lines": [c.line for c in s.calls],
                      "quotes": [{"call": q.call, "path": q.path, "format": q.fmt, "text": q.text} for q in s.quotes],
                      "figures": [{"name": f.name, "title": f.title,
                                   "files": [p.relative_to(root).as_posix() for p in figures.get(f.name, ())]}
                                  for f in s.figures]} for s in report.sections],
    }


def _draw_all(report: Report, root: Path) -> tuple[dict[str, tuple[Path, Path]], str | None]:
    if not report.options.figures:
        return {}, "--no-figures was given"
    if not has_matplotlib():
        return {}, EXTRA_HINT
    folder = root / FIGURE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    jobs = [(fig, (folder / f"{fig.name}.png", folder / f"{fig.name}.svg"))
            for sect in report.sections if not sect.unavailable for fig in sect.figures]
    _draw_jobs(jobs)
    return {fig.name: paths for fig, paths in jobs}, None


def _draw_jobs(jobs: list) -> None:
    """Draw each figure (SVG + PNG); on Linux with several cores, in forked workers, one figure each:
    drawing is most of a report's time and the figures are independent."""
    import os
    import sys

    from .model_report_figures import draw
    from .plotting import pyplot

    pyplot()  # import matplotlib once, before any fork
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2 or sys.platform != "linux":
        for fig, paths in jobs:
            draw(fig, paths)
        return
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.starmap(draw, jobs)


def check_output(out_dir: str | Path, name: str) -> Path:
    """The folder to write into and the page's file name, checked before any work is done."""
    root = Path(out_dir)
    if root.exists() and not root.is_dir():
        raise MlsysError(f"-o {out_dir}: exists and is not a folder")
    if not name.endswith(".md") or "/" in name or name == ".md":
        raise MlsysError(f"--name {name}: give a file name ending in .md")
    return root


def write_report(report: Report, out_dir: str | Path, name: str, command_line: str) -> Written:
    from .model_report_html import markdown_to_html

    root = check_output(out_dir, name)
    root.mkdir(parents=True, exist_ok=True)
    figures, note = _draw_all(report, root)
    text = render_markdown(report, command_line, figures, root, note)
    md = root / name
    md.write_text(text)
    html = root / "report.html"
    html.write_text(markdown_to_html(text, root, title=f"mlsys report: {report.options.model}"))
    data = root / "report.json"
    data.write_text(json.dumps(report_data(report, figures, root), indent=1, default=str) + "\n")
    return Written(md, html, data, tuple(p for pair in figures.values() for p in pair), note)
