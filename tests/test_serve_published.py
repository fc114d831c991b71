"""reports/serving/published.json is complete, and scripts/serve_published.py prices a case as the
simulator does (a batch-1 first-token case is exactly one prefill)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

CASES = json.loads((Path(__file__).resolve().parents[1] / "reports" / "serving" / "published.json").read_text())["cases"]
FIELDS = ("id", "model", "gpu", "tp", "dtype", "scheduler", "workload", "metric", "value", "source", "measurement")


def test_every_case_names_its_source_and_kind():
    assert len(CASES) >= 40 and len({c["id"] for c in CASES}) == len(CASES)
    for c in CASES:
        assert all(k in c for k in FIELDS), c["id"]
        assert c["value"] > 0 and "http" in c["source"] and isinstance(c["measurement"], bool)


def test_first_token_case_is_one_prefill():
    from mlsyscalc.calc.roofline_ops import resolve_ceilings
    from mlsyscalc.calc.serve import ServeOptions, iteration_cost
    from mlsyscalc.calc.serve_cost import Batch
    from mlsyscalc.specs.lookup import load_model

    script = load_script("serve_published")
    case = next(c for c in CASES if c["metric"] == "ttft_s" and c["gpu"] == "H100-SXM" and c["tp"] == 1)
    n = case["workload"]["prompt_len"]
    cost = iteration_cost(load_model(case["model"]), resolve_ceilings(case["gpu"]),
                          ServeOptions(dtype=case["dtype"], kv_dtype=case["kv_dtype"]))
    assert script.predict(case) == pytest.approx(cost.time_s(Batch.of(chunks=((n, 0),))), rel=1e-9)


PAPERS = json.loads((Path(__file__).resolve().parents[1] / "reports" / "serving" / "published_papers.json").read_text())["cases"]


def test_second_set_names_source_reading_and_uncertainty():
    assert len(PAPERS) == 45 and len({c["id"] for c in PAPERS}) == len(PAPERS)
    for c in PAPERS:
        assert all(k in c for k in FIELDS + ("set", "how_read", "uncertainty")), c["id"]
        assert c["value"] > 0 and "http" in c["source"] and "figure" in c["how_read"]


def test_unchunked_prefill_case_is_one_iteration():
    """A prompt shorter than the chunk is prefilled in one pass: its prefill_s is one iteration_s."""
    script = load_script("serve_published")
    case = next(c for c in PAPERS if c["metric"] == "prefill_s" and c["chunk"] > c["workload"]["prompt_len"])
    n = case["workload"]["prompt_len"]
    one = dict(case, metric="iteration_s", workload={"prefill": [[n, 0]], "decode_contexts": []})
    assert script.predict_paper(case) == pytest.approx(script.predict_paper(one), rel=1e-9)
