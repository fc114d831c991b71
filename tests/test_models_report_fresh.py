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


def test_rows_built_with_overrides_are_labelled_as_variants():
    """A row measured with --set overrides is not the named model: its label numbers the variant and the note
    under the table lists the overrides; the same overrides share a label."""
    from mlsyscalc.report.models_report import rows_table

    def row(model, overrides, batch):
        return Row("model.decode", "graph", f"B{batch}", "bf16", variant=f"{model} {batch} {overrides}",
                   median_ms=1.0, predicted_ms=1.0, prediction_error=0.0,
                   extra={"model": model, "phase": "decode", "batch": batch, "overrides": overrides})

    small = ["hidden_size=2048", "num_attention_heads=16"]
    rows = [row("deepseek-v3", [], 1), row("deepseek-v3", small, 1), row("deepseek-v3", small, 8),
            row("deepseek-v3", ["vocab_size=1000"], 1)]
    text = "\n".join(rows_table(rows, {"rows": []}))
    assert text.count("| deepseek-v3 #1 |") == 2 and text.count("| deepseek-v3 #2 |") == 1
    assert text.count("| deepseek-v3 |") == 1
    assert "- deepseek-v3 #1: `deepseek-v3` with `--set hidden_size=2048 --set num_attention_heads=16`" in text
    assert "- deepseek-v3 #2: `deepseek-v3` with `--set vocab_size=1000`" in text
