"""`mlsys train` on a layout that does not fit: the default becomes plan's best fitting layout; an explicit
layout is priced as given with a warning naming the excess and plan's pick (docs/train.md)."""

from __future__ import annotations

import json

JOB = ("llama3-70b", "--gpus", "64", "--gpu", "H100", "--seq", "8192", "--global-batch", "128")


def test_default_layout_that_does_not_fit_is_replaced_by_plans_best(run_cli):
    """tp1 x dp64 needs 1.24 TiB per GPU: train prices plan's best instead and says so."""
    code, out, err = run_cli("train", *JOB, "--json")
    assert code == 0
    data = json.loads(out)
    best = run_cli.json("plan", *JOB, "--top", "1", "--quiet")["candidates"][0]
    assert data["layout_choice"] == "plan" and data["fits"] and data["warnings"] == []
    assert data["step_time_s"] == best["step_time_s"]
    assert {k: data["layout"][k] for k in ("tp", "pp", "dp", "cp", "vp", "zero")} == \
           {k: best["layout"][k] for k in ("tp", "pp", "dp", "cp", "vp", "zero")}
    assert "layout chosen by plan: tp2 pp4" in err and "1.236 TiB per GPU" in err
    assert data["notes"][0].startswith("layout chosen by plan")


def test_explicit_layout_that_does_not_fit_warns_and_prices_it(run_cli):
    """An explicit layout is still priced (a what-if), exit 0, with the excess and the command of plan's pick."""
    code, out, err = run_cli("train", *JOB, "--tp", "1", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["layout_choice"] == "given" and not data["fits"] and data["layout"]["dp"] == 64
    assert data["memory_bytes_per_gpu"] > 1.2 * 2**40  # the layout as given, not a replacement
    (warning,) = data["warnings"]
    assert "over the 71.68 GiB usable" in warning and "1.166 TiB over" in warning
    assert err.startswith("warning: does not fit") and "mlsys train llama3-70b --gpus 64 --gpu H100" in err
    suggested = warning.rsplit(": mlsys train ", 1)[1].split()[1:]
    again = run_cli.json("train", "llama3-70b", *suggested)
    assert again["fits"] and again["warnings"] == [] and again["layout_choice"] == "given"
    assert again["layout"]["tp"] == 2 and again["layout"]["cp"] == 8


def test_fitting_layouts_are_untouched(run_cli):
    """A default layout that fits stays tp1 x dp = gpus, and nothing is searched or warned."""
    code, out, err = run_cli("train", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--seq", "1024", "--global-batch", "8", "--json")
    data = json.loads(out)
    assert code == 0 and err == "" and data["fits"]
    assert data["layout_choice"] == "default" and data["layout"]["dp"] == 8 and data["warnings"] == []


def test_nothing_fits_warns_with_what_to_change(run_cli):
    """One GPU cannot hold a 70B model's training states: the default is priced, with a warning saying so."""
    code, out, err = run_cli("train", "llama3-70b", "--gpus", "1", "--gpu", "H100", "--seq", "2048",
                             "--global-batch", "1", "--json")
    data = json.loads(out)
    assert code == 0 and not data["fits"] and data["layout_choice"] == "default"
    assert "no layout of 1 GPUs fits" in data["warnings"][0] and "warning: does not fit" in err


def test_default_layout_that_breaks_a_rule_is_replaced_by_plans_best(run_cli):
    """dp 16 cannot split a global batch of 8: with no layout flags, plan's best fitting layout is priced; with
    an explicit layout the rule is still an error (exit 2 naming it)."""
    job = ("llama2-7b", "--gpus", "16", "--gpu", "H100", "--seq", "2048", "--global-batch", "8")
    code, out, err = run_cli("train", *job, "--json")
    assert code == 0, err
    data = json.loads(out)
    best = run_cli.json("plan", *job, "--top", "1", "--quiet")["candidates"][0]
    assert data["layout_choice"] == "plan" and data["fits"] and data["step_time_s"] == best["step_time_s"]
    assert data["layout"]["dp"] <= 8 and "cannot run (rule global_batch % (dp*micro_batch) == 0" in " ".join(err.split())
    code, out, err = run_cli("train", *job, "--dp", "16")
    assert code == 2 and "global_batch % (dp*micro_batch)" in err and out == ""
