"""`mlsys report`: the page for three built-ins (dense, GQA, MoE+MLA), its figures, its HTML, and
the rule that every quoted command, rerun on its own, gives the numbers the page quotes."""

from __future__ import annotations

import json
import re
import shlex
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlsyscalc.cli.main import cli
from mlsyscalc.report.model_report import FORMATS, lookup

MODELS = ("llama2-7b", "llama3-8b", "deepseek-v3")


def _report(tmp_path: Path, model: str, *extra: str) -> tuple[Path, dict]:
    out = tmp_path / model
    result = CliRunner().invoke(cli, ["report", model, "-o", str(out), "--gpus", "8", *extra, "--json"])
    assert result.exit_code == 0, result.stderr + result.stdout
    return out, json.loads(result.stdout)


def _section_text(page: str, title: str) -> str:
    start = page.index(f"## {title}\n")
    end = page.find("\n## ", start + 1)
    return page[start:end if end > 0 else None]


class _Assets(HTMLParser):
    """Every URL-bearing attribute of the page, and whether a <script> or stylesheet link appears."""

    def __init__(self):
        super().__init__()
        self.urls, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [(tag, name, value) for name, value in attrs if name in ("src", "href", "srcset", "data")]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Each model once: figures for the dense one (the slow part), markdown + HTML for the others."""
    pytest.importorskip("matplotlib")
    root = tmp_path_factory.mktemp("reports")
    return {m: _report(root, m, *(() if m == "llama2-7b" else ("--no-figures",))) for m in MODELS}


@pytest.mark.parametrize("model", MODELS)
def test_every_quoted_command_reruns_to_the_quoted_numbers(reports, model):
    out, summary = reports[model]
    page = (out / "README.md").read_text()
    data = json.loads((out / "report.json").read_text())
    runner = CliRunner()
    checked = 0
    for sect in data["sections"]:
        if sect["unavailable"]:
            continue
        text = _section_text(page, sect["title"])
        for line in sect["command_lines"]:
            assert line in text  # the exact command is printed beside its numbers
        fresh = {}
        for i, argv in enumerate(sect["commands"]):
            result = runner.invoke(cli, [*argv, "--json"])
            assert result.exit_code == 0, (argv, result.stderr)
            fresh[i] = json.loads(result.stdout)
        for q in sect["quotes"]:
            again = FORMATS[q["format"]](lookup(fresh[q["call"]], q["path"]))
            assert again == q["text"], (sect["key"], q)
            assert q["text"] in text, (sect["key"], q)
            checked += 1
    assert checked > 100
    assert summary["sections"]["model"] == "ok" and summary["sections"]["inference"] == "ok"


def test_quoted_numbers_match_the_calculators_own_figures(reports):
    """Spot checks against figures fixed elsewhere: Llama-2-7B's 6,738,415,616 parameters (HF count, README)
    and DeepSeek-V3's MLA latent rank 512 and 8 of 256 experts (its config.json)."""
    page = (reports["llama2-7b"][0] / "README.md").read_text()
    assert "| **total** | 6,738,415,616 |" in page
    ds = (reports["deepseek-v3"][0] / "README.md").read_text()
    assert "| MLA KV latent rank | 512 |" in ds and "| routed experts | 256 |" in ds
    assert "| experts per token | 8 |" in ds and "active parameters per token" in ds


def test_linked_figures_exist_in_both_formats(reports):
    out, summary = reports["llama2-7b"]
    page = (out / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", page)
    assert len([x for x in links if x.endswith(".png")]) >= 5
    for link in links:
        path = out / link
        assert path.is_file() and path.stat().st_size > 5_000, link
    svgs = [out / x for x in links if x.endswith(".svg")]
    assert svgs and all(p.read_text().lstrip().startswith("<?xml") for p in svgs)
    assert sorted(summary["figures"]) == sorted(str(out / x) for x in links)


@pytest.mark.parametrize("model", MODELS)
def test_html_parses_and_fetches_nothing(reports, model):
    out, _ = reports[model]
    page = (out / "report.html").read_text()
    parser = _Assets()
    parser.feed(page)
    parser.close()
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "table" in parser.tags and "h2" in parser.tags
    for tag, _name, value in parser.urls:
        assert value.startswith("#") or (tag == "img" and value.startswith("data:image/png;base64,")), (tag, value)
    assert "url(" not in page and "@import" not in page
    images = [v for t, _, v in parser.urls if t == "img"]
    assert len(images) == (6 if model == "llama2-7b" else 0)  # five sections with figures + serving


def test_header_names_version_commit_gpu_source_and_the_command(reports):
    out, summary = reports["llama2-7b"]
    head = (out / "README.md").read_text().split("## ")[0]
    assert "mlsyscalc 0.1.0" in head and "commit " in head
    assert "H100-SXM (https://" in head  # the GPU spec and its datasheet
    assert f"`{summary['command']}`" in head
    assert shlex.split(summary["command"])[:3] == ["mlsys", "report", "llama2-7b"]


def test_sections_without_their_command_say_so_in_one_line(reports):
    out, summary = reports["llama3-8b"]
    page = (out / "README.md").read_text()
    for key, title, command in (("serving", "Serving", "serve"),):
        if summary["sections"][key] != "ok":
            body = _section_text(page, title).strip().splitlines()
            assert len(body) == 3 and f"`mlsys {command}`" in body[2]
    assert "pass `--measured DIR`" in _section_text(page, "Measured")


def test_core_install_without_matplotlib_writes_markdown_and_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out, summary = _report(tmp_path, "gpt2")
    page = (out / "README.md").read_text()
    assert "pip install 'mlsyscalc[science]'" in page
    assert not (out / "figures").exists() and summary["figures"] == []
    assert "![" not in page and (out / "report.html").is_file()


@pytest.mark.parametrize("args, message", [
    (["report", "llama2-7b"], "Missing option '-o'"),
    (["report", "llama-7", "-o", "x"], "did you mean"),
    (["report", "llama2-7b", "-o", "x", "--gpus", "8", "--tp", "3"], "not a multiple"),
    (["report", "llama2-7b", "-o", "x", "--name", "page.txt"], ".md"),
])
def test_bad_input_exits_2(tmp_path, args, message):
    result = CliRunner().invoke(cli, [a if a != "x" else str(tmp_path / "x") for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.stderr


def test_learned_positions_cap_sequence_and_context(tmp_path):
    """GPT-2 has 1,024 learned positions (its config.json: n_positions): the defaults (4,096 / 8,192) are
    capped to 1,024 tokens and 1,023 of context, the header says so, and the inference section renders."""
    out, summary = _report(tmp_path, "gpt2", "--no-figures")
    page = (out / "README.md").read_text()
    assert "capped to gpt2's 1,024 learned positions" in page.split("## ")[0]
    assert summary["sections"]["inference"] == "ok" and summary["sections"]["training_memory"] == "ok"
    assert "--context 1023" in page and "--seq 1024" in page


def test_committed_sample_links_its_figures_and_fetches_nothing():
    """reports/examples/llama3-70b-h100: every linked figure is there, and its HTML needs nothing else."""
    root = Path(__file__).resolve().parents[1] / "reports" / "examples" / "llama3-70b-h100"
    page = (root / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", page)
    assert len(links) == 12 and all((root / link).is_file() for link in links)  # 6 figures, PNG + SVG
    assert "mlsys report llama3-70b --cluster hgx-h100 --gpus 64 -o reports/examples/llama3-70b-h100" in page
    parser = _Assets()
    parser.feed((root / "report.html").read_text())
    assert all(v.startswith(("#", "data:image/png;base64,")) for _, _, v in parser.urls)
    assert sum(t == "img" for t, _, _ in parser.urls) == 6
