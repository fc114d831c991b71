"""scripts/validate/comm_transfer.py: rank-independent link and buffer models of collectives, on synthetic truth."""

from __future__ import annotations

import pytest

from .conftest import load_script

ct = load_script("validate/comm_transfer")
MiB = 2**20


def _rows(collective: str, alpha: float, b: float, c: float | None) -> list[dict]:
    """Times from t = alpha steps + S share / B (+ S / C) on 2 and 4 GPUs, 1 MiB .. 1 GiB; busbw as nccl-tests."""
    steps, share = ct.RING[collective]
    rows = []
    for n in (2, 4):
        for e in range(20, 31):
            size = 2**e
            t = alpha * steps(n) + size * share(n) / b + (size / c if c else 0.0)
            rows.append({"collective": collective, "gpus": n, "size_bytes": size, "ok": True, "time_s": t,
                         "time_min_s": t, "busbw_GBps": size * share(n) / t / 1e9})
    return rows


def test_buffer_model_recovers_its_parameters_from_two_gpu_counts():
    rows = _rows("all-gather", 10e-6, 900e9, 600e9)
    x = ct.fit(rows, "buffer", "time_s")
    assert x == pytest.approx([10e-6, 1 / 900e9, 1 / 600e9], rel=1e-6)
    assert max(ct.errors(rows, "buffer", x, "time_s")) < 1e-9


def test_a_buffer_term_is_what_a_two_gpu_link_fit_cannot_transfer():
    """With C, busbw grows with n: at 1 GiB (alpha negligible) busbw = 1 / (1/B + 1/(share C)). By hand, B = 900,
    C = 600 GB/s: share 1/2 -> 1/(1/900 + 1/300) = 225 GB/s; share 3/4 -> 1/(1/900 + 1/450) = 300 GB/s: ratio 4/3.
    A link fit on 2 GPUs keeps busbw at 225 and predicts 4 GPUs' time 4/3 too long (+33%) at the largest size."""
    rows = _rows("all-gather", 0.0, 900e9, 600e9)
    assert ct.busbw_ratio(rows, 2, 4, 2**30) == pytest.approx(4 / 3)
    two = [r for r in rows if r["gpus"] == 2]
    four = [r for r in rows if r["gpus"] == 4]
    x = ct.fit(two, "link", "time_s")
    assert max(ct.errors(two, "link", x, "time_s")) < 1e-9  # in-sample it is exact: S share / B' with B' = 225 x 1/2
    assert ct.errors(four, "link", x, "time_s")[-1] == pytest.approx(1 / 3, rel=1e-6)


def test_without_a_buffer_term_the_link_fit_transfers_exactly():
    rows = _rows("all-reduce", 5e-6, 350e9, None)
    x = ct.fit([r for r in rows if r["gpus"] == 2], "link", "time_s")
    assert max(ct.errors([r for r in rows if r["gpus"] == 4], "link", x, "time_s")) < 1e-9


def test_page_has_every_table(tmp_path):
    rows = _rows("all-reduce", 5e-6, 500e9, 700e9) + _rows("reduce-scatter", 8e-6, 900e9, 600e9)
    rows[14] = rows[14] | {"time_s": 2 * rows[14]["time_min_s"]}  # one jittery row: 4 GPUs, 8 MiB
    page = ct.render(rows, [MiB, 16 * MiB], "synthetic")
    assert page.count("### Sizes >=") == 4 and "extrapolated to 8 GPUs" in page
    assert "| all-reduce | 8 MiB |" in page  # the jittery row is listed (median 2 x best)
