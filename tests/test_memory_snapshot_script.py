"""scripts/memory_snapshot.py's replay of an allocator trace (the GPU part needs CUDA; this is the arithmetic)."""

from __future__ import annotations

from .conftest import load_script

OURS = [{"filename": "/usr/lib/torch/nn/functional.py", "line": 3, "name": "linear"},
        {"filename": "/w/mlsyscalc/bench/_torch_decoder.py", "line": 96, "name": "forward"}]
THEIRS = [{"filename": "/usr/lib/torch/autograd/graph.py", "line": 7, "name": "_engine_run_backward"}]


def test_replay_finds_the_peak_and_what_is_alive():
    ms = load_script("memory_snapshot")
    events = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": OURS},
        {"action": "alloc", "addr": 2, "size": 50, "frames": THEIRS},
        {"action": "free_requested", "addr": 1, "size": 100},
        {"action": "free_completed", "addr": 1, "size": 100},  # counted once
        {"action": "alloc", "addr": 3, "size": 70, "frames": OURS},
        {"action": "alloc", "addr": 4, "size": 40, "frames": OURS},  # 10 + 50 + 70 + 40 = 170: the peak
        {"action": "free_requested", "addr": 99, "size": 10},  # allocated before the trace began
        {"action": "segment_alloc", "addr": 0, "size": 1 << 30},  # reserved, not allocated
    ]
    peak, alive = ms.replay(events, baseline=10)
    assert peak == 170 and sorted(alive) == [2, 3, 4]
    top = ms.groups(alive)
    assert top[0] == {"bytes": 110, "count": 2, "frame": "_torch_decoder.py:96 forward", "below": "functional.py:3 linear"}
    assert top[1]["frame"] == "(no mlsyscalc/scripts frame)" and top[1]["bytes"] == 50
