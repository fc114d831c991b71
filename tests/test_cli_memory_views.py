"""`mlsys memory` views beyond the parts tables: the --max answer (checked by asking again at N and N + 1),
the KV notes (replicated heads, sliding windows, MLA under TP), the training tables (activations per layer,
pipeline stages) and the notes that follow ZeRO-3 and the framework."""

from __future__ import annotations

import pytest

from .test_values_views import close, quantity, run_both, table


def test_max_batch_is_the_last_that_fits(run_cli):
    args = ("memory", "infer", "llama2-7b", "--gpu", "h100", "--context", "4096")
    data = run_cli.json(*args, "--max", "batch")
    n = data["max_batch"]
    assert data["solved_for"] == "batch" and data["max_value"] == n == data["batch"] > 1
    assert run_cli.json(*args, "--batch", str(n))["fits"] is True
    assert run_cli.json(*args, "--batch", str(n + 1))["fits"] is False
    assert f"Largest batch that fits h100 after the reserve: {n:,}." in data["notes"]
    assert data["answer"][1] == f"largest batch that fits: {n:,} (batch {n:,}, context 4,096)"
    ctx = run_cli.json("memory", "infer", "llama2-7b", "--gpu", "h100", "--batch", "8", "--max", "context")
    assert run_cli.json("memory", "infer", "llama2-7b", "--gpu", "h100", "--batch", "8", "--context",
                        str(ctx["max_context"] + 1))["fits"] is False
    assert "(beyond the model's max_position_embeddings 4,096)" in ctx["notes"]   # llama2-7b's table is 4096 long


def test_kv_notes(run_cli):
    mixtral = run_cli.json("memory", "infer", "mixtral-8x7b", "--tp", "16", "--context", "1024")
    assert "tp 16 > 8 KV heads: each rank keeps one KV head (replicated 2x)." in mixtral["notes"]
    # one KV head of 128 per rank: 32 layers x K,V x 128 x bf16 per token
    assert mixtral["kv_bytes_per_token"] == 32 * 2 * 128 * 2
    mistral = run_cli.json("memory", "infer", "mistral-7b", "--context", "1024")
    assert mistral["notes"][0].startswith("KV cache: 131,072 bytes per token on this rank (2048 elements per token per "
                                          "layer before TP); 32 layers keep a 4096-token window.")
    assert mistral["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    mla = run_cli.json("memory", "infer", "deepseek-v2", "--tp", "8", "--context", "1024")
    assert "MLA: the compressed latent is shared by all heads, so every TP rank keeps the whole KV cache." in mla["notes"]
    assert not any(n.startswith("tp 8 >") for n in mla["notes"])


def test_training_tables(run_cli):
    data, views = run_both(run_cli, "memory", "train", "llama2-7b", "--pp", "2", "--tp", "2", "--dp", "2",
                           "--zero", "3", "--gpu", "h100")
    acts = table(views, r"^activations saved per layer")
    per_layer = data["activation_bytes_per_layer"]
    assert [r["tensor"] for r in acts] == [*per_layer, "layer total (before recompute)"]
    for row in acts[:-1]:
        assert quantity(row["bytes"]) == per_layer[row["tensor"]]
        assert close(row["KiB..TiB (2^10..)"], per_layer[row["tensor"]], 4)
    assert quantity(acts[-1]["bytes"]) == pytest.approx(sum(per_layer.values()), abs=len(per_layer))
    stages = table(views, "^pipeline stages$")
    assert len(stages) == len(data["stages"]) == 2
    for row, stage in zip(stages, data["stages"]):
        assert quantity(row["stage"]) == stage["stage"] and quantity(row["layers"]) == stage["layers"] == 16
        assert quantity(row["micro-batches in flight"]) == stage["micro_batches_in_flight"]
        assert row["peak phase"] == stage["phase"] and quantity(row["total bytes"]) == stage["total_bytes"]
    assert max(s["total_bytes"] for s in data["stages"]) == data["total_bytes"]
    notes = " ".join(data["notes"])
    assert "ZeRO-3 temporaries: the gathered weights" in notes
    assert "Model states (weights + gradients + optimizer) of all parameters on one GPU: " in notes
    plain = run_cli.json("memory", "train", "llama2-7b")
    assert not any("ZeRO-3 temporaries" in n for n in plain["notes"])
    assert "pipeline stages" not in run_both(run_cli, "memory", "train", "llama2-7b")[1]


def test_train_defaults_bytes_overrides_and_the_swept_plot(run_cli, monkeypatch, tmp_path):
    params = 6_738_415_616
    data = run_cli.json("memory", "train", "llama2-7b", "--dp", "8")
    assert data["zero"] == 0 and data["optimizer_bytes"] == 12 * params   # no ZeRO unless asked: nothing sharded
    assert run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--zero", "1")["optimizer_bytes"] == 12 * params // 8
    kv = run_cli.json("memory", "infer", "llama2-7b", "--context", "1024", "--bytes", "kv=1", "--bytes", "weight=1")
    assert kv["bytes_per_element"]["kv"] == 1 and kv["kv_cache_bytes"] == 1024 * 32 * 2 * 4096
    assert kv["detail"]["weights_quantised_bytes"] * 2 == run_cli.json(
        "memory", "infer", "llama2-7b", "--context", "1024")["detail"]["weights_quantised_bytes"]
    drawn = {}
    import mlsyscalc.report.memory_plot as memory_plot

    monkeypatch.setattr(memory_plot, "plot_breakdowns", lambda path, title, option, labels, parts, usable: drawn.update(
        option=option, labels=labels, parts=parts, usable=usable, title=title))
    plotted = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--plot", str(tmp_path / "m.png"), "--sweep",
                           "zero")
    assert drawn["option"] == "zero" and drawn["labels"] == ["0", "1", "2", "3"]
    for label, parts in zip(drawn["labels"], drawn["parts"]):
        one = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--zero", label)
        assert {f"{k}_bytes": v for k, v in parts.items()} == one["breakdown"], label
    assert drawn["usable"] == plotted["usable_bytes"] and plotted["plot"] == str(tmp_path / "m.png")
    assert drawn["title"].startswith("llama2-7b: training memory per GPU on H100-SXM, dp 8 x tp 1 x pp 1")
