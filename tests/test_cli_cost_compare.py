"""Cost rows of train and serve (`--price-per-gpu-hour`, `--train-tokens`) and the `mlsys compare` table:
each figure recomputed here from the step time, GPU count and price the same JSON reports."""

from __future__ import annotations

import pytest

from .test_values_views import close, quantity, run_both, table


def test_train_cost_and_run_rows_by_hand(run_cli):
    data, views = run_both(run_cli, "train", "llama2-7b", "--gpus", "8", "--price-per-gpu-hour", "2", "--train-tokens",
                           "1T")
    step, gpus, tokens = data["step_time_s"], data["gpus"], data["global_batch"] * data["seq"]
    assert gpus == 8 and tokens == data["global_batch"] * 2048
    per_step = 2.0 * gpus * step / 3600
    cost, run = data["cost"], data["run"]
    assert cost["cost_per_step"] == pytest.approx(per_step)
    assert cost["cost_per_million_tokens"] == pytest.approx(per_step / tokens * 1e6)
    assert cost["gpu_hours_per_step"] == pytest.approx(gpus * step / 3600)
    assert run["run_steps"] == pytest.approx(1e12 / tokens)
    assert run["run_wall_s"] == pytest.approx(1e12 / tokens * step)
    assert run["run_gpu_hours"] == pytest.approx(1e12 / tokens * step * gpus / 3600)
    assert run["cost_per_run"] == pytest.approx(2.0 * run["run_gpu_hours"])
    rows = {r[""]: r["value"] for r in table(views, r"^cost \(price units\)$")}
    assert list(rows) == ["price per GPU-hour", "cost per step", "cost per 1M training tokens", "run tokens", "run steps",
                          "run days", "run GPU-hours", "cost per run"]
    assert quantity(rows["price per GPU-hour"]) == 2.0
    assert close(rows["cost per step"], per_step, 4) and close(rows["cost per 1M training tokens"],
                                                               cost["cost_per_million_tokens"], 4)
    assert close(rows["run tokens"], 1e12, 4) and close(rows["run steps"], run["run_steps"], 4)
    assert close(rows["run days"], run["run_wall_s"] / 86400, 4)
    assert close(rows["run GPU-hours"], run["run_gpu_hours"], 4) and close(rows["cost per run"], run["cost_per_run"], 4)


def test_train_run_without_price_and_no_cost_without_either(run_cli):
    data, views = run_both(run_cli, "train", "llama2-7b", "--gpus", "8", "--train-tokens", "2T")
    assert "cost" not in data and "cost_per_run" not in data["run"]
    rows = {r[""]: r["value"] for r in table(views, "^run$")}
    assert list(rows) == ["run tokens", "run steps", "run days", "run GPU-hours"]
    plain, views = run_both(run_cli, "train", "llama2-7b", "--gpus", "8")
    assert "cost" not in plain and "run" not in plain and not [t for t in views if t in ("run", "cost (price units)")]


def test_serve_cost_by_hand(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", "--requests", "30", "--rate", "5", "--tp", "2",
                           "--price-per-gpu-hour", "3")
    cost = data["cost"]
    out_tps, in_tps = data["throughput_tokens_per_s"], data["input_tokens_per_s"]
    assert cost["cost_per_hour"] == pytest.approx(3.0 * 2)
    assert cost["cost_per_million_output_tokens"] == pytest.approx(6.0 / (out_tps * 3600) * 1e6)
    assert cost["cost_per_million_tokens"] == pytest.approx(6.0 / ((out_tps + in_tps) * 3600) * 1e6)
    rows = {r[""]: r["value"] for r in table(views, r"^cost \(price units\)$")}
    assert quantity(rows["price per GPU-hour"]) == 3 and quantity(rows["GPUs"]) == 2
    assert close(rows["cost per hour"], 6.0, 4)
    assert close(rows["cost per 1M output tokens"], cost["cost_per_million_output_tokens"], 4)
    assert close(rows["cost per 1M tokens (prompt + output)"], cost["cost_per_million_tokens"], 4)


def test_compare_serve_table(run_cli):
    data, views = run_both(run_cli, "compare", "llama2-7b", "--cards", "h100,a100,b200", "--task", "serve")
    rows = table(views, "^llama2-7b: serve on each card$")
    assert [r["card"] for r in rows] == ["h100", "a100", "b200"]
    first = data["cards"][0]
    for row, card in zip(rows, data["cards"]):
        assert row["gpu"] == card["gpu"]
        assert close(row["TTFT p50 s"], card["ttft_p50_s"], 4) and close(row["TPOT p50 s"], card["tpot_p50_s"], 4)
        assert close(row["out tok/s"], card["throughput_tokens_per_s"], 4)
        assert close(row["x first"], card["relative_time"], 4) and row["fits"] == ("yes" if card["fits"] else "no")
        assert card["relative_time"] == pytest.approx(card["time_s"] / first["time_s"])
    assert "memory/GPU" not in rows[0]


def test_compare_train_table_with_a_failing_card_and_prices(run_cli):
    data, views = run_both(run_cli, "compare", "llama2-7b", "--cards", "h100,b200", "--task", "train", "--gpus", "8",
                           "--price-per-gpu-hour", "h100=2,b200=5")
    rows = table(views, r"^llama2-7b: train on each card \(8 GPUs\)$")
    assert list(rows[0]) == ["card", "gpu", "step s", "tokens/s", "MFU", "x first", "memory/GPU", "fits",
                             "cost per step", "note"]
    for row, card in zip(rows, data["cards"]):
        assert close(row["step s"], card["step_time_s"], 4) and close(row["tokens/s"], card["tokens_per_s"], 4)
        assert close(row["MFU"], card["mfu"], 4)
        assert close(row["memory/GPU"], card["memory_bytes_per_gpu"], 4)
        assert close(row["cost per step"], card["cost"]["cost_per_step"], 4)
    h100 = data["cards"][0]
    assert h100["cost"]["cost_per_step"] == pytest.approx(2.0 * 8 * h100["step_time_s"] / 3600)


@pytest.mark.parametrize("task,extra", [("train", ["--gpus", "8"]), ("train", ["--gpus", "8", "--price-per-gpu-hour", "2"]),
                                        ("serve", ["--requests", "20"]), ("serve", ["--price-per-gpu-hour", "2"])])
def test_compare_a_card_that_cannot_answer_keeps_its_row(run_cli, task, extra):
    """A100 has no fp8 peak: its row shows the error under `note` and every figure empty (train used to
    exit 1, its error row one cell short of the header)."""
    data, views = run_both(run_cli, "compare", "llama2-7b", "--cards", "h100,a100", "--task", task, "--dtype", "fp8",
                           *extra)
    h100, a100 = table(views, f"^llama2-7b: {task} on each card")
    assert data["cards"][1]["error"] == a100["note"] == "A100-80GB-SXM: no fp8 peak (datasheet or calibration) for this GPU"
    assert (a100["card"], a100["gpu"]) == ("a100", "A100-80GB-SXM")
    assert set(a100.values()) - {"a100", "A100-80GB-SXM", a100["note"]} == {""}
    assert h100["note"] == "" and h100["fits"] == "yes" and close(h100["x first"], 1.0)
    assert data["answer"][0].startswith("fastest: h100 ")


def test_compare_cards_and_gpu_count_options(run_cli):
    base = ("compare", "llama2-7b", "--task", "memory")
    code, out, err = run_cli(*base, "--gpus", "h100,b200")   # the older spelling of --cards
    assert code == 0 and ("note: --gpus h100,b200 names cards: the spelling is now --cards h100,b200 (--gpus N is the "
                          "GPU count, as in mlsys train)") in err
    assert "h100" in out and "b200" in out
    for args, message in ((["--cards", "h100", "--gpus", "h100"], "give the cards once: --cards (--gpus CARD,... is its "
                                                                     "older spelling)"),
                          (["--cards", "h100", "--gpus", "8", "--num-gpus", "4"], "--gpus 8 and --num-gpus 4 disagree"),
                          (["--gpus", "8"], "give the cards to compare: --cards h100,b200,gb200-nvl72"),
                          (["--cards", "h100", "--gpus", "0"], "'0' is not a positive GPU count")):
        code, _, err = run_cli(*base, *args)
        assert code == 2 and message in " ".join(err.split()), (args, err)
    same = run_cli.json("compare", "llama2-7b", "--cards", "h100", "--task", "train", "--gpus", "8", "--num-gpus", "8")
    older = run_cli.json("compare", "llama2-7b", "--cards", "h100", "--task", "train", "--num-gpus", "8")
    assert same["cards"][0]["step_time_s"] == older["cards"][0]["step_time_s"]


def test_disaggregated_serving_cost_counts_both_pools(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", "--requests", "20", "--rate", "4", "--disagg", "1:2",
                           "--price-per-gpu-hour", "2")
    cost = data["cost"]
    assert data["gpus"] == 3 and cost["gpus"] == 3 and cost["cost_per_hour"] == pytest.approx(6.0)
    out_tps, in_tps = data["throughput_tokens_per_s"], data["input_tokens_per_s"]
    assert cost["cost_per_million_output_tokens"] == pytest.approx(6.0 / (out_tps * 3600) * 1e6)
    assert cost["cost_per_million_tokens"] == pytest.approx(6.0 / ((out_tps + in_tps) * 3600) * 1e6)
    rows = {r[""]: r["value"] for r in table(views, r"^cost \(price units\)$")}
    assert quantity(rows["GPUs"]) == 3 and close(rows["cost per hour"], 6.0, 4)
    assert "cost" not in run_cli.json("serve", "llama2-7b", "--requests", "20", "--rate", "4", "--disagg", "1:2")
