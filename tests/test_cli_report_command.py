"""`mlsys report`'s own code in cli/: the command line a page names (every option off its default, nothing
else) and the in-process runner that turns a section's argv into JSON or a one-line failure."""

from __future__ import annotations

import pytest

from mlsyscalc.cli.report import _command_line, json_runner
from mlsyscalc.report.model_report import CommandFailed

DEFAULTS = {"model": "llama2-7b", "overrides": (), "out_dir": "out", "name": "README.md", "gpu": None, "cluster": None,
            "gpus": 8, "seq": 4096, "context": 8192, "dtype": "bf16", "micro_batch": 1, "global_batch": 1024, "tp": None,
            "pp": None, "top": 3, "measured": None, "no_figures": False, "fmt": "table", "as_json": False}


def test_the_page_names_only_what_differs_from_the_defaults():
    assert _command_line(DEFAULTS) == "mlsys report llama2-7b -o out"
    changed = {**DEFAULTS, "overrides": ("num_hidden_layers=4", "vocab_size=1000"), "name": "page.md", "gpu": "h200",
               "gpus": 16, "seq": 2048, "tp": 2, "micro_batch": 2, "no_figures": True, "measured": "rows dir",
               "fmt": "json", "as_json": True}
    assert _command_line(changed) == ("mlsys report llama2-7b --set num_hidden_layers=4 --set vocab_size=1000 -o out "
                                      "--name page.md --gpu h200 --gpus 16 --seq 2048 --micro-batch 2 --tp 2 "
                                      "--measured 'rows dir' --no-figures")
    assert _command_line({**DEFAULTS, "global_batch": 1024, "context": 4096}) == (
        "mlsys report llama2-7b -o out --context 4096")


def test_the_runner_returns_json_or_one_line():
    run = json_runner()
    assert run(["params", "llama2-7b"])["total_params"] == 6_738_415_616
    with pytest.raises(CommandFailed) as info:
        run(["params", "no-such-model"])
    message = str(info.value)
    assert message.startswith("`mlsys params no-such-model` failed: ") and "error: " not in message
    assert "no-such-model" in message and "\n" not in message
