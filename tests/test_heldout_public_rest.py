"""reports/train/heldout_public_rest/runs.json: the runs RULE.md's cap left out of heldout_public, in its schema.

Nothing here prices a run: the runs go through train_published.py's reader (`model_ref`, `train_args`,
`published_target`) only, as the held-out protocol allows before predictions are committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
REST = ROOT / "reports/train/heldout_public_rest"
tp = load_script("validate/train_published")
ph = load_script("validate/published_runs/public_heldout")

RUN_KEYS = {"name", "group", "gpu", "cluster", "gpus", "layout", "assumed", "assumed_why", "published", "measurement",
            "flop_convention", "citation", "notes", "held_out", "selection"}
LAYOUT_KEYS = {"tp", "pp", "dp", "cp", "vp", "micro_batch", "global_batch", "seq", "sp", "recompute", "zero", "dtype",
               "framework", "attention"}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def rest() -> dict:
    return _load(REST / "runs.json")


@pytest.fixture(scope="module")
def public() -> dict:
    return _load(ROOT / "reports/train/heldout_public/runs.json")


def test_file_has_heldout_publics_schema_and_every_run_its_fields(rest, public):
    assert set(rest) == set(public) and rest["rule"] == public["rule"]
    public_keys = set().union(*(r.keys() for r in public["runs"]))
    for r in rest["runs"]:
        assert RUN_KEYS <= set(r) <= public_keys, r["name"]
        assert ("model" in r) != ("config" in r) and ("overrides" not in r or "model" in r), r["name"]
        assert isinstance(r.get("not_priced", []), list) and r["held_out"].startswith("held out: ")
        assert r["assumed"] == sorted(r["assumed_why"]) and r["measurement"] is True and r["group"].startswith("rest-")
        assert r["published"]["metric"] in tp.PREDICTED and r["published"]["value"] > 0
        assert all(r["citation"][k] for k in ("paper", "table", "repo", "path", "commit", "url")), r["name"]
        lay = r["layout"]
        assert LAYOUT_KEYS <= set(lay), r["name"]
        assert lay["tp"] * lay["pp"] * lay["dp"] * lay["cp"] == r["gpus"], r["name"]
        assert lay["global_batch"] % (lay["dp"] * lay["micro_batch"]) == 0, r["name"]
        assert lay["dtype"] != "fp8" or lay["fp8_recipe"] in ("delayed", "current"), r["name"]
    assert len({r["name"] for r in rest["runs"]}) == len(rest["runs"]) == 25


def test_every_run_builds_its_train_arguments_and_published_step_time(rest, tmp_path):
    for r in rest["runs"]:
        args = tp.train_args(r, tp.model_ref(r, tmp_path))
        lay = r["layout"]
        builtin = "model" in r and not r.get("overrides")
        assert args[0] == "train" and (args[1] == r["model"] if builtin else args[1].endswith(".json")), r["name"]
        assert args[args.index("--gpus") + 1] == str(r["gpus"]) and args[args.index("--vp") + 1] == str(lay["vp"])
        assert ("--fp8-params" in args) == bool(lay.get("fp8_params")) and ("--loss" in args) == ("loss" in lay)
        metric, value = tp.published_target(r)
        assert metric == "step_time_s" and value > 0, r["name"]


def test_the_rest_is_exactly_the_capped_candidates_less_those_left_out(rest, public):
    capped = [c for c in public["selection"]["candidates"] if not c["kept"]]
    assert [{k: c[k] for k in ("family", "key", "sha256", "row")} for c in rest["selection"]["candidates"]] == \
           [{k: c[k] for k in ("family", "key", "sha256", "row")} for c in capped]
    kept = {(c["key"], c["row"]) for c in rest["selection"]["candidates"] if c["kept"]}
    assert kept == {(r["selection"]["key"], r["selection"]["row"]) for r in rest["runs"]}
    assert len(rest["left_out"]) + len(rest["runs"]) == len(capped) == 40
    for r in rest["runs"]:
        assert r["selection"]["sha256"] == hashlib.sha256(r["selection"]["key"].encode()).hexdigest()
    counts = rest["selection"]["counts"]
    assert {f: c["kept"] for f, c in counts.items()} == {"S1": 3, "S2": 6, "S3": 6, "S4": 0, "S5": 10}
    assert sum(c["capped"] for c in counts.values()) == 40


def test_no_run_repeats_a_heldout_public_run(rest, public):
    """RULE.md (f): the same model, GPU, GPU count and layout (precision and global batch in it) is one measurement."""
    seen = {ph.measurement_key(r) for r in public["runs"]}
    assert not [r["name"] for r in rest["runs"] if ph.measurement_key(r) in seen]


def test_mlperf_numbers_are_the_stored_log_medians(rest):
    steps = _load(REST / "mlperf_step_times.json")["submissions"]
    mlperf = [r for r in rest["runs"] if r["selection"]["family"] == "S5"]
    assert len(mlperf) == len(steps) == 10
    for r in mlperf:
        st = steps[f"v{r['citation']['repo'].rsplit('_v', 1)[1]}/{r['citation']['path']}"]
        assert r["published"] == {"metric": "step_time_s", "value": round(st["median"], 4)}
        assert st["gbs"] == r["layout"]["global_batch"] and st["commit"] == r["citation"]["commit"]
