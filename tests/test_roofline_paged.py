"""The kernels serving engines run, as the roofline prices them with `kv_layout="paged"` and
`all_reduce="custom"` (calc.roofline.paged, calc.comm.tp_rows). Oracles: the cited sources' own
numbers (FlashAttention-2's split rule and its example, SGLang's measured all-reduce rows) and hand
arithmetic on the contiguous kernel's prediction."""

from __future__ import annotations

import pytest


def test_flash_decoding_split_rule_matches_its_source():
    """flash_api.cpp's own example: batch x heads = 48 on 108 SMs takes 2 splits (efficiency 0.89,
    3 splits 0.67); 87 or more CTAs (80% of 108) take 1; splits never exceed the KV blocks."""
    from mlsyscalc.calc.roofline.paged import decode_splits

    assert decode_splits(48, 108, 64) == 2
    assert decode_splits(87, 108, 64) == 1 and decode_splits(86, 108, 64) > 1
    assert decode_splits(1, 132, 3) == 3


def test_paged_decode_adds_the_combine_kernel_and_the_cta_cap():
    """Llama-3-8B decode at batch 1, context 4096 on an H100: 8 KV heads x 1 block = 8 CTAs split by the
    rule; the split adds one fixed cost and gap; at batch 64 (512 CTAs) nothing splits and the time is
    the contiguous kernel's."""
    from mlsyscalc.calc.roofline.ops import predict_attention, resolve_ceilings
    from mlsyscalc.calc.roofline.paged import combine_s, decode_splits, paged_attention

    ceil = resolve_ceilings("H100-SXM")
    one = predict_attention(1, 32, 8, 1, 4096, 128, False, "bf16", ceil)
    paged = paged_attention(one, ceil, 1, 8, 1, 4096, 4)
    splits = decode_splits(8, ceil.sm_count, 32)
    assert paged.tiling.split == splits > 1
    assert paged.overhead_s == pytest.approx(one.overhead_s + combine_s(ceil, splits), rel=1e-12)
    assert paged.memory_s == pytest.approx(max(one.memory_s, one.bytes / (8 * splits * 59e9)), rel=1e-12)
    many = predict_attention(64, 32, 8, 1, 4096, 128, False, "bf16", ceil)
    assert paged_attention(many, ceil, 64, 8, 1, 4096, 4).predicted_s == pytest.approx(many.predicted_s, rel=1e-12)


def test_paged_prefill_ratio_by_architecture():
    """Prefill attention on the paged kernel computes at 0.45 of the flash kernel's rate on Ampere (the
    Vidur A100 profiles) and at the same rate on Hopper."""
    from mlsyscalc.calc.roofline.ops import predict_attention, resolve_ceilings
    from mlsyscalc.calc.roofline.paged import paged_attention

    for gpu, ratio in (("A100-80GB-SXM", 0.45), ("H100-SXM", 1.0)):
        ceil = resolve_ceilings(gpu)
        flash = predict_attention(1, 32, 8, 2048, 4096, 128, True, "bf16", ceil)
        paged = paged_attention(flash, ceil, 1, 8, 2048, 4096, 4)
        assert paged.compute_s == pytest.approx(flash.compute_s / ratio, rel=1e-12), gpu


def test_custom_all_reduce_reads_the_measured_rows():
    """SGLang PR #2904's H100 rows: 32 KiB on TP 8 is 7.8 us; halfway between 256 and 512 KiB on TP 2,
    (7.9 + 12.5) / 2 us; past 1 MiB or off Hopper there is no row (NCCL prices it)."""
    from mlsyscalc.calc.comm.tp_rows import custom_all_reduce_s
    from mlsyscalc.specs.gpu import load_gpu

    h100, a100 = load_gpu("H100-SXM"), load_gpu("A100-80GB-SXM")
    assert custom_all_reduce_s(32768, h100, 8) == pytest.approx(7.8e-6, rel=1e-12)
    assert custom_all_reduce_s(393216, h100, 2) == pytest.approx((7.9 + 12.5) / 2 * 1e-6, rel=1e-12)
    assert custom_all_reduce_s(100, h100, 4) == pytest.approx(4.8e-6, rel=1e-12)
    assert custom_all_reduce_s(2**21, h100, 8) is None and custom_all_reduce_s(4096, a100, 8) is None


def test_serving_tp_decode_uses_the_custom_all_reduce():
    """Llama-2-7B TP 8 decode at batch 1 on an H100: 65 all-reduces of 8 KiB at the custom kernel's
    interpolated 6.0 us instead of NCCL's tree (20.4 us); `mlsys roofline` keeps NCCL."""
    from mlsyscalc.calc.roofline.model import predict_model
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("llama2-7b"), resolve_ceilings("H100-SXM")
    base = RooflineOptions(phase="decode", context=512, tp=8)
    nccl = predict_model(spec, ceil, base)
    custom = predict_model(spec, ceil, RooflineOptions(phase="decode", context=512, tp=8, all_reduce="custom"))
    ar = [r for r in custom.comm if r.collective == "all-reduce"]
    want = (5.7 + (7.8 - 5.7) * (8192 - 4096) / (32768 - 4096)) * 1e-6
    assert all(r.time_s == pytest.approx(want, rel=1e-9) for r in ar) and sum(r.count for r in ar) == 65
    assert all(r.time_s > 15e-6 for r in nccl.comm if r.collective == "all-reduce")
