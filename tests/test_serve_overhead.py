"""`--iteration-overhead-us`: a fixed host time every iteration pays (oracles: hand arithmetic on the
same schedule run with and without it)."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, simulate
from mlsyscalc.calc.serve.workload import from_trace, parse_length
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

SPEC = load_model("llama3-8b")
CEIL = resolve_ceilings("H100-SXM")
OVERHEAD_S = 0.004  # 4 ms: larger than a batch-1 decode step, so a mistake cannot hide in rounding


def _pair(work, **opts):
    return [simulate(SPEC, CEIL, work, ServeOptions(iteration_overhead_s=o, **opts)) for o in (0.0, OVERHEAD_S)]


@pytest.mark.parametrize("scheduler", ["static", "orca", "vllm", "sarathi"])
def test_vanishing_rate_adds_one_overhead_to_ttft_and_tpot(scheduler):
    """One request at a time: TTFT = one prefill + overhead, TPOT = one decode step + overhead."""
    work = WorkloadSpec(parse_length("512", "p"), parse_length("9", "o"), 0.001, 3, 1).build()
    plain, paid = _pair(work, scheduler=scheduler, chunk=512)
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"):
        assert paid.metrics[key] - plain.metrics[key] == pytest.approx(OVERHEAD_S, rel=1e-9), key
    # e2e: 1 prefill + 8 decode steps, each paying once
    assert paid.metrics["e2e_p50_s"] - plain.metrics["e2e_p50_s"] == pytest.approx(9 * OVERHEAD_S, rel=1e-9)


@pytest.mark.parametrize("scheduler", ["static", "orca", "vllm", "sarathi"])
def test_all_at_once_makespan_grows_by_overhead_per_iteration(scheduler):
    """Requests all present at 0: the schedule does not depend on time, so the same iterations run and
    the makespan grows by exactly iterations x overhead."""
    reqs = [(0.0, p, o) for p, o in ((300, 40), (900, 12), (64, 100), (512, 7))] * 5
    plain, paid = _pair(from_trace(reqs, "t"), scheduler=scheduler, chunk=256, max_seqs=8)
    n = plain.metrics["iterations"]
    assert paid.metrics["iterations"] == n
    assert paid.metrics["makespan_s"] - plain.metrics["makespan_s"] == pytest.approx(n * OVERHEAD_S, rel=1e-9)
    assert paid.metrics["throughput_tokens_per_s"] < plain.metrics["throughput_tokens_per_s"]


@pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf")])
def test_bad_overhead_is_refused(bad):
    with pytest.raises(MlsysError, match="--iteration-overhead-us"):
        ServeOptions(iteration_overhead_s=bad).validate()


def test_cli_option_in_microseconds(run_cli):
    args = ("serve", "llama3-8b", "--rate", "0.001", "--requests", "3", "--prompt-len", "256", "--output-len", "5")
    plain = run_cli.json(*args, "--iteration-overhead-us", "0")
    paid = run_cli.json(*args, "--iteration-overhead-us", "2500")
    assert paid["options"]["iteration_overhead_s"] == pytest.approx(0.0025)
    assert paid["ttft_p50_s"] - plain["ttft_p50_s"] == pytest.approx(0.0025, rel=1e-9)
    code, _, err = run_cli(*args, "--iteration-overhead-us", "-5")
    assert code == 2 and "--iteration-overhead-us" in err and "Traceback" not in err
