"""One rule per attention kind (calc.counts.attention.MASKS), priced the same in FLOPs, KV bytes and the roofline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc import FlopOptions, count_flops, load_model
from mlsyscalc.calc.counts.attention import MASKS, causal_fraction, chunk_fraction, eager_keys, keys_read
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.counts.flops import attention_layer_flops
from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model

H200 = load_ceilings("H200")


def test_chunk_fraction_by_hand():
    # 8192 queries over two 4096-token chunks: two triangles of 4096^2 / 2 in the 8192^2 square
    assert chunk_fraction(8192, 8192, 4096) == pytest.approx(0.25)
    assert chunk_fraction(100, 100, 4096) == causal_fraction(100, 100)  # one chunk: plain causal
    # 10 queries at positions 8190..8199 of C = 4096 chunks: (p mod C) over 8190..8192 then 0..7
    assert chunk_fraction(10, 8200, 4096) * 10 * 8200 == pytest.approx(
        ((4096 ** 2 - 4094 ** 2) + 8 ** 2) / 2)


@pytest.mark.parametrize("kind, size, context, read", [
    ("full_attention", None, 9000, 9001), ("sliding_attention", 4096, 9000, 4096),
    ("chunked_attention", 8192, 9000, 9000 - 8192 + 1), ("chunked_attention", 8192, 8191, 8192),
])
def test_decode_reads_the_keys_the_new_token_sees(kind, size, context, read):
    assert keys_read(kind, size, 1, context + 1) == read


def test_eager_cache_and_held_tokens():
    """transformers keeps W - 1 tokens of a window layer between steps; a step holds W."""
    assert eager_keys("sliding_attention", 1024, 0, 5000) == 1023
    assert eager_keys("sliding_attention", 1024, 1, 5000) == 1024 == MASKS["sliding_attention"].held(5000, 1024)
    assert eager_keys("full_attention", None, 1, 5000) == 5001
    assert MASKS["chunked_attention"].held(20_000, 8192) == 8192 and MASKS["chunked_attention"].held(100, 8192) == 100


def test_causal_flops_count_each_kind_by_its_mask():
    """gemma3-27b at 8192 tokens: 10 full layers keep half the rectangle, 52 window layers S W - W^2/2."""
    spec = load_model("gemma3-27b")
    per_pair = 2 * 32 * (128 + 128)
    got = count_flops(spec, FlopOptions(seq=8192, causal=True)).breakdown["attention_core"]
    window = 8192 * 1024 - 1024 ** 2 / 2
    assert got == 10 * per_pair * 8192 * 8192 // 2 + 52 * round(per_pair * window)
    assert got < count_flops(spec, FlopOptions(seq=8192)).breakdown["attention_core"] / 5


def test_llama4_roofline_prices_chunks_in_prefill_decode_and_mfu():
    spec = load_model("llama4-scout")
    skip = predict_model(spec, H200, RooflineOptions(seq=16384, tp=8))
    full = predict_model(spec, H200, RooflineOptions(seq=16384, tp=8, window="full"))
    (chunked,), (glob,) = ([r for r in skip.rows if r.pred.name == name] for name in ("attention (chunked)", "attention"))
    assert (chunked.count, glob.count) == (36, 12)
    assert chunked.pred.flops == pytest.approx(glob.pred.flops * 0.25 / 0.5)  # two 8192 chunks of 16384
    per_layer = attention_layer_flops(spec, "full_attention", 1, 16384, 16384, True)
    assert full.model_flops - skip.model_flops == pytest.approx(36 * per_layer * 0.5)
    decode = predict_model(spec, H200, RooflineOptions(phase="decode", context=20_000, tp=8))
    (row,) = [r for r in decode.rows if r.pred.name == "attention (chunked)"]
    assert "1x3617" in row.pred.shape  # keys 16384..20000 of the token's chunk


def test_llama4_kv_keeps_one_chunk_on_its_chunked_layers():
    spec = load_model("llama4-scout")
    per_token = 8 * 128 * 2 * 2  # K and V of 8 KV heads x 128, bf16
    kv = infer_memory(spec, InferOptions(context=20_000)).breakdown["kv_cache"]
    assert kv == (12 * 20_000 + 36 * 8192) * per_token


def test_gpt_oss_sinks_cost_no_flops_and_no_cache():
    spec = load_model("gpt-oss-20b")
    without = replace(spec, attention_sinks=False)
    opts = RooflineOptions(phase="decode", context=4096, batch=8)
    with_sinks, plain = predict_model(spec, H200, opts), predict_model(without, H200, opts)
    rows = [(a.pred, b.pred) for a, b in zip(with_sinks.rows, plain.rows) if a.pred.kind == "attention"]
    assert all(a.flops == b.flops and a.read_bytes - b.read_bytes == 8 * 64 * 4 for a, b in rows)
    assert with_sinks.kv_cache_bytes == plain.kv_cache_bytes
