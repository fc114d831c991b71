"""The protocol model (per-protocol alpha/beta, fastest wins, host floor): hand arithmetic, the fit, the spec."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc.bench import comm_fit
from mlsyscalc.calc.comm.collectives import COLLECTIVES, collective_cost
from mlsyscalc.report import comm as comm_report
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import Link, LinkTerms, Protocol, builtin_clusters, cluster_from_dict, load_cluster

KiB, MiB, GiB = 2**10, 2**20, 2**30
ROOT = Path(__file__).resolve().parents[1]
LL = Protocol("LL", 10e9, 1e-6)  # 10 GB/s, 1 us per step
SIMPLE = Protocol("Simple", 100e9, 10e-6)  # 100 GB/s, 10 us per step


def _spec(protocols=(LL, SIMPLE), overhead_s=0.0, bandwidth=450e9, latency=3.4e-6):
    link = Link("test NVLink", bandwidth, latency, protocols=tuple(protocols), call_overhead_s=overhead_s)
    return replace(load_cluster("hgx-h100"), intra=link)


def test_fastest_protocol_by_hand():
    """All-reduce on 4 GPUs: 6 steps, 1.5 n bytes per GPU."""
    small = collective_cost("all-reduce", 8 * KiB, 4, _spec())
    assert small.time_s == pytest.approx(6 * 1e-6 + 1.5 * 8192 / 10e9, rel=1e-12)  # LL: 7.23 us < Simple 60.1 us
    assert small.phases[0].protocol == "LL"
    big = collective_cost("all-reduce", MiB, 4, _spec())
    assert big.time_s == pytest.approx(6 * 10e-6 + 1.5 * MiB / 100e9, rel=1e-12)  # Simple: 75.7 us < LL 163.3 us
    assert big.phases[0].protocol == "Simple" and big.latency_s == pytest.approx(60e-6)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), st.sampled_from([2, 4, 8]), st.integers(1, 2**31), st.sampled_from(["ring", "tree"]))
def test_time_is_the_min_over_protocols(collective, gpus, size, algo):
    if collective == "p2p":
        gpus = 2
    if algo == "tree" and collective not in ("all-reduce", "broadcast", "reduce"):
        algo = "ring"
    both = collective_cost(collective, size, gpus, _spec(), algo=algo).time_s
    each = [collective_cost(collective, size, gpus, _spec((p,)), algo=algo).time_s for p in (LL, SIMPLE)]
    assert both == pytest.approx(min(each), rel=1e-12)


def test_call_overhead_is_a_floor_and_the_parts_add_up():
    spec = _spec((SIMPLE,), overhead_s=50e-6)
    small = collective_cost("all-gather", 64 * KiB, 2, spec)  # device: 10 us + 32 KiB / 100 GB/s = 10.33 us
    assert small.time_s == pytest.approx(50e-6) and small.host_wait_s == pytest.approx(50e-6 - 10e-6 - 32768 / 100e9)
    big = collective_cost("all-gather", GiB, 2, spec)  # device time 5.38 ms: the host floor is hidden
    assert big.host_wait_s == 0 and big.time_s == pytest.approx(10e-6 + GiB / 2 / 100e9)
    for cost in (small, big):
        assert cost.latency_s + cost.transfer_s + cost.host_wait_s == pytest.approx(cost.time_s, rel=1e-12)


# Ring terms on 2 GPUs for a 256 MiB buffer, written out by hand (NCCL's PERFORMANCE.md):
# all-reduce = reduce-scatter + all-gather: 2(p-1) = 2 steps, 2(p-1)/p x S = S bytes sent;
# all-gather, reduce-scatter, all-to-all: p-1 = 1 step, (p-1)/p x S = S/2; broadcast and reduce
# forward the whole buffer once down the chain: 1 step, S; p2p: 1 step, S.
RING_2GPU_256MIB = {
    "all-reduce": (2, 256 * MiB), "all-gather": (1, 128 * MiB), "reduce-scatter": (1, 128 * MiB),
    "all-to-all": (1, 128 * MiB), "broadcast": (1, 256 * MiB), "reduce": (1, 256 * MiB),
    "p2p": (1, 256 * MiB),
}
PLAIN_CLUSTERS = sorted(n for n, c in builtin_clusters().items() if not c.intra.per_collective)


def test_the_hand_table_covers_every_collective_and_a_plain_cluster_exists():
    assert set(RING_2GPU_256MIB) == set(COLLECTIVES) and PLAIN_CLUSTERS


@pytest.mark.parametrize("name", PLAIN_CLUSTERS)  # measured specs are covered below
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_a_spec_without_protocols_is_the_plain_alpha_beta_model(name, collective):
    spec = builtin_clusters()[name]
    assert not spec.intra.protocols and spec.intra.call_overhead_s == 0
    assert "protocols" not in json.dumps(spec.to_dict()) and "call_overhead" not in json.dumps(spec.to_dict())
    again = cluster_from_dict(spec.to_dict(), "round trip").intra  # line_rate_GBps survives
    assert (again.bandwidth_Bps, again.line_rate_Bps) == (spec.intra.bandwidth_Bps, spec.intra.line_rate_Bps)
    steps, sent = RING_2GPU_256MIB[collective]
    cost = collective_cost(collective, 256 * MiB, 2, spec)
    assert cost.time_s == steps * spec.intra.latency_s + sent / spec.intra.bandwidth_Bps  # exactly, no rounding
    assert cost.host_wait_s == 0 and cost.phases[0].protocol == ""
    one = Protocol("only", spec.intra.bandwidth_Bps, spec.intra.latency_s)  # one protocol = the plain pair
    assert collective_cost(collective, 256 * MiB, 2, _spec((one,))).time_s == cost.time_s


def test_spec_json_round_trip_and_inheritance():
    data = {"name": "t", "gpus_per_node": 2,
            "intra_node": {"bandwidth_GBps": 300, "latency_us": 5, "call_overhead_us": 40,
                           "protocols": [{"name": "LL", "bandwidth_GBps": 10, "latency_us": 1},
                                         {"name": "Simple", "bandwidth_GBps": 100, "latency_us": 10}],
                           "per_collective": {"p2p": {"call_overhead_us": 85},
                                              "all-gather": {"bandwidth_GBps": 200, "latency_us": 2, "protocols": []}}}}
    spec = cluster_from_dict(data, "test")
    figures = lambda t: [t.bandwidth_Bps, t.latency_s, t.call_overhead_s] + [  # noqa: E731
        x for p in t.protocols for x in (p.bandwidth_Bps, p.latency_s)]
    simple_ll = [10e9, 1e-6, 100e9, 10e-6]
    assert figures(spec.intra.terms("p2p")) == pytest.approx([300e9, 5e-6, 85e-6] + simple_ll)  # inherits protocols
    assert figures(spec.intra.terms("all-gather")) == pytest.approx([200e9, 2e-6, 40e-6])  # "protocols": [] opts out
    assert [p.name for p in spec.intra.terms("broadcast").protocols] == ["LL", "Simple"]
    assert isinstance(spec.intra.terms("p2p"), LinkTerms)
    again = cluster_from_dict(json.loads(json.dumps(spec.to_dict())), "round trip")
    for c in COLLECTIVES:
        assert figures(again.intra.terms(c)) == pytest.approx(figures(spec.intra.terms(c)), rel=1e-12)


@pytest.mark.parametrize("bad", [{"protocols": [{"name": "LL", "bandwidth_GBps": 0, "latency_us": 1}]},
                                 {"protocols": [{"name": "LL", "bandwidth_GBps": 5, "latency_us": -1}]},
                                 {"call_overhead_us": -3}, {"protocols": [{"bandwidth_GBps": 5}]}])
def test_bad_protocol_figures_are_refused(bad):
    data = {"name": "t", "gpus_per_node": 2, "intra_node": {"bandwidth_GBps": 300, "latency_us": 5, **bad}}
    with pytest.raises(MlsysError, match="malformed cluster spec"):
        cluster_from_dict(data, "test")


def _rows(collective, overhead_us, protocols, gpus=2):
    """Times that follow the max model exactly, 8 KiB .. 2 GiB."""
    truth = comm_fit.ProtocolFit(collective, "max", overhead_us * 1e-6,
                                 tuple(Protocol(n, b * 1e9, a * 1e-6, base * 1e-6) for n, a, b, base in
                                       (tuple(p) + (0.0,) * (4 - len(p)) for p in protocols)), ())
    return [{"collective": collective, "size_bytes": 2**e, "gpus": gpus, "nodes": 1, "ok": True,
             "time_s": truth.predict_s(gpus, 2**e)} for e in range(13, 32)]


def test_fit_recovers_a_known_model_and_the_calculator_agrees():
    rows = _rows("all-reduce", 40.0, [("medium", 9.0, 290.0), ("bulk", 60.0, 340.0)])
    fit = comm_fit.fit_protocols(rows, 2)
    assert fit.call_overhead_s == pytest.approx(40e-6, rel=1e-4)
    assert [p.name for p in fit.protocols] == ["medium", "bulk"]
    assert [p.bandwidth_Bps for p in fit.protocols] == pytest.approx([290e9, 340e9], rel=1e-3)
    # one GPU count: alpha is the prior (NCCL's 3.4 us), the per-call base takes the rest of 2 steps x alpha
    assert [p.latency_s for p in fit.protocols] == pytest.approx([comm_fit.STEP_LATENCY_PRIOR_S] * 2)
    assert [p.base_latency_s + 2 * p.latency_s for p in fit.protocols] == pytest.approx([18e-6, 120e-6], rel=1e-2)
    assert max(comm_fit.abs_errors(fit, rows, 0)) < 1e-4
    spec = replace(load_cluster("hgx-h100"), intra=Link("fit", 1e9, 0.0, {"all-reduce": fit.terms(1e9, 0.0)}))
    for r in rows:  # the fit's own formula and collective_cost are the same model
        assert collective_cost("all-reduce", r["size_bytes"], 2, spec).time_s == pytest.approx(fit.predict_s(2, r["size_bytes"]))


def test_fit_on_two_gpu_counts_separates_base_and_step_latency():
    """2 and 4 GPUs: the steps differ (2 vs 6 for all-reduce), so base and per-step alpha are both fitted."""
    truth = [("medium", 2.0, 290.0, 12.0), ("bulk", 5.0, 340.0, 90.0)]
    rows = _rows("all-reduce", 40.0, truth, gpus=2) + _rows("all-reduce", 40.0, truth, gpus=4)
    fit = comm_fit.fit_protocols(rows, 2)
    assert fit.gpus == (2, 4)
    assert [p.latency_s for p in fit.protocols] == pytest.approx([2e-6, 5e-6], rel=2e-2)
    assert [p.base_latency_s for p in fit.protocols] == pytest.approx([12e-6, 90e-6], rel=2e-2)
    assert max(comm_fit.abs_errors(fit, rows, 0)) < 1e-3


def test_two_gpu_fit_predicts_four_through_the_step_count():
    """Fitted on 2 GPUs with the true alpha as the prior: 4 GPUs follow from 6 ring steps and 3/2 n bytes."""
    truth = [("bulk", 3.4, 340.0, 50.0)]
    fit = comm_fit.fit_protocols(_rows("all-reduce", 40.0, truth, gpus=2), 1)
    four = _rows("all-reduce", 40.0, truth, gpus=4)
    assert max(comm_fit.abs_errors(fit, four, 0)) < 1e-3
    n = GiB  # by hand: 50 us + 6 x 3.4 us + 2 x 3/4 x 1 GiB / 340 GB/s
    assert fit.predict_s(4, n) == pytest.approx(50e-6 + 6 * 3.4e-6 + 1.5 * n / 340e9, rel=1e-3)


def test_fit_keeps_parameters_physical_and_drops_an_unseen_protocol():
    rows = _rows("broadcast", 38.0, [("bulk", 17.0, 370.0)])
    for r in rows[::2]:
        r["time_s"] *= 1.03  # noise
    fit = comm_fit.fit_protocols(rows, 3)
    assert fit.call_overhead_s >= 0 and all(p.latency_s >= 0 and p.bandwidth_Bps > 0 for p in fit.protocols)
    assert 1 <= len(fit.protocols) <= 3 and max(comm_fit.abs_errors(fit, rows, MiB)) < 0.05
    with pytest.raises(MlsysError, match="1 to 3 protocols"):
        comm_fit.fit_protocols(rows, 4)


def test_every_other_size_is_held_out():
    rows = _rows("p2p", 88.0, [("bulk", 40.0, 350.0)])
    train, test = comm_fit.split_every_other(rows)
    assert [r["size_bytes"] for r in train][:3] == [8 * KiB, 32 * KiB, 128 * KiB] and test[0]["size_bytes"] == 16 * KiB
    assert len(train) + len(test) == len(rows) and not {id(r) for r in train} & {id(r) for r in test}


def test_measured_h200_spec_predicts_the_committed_rows():
    """The committed fit against the committed NCCL rows (2 x H200): what docs/comm.md reports."""
    spec, rows = load_cluster("h200-x2-measured"), comm_report.load_rows(ROOT / "reports/comm/rows.jsonl")
    assert spec.measured and set(spec.intra.per_collective) == set(COLLECTIVES)
    assert all(1 <= len(t.protocols) <= 3 and t.call_overhead_s > 0 for t in spec.intra.per_collective.values())
    errors = comm_report.error_table(rows, spec, MiB)
    assert all(e["max_abs_error"] < 0.06 for c, e in errors.items() if c != "reduce-scatter")
    assert comm_report.error_table(rows, spec, 8 * MiB)["reduce-scatter"]["max_abs_error"] < 0.10
    assert errors["reduce-scatter"]["max_abs_error"] > 0.25  # 1-2 MiB run below the floor: a known miss


def test_refit_reproduces_the_committed_spec():
    rows = comm_report.load_rows(ROOT / "reports/comm/rows.jsonl")
    fresh = comm_report.measured_cluster(rows, MiB, "h200-x2-measured").to_dict()
    committed = json.loads((ROOT / "model_specs/clusters/h200-x2-measured.json").read_text())
    for c, entry in committed["intra_node"]["per_collective"].items():
        got = fresh["intra_node"]["per_collective"][c]
        assert got["call_overhead_us"] == pytest.approx(entry["call_overhead_us"], rel=1e-3)
        assert [p["bandwidth_GBps"] for p in got["protocols"]] == pytest.approx(
            [p["bandwidth_GBps"] for p in entry["protocols"]], rel=1e-2)


def test_calculator_and_fit_modules_import_no_scipy():
    code = ("import sys, mlsyscalc.bench.comm_fit, mlsyscalc.report.comm\n"
            "from mlsyscalc.calc.comm.collectives import collective_cost\n"
            "collective_cost('all-reduce', 2**24, 2, 'h200-x2-measured')\n"
            "print(sorted(m for m in ('scipy', 'torch', 'matplotlib', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
