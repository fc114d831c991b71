"""scripts/nccl_pairs.py: each paired call's transfer is the shorter kernel, the rest is the early rank's wait."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("nccl_pairs", Path(__file__).parents[1] / "scripts" / "nccl_pairs.py")
nccl_pairs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nccl_pairs)  # type: ignore[union-attr]


def _kernel(name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}


def test_the_late_rank_sets_the_transfer_and_the_early_one_waits():
    """Call 1: rank 0 starts at 0, rank 1 at 30; both end at 100: transfer <= 70 us, rank 0 waited 30.
    Call 2: rank 1 starts 10 us early, both end at 250: transfer <= 40, rank 1 waited 10. One step."""
    r0 = [_kernel("ncclDevKernel_AllReduce(x)", 0, 100), _kernel("gemm", 100, 100), _kernel("ncclDevKernel_AllReduce(x)", 210, 40)]
    r1 = [_kernel("ncclDevKernel_AllReduce(x)", 30, 70), _kernel("ncclDevKernel_AllReduce(x)", 200, 50)]
    got = nccl_pairs.pair(nccl_pairs.nccl_kernels(r0), nccl_pairs.nccl_kernels(r1), steps=1)
    assert got["calls"] == 2 and got["rank0_s"] == pytest.approx(140e-6) and got["rank1_s"] == pytest.approx(120e-6)
    assert got["transfer_bound_s"] == pytest.approx(110e-6)
    assert got["rank0_wait_s"] == pytest.approx(30e-6) and got["rank1_wait_s"] == pytest.approx(10e-6)
    assert got["end_gap_median_us"] == 0 and got["start_skew_max_us"] == 30
    assert got["by_kernel"]["ncclDevKernel_AllReduce"]["median_us"] == 55


def test_ranks_with_different_calls_are_refused():
    one = [_kernel("ncclDevKernel_AllReduce(x)", 0, 10)]
    with pytest.raises(SystemExit, match="not the same calls"):
        nccl_pairs.pair(nccl_pairs.nccl_kernels(one), [], steps=1)
    with pytest.raises(SystemExit, match="differ by name"):
        nccl_pairs.pair(nccl_pairs.nccl_kernels(one), nccl_pairs.nccl_kernels([_kernel("ncclDevKernel_AllGather(x)", 0, 9)]))
