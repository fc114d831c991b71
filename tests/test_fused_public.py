"""reports/fused/public: the Vidur profile set follows its rule, its predictions cover it, its page regenerates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
SET = ROOT / "reports/fused/public"
vidur = load_script("validate/fused_published_vidur")


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads((SET / "vidur_cases.json").read_text())


def test_cases_follow_the_rule(data):
    cases = data["cases"]
    assert len({c["id"] for c in cases}) == len(cases) > 3000
    assert {c["op"] for c in cases} == set(vidur.OPS) and {c["tokens"] for c in cases} == set(vidur.TOKENS)
    assert {c["tp"] for c in cases} <= {1, 2, 4, 8} and {c["gpu"] for c in cases} == set(vidur.CARDS.values())
    assert all(c["measured_ms"] > 0 and c["model"] in data["configs"] for c in cases)
    assert {(c["card"], c["model"], c["tp"], c["tokens"]) for c in cases if c["seen"]} == {vidur.SEEN}
    assert all(c["row"] == vidur._row_name(c["op"], not c["model"].endswith("phi-2")) for c in cases)
    assert data["rule"] == "reports/fused/public/RULE.md" and vidur.COMMIT in data["source"]


def test_predictions_name_a_commit_and_cover_every_case(data):
    pred = json.loads((SET / "predictions.json").read_text())
    assert len(pred["commit"]) == 40 and set(pred["predictions"]) == {c["id"] for c in data["cases"]}
    got = [p["default"] for p in pred["predictions"].values()]
    assert all(g["predicted_s"] > 0 and g["bytes"] > 0 and g["efficiency_class"] == "memory_fused" for g in got)


def test_the_page_regenerates_from_the_committed_files(tmp_path, monkeypatch):
    monkeypatch.setattr(vidur, "PAGE", tmp_path / "scored.md")
    vidur.score()
    assert (tmp_path / "scored.md").read_text() == (SET / "scored.md").read_text()
