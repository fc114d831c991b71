"""reports/train/heldout_moe26/runs.json: 2026 held-out rows (Megatron-Bridge after 26.02), in heldout_bridge_mlperf6's schema.

Nothing here prices a run: the runs go through train_published.py's reader and the CLI's argument parser only, as the
held-out protocol allows before predictions are committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "reports/train/heldout_moe26"
tp = load_script("validate/train_published")
ph = load_script("validate/published_runs/public_heldout")
mo = load_script("validate/published_runs/moe26_heldout")


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads((SET / "runs.json").read_text())


def test_the_writer_reproduces_the_file_and_accounts_for_every_row(data):
    assert mo.build(None) == data and data["rule"] == (SET / "RULE.md").read_text()
    rows = mo.candidate_rows(mo.page_texts(None))
    assert {r["release"] for r in rows} <= set(mo.RELEASE_ORDER) and rows
    from_pages = [x for x in data["left_out"] if x["what"].startswith(mo.BRIDGE_REPO)]
    assert sum(r["selection"]["family"] == "B" for r in data["runs"]) + len(from_pages) == len(rows)
    assert all(set(x["clause"].split()) <= {"(a)", "(b)", "(c)", "(d)", "(e)", "(f)"} for x in data["left_out"])


def test_every_run_has_the_earlier_sets_fields_and_a_consistent_layout(data):
    earlier = json.loads((ROOT / "reports/train/heldout_bridge_mlperf6/runs.json").read_text())
    assert set(data) == set(earlier)
    for r in data["runs"]:
        assert set(earlier["runs"][0]) - {"also_published"} <= set(r), r["name"]
        assert r["assumed"] == sorted(r["assumed_why"]) and r["held_out"].startswith("held out: ")
        lay = r["layout"]
        assert lay["tp"] * lay["pp"] * lay["dp"] * lay["cp"] == r["gpus"], r["name"]
        assert lay["global_batch"] % (lay["dp"] * lay["micro_batch"]) == 0, r["name"]
        assert lay.get("ep", 1) <= lay["dp"] * lay["cp"] * lay["tp"], r["name"]
        key = r["selection"]["key"]
        assert r["selection"]["sha256"] == hashlib.sha256(key.encode()).hexdigest()
        assert all(r["citation"].get(k) for k in ("table", "url", "layout_from")), r["name"]


def test_every_run_builds_train_arguments_the_cli_accepts(data, tmp_path):
    from mlsyscalc.cli.main import cli

    for r in data["runs"]:
        args = tp.train_args(r, tp.model_ref(r, tmp_path))
        assert args[args.index("--gpus") + 1] == str(r["gpus"]) and ("--ep" in args) == ("ep" in r["layout"]), r["name"]
        ctx = cli.make_context("mlsys", list(args), resilient_parsing=True)  # parses only; nothing is priced
        cli.get_command(ctx, args[0]).make_context(args[0], list(args[1:]))
        metric, value = tp.published_target(r)
        assert metric == "step_time_s" and value > 0, r["name"]


def test_no_run_repeats_an_existing_set_or_another_run(data):
    """RULE.md (e) against every earlier set, heldout_bridge_mlperf6 included, and (f) inside the set."""
    existing = mo.existing_runs()
    assert {name for name, _ in existing} >= set(mo.EXISTING)
    for r in data["runs"]:
        assert mo.repeats(r.get("model") or r["config"], r["gpu"], r["gpus"], r["layout"], existing) is None, r["name"]
    assert len({ph.measurement_key(r) for r in data["runs"]}) == len(data["runs"])
