"""`mlsys compare`: the same question on each card, answered by the calculator that owns it, side by side."""

from __future__ import annotations

import time

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.cost.compare import CompareOptions, compare, resolve_cards
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.specs.lookup import load_model

FIVE = "h100,h200,b200,gb200-nvl72,mi300x"
TRAIN = ("compare", "llama3-70b", "--gpus", FIVE, "--num-gpus", "64", "--tp", "8", "--pp", "2", "--seq", "4096")


def test_cards_are_gpus_or_clusters():
    cards = {c.ref: c for c in resolve_cards(FIVE.split(","), 64)}
    assert (cards["gb200-nvl72"].gpu.name, cards["gb200-nvl72"].cluster.name) == ("GB200", "gb200-nvl72")
    assert (cards["h100"].gpu.name, cards["h100"].cluster.name) == ("H100-SXM", "hgx-h100")
    assert cards["mi300x"].cluster.name == "mi300x-node"


def test_train_answers_are_train_steps(run_cli):
    data = run_cli.json(*TRAIN)
    spec = load_model("llama3-70b")
    for row, card in zip(data["cards"], resolve_cards(FIVE.split(","), 64)):
        step = train_step(spec, load_ceilings(card.gpu), card.cluster,
                          TrainStepOptions(gpus=64, seq=4096, global_batch=512, tp=8, pp=2, zero=1))
        assert row["step_time_s"] == row["time_s"] == step.step_time_s and row["fits"] == step.fits
    assert data["cards"][0]["relative_time"] == 1.0
    b200 = next(c for c in data["cards"] if c["card"] == "b200")
    assert b200["relative_time"] == pytest.approx(b200["time_s"] / data["cards"][0]["time_s"])


def test_prices_per_card_and_no_price_no_cost(run_cli):
    data = run_cli.json(*TRAIN, "--price-per-gpu-hour", "h100=2.5,b200=4.5")
    cost = {c["card"]: c.get("cost") for c in data["cards"]}
    assert cost["h100"]["cost_per_step"] == pytest.approx(64 * data["cards"][0]["step_time_s"] / 3600 * 2.5)
    assert cost["b200"]["price_per_gpu_hour"] == 4.5 and cost["h200"] is None
    assert all("cost" not in c for c in run_cli.json(*TRAIN)["cards"])
    code, out, _ = run_cli(*TRAIN)
    assert code == 0 and "cost" not in out


def test_a_card_that_cannot_answer_says_why(run_cli):
    data = run_cli.json("compare", "llama3-8b", "--task", "serve", "--gpus", "h100,b200", "--dtype", "nvfp4",
                        "--requests", "50")
    h100, b200 = data["cards"]
    assert "no fp4 peak" in h100["error"] and h100["time_s"] is None
    assert b200["error"] is None and b200["tpot_p50_s"] > 0
    code, _, err = run_cli("compare", "llama3-8b", "--gpus", "h100,h200", "--dtype", "nvfp4")
    assert code == 2 and "no fp4 peak" in err  # every card failed: the first reason is the error


def test_memory_fit_is_the_memory_calculators(run_cli):
    data = run_cli.json("compare", "llama3-70b", "--task", "memory", "--gpus", "h100,b300", "--dtype", "fp8",
                        "--batch", "8", "--context", "8192", "--kv-dtype", "fp8")
    for row, gpu in zip(data["cards"], ("H100-SXM", "B300")):
        mem = run_cli.json("memory", "infer", "llama3-70b", "--dtype", "fp8", "--kv-dtype", "fp8", "--batch", "8",
                           "--context", "8192", "--gpu", gpu)
        assert (row["total_bytes"], row["fits"], row["usable_bytes"]) == (mem["total_bytes"], mem["fits"],
                                                                          mem["usable_bytes"])
    assert data["cards"][1]["max_batch"] > data["cards"][0]["max_batch"]


@pytest.mark.parametrize("cards,msg", [("h100,H100", "names a card twice"), ("h100,zz9", "unknown GPU 'zz9'"),
                                       (",".join(["h100"] * 17), "at most 16 cards")])
def test_bad_cards_exit_2(run_cli, cards, msg):
    code, _, err = run_cli("compare", "llama3-8b", "--gpus", cards)
    assert code == 2 and msg in err


def test_five_cards_in_under_a_second_of_cpu():
    spec = load_model("llama3-70b")
    cards = resolve_cards(FIVE.split(","), 64)
    opts = CompareOptions(gpus=64, train=TrainStepOptions(gpus=64, seq=8192, global_batch=512, tp=8, pp=2, zero=1))
    compare(spec, cards, opts)  # warm the built-in specs
    start = time.process_time()
    result = compare(spec, cards, opts)
    assert time.process_time() - start < 1.0 and len(result.answers) == 5


def test_plot(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "cmp.png"
    data = run_cli.json(*TRAIN, "--price-per-gpu-hour", "3", "--plot", str(path))
    assert path.stat().st_size > 0 and data["plot"] == str(path)
