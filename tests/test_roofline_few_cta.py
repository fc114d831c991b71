"""A skinny plain GEMM with few CTAs streams at most 59 GB/s a CTA (calc.roofline.ops.few_cta_stream),
against hand arithmetic and the profiled kernel times quoted in docs/roofline.md ("Few-CTA GEMMs")."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.ops import predict_matmul

H100 = load_ceilings("H100-SXM")
H200 = load_ceilings("H200")


def test_phi2_projection_priced_by_its_40_ctas():
    """8 x 2560 x 2560 bf16: 2560 / 64 = 40 CTAs, not split (K < 4096); bytes 8*2560*2 + 2560*2560*2
    + 8*2560*2 = 13,189,120; 13,189,120 / (40 x 59e9) = 5.589 us, above the 0.78 x 3.35 TB/s stream
    (5.048 us); + 2 us fixed cost. Profiled on an H100: 7.94 us a kernel (phi-2 decode B8)."""
    p = predict_matmul(8, 2560, 2560, gpu=H100)
    assert p.bytes == 13_189_120
    assert p.memory_s == pytest.approx(13_189_120 / (40 * 59e9))
    assert p.predicted_s == pytest.approx(13_189_120 / (40 * 59e9) + 2e-6)
    assert p.efficiency_class == "matmul_few_cta" and p.bound == "memory"
    assert abs(7.94e-6 / p.predicted_s - 1) < 0.06
    # the cap is the kernel's, not the HBM's: the same time on an H200 (4.8 TB/s)
    assert predict_matmul(8, 2560, 2560, gpu=H200).predicted_s == pytest.approx(p.predicted_s)


def test_many_ctas_or_a_split_keep_the_hbm_stream():
    """4096 x 4096 at one row: cuBLAS splits K (64 tiles, K >= 4096), 64 x 4 CTAs fill the 132 SMs:
    33.6 MB / (0.78 x 3.35 TB/s) as before. 1 x 11008 x 4096: 172 CTAs, capped at 132 x 59 GB/s =
    7.8 TB/s, far above the HBM: the stream binds. gpt2's 768 x 768: 12 CTAs stream 1.18 MB in 1.67 us,
    below the 2.15 us GEMM floor, which still prices it."""
    for m, n, k in ((1, 4096, 4096), (1, 11008, 4096)):
        p = predict_matmul(m, n, k, gpu=H100)
        assert p.efficiency_class == "matmul_skinny"
        assert p.memory_s == pytest.approx(p.bytes / (0.78 * 3.35e12))
    small = predict_matmul(2, 768, 768, gpu=H100)
    assert small.memory_s == pytest.approx(small.bytes / (12 * 59e9))
    assert small.predicted_s == pytest.approx(2.15e-6 + 2e-6) and small.bound == "overhead"


def test_prefill_rows_and_weight_only_gemms_are_not_capped():
    """More than 64 rows (prefill, a router over 2048 tokens) or weight-only int4 (the project's GEMV):
    no CTA cap."""
    assert predict_matmul(2048, 8, 4096, gpu=H100).efficiency_class != "matmul_few_cta"
    assert predict_matmul(1, 2560, 2560, gpu=H100, weight_dtype="int4").efficiency_class != "matmul_few_cta"


def test_no_cap_where_it_was_not_measured():
    """The per-CTA rate is the Hopper nvjet kernels' (H100 and H200 rows); an A100's GEMM keeps the
    plain stream: 13,189,120 bytes / (0.78 x 2.039 TB/s)."""
    a100 = load_ceilings("A100-80GB-SXM")
    p = predict_matmul(8, 2560, 2560, gpu=a100)
    assert p.efficiency_class == "matmul_skinny"
    assert p.memory_s == pytest.approx(13_189_120 / (0.78 * a100.gpu.memory_bandwidth_Bps))
