"""`--slo`: percentile targets (`ttft_p99=0.5`), per-request thresholds (`ttft=0.5`), and their verdicts."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.serve.metrics import Slo
from mlsyscalc.calc.serve.slo import meets, parse_slo, verdicts
from mlsyscalc.errors import MlsysError


def test_percentile_terms_and_their_goodput_thresholds():
    slo = parse_slo("ttft_p99=0.5,tpot_p99=0.05,e2e_p50=10,ttft_p50=0.2")
    assert slo.terms == (("ttft", 99, 0.5), ("tpot", 99, 0.05), ("e2e", 50, 10.0), ("ttft", 50, 0.2))
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == (0.5, 0.05, 10.0)  # the loosest target per metric


def test_the_old_form_is_a_threshold_only_and_wins():
    assert parse_slo("ttft=0.5,tpot=0.05") == Slo(ttft_s=0.5, tpot_s=0.05)
    assert parse_slo("ttft_p99=0.5,ttft=0.3").ttft_s == 0.3
    assert not parse_slo(None).given and not parse_slo("").given and parse_slo("e2e=3").given


def test_verdicts_compare_each_percentile_with_its_limit():
    metrics = {"ttft_p99_s": 0.5, "tpot_p99_s": 0.051, "e2e_p50_s": None}
    slo = parse_slo("ttft_p99=0.5,tpot_p99=0.05,e2e_p50=1")
    assert [v["met"] for v in verdicts(metrics, slo)] == [True, False, True]  # at the bound holds; None vacuously
    assert not meets(metrics, slo) and meets(metrics, parse_slo("ttft_p99=0.5"))


@pytest.mark.parametrize("text,message", [
    ("ttft_p99", "expects"), ("latency=1", "unknown term"), ("ttft_p100=1", "unknown term"),
    ("tpot_p99=fast", "not a number"), ("ttft_p99=-1", "positive"), ("ttft_p99=nan", "positive"),
    ("e2e=1e12", "up to"), ("ttft_p99=1,TTFT_P99=2", "twice"),
])
def test_bad_terms_are_refused(text, message):
    with pytest.raises(MlsysError, match=message):
        parse_slo(text)


def test_serve_reports_each_target_and_counts_goodput_by_it(run_cli):
    """llama3-8b at 4 requests/s: TTFT p99 is tens of ms, so 1 s is met and 1 ms is missed by every request."""
    args = ("serve", "llama3-8b", "--rate", "4", "--requests", "100")
    met = run_cli.json(*args, "--slo", "ttft_p99=1")
    assert met["slo"]["met"] and met["slo"]["terms"][0]["value_s"] == met["ttft_p99_s"]
    assert met["slo_attainment"] == 1.0
    missed = run_cli.json(*args, "--slo", "ttft_p99=0.001")
    assert not missed["slo"]["met"] and missed["slo_attainment"] == 0 and missed["goodput_requests_per_s"] == 0
    code, text, _ = run_cli(*args, "--slo", "ttft_p99=0.001", "--format", "markdown")
    assert code == 0 and "| TTFT p99 | 1 ms |" in text and "MISSED" in text


def test_no_slo_prints_no_attainment(run_cli):
    code, text, _ = run_cli("serve", "llama3-8b", "--rate", "4", "--requests", "50", "--format", "markdown")
    assert code == 0 and "attain" not in text and "no --slo given" in text
    assert run_cli.json("serve", "llama3-8b", "--rate", "4", "--requests", "50")["slo"]["given"] is False
