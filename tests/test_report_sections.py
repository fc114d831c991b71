"""Report sections whose commands (`mlsys train`, `plan`, `serve`) publish a JSON contract but may not be
installed: rendered from fake JSON in that contract; and the measured section from bench rows."""

from __future__ import annotations

import json

import pytest

from mlsyscalc.cli.main import COMMANDS
from mlsyscalc.cli.report import json_runner
from mlsyscalc.errors import MlsysError
from mlsyscalc.report.model_report import CommandFailed, ReportOptions
from mlsyscalc.report.model_report_build import build_report
from mlsyscalc.report.model_report_more import measured_section
from mlsyscalc.report.model_report_infer import serving_section
from mlsyscalc.report.model_report_sections import step_section

TRAIN = {"step_time_s": 1.234, "tokens_per_s": 3_400_000.0, "tflops_per_gpu": 401.5, "mfu": 0.456, "hfu": 0.5,
         "memory_bytes_per_gpu": 60 * 2**30, "fits": True, "breakdown": {"compute_s": 1.0, "exposed_comm_s": 0.234},
         "layout": {"tp": 8, "pp": 2, "dp": 4}}
PLAN = {"candidates": [{"layout": {"tp": 8, "pp": 1, "dp": 8}, "step_time_s": 2.5, "mfu": 0.41},
                       {"layout": {"tp": 4, "pp": 2, "dp": 8}, "step_time_s": 2.75, "mfu": 0.372}],
        "searched": 1234, "feasible": 56, "search_s": 0.8}


def _serve(rate: float) -> dict:
    return {"ttft_p50_s": 0.1 * rate, "ttft_p99_s": 0.3 * rate, "tpot_p50_s": 0.02, "tpot_p99_s": 0.05,
            "e2e_p50_s": 5.0, "e2e_p99_s": 9.0, "throughput_requests_per_s": rate * 0.99,
            "throughput_tokens_per_s": rate * 253.0, "goodput_requests_per_s": rate * 0.9}


def _fake(calls: list):
    real = json_runner()

    def run(argv):
        calls.append(list(argv))
        if argv[0] == "train":
            return TRAIN
        if argv[0] == "plan":
            return PLAN
        if argv[0] == "serve" and "--max-rate" in argv:
            return {"max_rate_requests_per_s": 8.0, "tolerance": 0.01, "simulations": 11}
        if argv[0] == "serve":
            return _serve(float(argv[argv.index("--rate") + 1]))
        return real(argv)
    return run


def _build(options, builders, calls, available=(*COMMANDS, "train", "plan", "serve")):
    report = build_report(options, _fake(calls), available, {"version": "test", "time": "now"}, builders)
    return {s.key: s for s in report.sections}


def test_plan_layouts_are_listed_from_the_plan_contract():
    calls = []
    sect = _build(ReportOptions("llama2-7b", gpus=16), [("training_step", "step", step_section)], calls)["training_step"]
    text = "\n".join(sect.lines)
    assert "| 1 | tp 8, pp 1, dp 8 | 2.5 s | 41.0% |" in text
    assert "| 2 | tp 4, pp 2, dp 8 | 2.75 s | 37.2% |" in text
    assert "searched 1,234 layouts, 56 feasible" in text
    plan = next(c for c in calls if c[0] == "plan")
    assert plan == ["plan", "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--seq", "4096", "--global-batch",
                    "1024", "--top", "3"]
    assert "mlsys plan llama2-7b --gpus 16" in text  # quoted beside the numbers
    assert any(c[0] == "roofline" for c in calls)  # the per-GPU roofline part still renders


def test_a_given_layout_runs_train_with_it():
    calls = []
    opts = ReportOptions("llama2-7b", gpus=64, tp=8, pp=2, cluster="hgx-h100")
    sect = _build(opts, [("training_step", "step", step_section)], calls)["training_step"]
    text = "\n".join(sect.lines)
    train = next(c for c in calls if c[0] == "train")
    assert train[train.index("--tp") + 1] == "8" and train[train.index("--pp") + 1] == "2"
    assert train[train.index("--dp") + 1] == "4" and "--cluster" in train and "--micro-batch" in train
    for row in ("| step time | 1.23 s |", "| MFU | 45.6% |", "| memory per GPU | 60 GiB |", "| fits | yes |",
                "| exposed_comm_s | 234 ms |", "tp 8, pp 2, dp 4"):
        assert row in text, row


def test_serving_table_from_the_serve_contract():
    calls = []
    sect = _build(ReportOptions("llama3-8b", rates=(1.0, 4.0)), [("serving", "Serving", serving_section)],
                  calls)["serving"]
    text = "\n".join(sect.lines)
    assert sect.unavailable is None
    assert "| 1 | 100 | 300 | 20 | 50 | 5,000 | 9,000 | 0.99 | 253 | 0.9 |" in text
    assert "| 4 | 400 | 1,200 | 20 | 50 | 5,000 | 9,000 | 3.96 | 1,012 | 3.6 |" in text
    serve_calls = [c for c in calls if c[0] == "serve"]  # after the memory commands that choose the tp
    assert serve_calls[0] == ["serve", "llama3-8b", "--gpu", "H100-SXM", "--prompt-len", "1024", "--output-len", "256",
                              "--requests", "200", "--slo", "ttft_p99=0.5,tpot_p99=0.05", "--rate", "1"]
    assert len(serve_calls) == 2  # rates given: no capacity search
    assert sect.figures[0].kind == "serving_latency"


def test_serving_rates_straddle_the_capacity_under_the_slo():
    """Without rates, 0.25x-1.25x the highest rate `serve --max-rate` finds (8 requests/s in the fake)."""
    calls = []
    sect = _build(ReportOptions("llama3-8b"), [("serving", "Serving", serving_section)], calls)["serving"]
    serve_calls = [c for c in calls if c[0] == "serve"]
    assert serve_calls[0][-1] == "--max-rate"
    assert [c[c.index("--rate") + 1] for c in serve_calls[1:]] == ["2", "4", "6", "8", "10"]
    text = "\n".join(sect.lines)
    assert "0.25x to 1.25x the highest rate" in text and "`--slo ttft_p99=0.5,tpot_p99=0.05`, 8 requests/s" in text
    assert "| 10 | 1,000 | 3,000 |" in text


def test_serving_falls_back_to_fixed_rates_and_says_why():
    def run(argv):
        if "--max-rate" in argv:
            raise CommandFailed("`mlsys serve gpt2 ... --max-rate` failed: --max-rate: no rate bounds it")
        return _fake([])(argv)

    report = build_report(ReportOptions("gpt2"), run, (*COMMANDS, "serve"), {}, [("serving", "Serving", serving_section)])
    text = "\n".join(report.sections[0].lines)
    assert report.sections[0].unavailable is None and "at fixed rates" in text and "no rate bounds it" in text
    assert "| 8 | 800 |" in text


def test_missing_commands_leave_one_line():
    sections = _build(ReportOptions("gpt2"), [("serving", "Serving", serving_section),
                                              ("training_step", "step", step_section)], [],
                      available={k: v for k, v in COMMANDS.items() if k not in ("serve", "plan", "train")})
    assert sections["serving"].unavailable.startswith("`mlsys serve` is not part of this installation")
    assert any("`mlsys plan` is not part" in line for line in sections["training_step"].lines)


def test_a_failing_command_is_one_line_not_a_crash():
    def run(argv):
        from mlsyscalc.report.model_report import CommandFailed
        raise CommandFailed("`mlsys serve gpt2` failed: out of memory")

    report = build_report(ReportOptions("gpt2"), run, (*COMMANDS, "serve"), {}, [("serving", "Serving", serving_section)])
    assert report.sections[0].unavailable == "`mlsys serve gpt2` failed: out of memory"


def _row(gpu: str, kernel: str, median: float, predicted: float | None) -> dict:
    return {"kernel": kernel, "baseline": "torch.matmul", "shape": "4096x4096x4096", "dtype": "bfloat16",
            "ok": True, "median_ms": median, "predicted_ms": predicted, "env_gpu": gpu, "env_git_commit": "abc1234"}


def test_measured_rows_of_this_card_beside_their_prediction(tmp_path):
    rows = [_row("NVIDIA H100 80GB HBM3", "triton_matmul", 0.20, 0.18),
            _row("NVIDIA H100 80GB HBM3", "triton_gemv", 0.05, None)]  # no prediction: left out
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "h200").mkdir()  # another card's rows: left out
    (tmp_path / "h200" / "rows.csv").write_text("kernel,baseline,shape,dtype,ok,median_ms,predicted_ms,env_gpu\n"
                                                "triton_matmul,torch.matmul,8x8x8,bfloat16,True,0.15,0.16,NVIDIA H200\n")
    sect = _build(ReportOptions("llama2-7b", measured=str(tmp_path)), [("measured", "Measured", measured_section)],
                  [])["measured"]
    text = "\n".join(sect.lines)
    # error = (measured - predicted) / predicted = (0.20 - 0.18) / 0.18 = +11.1%
    assert "| triton_matmul | 4096x4096x4096 | bfloat16 | 0.2 | 0.18 | +11.1% | NVIDIA H100 80GB HBM3 |" in text
    assert "H200" not in text and "triton_gemv" not in text


def test_measured_without_rows_says_why(tmp_path):
    sect = _build(ReportOptions("gpt2"), [("measured", "Measured", measured_section)], [])["measured"]
    assert "--measured DIR" in sect.unavailable
    with pytest.raises(MlsysError, match="--measured .*missing: no such folder"):  # bad input stops the report
        _build(ReportOptions("gpt2", measured=str(tmp_path / "missing")), [("measured", "Measured", measured_section)], [])


def test_one_layout_one_pricing_and_the_roofline_says_why_it_differs(monkeypatch):
    """Layout 1's parts come from the plan call the table quotes; the per-micro-batch roofline is labelled."""
    from mlsyscalc.report.model_report_system import ROOFLINE_DIFFERS

    monkeypatch.setitem(PLAN["candidates"][0], "breakdown", {"compute_s": 2.25, "dp_comm_s": 0.125})
    calls = []
    sect = _build(ReportOptions("llama2-7b", gpus=16), [("training_step", "step", step_section)], calls)["training_step"]
    text = "\n".join(sect.lines)
    assert "Layout 1's step time, part by part (the same `mlsys plan` pricing as the table)" in text
    assert "| compute_s | 2.25 s |" in text and "| dp_comm_s | 125 ms |" in text
    assert sum(c[0] == "plan" for c in calls) == 1  # the parts are the table's own call, not a second pricing
    assert ROOFLINE_DIFFERS in text
    assert text.index("fastest layouts") < text.index(ROOFLINE_DIFFERS) < text.index("step time of one micro-batch")
