"""The published 2026-hardware cases: cited, well formed, and compared like with like by scripts/validate/hardware_published.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = json.loads((ROOT / "reports" / "hardware" / "published.json").read_text())["cases"]
spec = importlib.util.spec_from_file_location("hardware_published", ROOT / "scripts" / "validate" / "hardware_published.py")
assert spec is not None and spec.loader is not None
hp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hp)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_every_case_is_a_cited_measurement(case):
    assert case["measurement"] is True and case["citation"]["source"] and case["citation"]["table"]
    assert case["published"]["value"] > 0 and case["kind"] in ("train", "serve", "latency")
    if case["kind"] == "train":
        lay = case["layout"]
        assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == case["gpus"]


def test_ids_are_unique_and_blackwell_is_covered():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    groups = {c["group"] for c in CASES}
    assert {"megatron-bridge-b200", "megatron-bridge-gb200", "trtllm-b200-fp4", "trtllm-gb200-fp4"} <= groups


def test_training_rates_are_compared_as_step_times():
    case = next(c for c in CASES if c["id"] == "mb-25.11-b200-llama3-8b-fp8-cs-8")
    published_step = 128 * 8192 / (30624 * 8)  # GBS x seq / (tokens/s/GPU x GPUs)
    pub, pred, err = hp.error(case, {"step_time_s": published_step * 1.1})
    assert pub == pytest.approx(published_step) and err == pytest.approx(0.1)
    assert hp.error(case, {"error": "bad layout"}) is None


def test_train_args_name_the_layout():
    case = next(c for c in CASES if c["id"] == "mb-26.02-gb200-llama3.1-405b-nvfp4-256")
    args = hp.train_args(case)
    for flag in ("--cluster gb200-nvl72", "--tp 4", "--pp 16", "--vp 8", "--dtype nvfp4", "--zero 1"):
        assert flag in " ".join(args)
    assert "--account-for-embedding-in-pipeline-split" in args and "--fp8-params" not in args


def test_summary_is_median_worst_and_signed_median():
    assert hp.summary([0.1, -0.2, 0.05]) == "3 | 10.0% | 20.0% | +5.0%"
    assert hp.summary([]) == "0 | - | - | -"
