"""scripts/validate/train_published.py: the runs file, the arguments it passes, and the table logic (fake runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
tp = load_script("validate/train_published")


def _runs():
    return json.loads((ROOT / "reports/train/published_runs.json").read_text())["runs"]


def test_runs_file_is_complete_and_consistent():
    runs = _runs()
    assert {r["group"] for r in runs} == {"korthikanti-2022-table5", "narayanan-2021-table1", "llama3-2024-table4",
                                          "smith-2022-mtnlg", "bigscience-2022-bloom", "black-2022-neox",
                                          "megatron-bridge-h100", "llm-foundry-mpt-h100", "llm-foundry-mpt-a100",
                                          "torchtitan-h100", "deepseek-v3-2024", "deepseek-v2-2024"}
    for r in runs:
        lay = r["layout"]
        assert lay["tp"] * lay["pp"] * lay["dp"] * lay.get("cp", 1) == r["gpus"], r["name"]
        assert lay["global_batch"] % (lay["dp"] * lay["micro_batch"]) == 0, r["name"]
        assert r["published"]["metric"] in tp.PREDICTED and r["published"]["value"] > 0
        assert r["citation"]["paper"] and r["citation"]["table"] and r["flop_convention"]
        assert ("model" in r) != ("config" in r) and ("overrides" not in r or "model" in r)
    # Korthikanti et al. 2022, Table 5: selective recompute + SP is faster than full recompute for every model
    kor = {r["name"]: r["published"]["value"] for r in runs if r["group"] == "korthikanti-2022-table5"}
    assert kor["Megatron 175B, full recompute"] == 18.13 and kor["Megatron 1T, sequence parallel + selective recompute"] == 71.49


def test_gpt_configs_have_the_papers_parameter_counts(run_cli, tmp_path):
    """Narayanan et al. 2021, Table 1 lists the parameter counts (billions, 1 decimal: 1.65 prints as 1.7)."""
    for r in _runs():
        if r["group"] == "narayanan-2021-table1":
            path = tmp_path / "c.json"
            path.write_text(json.dumps(r["config"]))
            total = run_cli.json("params", str(path))["total_params"] / 1e9
            assert total == pytest.approx(float(r["name"].split()[-1].rstrip("B")), abs=0.05), r["name"]


def test_a_tflops_figure_becomes_the_step_time_of_the_papers_own_flop_count():
    """Narayanan et al. 2021, Table 1, 1T: 163 TFLOP/s per GPU on 3072 GPUs; eq. 3 with B 3072, s 2048, l 128,
    h 25600, V 51200 gives 5.14e19 FLOPs a step, so step = F / (163e12 x 3072) = 102.6 s, by hand:"""
    run = next(r for r in _runs() if r["name"] == "Megatron GPT 1008.0B")
    flops = 96 * 3072 * 2048 * 128 * 25600**2 * (1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
    metric, value = tp.published_target(run)
    assert metric == "step_time_s" and value == pytest.approx(flops / (163e12 * 3072), rel=1e-12)
    assert value == pytest.approx(102.6, abs=0.05)
    llama = next(r for r in _runs() if r["group"] == "llama3-2024-table4")
    assert tp.published_target(llama) == ("mfu", 0.43)


def test_mpt_configs_have_the_tables_parameter_counts(run_cli, tmp_path):
    """llm-foundry's MPT benchmark table (scripts/train/benchmarking/README.md) prints NumParams for each row at
    sequence 2048: 1b 1,315,950,592 .. 70b 64,862,437,376. By hand for 7b (d 4096, 32 layers, vocabulary 50368,
    learned positions, biases, LayerNorm with bias, tied head): embeddings (50368 + 2048) x 4096 = 214,695,936;
    a block 12 d^2 + 13 d = 201,379,840, x 32 = 6,444,154,880; final LayerNorm 2 d = 8,192: 6,658,859,008."""
    table = {"1b": 1315950592, "3b": 2651837440, "7b": 6658859008, "13b": 12853954560, "30b": 29975214080,
             "70b": 64862437376}
    assert (50368 + 2048) * 4096 + 32 * (12 * 4096**2 + 13 * 4096) + 2 * 4096 == table["7b"]
    runs = [r for r in _runs() if r["group"].startswith("llm-foundry-mpt")]
    assert len(runs) == 11  # six H100 rows (1b..70b), five A100 rows (1b..30b)
    for r in runs:
        path = tmp_path / "c.json"
        path.write_text(json.dumps(r["config"]))
        assert run_cli.json("params", str(path))["total_params"] == table[r["name"].split(",")[0][4:]], r["name"]


def test_held_out_runs_are_marked_and_summarised_on_their_own(tmp_path):
    """A run carrying `held_out` gets '(held out)' on the page and a 'held out' line beside 'all'."""
    held = [r for r in _runs() if r.get("held_out")]
    assert {r["group"] for r in held} == {"llm-foundry-mpt-h100", "llm-foundry-mpt-a100", "torchtitan-h100",
                                         "megatron-bridge-h100", "deepseek-v3-2024", "deepseek-v2-2024"}
    base = {"group": "g", "model": "llama2-7b", "cluster": "c", "gpus": 8, "measurement": True,
            "layout": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 8, "seq": 2048,
                       "recompute": "full", "dtype": "bf16"}, "citation": {"paper": "P", "table": "T"}}
    runs = [base | {"name": "old", "published": {"metric": "step_time_s", "value": 2.5}},
            base | {"name": "new", "published": {"metric": "step_time_s", "value": 4.0}, "held_out": "priced once"}]
    rows = [tp.evaluate(r, _fake(), tmp_path, plan=False) for r in runs]  # predicted 2.0 s: -20%, -50%
    summary = tp.summarize(rows)
    assert summary["all"]["runs"] == 2 and summary["all"]["mean_abs_error"] == pytest.approx(0.35)
    assert summary["held out"] == {"runs": 1, "mean_abs_error": 0.5, "median_abs_error": 0.5, "max_abs_error": 0.5}
    page = tp.render(rows, summary, "cmd")
    assert "| new (held out) |" in page and "| old |" in page and "| held out | 1 |" in page


def test_train_and_plan_arguments():
    run = next(r for r in _runs() if r["name"] == "Megatron 175B, sequence parallel + selective recompute")
    args = tp.train_args(run, "m.json")
    assert args[:4] == ["train", "m.json", "--gpus", "64"]
    joined = " ".join(args)
    for part in ("--cluster dgx-a100", "--seq 2048", "--global-batch 64", "--micro-batch 1", "--tp 8", "--pp 8",
                 "--dp 1", "--vp 3", "--sp", "--recompute selective", "--dtype bf16", "--attention unfused"):
        assert part in joined
    assert tp.plan_args(run, "m.json")[-6:] == ["--dtype", "bf16", "--top", "1", "--attention", "unfused"]  # same core


def _fake(step_s=2.0, plan_s=1.5, fail=None):
    def run(args):
        if fail and fail in args:
            raise RuntimeError("layers 105 do not split over pp 35 x vp 2")
        if args[0] == "plan":
            return {"candidates": [{"step_time_s": plan_s, "layout": {"tp": 8}}], "searched": 10, "feasible": 3}
        return {"step_time_s": step_s, "tflops_per_gpu": 120e12, "mfu": 0.4, "hfu": 0.5, "fits": True}  # FLOP/s
    return run


def test_rows_errors_and_summary_by_hand(tmp_path):
    runs = [{"name": "a", "group": "g1", "model": "llama2-7b", "cluster": "c", "gpus": 8, "measurement": True,
             "layout": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 8, "seq": 2048,
                        "recompute": "full", "dtype": "bf16"},
             "published": {"metric": "step_time_s", "value": 2.5}, "citation": {"paper": "P, 2020", "table": "T1"}},
            {"name": "b", "group": "g2", "model": "llama2-7b", "cluster": "c", "gpus": 8, "measurement": True,
             "layout": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 8, "seq": 2048,
                        "recompute": "full", "dtype": "bf16"},
             "published": {"metric": "hardware_tflops_per_gpu", "value": 160.0}, "citation": {"paper": "Q", "table": "T2"}}]
    # (no flop_formula: the TFLOP/s is compared as TFLOP/s)
    rows = [tp.evaluate(r, _fake(), tmp_path, plan=True) for r in runs]
    assert rows[0]["predicted"] == 2.0 and rows[0]["error"] == pytest.approx(-0.2)  # (2.0 - 2.5) / 2.5
    assert rows[1]["predicted"] == pytest.approx(150.0)  # 120 model TFLOP/s x hfu 0.5 / mfu 0.4
    assert rows[1]["error"] == pytest.approx(-10 / 160)
    assert rows[0]["plan_not_worse"] and rows[0]["plan_step_time_s"] == 1.5
    summary = tp.summarize(rows)
    assert summary["all"]["runs"] == 2 and summary["all"]["mean_abs_error"] == pytest.approx((0.2 + 0.0625) / 2)
    assert summary["all"]["max_abs_error"] == pytest.approx(0.2) and summary["g2"]["median_abs_error"] == pytest.approx(0.0625)
    worse = tp.evaluate(runs[0], _fake(plan_s=3.0), tmp_path, plan=True)
    assert worse["plan_not_worse"] is False and "WORSE" in tp._plan_cell(worse)
    over = worse | {"fits": False}  # a paper layout the memory model rejects is not in the search: no bug
    assert "WORSE" not in tp._plan_cell(over) and "over memory" in tp._plan_cell(over)


def test_a_refused_layout_is_a_row_not_a_crash_and_the_page_is_written(tmp_path):
    out = tmp_path / "published.md"
    rows = tp.main(["--out", str(out), "--only", "korthikanti-2022-table5"], runner=_fake(fail="35"))
    assert len(rows) == 8
    failed = {r["name"] for r in rows if "failure" in r}
    assert failed == {"Megatron 530B, full recompute", "Megatron 530B, sequence parallel + selective recompute"}
    assert all("error" in r for r in rows if "failure" not in r)
    page = out.read_text()
    assert "Korthikanti et al. 2022" in page and "| all |" in page and "do not split" in page
    assert page.count("\n| Megatron ") == 8


def test_every_run_names_its_source_measurement_and_flop_convention():
    """A run is usable only with its paper and table, whether it is a measurement, and its FLOP convention."""
    for r in _runs():
        assert r["citation"]["paper"].strip() and r["citation"]["table"].strip(), r["name"]
        assert isinstance(r["measurement"], bool), r["name"]
        assert isinstance(r["flop_convention"], str) and r["flop_convention"].strip(), r["name"]
        assert isinstance(r.get("assumed", []), list) and r.get("notes", "").strip(), r["name"]
        assert isinstance(r.get("held_out", "-"), str) and r.get("held_out", "-").strip(), r["name"]  # says why
        if r["published"]["metric"] == "hardware_tflops_per_gpu":  # a TFLOP/s figure needs the paper's formula
            assert r.get("flop_formula") in tp.FLOP_FORMULAS, r["name"]


def test_mtnlg_tflops_are_eq3_at_its_step_times():
    """Smith et al. 2022, section 2.4: 60.1 / 50.2 / 44.4 s a step at 2240 / 2800 / 3360 GPUs, which the paper
    gives as 126 / 121 / 113 TFLOP/s per GPU. Eq. 3 (4 passes: full recomputation) with B 1920, s 2048, l 105,
    h 20480, V 51200: 96 x 1920 x 2048 x 105 x 20480^2 x (1 + 2048/122880 + 51200/34406400) = 1.6926e19 FLOPs,
    / (60.1 s x 2240) = 125.7e12: the runs' `recompute full` is the paper's convention."""
    flops = 96 * 1920 * 2048 * 105 * 20480**2 * (1 + 2048 / 122880 + 51200 / 34406400)
    assert flops == pytest.approx(1.6926e19, rel=1e-4)
    for r in _runs():
        if r["group"] == "smith-2022-mtnlg":
            tflops = {2240: 126, 2800: 121, 3360: 113}[r["gpus"]]
            assert flops / (r["published"]["value"] * r["gpus"]) / 1e12 == pytest.approx(tflops, rel=0.006), r["name"]
            assert r["layout"]["recompute"] == "full" and r["layout"]["global_batch"] == 1920


def test_eq3_reads_hf_keys_and_a_cluster_file_resolves_in_the_repository():
    """GPT-NeoX-20B (HF keys): 117 TFLOP/s on 96 GPUs, B 1536, s 2048, l 44, h 6144, V 50432:
    F = 96 x 1536 x 2048 x 44 x 6144^2 x (1 + 2048/36864 + 50432/4325376) = 5.3530e17 FLOPs a step, so the
    step the figure implies is F / (117e12 x 96) = 47.66 s."""
    run = next(r for r in _runs() if r["group"] == "black-2022-neox")
    flops = 96 * 1536 * 2048 * 44 * 6144**2 * (1 + 2048 / 36864 + 50432 / 4325376)
    metric, value = tp.published_target(run)
    assert metric == "step_time_s" and value == pytest.approx(flops / (117e12 * 96), rel=1e-12)
    assert flops == pytest.approx(5.3530e17, rel=1e-4) and value == pytest.approx(47.66, abs=0.005)
    args = tp.train_args(run, "m.json")
    cluster = Path(args[args.index("--cluster") + 1])
    assert cluster.is_absolute() and cluster.is_file() and cluster.parent == ROOT / "reports/train/clusters"
    assert args[-2:] == ["--overlap", "none"] and tp.plan_args(run, "m.json")[-2:] == ["--overlap", "none"]
    assert "--overlap" not in tp.train_args(_runs()[0], "m.json")  # runs without the key keep the default


def test_a_tokens_rate_becomes_the_step_time_it_implies():
    """Megatron-Bridge performance summary, 25.11, DGX-H100, LLAMA3_70B FP8-CS: 1602 tokens/s/GPU on 64 GPUs
    at GBS 128 x 8192 tokens: 1,048,576 tokens a step / (1602 x 64 = 102,528 tokens/s) = 10.227 s, by hand."""
    run = next(r for r in _runs() if r["name"].startswith("Llama 3 70B, 64 H100, FP8, GBS 128"))
    assert tp.published_target(run) == ("step_time_s", pytest.approx(10.2272, abs=1e-4))
    assert tp.PREDICTED["tokens_per_s_per_gpu"]({"tokens_per_s": 102528.0, "gpus": 64}) == 1602.0


def _fake_runs():
    base = {"group": "g", "gpus": 8, "measurement": True, "citation": {"paper": "p", "table": "t"}, "model": "llama2-7b",
            "cluster": "hgx-h100", "layout": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 8,
                                              "seq": 2048, "recompute": "none", "dtype": "bf16"}}
    return [{**base, "name": "a", "published": {"metric": "step_time_s", "value": 2.0}},
            {**base, "name": "b", "published": {"metric": "tokens_per_s_per_gpu", "value": 1024.0}}]


def test_predictions_read_no_published_value_and_name_their_commit(monkeypatch):
    """--predict: the metric each run is compared in and its prediction, with HEAD; a dirty tree is refused."""
    runs = _fake_runs()
    for r in runs:
        r["published"]["value"] = float("nan")  # never read by predict
    monkeypatch.setattr(tp, "git_state", lambda: ("abc123", False))
    out = tp.predict(runs, lambda args: {"step_time_s": 1.5, "mfu": 0.5, "fits": True, "breakdown": {},
                                         "tokens_per_s": 8 * 2048 / 1.5, "gpus": 8}, str(ROOT / "reports/train/heldout_dgxc/runs.json"))
    assert out["commit"] == "abc123" and [p["metric"] for p in out["predictions"]] == ["step_time_s", "step_time_s"]
    assert [p["predicted"] for p in out["predictions"]] == [1.5, 1.5]
    monkeypatch.setattr(tp, "git_state", lambda: ("abc123", True))
    with pytest.raises(SystemExit, match="commit first"):
        tp.predict(runs, lambda args: {}, str(ROOT / "reports/train/heldout_dgxc/runs.json"))


def test_scores_are_signed_and_summarised():
    """error = (predicted - published) / published: run a predicted 1.5 s for 2.0 s (-25%); run b's rate of 1024
    tokens/s/GPU is a step of 8 x 2048 / (1024 x 8) = 2 s, predicted 3 s (+50%): median |error| 37.5%, signed +12.5%."""
    preds = {"commit": "abc", "command": "c", "runs_file": "r",
             "predictions": [{"name": "a", "metric": "step_time_s", "predicted": 1.5},
                             {"name": "b", "metric": "step_time_s", "predicted": 3.0}]}
    rows = tp.score(_fake_runs(), preds)
    assert [r["error"] for r in rows] == [pytest.approx(-0.25), pytest.approx(0.5)]
    s = tp.signed_summary(rows)["all"]
    assert (s["median_abs_error"], s["max_abs_error"], s["median_signed_error"]) == (
        pytest.approx(0.375), pytest.approx(0.5), pytest.approx(0.125))
    assert "made at commit `abc`" in tp.render_scored(rows, preds, "p.json")
