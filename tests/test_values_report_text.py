"""`mlsys report`'s page as a reader reads it: every sentence's counts come from the option it names,
every GiB is 2^30 bytes, every column is the key its header names.

One page is built with options that differ from each other and from their defaults (seq 1,536,
context 3,072, micro-batch 2, global batch 64, 4 GPUs), so a sentence that takes its count from the
wrong option shows the wrong number. GiB figures are checked against hand arithmetic from
config.json (llama2-7b: 6,738,415,616 parameters; K and V of 32 layers x 4,096 wide), where a GB
computed for a GiB is 7.4% off; table columns against the JSON of the command the page quotes.
"""

from __future__ import annotations

import re

import pytest

from .test_values_views import close, quantity

PARAMS = 6_738_415_616  # llama2-7b, `mlsys params` (and transformers)
KV_PER_TOKEN = 2 * 32 * 4096 * 2  # K and V, 32 layers, 4,096 wide, bf16
OPTIONS = ("--seq", "1536", "--context", "3072", "--micro-batch", "2", "--global-batch", "64", "--gpus", "4")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    out = tmp_path_factory.mktemp("report")
    result = CliRunner().invoke(cli, ["report", "llama2-7b", "-o", str(out), "--no-figures", *OPTIONS, "--json"])
    assert result.exit_code == 0, result.stderr
    return (out / "README.md").read_text()


def _section(page: str, title: str) -> str:
    return page.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table(text: str, header_start: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header_start}"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def test_each_sentence_counts_what_its_option_says(page):
    head = page.split("\n## ", 1)[0]
    assert head.startswith("# llama2-7b on 4 x H100-SXM: what it costs")
    assert ("Assumptions: training 1,536 tokens per sequence, micro-batch 2, global batch 64; inference bf16, "
            "decode at 3,072 tokens of context.") in head
    model = _section(page, "Model")
    assert "FLOPs of one sequence of 1,536 tokens" in model
    assert "mlsys flops llama2-7b --batch 1 --seq 1536 --json" in model
    memory = _section(page, "Training: memory per GPU")
    assert "micro-batch 2 x 1,536 tokens" in memory and "dp 4 x tp 1 x pp 1 on H100-SXM" in memory
    step = _section(page, "Training: step time and MFU")
    assert "fastest layouts of 4 GPUs that fit, global batch 64 x 1,536 tokens" in step
    assert "training step of micro-batch 2 x 1,536 tokens" in step
    inference = _section(page, "Inference")
    assert "Largest batch at 3,072 tokens of context" in inference
    assert "decode at 3,072 tokens of context" in inference and "Prefill of 1,536-token prompts" in inference
    serving = _section(page, "Serving")
    assert "1,024-token prompts, 256 output tokens" in serving  # ReportOptions' serving workload
    assert "--prompt-len 1024 --output-len 256" in serving


def test_weights_and_kv_cache_in_gib_by_hand(page):
    inference = _section(page, "Inference")
    by_tp = {r["tp"]: r for r in _table(inference, "tp |")}
    assert by_tp["1"]["weights per GPU (GiB)"] == "12.6"  # 2 x 6,738,415,616 B / 2^30 = 12.55 (13.5 in GB)
    assert close(by_tp["1"]["weights per GPU (GiB)"], PARAMS * 2 / 2**30)
    by_context = {r["context (tokens)"]: r for r in _table(inference, "context (tokens)")}
    for tokens in (1024, 4096, 16384, 65536):
        shown = by_context[f"{tokens:,}"]["KV cache per sequence (GiB)"]
        assert quantity(shown) == pytest.approx(tokens * KV_PER_TOKEN / 2**30, rel=5e-3), tokens  # tp 1
    assert [by_context[f"{n:,}"]["KV cache per sequence (GiB)"] for n in (1024, 4096, 16384)] == ["0.5", "2", "8"]
    by_dtype = {r["weights dtype"]: r for r in _table(inference, "weights dtype")}
    assert by_dtype["int8"]["weights per GPU (GiB)"] == by_dtype["fp8"]["weights per GPU (GiB)"]
    assert quantity(by_dtype["bf16"]["KV cache per sequence (GiB)"]) == pytest.approx(3072 * KV_PER_TOKEN / 2**30)


def test_training_memory_cells_are_the_quoted_commands_in_gib(page, run_cli):
    memory = _section(page, "Training: memory per GPU")
    rows = {r["ZeRO stage"]: r for r in _table(memory, "ZeRO stage")}
    for zero in (0, 3):
        for recompute in ("none", "full"):
            data = run_cli.json("memory", "train", "llama2-7b", "--batch", "2", "--seq", "1536", "--dp", "4", "--tp", "1",
                                "--pp", "1", "--gpu", "H100-SXM", "--zero", str(zero), "--recompute", recompute)
            cell = rows[f"ZeRO-{zero}"][f"recompute {recompute}"]
            number, verdict = cell.split(" (")
            assert close(number, data["total_bytes"] / 2**30), (zero, recompute, cell)
            assert verdict == ("fits)" if data["fits"] else "no)")
    usable = re.search(r"\(([\d.]+) GiB usable after the reserve\)", memory).group(1)
    assert close(usable, data["usable_bytes"] / 2**30)


def test_serving_columns_are_the_keys_they_name(page, run_cli):
    serving = _section(page, "Serving")
    rows = _table(serving, "rate (requests/s)")
    args = ("serve", "llama2-7b", "--gpu", "H100-SXM", "--prompt-len", "1024", "--output-len", "256", "--requests",
            "200", "--slo", "ttft_p99=0.5,tpot_p99=0.05")
    best = run_cli.json(*args, "--max-rate")["max_rate_requests_per_s"]  # the rates straddle the SLO's capacity
    assert [float(r["rate (requests/s)"]) for r in rows] == [float(f"{f * best:.3g}") for f in (0.25, 0.5, 0.75, 1, 1.25)]
    assert f"{best:.4g} requests/s" in serving
    for row in rows[::2]:
        data = run_cli.json(*args, "--rate", row["rate (requests/s)"])
        for column, key in (("TTFT p50", "ttft_p50_s"), ("TTFT p99", "ttft_p99_s"), ("TPOT p50", "tpot_p50_s"),
                            ("TPOT p99", "tpot_p99_s"), ("e2e p50", "e2e_p50_s"), ("e2e p99", "e2e_p99_s")):
            assert close(row[column], data[key] * 1e3), (row["rate (requests/s)"], column)  # in ms
        assert close(row["requests/s"], data["throughput_requests_per_s"], 4)
        assert close(row["goodput (requests/s)"], data["goodput_requests_per_s"], 4)
        assert quantity(row["tokens/s"]) == pytest.approx(data["throughput_tokens_per_s"], abs=0.5)


def test_parameter_and_flop_tables_by_hand(page):
    model = _section(page, "Model")
    params = {r["parameters"]: r for r in _table(model, "parameters")}
    assert params["**total**"]["count"] == f"{PARAMS:,}"
    assert params["embeddings"]["count"] == f"{32000 * 4096:,}" and params["embeddings"]["share"] == "1.9%"
    flops = {r["FLOPs"]: r for r in _table(model, "FLOPs |")}
    # forward of 1,536 tokens: 2 x 1,536 x (matmul params) + attention scores and values over 1,536 x 1,536
    matmul = PARAMS - 32000 * 4096 - 266_240  # no embedding gather, no norms
    core = 2 * 1536 * 1536 * 32 * (128 + 128) * 32
    forward = 2 * 1536 * matmul + core
    assert close(flops["**forward**"]["count"], forward)
    assert close(flops["backward"]["count"], 2 * forward) and close(flops["training step (3 x forward)"]["count"],
                                                                    3 * forward)
    assert close(flops["attention_core"]["count"], core)
    assert re.search(r"\(([\d.]+) GFLOP per token forward\)", model).group(1) == f"{forward / 1536 / 1e9:.3g}"
