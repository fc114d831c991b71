"""models_report --fresh: the goals table over the later rows only counts those rows."""

from __future__ import annotations

from pathlib import Path

from mlsyscalc.bench.rows import Row
from mlsyscalc.report.models_report import fresh_goals


def _fit(rows):
    return {"rows": [{"key": k, "phase": ph, "uncalibrated_error": e, "error": e, "held_out": held}
                     for k, ph, e, held in rows]}


def test_fresh_goals_count_only_the_fresh_rows():
    measured = [Row("model.train", "eager", "s", "bf16", variant=v, extra={"memory_error": m})
                for v, m in (("a", 0.01), ("b", 0.10), ("c", -0.02))]
    a, b, c = (r.key for r in measured)
    rows = [(a, "train", 0.05, True), (b, "train", 0.30, False), (c, "prefill", -0.02, True)]
    fit, fused = _fit(rows), _fit([(k, ph, e + 0.2, h) for k, ph, e, h in rows])
    text = "\n".join(fresh_goals({a, c}, [Path("new.jsonl")], fit, fused, [], measured))
    assert "rows of new.jsonl only" in text
    assert "| uncalibrated train within +-15% (--impl torch) | 1/1 | +5.0% |" in text
    assert "| uncalibrated prefill within +-15% (--impl torch) | 1/1 | +2.0% |" in text
    assert "| calibrated, held-out models, within +-5% | 2/2 | +3.5% |" in text
    assert "| peak memory within 3% of max_memory_allocated | 2/2 | +1.5% |" in text
    assert fresh_goals(set(), [], fit, fused, [], measured) == []
