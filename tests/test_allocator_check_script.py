"""scripts/allocator_check.py on the CPU with torch.cuda's counters faked: the path a GPU run takes
(build, inputs, warm-up, step) runs, and each point carries the replay of the same allocations."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from mlsyscalc.bench.cases.model import ModelCase, predicted_peak_bytes  # noqa: E402
from mlsyscalc.bench.torch_alloc import build_events, step_events  # noqa: E402
from mlsyscalc.calc.memory.caching_allocator import Alloc, simulate  # noqa: E402
from mlsyscalc.specs.lookup import builtin_configs, load_model  # noqa: E402

from .conftest import load_script  # noqa: E402
from .test_bench_model_builder import TINY  # noqa: E402

MiB = 2**20
PEAK = 400 * MiB  # what the fake max_memory_allocated reads


@pytest.fixture
def fake_cuda(monkeypatch):
    stats = {"requested_bytes.all.current": 0, "requested_bytes.all.peak": 0, "segment.all.current": 0}
    for name, value in (("synchronize", None), ("reset_peak_memory_stats", None), ("memory_snapshot", []),
                        ("memory_stats", stats), ("memory_allocated", 0), ("memory_reserved", 0),
                        ("max_memory_allocated", PEAK), ("get_device_name", "fake")):
        monkeypatch.setattr(torch.cuda, name, lambda *a, value=value, **k: value)


@pytest.mark.parametrize("phase, seq, mode", [("decode", 15, "graph"), ("train", 8, "eager")])
def test_points_carry_the_replay(fake_cuda, tmp_path, phase, seq, mode):
    """A 2-layer, 64-wide gpt2 (its config.json with the builder tests' tiny sizes)."""
    config = {k: v for k, v in builtin_configs()["gpt2"].items() if not k.startswith("_")} | TINY["gpt2"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    row = load_script("allocator_check").check(f"{tmp_path}:{phase}:1:{seq}:{mode}", device="cpu")
    assert "error" not in row
    spec, graphs = load_model(str(tmp_path)), mode == "graph"
    assert row["build"]["sim_allocated_bytes"] == simulate(build_events(spec)).allocated_bytes
    events = step_events(spec, phase, 1, seq, graphs) + [Alloc(("workspace", 0), 32 * MiB), Alloc(("workspace", 1), MiB)]
    assert row["before_step"]["sim_rounding_bytes"] == simulate(events).rounding_bytes
    assert ("inputs" in row) == (phase == "decode")
    want = predicted_peak_bytes(spec, ModelCase(phase, 1, seq, graphs), (9, 0))
    assert row["predicted_peak_bytes"] == want and row["memory_error"] == pytest.approx((want - PEAK) / PEAK)
