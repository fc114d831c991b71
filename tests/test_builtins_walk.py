"""Every built-in through every calculator command (CliRunner, --json): each answers, with numbers.

Large models run on H200s with tensor parallelism (and fp8 weights where bf16 would not fit eight),
so that the inference commands price a deployment that fits rather than refusing it.
"""

from __future__ import annotations

import pytest

from mlsyscalc import count_params, load_model
from mlsyscalc.specs.lookup import builtin_configs

H200_BYTES = 141e9


def _deployment(name: str) -> tuple[str, str]:
    """(tp, dtype): the fewest of 1, 2, 4, 8 H200s that hold the weights at 60% of memory, in bf16,
    else fp8 on eight; tp divides the query heads (calc.parallel.tensor_parallel's rule)."""
    spec = load_model(name)
    total = count_params(spec).total
    for dtype, size in (("bf16", 2), ("fp8", 1)):
        for tp in (1, 2, 4, 8):
            if spec.num_heads % tp == 0 and total * size / tp < 0.6 * H200_BYTES:
                return str(tp), dtype
    raise AssertionError(f"{name} fits no H200 layout")


def _expert_tp(name: str) -> list[str]:
    """--etp 1 where the routed experts have biases: Megatron-Core trains those only without expert TP."""
    moe = load_model(name).moe
    return ["--etp", "1"] if moe is not None and moe.expert_bias else []


def _commands(name: str) -> dict[str, list[str]]:
    tp, dtype = _deployment(name)
    gpu = ["--gpu", "h200"]
    dp = str(8 // int(tp))
    return {
        "params": ["params", name],
        "flops": ["flops", name, "--seq", "256"],
        "flops decode": ["flops", name, "--phase", "decode", "--context", "1000"],
        "memory infer": ["memory", "infer", name, "--context", "1000", "--tp", tp, "--dtype", dtype, *gpu],
        "memory train": ["memory", "train", name, "--seq", "1024", "--tp", tp, *gpu],
        "roofline prefill": ["roofline", name, "--seq", "512", "--tp", tp, "--dtype", dtype, *gpu],
        "roofline decode": ["roofline", name, "--phase", "decode", "--context", "1000", "--batch", "8", "--tp", tp,
                            "--dtype", dtype, *gpu],
        "roofline train": ["roofline", name, "--phase", "train", "--seq", "256", "--tp", tp, "--no-fit-check", *gpu],
        "train": ["train", name, "--gpus", "8", "--tp", tp, "--dp", dp, "--seq", "512", "--global-batch", dp, *gpu,
                  *_expert_tp(name)],
        # serve on a B200: its fit of the roofline (calc.serve.iteration) breaks where Hopper's few-CTA cap on a
        # skinny GEMM ends between its fit points (gemma2-9b's k_proj at 8 and 17 tokens on an H100 or H200)
        "serve": ["serve", name, "--rate", "2", "--requests", "8", "--prompt-len", "64", "--output-len", "4",
                  "--tp", tp, "--dtype", dtype, "--gpu", "b200"],
    }


KEYS = {"params": "total_params", "flops": "forward_flops", "flops decode": "forward_flops",
        "memory infer": "kv_cache_bytes", "memory train": "total_bytes", "roofline prefill": "predicted_s",
        "roofline decode": "predicted_s", "roofline train": "predicted_s", "train": "step_time_s",
        "serve": "ttft_p50_s"}


@pytest.mark.parametrize("name", sorted(builtin_configs()))
def test_every_command_answers_for_every_builtin(run_cli, name):
    for what, argv in _commands(name).items():
        data = run_cli.json(*argv)
        value = data.get(KEYS[what], data.get("totals", {}).get(KEYS[what]))
        assert isinstance(value, (int, float)) and value > 0, (what, argv, value)
