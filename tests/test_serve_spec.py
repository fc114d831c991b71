"""Speculative decoding in `mlsys serve` (Leviathan et al. 2023)."""

from __future__ import annotations

import math

import pytest

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, simulate, speculation
from mlsyscalc.calc.serve.spec import expected_tokens
from mlsyscalc.calc.serve.workload import parse_length
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

CEIL = resolve_ceilings("H100-SXM")
TARGET, DRAFT = load_model("llama3-70b"), load_model("llama3-8b")


def test_expected_tokens_hand_values():
    # (1 - 0.8^5) / (1 - 0.8) = (1 - 0.32768) / 0.2
    assert expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(1.0, 4) == 5.0
    with pytest.raises(MlsysError, match=r"--accept must be in \[0, 1\], got 1.5"):
        expected_tokens(1.5, 4)


def test_verdict_parts_add_up_and_acceptance_decides():
    opts = ServeOptions(tp=4, spec_k=4, accept=0.8)
    sd = speculation(TARGET, DRAFT, CEIL, opts)
    v = sd.verdict(1, 1000)
    assert v["spec_step_s"] == pytest.approx(v["draft_s"] + v["verify_s"])
    assert v["tpot_spec_s"] == pytest.approx(v["spec_step_s"] / 3.3616)
    assert v["pays"]  # a 70B target at batch 1 is memory-bound: verifying 5 tokens costs about one step
    assert not speculation(TARGET, DRAFT, CEIL, ServeOptions(tp=4, accept=0.0)).verdict(1, 1000)["pays"]


def test_simulated_tpot_at_vanishing_rate():
    """One request: its TPOT is ceil((O-1)/E) speculative steps over O-1 tokens."""
    opts = ServeOptions(tp=4, spec_k=4, accept=0.8)
    work = WorkloadSpec(parse_length("1000", "p"), parse_length("101", "o"), 0.001, 2).build()
    r = simulate(TARGET, CEIL, work, opts, draft=DRAFT)
    sd = speculation(TARGET, DRAFT, CEIL, opts)
    steps = math.ceil(100 / sd.tokens_per_step)
    mid = sd.step_s(1, 1000 + 1 + sd.tokens_per_step * steps / 2)
    assert r.metrics["tpot_p50_s"] == pytest.approx(steps * mid / 100, rel=2e-3)
    plain = simulate(TARGET, CEIL, work, opts)
    assert r.metrics["tpot_p50_s"] < plain.metrics["tpot_p50_s"] / 1.5


def test_draft_needs_same_vocabulary_and_iteration_scheduler():
    work = WorkloadSpec(parse_length("100", "p"), parse_length("10", "o"), 1.0, 2).build()
    with pytest.raises(MlsysError, match="vocabulary"):
        simulate(TARGET, CEIL, work, ServeOptions(tp=4), draft=load_model("gpt2"))
    with pytest.raises(MlsysError, match="iteration-level"):
        simulate(TARGET, CEIL, work, ServeOptions(tp=4, scheduler="static"), draft=DRAFT)


def test_cli_speculative(run_cli):
    data = run_cli.json("serve", "llama3-70b", "--tp", "4", "--rate", "1", "--requests", "30", "--draft", "llama3-8b",
                        "--accept", "0.6", "--spec-k", "3")
    assert data["speculative"]["batch1"]["expected_tokens_per_step"] == pytest.approx((1 - 0.6**4) / 0.4)
    code, _, err = run_cli("serve", "llama3-70b", "--tp", "4", "--rate", "1", "--draft", "llama3-8b", "--accept", "2")
    assert code == 2 and "--accept" in err
