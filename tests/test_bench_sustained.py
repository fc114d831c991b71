"""`mlsys bench ceilings --sustained` (bench.cases.sustained) without a GPU: the window loop, the record's
reductions, and the CLI's refusal on the interpreter."""

from __future__ import annotations

import itertools

import pytest

from mlsyscalc.bench.cases import sustained


class _FakeEvent:
    """A CUDA event on a fake clock: each record() advances it by the calls issued since the last one."""

    clock = itertools.count()

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = float(next(self.clock))

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "_FakeEvent") -> float:
        return (end.t - self.t) * 10.0  # ms


def test_back_to_back_keeps_at_most_two_windows_in_flight_and_drains(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    calls = []
    now = iter(x * 0.1 for x in range(10_000))
    windows = sustained.run_back_to_back(lambda: calls.append(1), 1.0, 3, lambda: next(now))
    assert len(calls) == 3 * len(windows) and len(windows) >= 2  # every issued window is timed, none lost
    assert all(ms > 0 and t0 <= t1 for t0, t1, ms in windows)


def test_table_and_fractions_of_a_record():
    record = {"gpu": "NVIDIA H200", "workloads": [
        {"name": "matmul_bf16_8192", "kind": "matmul", "dtype": "bf16", "unit": "flops", "burst_rate": 672e12,
         "sustained_rate": 656e12, "sustained_over_burst": 656 / 672,
         "card_steady": {"sm_clock_MHz": 1425, "power_W": 693.4, "throttle": ["sw_power_cap"]}},
        {"name": "copy", "kind": "memory", "dtype": "float32", "unit": "bytes", "burst_rate": 4.27e12,
         "sustained_rate": 4.28e12, "sustained_over_burst": 1.002, "card_steady": {}},
        {"name": "matmul_fp8_8192", "kind": "matmul_fp8", "error": "RuntimeError: no fp8"}]}
    fractions = sustained.datasheet_fractions(record)
    assert fractions == pytest.approx({"matmul": 656e12 / 989.5e12, "memory": 4.28e12 / 4.8e12})
    rows = sustained.table_rows(record)
    assert rows[0] == [pytest.approx(x) if isinstance(x, float) else x for x in
                       ["matmul_bf16_8192", 672.0, 656.0, 656 / 672, 1425, 693.4, "sw_power_cap"]]
    assert rows[1][1] == pytest.approx(4270.0) and rows[2][1].startswith("RuntimeError")


def test_sampler_without_nvml_records_nothing_and_says_why(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_nvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("no nvidia-ml-py")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_nvml)
    with sustained.CardSampler() as sampler:
        pass
    assert sampler.samples == [] and "no nvidia-ml-py" in sampler.error and sampler.between(0, 1) == {}
    assert sampler.card() == {}


def test_sustained_needs_a_gpu(run_cli):
    code, _, err = run_cli("bench", "ceilings", "--interpret", "--sustained")
    assert code == 2 and "--sustained needs a CUDA GPU" in err
