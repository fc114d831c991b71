"""The data-parallel gradient reduction's dtype (`--grad-reduce`): the frameworks' defaults and what it moves."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model


def _opts(**kw) -> TrainStepOptions:
    return TrainStepOptions(**{"gpus": 16, "seq": 2048, "global_batch": 16, "micro_batch": 1, **kw})


def test_defaults_follow_the_framework():
    """Megatron-LM reduces bf16 training's gradients in fp32 (arguments.py; NeMo's and Megatron-Bridge's bf16_mixed
    set grad_reduce_in_fp32); torch's FSDP (ZeRO 2-3) reduces in fp32, DDP the bf16 model's own gradients; fp8
    training's gradients are bf16 tensors reduced as bf16 training's; an fp32 model stays fp32; --grad-reduce wins."""
    assert _opts().grad_reduce_dtype() == "fp32"
    assert _opts(dtype="fp8").grad_reduce_dtype() == "fp32"
    assert _opts(framework="torch").grad_reduce_dtype() == "bf16"
    assert _opts(framework="torch", zero=3).grad_reduce_dtype() == "fp32"
    assert _opts(framework="torch").grad_reduce_dtype(zero=2) == "fp32"
    assert _opts(framework="torch", dtype="fp32").grad_reduce_dtype() == "fp32"
    assert _opts(grad_reduce="bf16").grad_reduce_dtype() == "bf16"
    assert _opts(framework="torch", zero=3, grad_reduce="bf16").grad_reduce_dtype() == "bf16"


def test_fp32_doubles_the_gradient_bytes_and_not_the_parameters():
    """ZeRO-1: the reduce-scatter moves 4 bytes a gradient in fp32, 2 in bf16; the parameter all-gather stays bf16."""
    spec, cluster = load_model("llama2-7b"), load_cluster("hgx-h100")
    rows = {g: {r.collective: r.bytes_per_gpu for r in step_comm(spec, StepOptions(dp=16, zero=1, grad_dtype=g), cluster,
                                                           parts=("dp",)).rows}
            for g in ("fp32", "bf16")}
    assert rows["fp32"]["reduce-scatter"] == pytest.approx(2 * rows["bf16"]["reduce-scatter"], rel=1e-12)
    assert rows["fp32"]["all-gather"] == rows["bf16"]["all-gather"] > 0


def test_cli_prices_and_reports_it(run_cli):
    args = ("train", "llama2-7b", "--gpus", "16", "--cluster", "hgx-h100", "--seq", "2048", "--global-batch", "16",
            "--zero", "1")
    default, bf16 = run_cli.json(*args), run_cli.json(*args, "--grad-reduce", "bf16")
    assert default["grad_reduce"] == "fp32" and bf16["grad_reduce"] == "bf16"
    assert default["comm_total_s"]["dp"] > 1.2 * bf16["comm_total_s"]["dp"]
    assert default["comm_total_s"]["tp"] == bf16["comm_total_s"]["tp"]
    code, _, err = run_cli("train", *args[1:], "--grad-reduce", "fp16")
    assert code == 2 and "--grad-reduce" in err
