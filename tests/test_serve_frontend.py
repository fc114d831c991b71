"""`--frontend-ms`: the API server's time per request, one request at a time, before the scheduler sees it
(oracles: hand arithmetic on schedules where it is the only thing that changes)."""

from __future__ import annotations

import statistics

import pytest
from click.testing import CliRunner

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
from mlsyscalc.calc.serve.workload import from_trace
from mlsyscalc.cli.main import cli
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

SPEC = load_model("llama3-8b")
CEIL = resolve_ceilings("H100-SXM")


def _run(work, frontend_s, **opts):
    return simulate(SPEC, CEIL, work, ServeOptions(frontend_s=frontend_s, **opts))


def test_zero_changes_nothing():
    reqs = [(0.01 * i, 200 + 37 * i, 20 + i) for i in range(30)]
    for clients in (0, 4):
        work = from_trace(reqs, "t", 0, clients)
        assert _run(work, 0.0).latencies == simulate(SPEC, CEIL, work, ServeOptions()).latencies


def test_one_client_pays_it_once_per_request():
    """A closed loop of one client: every request waits exactly frontend_s more before its prefill."""
    work = from_trace([(0.0, 512, 16)] * 6, "t", 0, 1)
    plain, paid = _run(work, 0.0), _run(work, 0.05)
    for a, b in zip(plain.latencies["ttft"], paid.latencies["ttft"]):
        assert b - a == pytest.approx(0.05, rel=1e-9)
    assert paid.latencies["tpot"] == pytest.approx(plain.latencies["tpot"])


def test_a_burst_is_taken_up_one_request_at_a_time():
    """N requests sent at once, each a one-token output, with a frontend far slower than the GPU: request k
    reaches the scheduler at (k + 1) x frontend_s and is done one prefill later, so TTFT_k - (k + 1) s is
    the same prefill time for every k."""
    s, n = 0.5, 8
    paid = _run(from_trace([(0.0, 256, 1)] * n, "t"), s)
    rest = [t - (k + 1) * s for k, t in enumerate(paid.latencies["ttft"])]
    assert max(rest) - min(rest) < 1e-9 and 0 < rest[0] < s
    assert statistics.fmean(paid.latencies["ttft"]) == pytest.approx(s * (n + 1) / 2 + rest[0], rel=1e-9)


@pytest.mark.parametrize("clients", [0, 3])
def test_no_request_is_scheduled_before_the_frontend_has_taken_it_up(clients):
    """Queueing delay (first scheduled - sent) is at least frontend_s for every request, and the k-th of a
    burst sent at 0 is not scheduled before (k + 1) x frontend_s. (The mean TTFT need not grow with it: a
    chunked-prefill schedule fed more evenly can finish some prompts sooner.)"""
    reqs = [(0.0 if clients else 0.002 * i, 300 + 11 * i, 30) for i in range(40)]
    for s in (0.001, 0.01, 0.1):
        lat = _run(from_trace(reqs, "t", 0, clients), s).latencies
        assert min(lat["queue"]) >= s - 1e-12
    burst = _run(from_trace([(0.0, 300, 30)] * 12, "t"), 0.01).latencies
    assert all(q >= (k + 1) * 0.01 - 1e-12 for k, q in enumerate(burst["queue"]))


def test_bad_frontend_time_is_refused():
    with pytest.raises(MlsysError, match="frontend"):
        _run(from_trace([(0.0, 10, 2)], "t"), float("nan"))
    args = ["serve", "llama3-8b", "--requests", "4", "--concurrency", "2"]
    result = CliRunner().invoke(cli, [*args, "--frontend-ms", "-1"])
    assert result.exit_code == 2 and "frontend" in result.output
    ok = CliRunner().invoke(cli, [*args, "--frontend-ms", "20", "--json"])
    assert ok.exit_code == 0 and '"frontend_s": 0.02' in ok.output
