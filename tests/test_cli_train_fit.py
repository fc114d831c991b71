"""`mlsys train` on a layout that does not fit: the warning's figures against the JSON, the command it
suggests run again (it must price the layout and step time the warning names, and fit), and the default
layout replaced by plan's choice with a note."""

from __future__ import annotations

import re
import shlex

import pytest

from mlsyscalc.cli.train_fit import short_layout
from mlsyscalc.units import fmt_bytes

JOB = ("train", "llama2-13b", "--gpus", "8", "--global-batch", "64")


def test_short_layout_by_hand():
    lay = {"tp": 2, "pp": 4, "dp": 1, "cp": 8, "ep": 1, "vp": 2, "micro_batch": 1, "zero": 1, "recompute": "none"}
    assert short_layout(lay) == "tp2 pp4 dp1 cp8 ep1 vp2, micro-batch 1, ZeRO-1, recompute none"


def test_an_explicit_layout_that_does_not_fit_warns_with_a_command_that_fits(run_cli):
    code, _, err = run_cli(*JOB, "--tp", "1")
    data = run_cli.json(*JOB, "--tp", "1")
    assert code == 0 and data["layout_choice"] == "given" and data["fits"] is False
    (warning,) = data["warnings"]
    assert " ".join(err.split()) == f"warning: {warning}" and data["notes"][0] == warning   # wrapped at 80 columns
    assert all(len(line) <= 80 for line in err.splitlines()[:-1])
    assert err.splitlines()[-1].startswith("  mlsys train ")   # the command on a line of its own, whole
    memory, usable = data["memory_bytes_per_gpu"], data["usable_bytes"]
    assert warning.startswith(f"does not fit: {short_layout(data['layout'])} needs {fmt_bytes(memory)} per GPU, "
                              f"{fmt_bytes(memory - usable)} over the {fmt_bytes(usable)} usable; ")
    match = re.search(r"picks is (.+) \(([\d.]+) s per step\): (mlsys train .+)$", warning)
    assert match, warning
    layout, seconds, command = match.groups()
    words = shlex.split(command)[1:]
    assert words[:2] == ["train", "llama2-13b"] and "--gpus" in words and "--global-batch" in words
    again = run_cli.json(*words)
    assert again["fits"] is True and again["warnings"] == [] and again["layout_choice"] == "given"
    assert short_layout(again["layout"]) == layout
    assert again["step_time_s"] == pytest.approx(float(seconds), rel=1e-3)


def test_the_default_layout_gives_way_to_plans_choice(run_cli):
    data = run_cli.json(*JOB, "--seq", "8192")
    assert data["layout_choice"] == "plan" and data["fits"] is True and data["warnings"] == []
    note = data["notes"][0]
    assert note.startswith(f"layout chosen by plan: {short_layout(data['layout'])} ({data['step_time_s']:.4g} s per "
                           "step); the default tp1 pp1 dp8 cp1 ep1 vp1, micro-batch 1, ZeRO-0, recompute none needs ")
    fitting = run_cli.json("train", "qwen2.5-0.5b", "--gpus", "8", "--global-batch", "64")
    assert fitting["layout_choice"] == "default" and fitting["fits"] is True and fitting["warnings"] == []
    assert (fitting["layout"]["tp"], fitting["layout"]["dp"]) == (1, 8)
    assert not any(n.startswith("layout chosen by plan") for n in fitting["notes"])
