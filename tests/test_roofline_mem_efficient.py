"""Absorbed MLA decode under `--impl torch`: SDPA's memory-efficient (CUTLASS) kernel, priced by its grid
(calc.roofline.mem_efficient). Expected values are written out by hand from the kernel's tiling and the
two measured per-SM rates, not taken from the code under test."""

from __future__ import annotations

import pytest

from mlsyscalc.bench.cases.model import reduced_spec
from mlsyscalc.calc.roofline.calibration import KERNEL_GAP_S, datasheet_ceilings
from mlsyscalc.calc.roofline.mem_efficient import mem_efficient_attention, runs_mem_efficient
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.specs.lookup import load_model

PER_SM = 989.5e12 / 132  # H100/H200 datasheet bf16 dense peak, one SM's share
CTA_2049 = 32 * 2176 * 2 * (576 + 512)  # 32 query rows x 2049 keys padded to 17 x 128, Q/K 576 + V 512 wide


def test_sdpa_backend_rule_by_head_dim():
    """flash: equal Q/K/V widths <= 256; cuDNN on sm90: both widths <= 256; else memory-efficient."""
    assert runs_mem_efficient(576, 512)  # absorbed MLA: latent 512 + rotary 64
    assert runs_mem_efficient(320, 256)  # a 256-wide latent: Q/K 320 still above 256
    assert not runs_mem_efficient(192, 128)  # MLA prefill/train per head: cuDNN (its profiles)
    assert not runs_mem_efficient(256, 256)  # gemma2


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200"])
def test_few_ctas_cost_one_ctas_walk(gpu):
    """deepseek-v3 B1 and B16: 4 and 64 CTAs of 32 of the 128 query rows, one an SM: the same time, one
    CTA's FLOPs at 0.100 of an SM's datasheet share, plus the 2 us fixed cost (not HBM: same on both cards)."""
    ceil = datasheet_ceilings(gpu)
    expected = CTA_2049 / (0.100 * PER_SM) + 2e-6
    for batch, ctas in ((1, 4), (16, 64)):
        op = mem_efficient_attention(batch, 128, 2049, 576, 512, "bf16", ceil)
        assert op.tiling is not None and op.tiling.units == ctas and op.tiling.block_m == 32
        assert op.predicted_s == pytest.approx(expected, rel=1e-9)
        assert op.flops == 2 * batch * 128 * 2049 * (576 + 512)  # useful FLOPs, no padding
    assert expected == pytest.approx(204.1e-6, rel=1e-3)  # the H200 rows' 204.0 us a call


def test_more_ctas_than_sms_share_an_sm():
    """B64: 256 CTAs on 132 SMs, 2 on the busiest; together they run at 0.150 of the SM's share:
    2 x CTA / 0.150 = 1.333 x one CTA alone at 0.100."""
    op = mem_efficient_attention(64, 128, 2049, 576, 512, "bf16", datasheet_ceilings("H100-SXM"))
    assert op.tiling is not None and op.tiling.units == 256 and op.tiling.waves == 2
    assert op.compute_s == pytest.approx(2 * CTA_2049 / (0.150 * PER_SM), rel=1e-9)


def test_fewer_heads_than_rows_pad_to_one_cta():
    """16 query heads (deepseek-v2-lite) fill half a 32-row CTA: B1 costs the same CTA walk."""
    op = mem_efficient_attention(1, 16, 2049, 576, 512, "bf16", datasheet_ceilings("H100-SXM"))
    assert op.tiling is not None and op.tiling.units == 1
    assert op.compute_s == pytest.approx(CTA_2049 / (0.100 * PER_SM), rel=1e-9)


def _attention_rows(impl: str, batch: int):
    spec = reduced_spec(load_model("deepseek-v3"), 4)
    opts = RooflineOptions(phase="decode", batch=batch, context=2048, impl=impl, check_fit=False)
    roof = predict_model(spec, datasheet_ceilings("H100-SXM"), opts)
    return [r for r in roof.rows if r.pred.kind == "attention"]


def test_torch_impl_prices_the_decode_attention_as_the_cutlass_kernel():
    """--impl torch: 4 layers x one call at the hand value; --impl fused keeps the flash-decoding kernel."""
    rows = _attention_rows("torch", 1)
    assert sum(r.count for r in rows) == 4
    assert all(r.pred.compute_class == "attention_mem_efficient" for r in rows)
    assert sum(r.total_s for r in rows) == pytest.approx(4 * (CTA_2049 / (0.100 * PER_SM) + 2e-6 + KERNEL_GAP_S),
                                                             rel=1e-9)
    fused = _attention_rows("fused", 1)
    assert all(r.pred.compute_class == "attention" for r in fused)
    assert sum(r.total_s for r in fused) < sum(r.total_s for r in rows) / 10
