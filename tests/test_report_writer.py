"""The report writer (mlsyscalc/report/model_report_write.py) on a report built by hand: the header's lines, the
contents' links, each section's body with its figures above its commands, an unavailable section's one line,
the JSON twin of the page, the output checks and which figures are drawn where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsyscalc.errors import MlsysError
from mlsyscalc.report import model_report_write as write
from mlsyscalc.report.model_report import Call, Figure, Quote, Report, ReportOptions, Section

HEADER = {"version": "1.2.3", "commit": "abc1234", "time": "2026-12-03T10:00:00Z", "gpu": "H200-SXM",
          "gpu_source": ["datasheet a", "datasheet b"], "cluster": None, "capped": None}


def _report(header=None, options=None):
    ok = Section("inference", "Inference and serving", lambda argv: {})
    ok.calls.append(Call(("memory", "infer", "m"), {"x": 1}))
    ok.quotes.append(Quote(0, "x", "int", "1"))
    ok.lines += ["Some text.", "", "```bash", "mlsys memory infer m --json", "```", ""]
    ok.figures.append(Figure("kv", "inference_memory", "KV vs context", {}))
    ok.figures.append(Figure("undrawn", "op_share", "not drawn", {}))
    gone = Section("serving", "Serving: simulated", lambda argv: {}, unavailable="`mlsys serve` is not there")
    plain = Section("training_step", "Training step", lambda argv: {})
    plain.lines += ["No commands here."]
    plain.figures.append(Figure("mem", "memory_bars", "Memory bars", {}))
    return Report(options or ReportOptions("m", gpus=16, seq=2048, micro_batch=2, global_batch=4096, dtype="fp8",
                                           context=32768),
                  {**HEADER, **(header or {})}, (ok, gone, plain))


def test_header_lines_state_the_hardware_assumptions_and_contents():
    lines = write._header_lines(_report(), "mlsys report m -o out", None)
    assert lines == [
        "# m on 16 x H200-SXM: what it costs", "",
        "- Written by mlsyscalc 1.2.3, commit abc1234, at 2026-12-03T10:00:00Z.",
        "- Hardware: H200-SXM (datasheet a, datasheet b); figures are datasheet ceilings x efficiency unless a "
        "calibrated spec is named.",
        "- Assumptions: training 2,048 tokens per sequence, micro-batch 2, global batch 4,096; inference fp8, decode "
        "at 32,768 tokens of context.",
        "- Every number below comes from the JSON of the `mlsys` command quoted under its section, run in the same "
        "call; rerunning a command gives the same numbers.",
        "- Reproduce the whole page: `mlsys report m -o out`", "",
        "Contents: [Inference and serving](#inference-and-serving) · [Serving: simulated](#serving-simulated) · "
        "[Training step](#training-step)", ""]


def test_header_with_a_cluster_a_cap_no_commit_and_no_figures():
    report = _report({"cluster": "hgx-h200", "cluster_source": [], "capped": "context capped at 4,096", "commit": None,
                      "gpu_source": []})
    lines = write._header_lines(report, "cmd", "--no-figures was given")
    assert lines[2] == "- Written by mlsyscalc 1.2.3, commit unknown, at 2026-12-03T10:00:00Z."
    assert lines[3].startswith("- Hardware: H200-SXM (no source given); cluster hgx-h200 (no source given); figures")
    assert lines[4].endswith("decode at 32,768 tokens of context (context capped at 4,096).")
    assert lines[7] == "- No figures: --no-figures was given."


def test_sections_put_figures_above_their_commands(tmp_path):
    report = _report()
    figures = {"kv": (tmp_path / "figures" / "kv.png", tmp_path / "figures" / "kv.svg"),
               "mem": (tmp_path / "figures" / "mem.png", tmp_path / "figures" / "mem.svg")}
    ok, gone, plain = report.sections
    assert write._section_lines(ok, figures, tmp_path) == [
        "## Inference and serving", "", "Some text.", "",
        "![KV vs context](figures/kv.png)", "", "*KV vs context* ([SVG](figures/kv.svg))", "",
        "```bash", "mlsys memory infer m --json", "```", ""]
    assert write._section_lines(gone, figures, tmp_path) == ["## Serving: simulated", "", "*`mlsys serve` is not there*",
                                                             ""]
    assert write._section_lines(plain, figures, tmp_path) == [  # no commands: figures at the end
        "## Training step", "", "No commands here.", "![Memory bars](figures/mem.png)", "",
        "*Memory bars* ([SVG](figures/mem.svg))", ""]
    text = write.render_markdown(report, "cmd", figures, tmp_path, None)
    assert text.endswith("*Memory bars* ([SVG](figures/mem.svg))\n") and text.startswith("# m on 16 x H200-SXM")
    assert text.index("## Inference and serving") < text.index("## Serving: simulated") < text.index("## Training step")


def test_report_json_holds_each_sections_commands_quotes_and_figure_files(tmp_path):
    report = _report()
    figures = {"kv": (tmp_path / "figures" / "kv.png", tmp_path / "figures" / "kv.svg")}
    data = write.report_data(report, figures, tmp_path)
    assert data["header"] == report.header and data["options"]["gpus"] == 16 and data["options"]["dtype"] == "fp8"
    first, second, _ = data["sections"]
    assert first == {"key": "inference", "title": "Inference and serving", "unavailable": None,
                     "commands": [["memory", "infer", "m"]], "command_lines": ["mlsys memory infer m --json"],
                     "quotes": [{"call": 0, "path": "x", "format": "int", "text": "1"}],
                     "figures": [{"name": "kv", "title": "KV vs context", "files": ["figures/kv.png", "figures/kv.svg"]},
                                 {"name": "undrawn", "title": "not drawn", "files": []}]}
    assert second["unavailable"] == "`mlsys serve` is not there" and second["commands"] == []


def test_output_checks(tmp_path):
    assert write.check_output(tmp_path / "new", "README.md") == tmp_path / "new"
    (tmp_path / "file").write_text("x")
    with pytest.raises(MlsysError, match="exists and is not a folder"):
        write.check_output(tmp_path / "file", "README.md")
    for name in ("README.txt", "a/b.md", ".md"):
        with pytest.raises(MlsysError, match=f"--name {name}: give a file name ending in .md"):
            write.check_output(tmp_path, name)


def test_figures_drawn_for_available_sections_only(tmp_path, monkeypatch):
    jobs = []
    monkeypatch.setattr(write, "_draw_jobs", lambda js: jobs.extend(js))
    figures, note = write._draw_all(_report(), tmp_path)
    assert note is None and (tmp_path / "figures").is_dir()
    assert [(fig.name, [p.relative_to(tmp_path).as_posix() for p in paths]) for fig, paths in jobs] == [
        ("kv", ["figures/kv.png", "figures/kv.svg"]), ("undrawn", ["figures/undrawn.png", "figures/undrawn.svg"]),
        ("mem", ["figures/mem.png", "figures/mem.svg"])]
    assert list(figures) == ["kv", "undrawn", "mem"]
    assert write._draw_all(_report(options=ReportOptions("m", figures=False)), tmp_path) == ({}, "--no-figures was given")
    monkeypatch.setattr(write, "has_matplotlib", lambda: False)
    assert write._draw_all(_report(), tmp_path)[1] == "figures need matplotlib: pip install 'mlsyscalc[science]'"


def test_write_report_writes_the_page_html_and_json(tmp_path, monkeypatch):
    monkeypatch.setattr(write, "_draw_jobs", lambda js: None)
    out = write.write_report(_report(options=ReportOptions("m", figures=False)), tmp_path / "o", "PAGE.md", "cmd")
    assert out.markdown == tmp_path / "o" / "PAGE.md" and out.figures == () and out.figures_note == "--no-figures was given"
    html = out.html.read_text()
    assert "<title>mlsys report: m</title>" in html and '<h2 id="training-step">Training step</h2>' in html
    assert json.loads(out.json.read_text())["sections"][1]["key"] == "serving"
    assert Path(out.markdown).read_text().count("## ") == 3
