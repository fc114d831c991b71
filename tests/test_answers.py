"""The answer line: every command that renders a result leads with it, --brief prints only it."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from mlsyscalc.cli.main import cli
from mlsyscalc.cli.render_units import gib, percent, seconds

from .cli_cases import COMMANDS, invocations

SYSTEM = [
    ["train", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--zero", "1"],
    ["train", "llama3-70b", "--gpus", "64", "--gpu", "h100", "--seq", "8192", "--global-batch", "128"],
    ["plan", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--global-batch", "64", "--top", "2"],
    ["serve", "llama3-8b", "--rate", "2", "--requests", "30"],
    ["serve", "llama3-8b", "--rate", "2", "--requests", "30", "--slo", "ttft=0.5,tpot=0.005"],
    ["serve", "llama3-8b", "--sweep", "rate=1,4", "--requests", "20"],
    ["memory", "infer", "llama3-8b", "--gpu", "h100", "--batch", "8", "--context", "4096"],
    ["memory", "train", "llama3-8b"],
    ["report", "llama3-8b", "--no-figures", "-o", "{out}"],
]


def _all(tmp_path) -> list[list[str]]:
    out = str(tmp_path / "report")
    return invocations(tmp_path) + [[out if a == "{out}" else a for a in args] for args in SYSTEM]


IDS = [" ".join(c[:4]) for c in COMMANDS + SYSTEM]


def _run(args: list[str]) -> str:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, args)
    assert result.exit_code == 0, result.output
    return _untimed(result.stdout)


def _untimed(text: str) -> str:
    return re.sub(r" in [\d.]+ m?s(?=\**\s*$)", "", text, flags=re.M)  # the report's own run time differs per run


@pytest.mark.parametrize("index", range(len(IDS)), ids=IDS)
def test_table_leads_with_the_answer_and_brief_prints_only_it(index, tmp_path):
    args = _all(tmp_path)[index]
    answer = [_untimed(line) for line in json.loads(_run([*args, "--json"]))["answer"]]
    assert answer and all(isinstance(line, str) and line.strip() for line in answer)
    table = [line.rstrip() for line in _run(args).splitlines() if line.strip()]
    assert table[:len(answer)] == answer, f"`mlsys {' '.join(args)}` does not lead with its answer"
    assert _run([*args, "--brief"]).splitlines() == answer
    markdown = [line for line in _run([*args, "--format", "markdown"]).splitlines() if line.strip()]
    assert markdown[0].rstrip() == f"**{answer[0]}**"


def _answer(*args: str) -> tuple[dict, list[str]]:
    data = json.loads(_run([*args, "--json"]))
    return data, data["answer"]


def test_memory_answer_says_whether_it_fits_and_by_how_much():
    data, (line,) = _answer("memory", "train", "llama3-8b", "--gpu", "h100")
    assert not data["fits"] and line.startswith("does not fit: needs ")
    assert gib(data["peak_bytes"]) in line and f"{data['peak_bytes'] / data['usable_bytes']:.3g}x" in line
    data, (line,) = _answer("memory", "train", "llama3-8b", "--gpu", "h100", "--zero", "3", "--dp", "8")
    assert data["fits"] and line.startswith("fits: yes, ")
    assert percent(data["peak_bytes"] / data["usable_bytes"]) in line


def test_train_answer_carries_step_time_mfu_and_the_fit():
    data, lines = _answer("train", "llama3-70b", "--gpus", "64", "--gpu", "h100", "--seq", "8192",
                          "--global-batch", "128", "--tp", "1")
    assert lines[0].startswith(f"step {seconds(data['step_time_s'])}, MFU {percent(data['mfu'])}, ")
    assert "does not fit" in lines[0] and "mlsys plan" in lines[1]


def test_serve_verdict_only_with_an_slo():
    _, lines = _answer("serve", "llama3-8b", "--rate", "2", "--requests", "30")
    assert not any("SLO" in line for line in lines)
    data, lines = _answer("serve", "llama3-8b", "--rate", "2", "--requests", "30", "--slo", "ttft=0.5,tpot=0.005")
    assert lines[1].startswith("SLO missed: tpot p99 ") and "ttft" not in lines[1]
    _, lines = _answer("serve", "llama3-8b", "--rate", "2", "--requests", "30", "--slo", "ttft=0.5,tpot=0.05")
    assert lines[1].startswith("SLO met at p99")


def test_brief_refuses_json_and_commands_without_an_answer():
    result = CliRunner().invoke(cli, ["params", "llama3-8b", "--brief", "--json"])
    assert result.exit_code == 2 and "--brief" in result.stderr
    result = CliRunner().invoke(cli, ["bench", "rows", "nowhere.jsonl", "--brief"])
    assert result.exit_code == 2 and "no answer line" in result.stderr


def test_serve_verdict_follows_the_percentile_targets():
    """A p50 target between the run's p50 and p99 holds: the answer says so, as the JSON's slo.met does."""
    data, lines = _answer("serve", "llama3-8b", "--rate", "2", "--requests", "30", "--slo", "ttft_p50=0.02")
    assert data["ttft_p50_s"] <= 0.02 < data["ttft_p99_s"] and data["slo"]["met"] is True
    assert lines[1].startswith("SLO met (ttft p50)")
