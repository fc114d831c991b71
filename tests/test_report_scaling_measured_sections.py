"""The report's scaling and measured sections (mlsyscalc/report/model_report_more.py): the scaling rows from a
fake `mlsys params` / `scaling optimal` / `scaling budget` (dense and MoE), and the measured rows a `--measured`
folder gives (this card's, the model's own first, one run saved twice counted once, at most 20 shown)."""

from __future__ import annotations

import json

from mlsyscalc.cli.main import COMMANDS
from mlsyscalc.report.model_report import ReportOptions
from mlsyscalc.report.model_report_build import build_report
from mlsyscalc.report.model_report_more import MAX_MEASURED_ROWS, measured_section, scaling_section


def _arg(argv, name):
    return argv[argv.index(name) + 1]


class Fake:
    def __init__(self, total, active):
        self.total, self.active, self.calls = total, active, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] == "params":
            return {"total_params": self.total, "active_params": self.active}
        if argv[:2] == ["scaling", "optimal"]:
            n = float(_arg(argv, "--params"))
            return {"params": n, "tokens": 20 * n, "tokens_per_param": 20.0, "compute_flops": 120 * n * n,
                    "loss": 2.345678, "loss_law": "approach3", "law": "approach1", "law_title": "Chinchilla approach 1",
                    "source": "Hoffmann et al. 2022", "notes": ["first", "the last note"]}
        if argv[:2] == ["scaling", "budget"]:
            return {"mfu": 0.4, "gpu_hours": 123456.7, "gpus": int(_arg(argv, "--gpus")), "wall_days": 12.3456}
        raise AssertionError(argv)


def _section(runner, builder, **options):
    report = build_report(ReportOptions(options.pop("model", "llama2-7b"), **options), runner, tuple(COMMANDS), {},
                          [("s", "S", builder)])
    return report.sections[0]


def test_scaling_rows_of_a_dense_model():
    fake = Fake(7_000_000_000, 7_000_000_000)
    sect = _section(fake, scaling_section, gpus=64)
    text = "\n".join(sect.lines)
    optimal = next(c for c in fake.calls if c[:2] == ["scaling", "optimal"])
    budget = next(c for c in fake.calls if c[:2] == ["scaling", "budget"])
    assert _arg(optimal, "--params") == "7000000000"
    assert _arg(budget, "--compute") == repr(120 * 7e9 * 7e9) and _arg(budget, "--gpus") == "64"
    assert _arg(budget, "--gpu") == "H100-SXM"
    assert "Compute-optimal training for a model of this size by Chinchilla approach 1 (Hoffmann et al. 2022):" in text
    for row in ("| parameters N (total) | 7 B |", "| compute-optimal tokens D | 140 B |", "| tokens per parameter | 20 |",
                "| training compute C = 6ND | 5.88e+21 FLOP |", "| predicted loss (approach3), nats/token | 2.346 |",
                "| GPU-hours at MFU 0.4 | 123,457 |", "| wall clock on 64 x H100-SXM (days) | 12.35 |"):
        assert row in text, row
    assert "- the last note" in text and "- first" not in text and "mixture of experts" not in text
    (fig,) = sect.figures
    assert fig.kind == "frontier" and fig.data == {"law": "approach1", "loss_law": "approach3",
                                                   "point": [120 * 7e9 * 7e9, 7e9, 140e9]}
    assert fig.title == "llama2-7b: compute-optimal frontier (approach1) and this model (N = 7 B)"


def test_scaling_of_a_moe_uses_its_active_parameters_and_says_why():
    fake = Fake(47_000_000_000, 13_000_000_000)
    sect = _section(fake, scaling_section)
    text = "\n".join(sect.lines)
    assert _arg(next(c for c in fake.calls if c[:2] == ["scaling", "optimal"]), "--params") == "13000000000"
    assert "| parameters N (active) | 13 B |" in text and "47" not in text.split("Compute-optimal")[1].split("```")[0]
    assert "N here is the active parameters per token" in text
    assert sect.figures[0].title.endswith("(N = 13 B)")


def _row(gpu, kernel, median, predicted, shape="4096x4096x4096", variant="", measured_at="t1", commit="abc1234"):
    return {"kernel": kernel, "baseline": "torch.matmul", "shape": shape, "dtype": "bfloat16", "variant": variant,
            "ok": True, "median_ms": median, "predicted_ms": predicted, "env_gpu": gpu, "env_git_commit": commit,
            "measured_at": measured_at}


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_measured_rows_that_name_the_model_come_first(tmp_path):
    h100 = "NVIDIA H100 80GB HBM3"
    _write(tmp_path / "kernels" / "rows.jsonl", [_row(h100, "triton_matmul", 0.2, 0.18)])
    _write(tmp_path / "models" / "rows.jsonl", [_row(h100, "triton_decode", 12.0, 10.0, shape="B1", variant="llama2-7b"),
                                                 _row(h100, "triton_decode", 9.0, None, shape="B2", variant="llama2-7b"),
                                                 _row(h100, "triton_decode", None, 1.0, shape="B4", variant="llama2-7b")])
    sect = _section(None, measured_section, measured=str(tmp_path))
    text = "\n".join(sect.lines)
    assert (f"Rows measured on a H100-SXM that name this model, from `{tmp_path}` (2 rows, the first 2 shown); the "
            "numbers come from the row files, not from a command:") in text
    assert f"| triton_decode | B1 | bfloat16 | 12 | 10 | +20.0% | {h100} | abc1234 | models/rows.jsonl |" in text
    assert f"| triton_decode | B2 | bfloat16 | 9 |  |  | {h100} | abc1234 | models/rows.jsonl |" in text
    assert "triton_matmul" not in text and "| B4 |" not in text  # another model's row; an untimed row


def test_measured_rows_of_this_card_with_a_prediction_when_none_name_the_model(tmp_path):
    h100 = "NVIDIA H100 80GB HBM3"
    rows = [_row(h100, "triton_matmul", 0.1 + i / 1000, 0.1, shape=f"{i}x8x8", measured_at=f"t{i}") for i in range(25)]
    rows.append(_row(h100, "triton_gemv", 0.05, None))  # no prediction
    _write(tmp_path / "rows.jsonl", rows)
    _write(tmp_path / "rows_copy.jsonl", rows[:3])  # the same run saved twice counts once
    _write(tmp_path / "h200" / "rows.jsonl", [_row("NVIDIA H200", "triton_matmul", 0.15, 0.16)])
    sect = _section(None, measured_section, model="gpt2", measured=str(tmp_path))
    text = "\n".join(sect.lines)
    assert (f"Rows measured on a H100-SXM that carry a roofline prediction (no rows name this model, so they are not "
            f"specific to it), from `{tmp_path}` (25 rows, the first {MAX_MEASURED_ROWS} shown)") in text
    body = [line for line in sect.lines if line.startswith("| triton")]
    assert len(body) == MAX_MEASURED_ROWS == 20
    assert body[0] == f"| triton_matmul | 0x8x8 | bfloat16 | 0.1 | 0.1 | +0.0% | {h100} | abc1234 | rows.jsonl |"
    assert body[1].startswith("| triton_matmul | 1x8x8 | bfloat16 | 0.101 | 0.1 | +1.0% |")
    assert "H200 |" not in text and "triton_gemv" not in text


def test_measured_folder_without_a_usable_row_stops_the_section(tmp_path):
    _write(tmp_path / "rows.jsonl", [_row("NVIDIA H200", "triton_matmul", 0.15, 0.16)])
    sect = _section(None, measured_section, measured=str(tmp_path))
    assert sect.unavailable == f"--measured {tmp_path}: no timed rows for a H100-SXM with a prediction beside them."
