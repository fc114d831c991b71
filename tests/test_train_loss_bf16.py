"""`--loss bf16` (--framework torch): cross-entropy on the bf16 logits, no fp32 upcast.

Memory against the one-H200 measurement of experiments/probe_torch_loss.py (committed rows); time and memory never
above the fp32 loss's; the option refused, exit 2, where it prices nothing real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsyscalc.calc.memory.training import TrainOptions, default_bytes

ROWS = json.loads((Path(__file__).resolve().parents[1] / "experiments/probe_torch_loss_h200/torch_loss_h200.json")
                  .read_text())["rows"]
TORCH = ("--framework", "torch", "--zero", "3", "--gpus", "8", "--seq", "4096", "--global-batch", "64")


@pytest.mark.parametrize("loss", ["fp32", "bf16"])
def test_logit_bytes_are_the_measured_peak(loss):
    """Per logit element, the loss's temporaries plus its kept log-probs are what max_memory_allocated added."""
    b = default_bytes(TrainOptions(framework="torch", loss=loss, dtype="bf16"))
    measured = {round(r["bytes_per_element"], 2) for r in ROWS if r["variant"] == loss}
    assert measured == {b["logits"] + b["logits_saved"]}


def test_bf16_loss_is_cheaper_in_time_and_memory(run_cli):
    fp32, bf16 = (run_cli.json("train", "llama3-8b", *TORCH, "--loss", loss) for loss in ("fp32", "bf16"))
    assert 0 < bf16["step_time_s"] < fp32["step_time_s"]
    mem = {k: (fp32["memory"]["detail"][k], bf16["memory"]["detail"][k]) for k in fp32["memory"]["detail"]}
    assert mem["temporaries_logits_bytes"][1] * 3 == mem["temporaries_logits_bytes"][0]  # 4 of 12 bytes an element
    assert all(b <= a for a, b in mem.values())
    assert sum(bf16["memory"]["breakdown"].values()) < sum(fp32["memory"]["breakdown"].values())


def test_bf16_loss_reads_and_writes_18_bytes_a_logit_not_48(run_cli):
    def loss_bytes(loss: str) -> float:
        d = run_cli.json("roofline", "model", "llama3-8b", "--phase", "train", "--impl", "torch", "--batch", "1",
                         "--seq", "4096", "--loss", loss)
        return sum((o["read_bytes"] + o["write_bytes"]) * o["count"] for o in d["ops"] if o["name"].startswith("loss."))

    elements = 4096 * 128256
    assert loss_bytes("bf16") / elements == pytest.approx(18, rel=1e-3)
    assert loss_bytes("fp32") / elements == pytest.approx(48, rel=1e-3)


@pytest.mark.parametrize("extra", [("--framework", "megatron"), ("--framework", "torch", "--dtype", "fp8"),
                                   ("--framework", "torch", "--tp", "2"), ("--framework", "torch", "--dtype", "mxfp8")])
def test_bf16_loss_is_refused_where_it_prices_nothing_real(run_cli, extra):
    code, _, err = run_cli("train", "llama3-8b", "--gpus", "8", "--loss", "bf16", *extra)
    assert code == 2 and "--loss bf16" in err


def test_roofline_refuses_bf16_loss_outside_torch_training(run_cli):
    code, _, err = run_cli("roofline", "model", "llama3-8b", "--phase", "train", "--impl", "fused", "--loss", "bf16")
    assert code == 2 and "--loss bf16" in err


def test_a_layout_that_does_not_fit_gets_a_plan_hint_the_loss_allows(run_cli):
    """The hint's search keeps the vocabulary whole on a rank (tp 1), the layouts --loss bf16 is priced for."""
    code, out, err = run_cli("train", "llama3-8b", *TORCH[:4], "--gpus", "8", "--seq", "8192", "--global-batch", "64",
                             "--micro-batch", "8", "--tp", "1", "--dp", "8", "--loss", "bf16")
    assert code == 0 and "does not fit" in err + out and "--tp 1 " in (err + out).replace("\n", " ")
