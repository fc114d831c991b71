"""The report's training sections (mlsyscalc/report/model_report_sections.py, model_report_system.py) from a
fake `mlsys memory train`, `train`, `plan` and `roofline` whose JSON is fixed here: the memory grid's cells
and figure, the lightest ZeRO stage and recomputation that fit, the layouts' rows and breakdowns, and the
per-micro-batch roofline's rows and verdict."""

from __future__ import annotations

from mlsyscalc.cli.main import COMMANDS
from mlsyscalc.report.model_report import ReportOptions
from mlsyscalc.report.model_report_build import build_report
from mlsyscalc.report.model_report_sections import memory_section, step_section
from mlsyscalc.report.model_report_system import layout_text

GiB = 2**30
PARTS = ("weights", "gradients", "optimizer", "activations", "temporaries")
ZERO = {0: 1.0, 1: 0.5, 2: 0.4, 3: 0.25}  # a share of the model states per ZeRO stage
RECOMPUTE = {"none": 40, "selective": 20, "full": 5}  # activations GiB


def _arg(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


class Fake:
    def __init__(self, usable=60, plan=None, train=None):
        self.usable, self.plan, self.train, self.calls = usable, plan, train, []

    def memory(self, zero, recompute):
        parts = {"weights": 16 * ZERO[zero], "gradients": 16 * ZERO[zero], "optimizer": 64 * ZERO[zero],
                 "activations": RECOMPUTE[recompute], "temporaries": 2}
        total = sum(parts.values())
        return {**{f"{p}_bytes": v * GiB for p, v in parts.items()}, "total_bytes": total * GiB,
                "usable_bytes": self.usable * GiB, "fits": total <= self.usable,
                "notes": ["the first note", "another"]}

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[:2] == ["memory", "train"]:
            return self.memory(int(_arg(argv, "--zero")), _arg(argv, "--recompute"))
        if argv[0] == "plan":
            return self.plan
        if argv[0] == "train":
            return self.train
        if argv[0] == "roofline":
            return {"predicted_s": 0.5, "totals": {"forward_s": 0.1, "backward_s": 0.2, "recompute_s": 0.05,
                                                   "optimizer_s": 0.01, "tp_comm_s": 0.1, "dp_comm_s": 0.04},
                    "tokens_per_s": 123456.7, "mfu": 0.4321, "bound": "compute"}
        raise AssertionError(f"unexpected command {argv}")


def _section(fake, builder, **options):
    report = build_report(ReportOptions("llama2-7b", **options), fake, (*COMMANDS, "train", "plan"), {},
                          [("s", "S", builder)])
    (sect,) = report.sections
    assert sect.unavailable is None, sect.unavailable
    return sect, "\n".join(sect.lines)


def test_memory_grid_cells_usable_memory_and_figure():
    fake = Fake(usable=60)
    sect, text = _section(fake, memory_section, gpus=16, tp=2, seq=2048, micro_batch=2)
    assert ("Per-GPU training memory in GiB, micro-batch 2 x 2,048 tokens, mixed-precision AdamW, dp 8 x tp 2 x pp 1 "
            "on H100-SXM (60 GiB usable after the reserve):") in text
    # ZeRO-0: 96 GiB of states + activations + 2; ZeRO-3: 24 + ...
    assert "| ZeRO-0 | 138 (no) | 118 (no) | 103 (no) |" in text
    assert "| ZeRO-1 | 90 (no) | 70 (no) | 55 (fits) |" in text
    assert "| ZeRO-3 | 66 (no) | 46 (fits) | 31 (fits) |" in text
    assert "| ZeRO stage | recompute none | recompute selective | recompute full |" in text
    assert "- the first note" in text and "another" not in text
    grid = [c for c in fake.calls if c[:2] == ["memory", "train"]]
    assert [(_arg(c, "--zero"), _arg(c, "--recompute")) for c in grid] == [
        (str(z), r) for z in (0, 1, 2, 3) for r in ("none", "selective", "full")]
    assert grid[0] == ["memory", "train", "llama2-7b", "--batch", "2", "--seq", "2048", "--dp", "8", "--tp", "2",
                       "--pp", "1", "--gpu", "H100-SXM", "--zero", "0", "--recompute", "none"]
    (fig,) = sect.figures
    assert fig.title == ("llama2-7b: training memory per GPU on H100-SXM, dp 8 x tp 2 x pp 1, micro-batch 2 x 2048, "
                         "by ZeRO stage and activation recomputation")
    assert fig.data["usable_bytes"] == 60 * GiB and len(fig.data["bars"]) == 12
    assert fig.data["bars"][5] == {"zero": 1, "recompute": "full", "weights": 8 * GiB, "gradients": 8 * GiB,
                                   "optimizer": 32 * GiB, "activations": 5 * GiB, "temporaries": 2 * GiB}


PLAN = {"candidates": [
    {"layout": {"tp": 4, "pp": 2, "dp": 2, "decoder_first_pipeline_num_layers": 15}, "step_time_s": 2.5, "mfu": 0.41,
     "tokens_per_s": 1.5e6, "memory_bytes_per_gpu": 50 * GiB,
     "breakdown": {"compute_s": 2.0, "bubble_s": 0.4, "bubble_fraction": 0.16, "label": "x"}},
    {"layout": {"tp": 8, "pp": 1, "dp": 2}, "step_time_s": 2.75, "mfu": 0.372, "tokens_per_s": 1.4e6,
     "memory_bytes_per_gpu": 40 * GiB}], "searched": 1234, "feasible": 56}


def test_plan_rows_the_best_layouts_breakdown_and_the_roofline_of_the_lightest_fit():
    fake = Fake(usable=60, plan=PLAN)
    sect, text = _section(fake, step_section, gpus=16, seq=2048)
    assert ("The 2 fastest layouts of 16 GPUs that fit, global batch 1,024 x 2,048 tokens (searched 1,234 layouts, "
            "56 feasible):") in text
    assert "| rank | layout | step time | MFU | tokens/s | memory per GPU |" in text
    assert "| 1 | tp 4, pp 2 (first 15), dp 2 | 2.5 s | 41.0% | 1,500,000 | 50 GiB |" in text
    assert "| 2 | tp 8, pp 1, dp 2 | 2.75 s | 37.2% | 1,400,000 | 40 GiB |" in text
    assert "Layout 1's step time, part by part (the same `mlsys plan` pricing as the table):" in text
    assert "| compute_s | 2 s |" in text and "| bubble_s | 400 ms |" in text and "| bubble_fraction | 0.16 |" in text
    assert "| label |" not in text  # only numbers
    # the lightest fit: ZeRO-1 with full recomputation (55 GiB of 60) is the first that fits in stage order
    roofline = next(c for c in fake.calls if c[0] == "roofline")
    assert _arg(roofline, "--zero") == "1" and _arg(roofline, "--recompute") == "full" and _arg(roofline, "--dp") == "16"
    assert "--no-fit-check" in roofline and _arg(roofline, "--batch") == "1" and _arg(roofline, "--seq") == "2048"
    assert ("Roofline of one training step of micro-batch 1 x 2,048 tokens on a tensor-parallel group of 1 x H100-SXM, "
            "gradients reduced over dp 16, ZeRO-1, recompute full (the lightest setting that fits); kernels and "
            "collectives back to back.") in text
    for row in ("| step time of one micro-batch | 500 ms |", "| forward kernels | 100 ms |",
                "| backward kernels | 200 ms |", "| recomputation | 50 ms |", "| optimizer | 10 ms |",
                "| tensor-parallel communication | 100 ms |", "| data-parallel communication | 40 ms |",
                "| tokens/s over the 16 data-parallel replicas | 123,457 |", "| MFU | 43.2% |", "| bound | compute |",
                "| memory per GPU (GiB) | 55 |", "| fits | yes |"):
        assert row in text, row
    assert text.index("The 2 fastest layouts") < text.index("Roofline of one training step")


def test_nothing_fits_is_a_what_if_and_no_layout_says_so():
    fake = Fake(usable=10, plan={"candidates": [], "searched": 10, "feasible": 0})
    _, text = _section(fake, step_section, gpus=8)
    assert "The 0 fastest layouts of 8 GPUs that fit" in text and "No layout fits." in text
    roofline = next(c for c in fake.calls if c[0] == "roofline")
    assert _arg(roofline, "--zero") == "3" and _arg(roofline, "--recompute") == "full"
    assert "ZeRO-3, recompute full (nothing fits; shown as a what-if)" in text
    assert "| fits | no |" in text


def test_a_given_layout_runs_train_and_names_the_pipeline_the_roofline_leaves_out():
    train = {"step_time_s": 1.234, "tokens_per_s": 3_400_000.0, "tflops_per_gpu": 401.5, "mfu": 0.456, "hfu": 0.5,
             "memory_bytes_per_gpu": 60 * GiB, "fits": True, "layout": {"tp": 2, "pp": 2, "dp": 4},
             "breakdown": {"compute_s": 1.0, "exposed_comm_s": 0.234, "share": 0.5}}
    fake = Fake(usable=60, train=train)
    sect, text = _section(fake, step_section, gpus=16, tp=2, pp=2)
    call = next(c for c in fake.calls if c[0] == "train")
    assert call == ["train", "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--seq", "4096", "--global-batch", "1024",
                    "--micro-batch", "1", "--tp", "2", "--pp", "2", "--dp", "4"]
    assert "The layout given (tp 2, pp 2, dp 4), global batch 1,024 x 4,096 tokens:" in text
    for row in ("| step time | 1.23 s |", "| tokens/s (all GPUs) | 3,400,000 |", "| TFLOP/s per GPU | 401.5 |",
                "| MFU | 45.6% |", "| HFU | 50.0% |", "| memory per GPU | 60 GiB |", "| fits | yes |",
                "| compute_s | 1 s |", "| exposed_comm_s | 234 ms |", "| share | 0.5 |"):
        assert row in text, row
    assert "; 2 pipeline stages are not modelled by the roofline)" in text
    assert not [c for c in fake.calls if c[0] == "plan"]
    assert sect.lines[-1] == "" and "```bash" in sect.lines  # the commands under the section


def test_layout_text_joins_an_uneven_split_to_pp():
    assert layout_text({"tp": 8, "pp": 2, "zero": 1}) == "tp 8, pp 2, zero 1"
    assert layout_text({"tp": 1, "pp": 4, "decoder_first_pipeline_num_layers": 21,
                        "decoder_last_pipeline_num_layers": 19, "account_for_loss_in_pipeline_split": True,
                        "account_for_embedding_in_pipeline_split": False}) == "tp 1, pp 4 (first 21+last 19+loss)"
