"""scripts/validate/comm_shared.py: link and buffer parameters shared across collectives, fitted on one GPU count."""

from __future__ import annotations

import pytest

from .conftest import load_script

cs = load_script("validate/comm_shared")
GIB = 2**30
B, C = 400e9, 1200e9  # link bandwidth and buffer cost of the ring group, bytes/s
FLOOR = {"all-reduce": 25e-6, "all-gather": 20e-6, "reduce-scatter": 21e-6, "broadcast": 24e-6}
B_BCAST = 380e9


def hand_time(coll: str, n: int, size: int) -> float:
    """The model written out: ring all-reduce sends 2(n-1)/n S a GPU, all-gather and reduce-scatter (n-1)/n S,
    broadcast (pipelined chain) S; the ring group also pays S / C."""
    share = {"all-reduce": 2 * (n - 1) / n, "all-gather": (n - 1) / n, "reduce-scatter": (n - 1) / n,
             "broadcast": 1.0}[coll]
    if coll == "broadcast":
        return FLOOR[coll] + size * share / B_BCAST
    return FLOOR[coll] + size * share / B + size / C


def rows(n: int) -> list[dict]:
    return [{"collective": c, "gpus": n, "size_bytes": s, "time_s": hand_time(c, n, s),
             "time_min_s": hand_time(c, n, s)} for c in FLOOR for s in (2**20 * 2**k for k in range(11))]


def test_two_gpu_rows_determine_the_shared_link_and_buffer():
    model = cs.Shared(list(FLOOR))
    x = model.fit(rows(2))
    p = model.params(x)
    assert p["B_GBps"]["ring"] == pytest.approx(400, rel=1e-6)
    assert p["C_GBps"]["ring"] == pytest.approx(1200, rel=1e-6)
    assert p["B_GBps"]["broadcast"] == pytest.approx(380, rel=1e-6)
    assert p["floor_s"]["all-gather"] == pytest.approx(20e-6, rel=1e-4)
    # held out: 4 GPUs. all-gather of 1 GiB by hand: 20 us + 0.75 GiB / 400 GB/s + 1 GiB / 1200 GB/s
    four = rows(4)
    assert max(abs(e) for e in cs.signed_errors(model, x, four)) < 1e-6
    ag = next(r for r in four if r["collective"] == "all-gather" and r["size_bytes"] == GIB)
    assert float(model.row(ag) @ x) == pytest.approx(20e-6 + 0.75 * GIB / 400e9 + GIB / 1200e9, rel=1e-6)


def test_a_buffered_group_of_one_collective_cannot_be_fitted_on_one_gpu_count():
    """All-reduce alone on 2 GPUs: S share and S are proportional, B and C are not separable."""
    model = cs.Shared(["all-reduce"])
    with pytest.raises(SystemExit, match="do not determine"):
        model.fit([r for r in rows(2) if r["collective"] == "all-reduce"])


def test_render_names_in_sample_and_held_out(tmp_path):
    page = cs.render(rows(2) + rows(4), 2, 2**20, "synthetic")
    assert "| all-gather | 4 | held out | 0.0% / 0.0% |" in page
    assert "| all-reduce | 2 | in-sample | 0.0% / 0.0% |" in page
    assert "B (GB/s) ring 400" in page and "C (GB/s) ring 1200" in page
