"""`mlsys bench comm`'s timing arithmetic: calls per trial, the slowest rank per trial, the row's spread."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlsyscalc.bench import comm_timing as timing


def test_iters_fill_the_trial_target():
    # 10 ms of 33 us calls: ceil(0.01 / 33e-6) = ceil(303.03) = 304
    assert timing.iters_for(33e-6) == 304
    # a 4.5 ms call (1 GiB all-reduce on 4 GPUs) still runs MIN_ITERS = 5 times a trial
    assert timing.iters_for(4.5e-3) == 5
    # a 1 us probe would ask for 10,000 calls: clamped to MAX_ITERS
    assert timing.iters_for(1e-6) == timing.MAX_ITERS == 4000
    assert timing.iters_for(0.0) == timing.MAX_ITERS  # a zero probe (clock resolution) is not a division by 0


def test_a_trial_is_its_slowest_rank():
    # rank 0 trials 30, 70, 31 us; rank 1 40, 35, 32 us -> per trial max 40, 70, 32
    assert timing.slowest_per_trial([[30e-6, 70e-6, 31e-6], [40e-6, 35e-6, 32e-6]]) == [40e-6, 70e-6, 32e-6]
    with pytest.raises(ValueError, match="different numbers of trials"):
        timing.slowest_per_trial([[1.0, 2.0], [1.0]])


def test_summary_reports_the_spread():
    trials = [40e-6, 70e-6, 32e-6, 35e-6, 36e-6]
    row = timing.summarize(trials)
    # sorted 32, 35, 36, 40, 70: median 36, best 32, worst 70; spread 36 / 32 - 1 = 0.125
    assert row["time_s"] == pytest.approx(36e-6) and row["time_min_s"] == 32e-6 and row["time_max_s"] == 70e-6
    assert row["trial_spread"] == pytest.approx(0.125) and row["trial_times_s"] == trials
    graph = timing.summarize([10e-6, 12e-6], "graph_")
    # even count: median (10 + 12) / 2 = 11, spread 11 / 10 - 1 = 0.1
    assert graph["graph_time_s"] == pytest.approx(11e-6) and graph["graph_trial_spread"] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        timing.summarize([1e-6, 0.0])


class FakeComm:
    """One rank whose timed loops take scripted times: what measure() does with them is the arithmetic."""

    def __init__(self, torch, loops):
        self.torch, self.world, self.rank, self.nodes, self.backend = torch, 1, 0, 1, "gloo"
        self.device = torch.device("cpu")
        self.dist = SimpleNamespace(all_reduce=lambda *a, **k: None)  # one rank: the sum is the input
        self.loops, self.calls = list(loops), []

    def reduce(self, value, op):
        return value

    def reduce_list(self, values, op):
        return list(values)

    def sync(self):
        pass

    def time_loop(self, run, iters):
        self.calls.append(iters)
        return self.loops.pop(0)


def test_measure_times_trials_of_the_probed_length():
    torch = pytest.importorskip("torch")
    from mlsyscalc.bench.comm_bench import measure

    probe = (50e-6, 20e-6)  # 50 us a call on the stream, 20 us of it the host's
    trials = [(t * 1e-6, 30e-6) for t in (60, 52, 55, 51, 90, 53, 54, 56, 58, 50)]
    comm = FakeComm(torch, [probe] + trials)
    row = measure(comm, "all-reduce", 4096)
    # the probe runs PROBE_CALLS calls, then TRIALS trials of ceil(0.01 / 50e-6) = 200 calls each
    assert comm.calls == [timing.PROBE_CALLS] + [200] * timing.TRIALS and row["iters"] == 200
    # trials sorted: 50 51 52 53 54 | 55 56 58 60 90 -> median (54 + 55) / 2 = 54.5 us, best 50, worst 90
    assert row["time_s"] == pytest.approx(54.5e-6) and row["time_min_s"] == pytest.approx(50e-6)
    assert row["time_max_s"] == pytest.approx(90e-6) and row["trial_spread"] == pytest.approx(54.5 / 50 - 1)
    assert row["host_issue_s"] == pytest.approx(30e-6)
    # 4096 B all-reduce on one rank: algbw = 4096 / 54.5 us; busbw factor 2(p-1)/p = 0 for p = 1
    assert row["algbw_GBps"] == pytest.approx(4096 / 54.5e-6 / 1e9) and row["busbw_GBps"] == 0
    assert "graph_time_s" not in row


def test_graph_timing_off_the_gpu_says_why():
    torch = pytest.importorskip("torch")
    from mlsyscalc.bench.comm_bench import measure

    comm = FakeComm(torch, [(50e-6, 20e-6)] + [(50e-6, 20e-6)] * timing.TRIALS)
    row = measure(comm, "all-reduce", 4096, graph=True)
    assert row["graph_error"] == "CUDA graphs need the nccl backend" and "graph_time_s" not in row
