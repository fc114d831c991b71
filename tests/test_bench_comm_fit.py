"""bench/comm_fit.py, the NCCL protocol fit, on rows made from a known model: the prediction by hand,
the parameter layout, the recovered protocols (alpha fitted on several GPU counts, the prior on one),
the dropping of a protocol no size uses, and the row selection and error helpers around the fit.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("scipy")

from mlsyscalc.bench.comm_fit import (PROTOCOL_NAMES, STEP_LATENCY_PRIOR_S, ProtocolFit, _Layout, _named_fit,  # noqa: E402
                                      abs_errors, by_collective, fit_protocols, split_every_other, variant_errors)
from mlsyscalc.specs.cluster import Protocol  # noqa: E402

# two protocols: a low-latency slow one and a bulk one; a 6 us host floor
SMALL = Protocol("medium", 50e9, 1.0e-6, 2.0e-6)
BULK = Protocol("bulk", 300e9, 2.0e-6, 10.0e-6)
FLOOR_S = 6e-6


# the same two regimes with NCCL's step latency, as a fit on one GPU count assumes
AT_PRIOR = (Protocol("medium", 50e9, STEP_LATENCY_PRIOR_S, 2.0e-6), Protocol("bulk", 300e9, STEP_LATENCY_PRIOR_S, 10e-6))


def _true_s(gpus: int, size: float, protocols=(SMALL, BULK)) -> float:
    steps, sent = 2 * (gpus - 1), 2 * (gpus - 1) / gpus * size   # ring all-reduce
    device = min(p.base_latency_s + steps * p.latency_s + sent / p.bandwidth_Bps for p in protocols)
    return max(FLOOR_S, device)


def _rows(gpu_counts=(2, 4, 8), sizes=tuple(2**k for k in range(10, 31, 2)), protocols=(SMALL, BULK)):
    return [{"collective": "all-reduce", "gpus": g, "nodes": 1, "size_bytes": n, "ok": True,
             "time_s": _true_s(g, n, protocols)} for g in gpu_counts for n in sizes]


def test_predict_by_hand_in_both_forms():
    fit = ProtocolFit("all-reduce", "max", FLOOR_S, (SMALL, BULK), (1,))
    # 4 GPUs, 1 MiB: 6 steps, 1.5 MiB sent; small 2 + 6 + 31.46 us, bulk 10 + 12 + 5.24 us
    sent = 1.5 * 2**20
    small, bulk = 2e-6 + 6e-6 + sent / 50e9, 10e-6 + 12e-6 + sent / 300e9
    assert fit.predict_s(4, 2**20) == pytest.approx(min(small, bulk)) == pytest.approx(bulk)
    assert fit.predict_s(2, 1024) == FLOOR_S   # 2 steps: small 2 + 2 + 0.02 us is under the floor
    summed = ProtocolFit("all-reduce", "sum", FLOOR_S, (SMALL, BULK), (1,))
    assert summed.predict_s(2, 1024) == pytest.approx(FLOOR_S + 2e-6 + 2 * 1e-6 + 1024 / 50e9)
    terms = fit.terms(123e9, 4e-6)
    assert (terms.bandwidth_Bps, terms.latency_s, terms.protocols, terms.call_overhead_s) == (123e9, 4e-6,
                                                                                                (SMALL, BULK), FLOOR_S)


def test_layout_splits_x():
    import numpy as np

    x = np.array([6.0, 2.0, 10.0, 1.0, 2.0, 50.0, 300.0])
    h, base, alpha, bw = _Layout(2, True, 3.4).split(x)
    assert h == 6.0 and base[:, 0].tolist() == [2.0, 10.0] and alpha[:, 0].tolist() == [1.0, 2.0]
    assert bw[:, 0].tolist() == [50.0, 300.0]
    h, base, alpha, bw = _Layout(2, False, 3.4).split(np.array([6.0, 2.0, 10.0, 50.0, 300.0]))
    assert base[:, 0].tolist() == [2.0, 10.0] and alpha == 3.4 and bw[:, 0].tolist() == [50.0, 300.0]


def test_fit_recovers_both_protocols_from_three_gpu_counts():
    fit = fit_protocols(_rows(), 2)
    assert fit.gpus == (2, 4, 8) and fit.form == "max" and [p.name for p in fit.protocols] == ["medium", "bulk"]
    assert fit.call_overhead_s == pytest.approx(FLOOR_S, rel=0.02)
    medium, bulk = fit.protocols
    assert bulk.bandwidth_Bps == pytest.approx(300e9, rel=0.01) and medium.bandwidth_Bps == pytest.approx(50e9, rel=0.05)
    assert bulk.latency_s == pytest.approx(2e-6, rel=0.1) and bulk.base_latency_s == pytest.approx(10e-6, rel=0.1)
    for gpus in (2, 4, 8):
        for size in (2**12, 2**20, 2**28):
            assert fit.predict_s(gpus, size) == pytest.approx(_true_s(gpus, size), rel=0.02), (gpus, size)
    assert fit.sizes == tuple(r["size_bytes"] for r in _rows())


def test_one_gpu_count_takes_the_step_latency_prior():
    fit = fit_protocols(_rows(gpu_counts=(4,), protocols=AT_PRIOR), 2)
    assert fit.gpus == (4,) and all(p.latency_s == pytest.approx(STEP_LATENCY_PRIOR_S) for p in fit.protocols)
    assert [p.bandwidth_Bps for p in fit.protocols] == pytest.approx([50e9, 300e9], rel=0.05)
    assert [p.base_latency_s for p in fit.protocols] == pytest.approx([2e-6, 10e-6], rel=0.1)
    for size in (2**14, 2**22, 2**30):
        assert fit.predict_s(4, size) == pytest.approx(_true_s(4, size, AT_PRIOR), rel=0.02), size
    one = fit_protocols(_rows(gpu_counts=(4,), protocols=AT_PRIOR), 1)
    assert [p.name for p in one.protocols] == ["bulk"] and one.protocols[0].bandwidth_Bps == pytest.approx(300e9, rel=0.1)


def test_fit_refuses_too_few_rows_or_protocols():
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError, match="need at least 3 rows"):
        fit_protocols(_rows()[:2])
    with pytest.raises(MlsysError, match="1 to 3 protocols, not 4"):
        fit_protocols(_rows(), 4)
    mixed = _rows()[:3] + [{**_rows()[3], "collective": "all-gather"}]
    with pytest.raises(MlsysError, match="all-reduce: need at least 3 rows of one collective"):
        fit_protocols(mixed)


def test_a_protocol_fastest_nowhere_is_dropped_and_the_rest_named_by_bandwidth():
    import numpy as np

    steps, sent = np.array([2.0, 2.0, 2.0]), np.array([1e3, 1e6, 1e9])
    layout = _Layout(3, False, 1.0)
    # H 1 us; bases 5, 500, 50 us; bandwidths (GB/s) 1, 2, 100: protocol 1 is slower than 0 or 2 everywhere
    x = [1.0, 5.0, 500.0, 50.0, 1.0, 2.0, 100.0]
    fit = _named_fit("all-reduce", "max", x, steps, sent, layout, [{"size_bytes": n} for n in (1, 2, 3)], (2,))
    assert [p.name for p in fit.protocols] == list(PROTOCOL_NAMES[2]) == ["medium", "bulk"]
    assert [p.bandwidth_Bps for p in fit.protocols] == [1e9, 100e9]
    assert [p.base_latency_s for p in fit.protocols] == pytest.approx([5e-6, 50e-6])
    assert fit.call_overhead_s == pytest.approx(1e-6) and fit.sizes == (1, 2, 3) and fit.gpus == (2,)
    floor_only = _named_fit("all-reduce", "max", [1e9, 5.0, 500.0, 50.0, 1.0, 2.0, 100.0], steps, sent, layout,
                            [{"size_bytes": 1}], (2,))
    assert [p.bandwidth_Bps for p in floor_only.protocols] == [100e9]   # all under the floor: the widest one
    assert PROTOCOL_NAMES[3] == ("small", "medium", "bulk") and PROTOCOL_NAMES[1] == ("bulk",)


def test_rows_the_fit_takes():
    rows = [{"collective": "all-reduce", "size_bytes": n, "ok": True, "time_s": 1e-5, "nodes": 1, "gpus": 2}
            for n in (4096, 1024, 2048)]
    rows += [{**rows[0], "size_bytes": 8192, "nodes": 2}, {**rows[0], "size_bytes": 16384, "ok": False},
             {**rows[0], "size_bytes": 32768, "time_s": 0.0}, {**rows[0], "collective": "all-gather"}]
    grouped = by_collective(rows)
    assert list(grouped) == ["all-reduce"] and [r["size_bytes"] for r in grouped["all-reduce"]] == [1024, 2048, 4096]
    assert split_every_other([1, 2, 3, 4, 5]) == ([1, 3, 5], [2, 4])


def test_errors_and_variants():
    fit = ProtocolFit("all-reduce", "max", FLOOR_S, (SMALL, BULK), (1,))
    rows = [{"gpus": 4, "size_bytes": n, "time_s": 2 * _true_s(4, n)} for n in (1024, 2**20, 2**24)]
    assert abs_errors(fit, rows, 2**20) == pytest.approx([0.5, 0.5])   # half the measured time: 50% off
    assert abs_errors(fit, rows, 2**20 + 1) == pytest.approx([0.5])
    errors = variant_errors(_rows(gpu_counts=(4,), protocols=AT_PRIOR), 2**16)
    assert set(errors) == {"all-reduce"} and set(errors["all-reduce"]) == {("max", 1), ("max", 2), ("max", 3),
                                                                            ("sum", 2)}
    inside, held = errors["all-reduce"][("max", 2)]
    assert inside < 0.03 and held < 0.05 and not math.isnan(held)
    assert errors["all-reduce"][("max", 1)][0] > inside   # one protocol cannot follow the two regimes
