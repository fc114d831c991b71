"""PyTorch's memory-bound kernels in a model's step stream at most MEMORY_STREAM_SM_BPS per SM on Hopper: it
binds on the H200 (0.89 x 4.8 TB/s = 32.4 GB/s per SM), not on the H100 (22.6), nor off Hopper; the fit
re-prices a capped kernel's time only where the efficiency, not the cap, sets it."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import MEMORY_STREAM_SM_BPS, load_ceilings
from mlsyscalc.calc.roofline.calibration_fit import Observation, Term, predict
from mlsyscalc.calc.roofline.memory_bound import elementwise_op
from mlsyscalc.calc.roofline.ops import predict_attention, predict_matmul

GIB = 2**30


def _rate(gpu: str) -> float:
    op = elementwise_op(GIB, 1, 1, 1, "fp32", gpu)  # 4 GiB read, 4 GiB written
    return op.bytes / op.memory_s


def test_the_cap_binds_on_the_h200_by_hand():
    assert MEMORY_STREAM_SM_BPS == 23.75e9
    assert _rate("H200") == pytest.approx(23.75e9 * 132, rel=1e-12)  # 3.135 TB/s, not 0.89 x 4.8
    assert _rate("H100-SXM") == pytest.approx(0.89 * 3.35e12, rel=1e-12)
    assert _rate("B200") == pytest.approx(0.89 * 8.0e12, rel=1e-12)  # not Hopper: no cap read there
    assert _rate("A100-80GB-SXM") == pytest.approx(0.89 * 2.039e12, rel=1e-9)


def test_gemms_and_attention_are_not_capped():
    h200 = load_ceilings("H200")
    mm = predict_matmul(1, 8192, 8192, "bf16", h200)
    assert mm.memory_s == pytest.approx(mm.bytes / (0.78 * 4.8e12), rel=1e-3)
    att = predict_attention(8, 32, 8, 1, 8192, 128, False, "bf16", h200)
    assert att.memory_s < att.bytes / (23.75e9 * 132)


def test_more_bytes_never_take_less_time_under_the_cap():
    times = [elementwise_op(n, 2, 1, 1, "bf16", "H200").predicted_s for n in (1, 10**3, 10**6, 10**8, 10**9)]
    assert times == sorted(times)


def test_the_fit_keeps_a_capped_time_and_scales_the_rest():
    """A term priced at the cap (cap_s above the efficiency's time) keeps the cap whatever the fitted
    memory efficiency, until that efficiency is low enough to be slower than the cap."""
    base = (0.74, 0.61, 0.89, 0.78, 0.32, 0.12, 0.22, 0.78, 0.49)
    obs = Observation("x", 1.0, (Term(1, "memory", 0.0, 1e-3, cap_s=1.4e-3),), base)
    params = {"matmul": 0.74, "attention": 0.61, "matmul_skinny": 0.78, "launch_s": 0.0}
    assert predict(obs, {**params, "memory": 0.89}) == pytest.approx(1.4e-3, rel=1e-12)
    assert predict(obs, {**params, "memory": 0.80}) == pytest.approx(1.4e-3, rel=1e-12)  # 1.1125 ms < cap
    assert predict(obs, {**params, "memory": 0.445}) == pytest.approx(2e-3, rel=1e-12)  # the efficiency binds


def test_the_cap_is_named_where_it_binds(run_cli):
    """The roofline's notes name the cap on the H200 (where it is below 0.89 x 4.8 TB/s), not on the H100; the
    JSON ceilings carry it on Hopper (null elsewhere)."""
    args = ("roofline", "llama2-7b", "--phase", "train", "--batch", "1", "--seq", "1024")
    h200 = run_cli.json(*args, "--gpu", "H200")["ceilings"]
    assert h200["memory_stream_cap_Bps"] == pytest.approx(23.75e9 * 132, rel=1e-12)
    assert run_cli.json(*args, "--gpu", "B200")["ceilings"]["memory_stream_cap_Bps"] is None
    for gpu, named in (("H200", True), ("H100-SXM", False)):
        code, out, _ = run_cli(*args, "--gpu", gpu)
        assert code == 0 and ("GB/s per SM" in " ".join(out.split())) is named
