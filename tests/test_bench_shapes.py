"""bench/shapes.py: the projection shapes come from the models' config.json, the named sweeps hold
what their names say, and `--shapes` text is parsed or refused with a message naming the part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsyscalc.bench.shapes import MATMUL_SWEEPS, PROJECTIONS, parse_shapes, pick
from mlsyscalc.errors import MlsysError

MODELS = Path(__file__).resolve().parents[1] / "model_specs" / "models"


@pytest.mark.parametrize("model", ["llama2-7b", "llama3-70b"])
def test_projections_are_the_linear_weights_of_the_config(model):
    c = json.loads((MODELS / f"{model}.json").read_text())
    hidden, inter, heads = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    kv_heads, head_dim = c.get("num_key_value_heads", heads), hidden // heads
    assert PROJECTIONS[f"{model}.qkv"] == ((heads + 2 * kv_heads) * head_dim, hidden)   # (out, in)
    assert PROJECTIONS[f"{model}.o"] == (hidden, heads * head_dim)
    assert PROJECTIONS[f"{model}.gate_up"] == (2 * inter, hidden)
    assert PROJECTIONS[f"{model}.down"] == (hidden, inter)


def test_named_sweeps():
    pairs = list(PROJECTIONS.values())
    assert MATMUL_SWEEPS["squares"] == [(1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3]
    assert MATMUL_SWEEPS["llm"] == [(m, n, k) for m in (2048, 8192, 16384) for n, k in pairs]
    assert len(MATMUL_SWEEPS["llm"]) == 24 and MATMUL_SWEEPS["llm"][0] == (2048, 12288, 4096)
    assert MATMUL_SWEEPS["prefill"] == MATMUL_SWEEPS["squares"] + MATMUL_SWEEPS["llm"]
    assert MATMUL_SWEEPS["decode"] == [(m, n, k) for m in (1, 4, 16) for n, k in pairs]
    assert MATMUL_SWEEPS["skinny"] == [(m, n, k) for m in (1, 16) for n, k in pairs]
    assert MATMUL_SWEEPS["splitk_squares"] == [(1024,) * 3, (2048,) * 3, (4096,) * 3]
    assert MATMUL_SWEEPS["int8_squares"] == [(4096,) * 3, (6144,) * 3, (8192,) * 3]
    assert MATMUL_SWEEPS["quant_prefill"] == [(m, n, k) for m in (256, 2048, 8192) for n, k in pairs]
    assert MATMUL_SWEEPS["interpret"] == [(37, 45, 53), (64, 48, 40)]
    assert MATMUL_SWEEPS["smoke"] == [(1000, 1000, 1000), (4096, 4096, 4096), (2048, 12288, 4096)]


def test_parse_and_pick():
    assert parse_shapes("4096x4096x4096, 1X4096x11008") == [(4096, 4096, 4096), (1, 4096, 11008)]
    assert parse_shapes("1x1x1") == [(1, 1, 1)]
    for bad in ("4096x4096", "0x8x8", "8x-1x8", "8x8x8x8", "axbxc", "8x8x8,"):
        part = bad.split(",")[-1] if bad.endswith(",") else bad
        with pytest.raises(MlsysError, match=f"^shape {part.strip()!r} is not MxNxK with positive integers"):
            parse_shapes(bad)
    assert pick("8x8x8", "squares", "llm") == [(8, 8, 8)]            # --shapes wins over --sweep
    assert pick(None, "squares", "llm") == MATMUL_SWEEPS["squares"]
    assert pick(None, None, "decode") == MATMUL_SWEEPS["decode"]
    picked = pick(None, None, "squares")
    picked.append((1, 1, 1))
    assert MATMUL_SWEEPS["squares"][-1] == (8192,) * 3               # a copy: the table is not changed
    with pytest.raises(MlsysError, match=r"^unknown sweep 'big' \(choose from a, b\)$"):
        pick(None, "big", "a", {"b": [], "a": []})
