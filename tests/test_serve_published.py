"""reports/serving/published.json is complete, and scripts/validate/serve_published.py prices a case as the
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
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost
    from mlsyscalc.calc.serve.iteration import Batch
    from mlsyscalc.specs.lookup import load_model

    script = load_script("validate/serve_published")
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
    script = load_script("validate/serve_published")
    case = next(c for c in PAPERS if c["metric"] == "prefill_s" and c["chunk"] > c["workload"]["prompt_len"])
    n = case["workload"]["prompt_len"]
    one = dict(case, metric="iteration_s", workload={"prefill": [[n, 0]], "decode_contexts": []})
    assert script.predict_paper(case) == pytest.approx(script.predict_paper(one), rel=1e-9)


NIM = json.loads((Path(__file__).resolve().parents[1] / "reports" / "serving" / "published_nim.json").read_text())


def test_nim_cases_are_every_row_with_their_set():
    """79 rows of NIM's docs page (in-sample) and the 787 rows of the DLI file (held out), none dropped."""
    sets = [c["set"] for c in NIM["cases"]]
    assert (sets.count("nim-docs"), sets.count("nim-dli")) == (79, 787)
    assert set(NIM["sets"]) == {"nim-docs", "nim-dli"} and "IN-SAMPLE" in NIM["sets"]["nim-docs"]
    assert "HELD OUT" in NIM["sets"]["nim-dli"] and len({c["id"] for c in NIM["cases"]}) == len(NIM["cases"])
    for c in NIM["cases"]:
        assert c["concurrency"] >= 1 and min(c["measured"].values()) > 0, c["id"]


def test_nim_case_at_one_client_is_one_prefill_then_decodes():
    """One client: every request's TTFT is one prefill of its prompt (the simulator's own iteration cost,
    host time included) and its output tokens/s is output / end-to-end."""
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost
    from mlsyscalc.calc.serve.iteration import Batch
    from mlsyscalc.specs.lookup import load_model

    script = load_script("validate/serve_published_nim")
    case = next(c for c in NIM["cases"] if c["set"] == "nim-dli" and c["concurrency"] == 1 and c["tp"] == 1)
    variant = script.VARIANTS["trtllm"]
    got = script.predict_case(case, variant, {})
    opts = ServeOptions(tp=1, dtype=case["dtype"], kv_dtype=case["kv_dtype"], **variant)
    cost = iteration_cost(load_model(case["model"]), resolve_ceilings(case["gpu"]), opts)
    assert got["ttft_s"] == pytest.approx(cost.time_s(Batch.of(chunks=((case["prompt_len"], 0),))), rel=1e-9)
    assert got["output_tokens_per_s"] < 1 / got["itl_s"]
