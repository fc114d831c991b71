"""reports/train/heldout_bridge_mlperf6/runs.json: Megatron-Bridge 25.11 / 26.02 H100 rows, in heldout_public_rest's schema.

Nothing here prices a run: the runs go through train_published.py's reader (`model_ref`, `train_args`,
`published_target`) and the CLI's argument parser only, as the held-out protocol allows before predictions are committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "reports/train/heldout_bridge_mlperf6"
tp = load_script("validate/train_published")
ph = load_script("validate/published_runs/public_heldout")
bm = load_script("validate/published_runs/bridge_mlperf6_heldout")

RUN_KEYS = {"name", "group", "gpu", "model", "cluster", "gpus", "layout", "assumed", "assumed_why", "published", "measurement",
            "flop_convention", "citation", "notes", "not_priced", "held_out", "selection"}
LAYOUT_KEYS = {"tp", "pp", "dp", "cp", "vp", "micro_batch", "global_batch", "seq", "sp", "recompute", "zero", "dtype",
               "framework", "attention", "overlap"}


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads((SET / "runs.json").read_text())


def test_file_has_the_rest_sets_schema_and_every_run_its_fields(data):
    rest = json.loads((ROOT / "reports/train/heldout_public_rest/runs.json").read_text())
    assert set(data) == set(rest) and data["rule"] == (SET / "RULE.md").read_text()
    rest_keys = set().union(*(r.keys() for r in rest["runs"]))
    for r in data["runs"]:
        assert RUN_KEYS <= set(r) <= rest_keys, r["name"]
        assert r["assumed"] == sorted(r["assumed_why"]) and r["measurement"] is True and r["held_out"].startswith("held out: ")
        assert r["group"] in ("bridge-25.11-h100", "bridge-26.02-h100") and r["gpu"] == "H100-SXM" and r["cluster"] == "hgx-h100"
        assert r["published"]["metric"] in tp.PREDICTED and r["published"]["value"] > 0
        assert all(r["citation"][k] for k in ("paper", "table", "repo", "path", "commit", "url", "layout_from")), r["name"]
        assert r["citation"]["commit"] == bm.BRIDGE_COMMIT
        lay = r["layout"]
        assert LAYOUT_KEYS <= set(lay), r["name"]
        assert lay["tp"] * lay["pp"] * lay["dp"] * lay["cp"] == r["gpus"], r["name"]
        assert lay["global_batch"] % (lay["dp"] * lay["micro_batch"]) == 0, r["name"]
        assert lay["dtype"] != "fp8" or lay["fp8_recipe"] == "current", r["name"]
        key = r["selection"]["key"]
        assert r["selection"]["sha256"] == hashlib.sha256(key.encode()).hexdigest() and str(r["gpus"]) in key.split("|")
    assert len({r["name"] for r in data["runs"]}) == len(data["runs"]) == 5


def test_every_run_builds_train_arguments_the_cli_accepts(data, tmp_path):
    from mlsyscalc.cli.main import cli

    for r in data["runs"]:
        args = tp.train_args(r, tp.model_ref(r, tmp_path))
        assert args[:2] == ["train", r["model"]] and args[args.index("--gpus") + 1] == str(r["gpus"]), r["name"]
        assert ("--ep" in args) == ("ep" in r["layout"]) and ("--fp8-params" in args) == bool(r["layout"].get("fp8_params"))
        ctx = cli.make_context("mlsys", list(args), resilient_parsing=True)  # parses only; nothing is priced
        sub = cli.get_command(ctx, args[0])
        sub.make_context(args[0], list(args[1:]))
        metric, value = tp.published_target(r)
        assert metric == "step_time_s" and value > 0, r["name"]


def test_no_run_repeats_a_run_of_an_existing_set(data):
    """RULE.md (e): the same model, GPU, GPU count and layout is one measurement, in any existing set."""
    existing = bm.existing_runs()
    assert not [r["name"] for r in data["runs"] if bm.repeats(r, existing)]
    keys = {ph.measurement_key(r) for _, r in existing if "gpu" in r} | {bm.core_key(r) for _, r in existing}
    assert not [r["name"] for r in data["runs"] if ph.measurement_key(r) in keys or bm.core_key(r) in keys]
    assert len({bm.core_key(r) for r in data["runs"]}) == len(data["runs"])  # RULE.md (f)


def test_the_writer_reproduces_the_file_from_the_stored_page(data):
    assert bm.build(None) == data
    rows = bm.h100_rows(bm.PAGE_FILE.read_text())
    assert {r["release"] for r in rows} == {"25.11", "26.02"} and len(rows) == 11
    assert len(data["runs"]) + sum(x["what"].startswith(bm.BRIDGE_REPO) for x in data["left_out"]) == len(rows)
