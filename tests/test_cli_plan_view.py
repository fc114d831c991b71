"""`mlsys plan`'s table beyond the layout columns: the split cell, etp, the cost and run columns a price and
`--train-tokens` add (each recomputed from the candidate's step time), and the notes under the table."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlsyscalc.cli.plan import _folded_note, _split

from .test_values_views import close, quantity, run_both

SPLIT_KEYS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
              "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def _lay(first=None, last=None, emb=False, loss=False):
    return dict(zip(SPLIT_KEYS, (first, last, emb, loss)))


def test_split_cell():
    assert _split(_lay()) == "even"
    assert _split(_lay(first=3)) == "first=3" and _split(_lay(last=5)) == "last=5"
    assert _split(_lay(first=0, last=2, emb=True, loss=True)) == "first=0+last=2+emb+loss"
    assert _split(_lay(loss=True)) == "loss" and _split(_lay(emb=True)) == "emb"


def test_folded_note():
    folded = SimpleNamespace(options=SimpleNamespace(all_variants=False), variants=(3, 1200))
    assert _folded_note(folded) == ("one row per tp, pp, dp, cp, ep and micro-batch, the fastest of its variants (vp, "
                                    "recompute, ZeRO, etp, split) that fit: #1 3, #2 1,200; --all-variants shows them all")
    none = SimpleNamespace(options=SimpleNamespace(all_variants=False), variants=())
    assert _folded_note(none).endswith("that fit: none; --all-variants shows them all")
    every = SimpleNamespace(options=SimpleNamespace(all_variants=True), variants=(3,))
    assert _folded_note(every).startswith("every fitting layout is a row (--all-variants)")


def test_plan_cost_and_run_columns(run_cli):
    data, views = run_both(run_cli, "plan", "llama2-7b", "--gpus", "8", "--global-batch", "16", "--top", "3",
                           "--price-per-gpu-hour", "2.5", "--train-tokens", "100G")
    title, rows = next((t, r) for t, r in views.items() if "layouts timed" in t)
    assert list(rows[0])[-6:] == ["step s", "MFU", "memory", "cost/step", "run days", "cost/run"]
    seq = int(title.split("seq ")[1].split(",")[0])
    for row, c in zip(rows, data["candidates"]):
        step = c["step_time_s"]
        assert c["cost"]["cost_per_step"] == pytest.approx(2.5 * 8 * step / 3600)
        assert close(row["cost/step"], c["cost"]["cost_per_step"], 4)
        assert close(row["run days"], c["run"]["run_wall_s"] / 86400, 4)
        assert close(row["cost/run"], c["run"]["cost_per_run"], 4)
        assert c["run"]["cost_per_run"] == pytest.approx(2.5 * c["run"]["run_gpu_hours"])
        assert quantity(row["etp"]) == c["layout"]["etp"] and row["split"] == _split(c["layout"])
        assert c["run"]["run_steps"] == pytest.approx(100e9 / (16 * seq))
    notes = data["notes"]
    assert notes[0] == f"why: {data['why']}" and notes[1].startswith("searched in ") and notes[1].endswith(" s")
    assert notes[2].startswith("one row per tp, pp, dp, cp, ep and micro-batch")
    plain = run_cli.json("plan", "llama2-7b", "--gpus", "8", "--global-batch", "16", "--top", "2")
    assert "cost" not in plain["candidates"][0] and "run" not in plain["candidates"][0]


def test_plan_price_alone_adds_only_the_step_cost(run_cli):
    data, views = run_both(run_cli, "plan", "llama2-7b", "--gpus", "8", "--global-batch", "16", "--top", "2",
                           "--price-per-gpu-hour", "2")
    rows = next(r for t, r in views.items() if "layouts timed" in t)
    assert list(rows[0])[-4:] == ["step s", "MFU", "memory", "cost/step"]
    assert "run" not in data["candidates"][0]
    tokens_only = run_both(run_cli, "plan", "llama2-7b", "--gpus", "8", "--global-batch", "16", "--top", "2",
                           "--train-tokens", "1T")[1]
    rows = next(r for t, r in tokens_only.items() if "layouts timed" in t)
    assert list(rows[0])[-4:] == ["step s", "MFU", "memory", "run days"]
