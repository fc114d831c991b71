"""Inputs a demanding user tried that must exit 2 (one clear line, no traceback) instead of giving
a number: malformed calibration values, fractional sweep batches, positions a model cannot
embed, tensor parallelism wider than any node of the GPU, training 4-bit weights."""

from __future__ import annotations

import json

import pytest

from mlsyscalc import MlsysError
from mlsyscalc.calc.calibration import load_ceilings


def _cal(tmp_path, **changes):
    record = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "peak_flops": {"bf16": 700e12},
              "bandwidth_Bps": {"read": 3.1e12, "write": 2.9e12}}
    record.update(changes)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(record).replace('"INF"', "Infinity"))
    return path


@pytest.mark.parametrize("changes,match", [
    ({"sm_count": -5}, "sm_count"),  # was accepted: negative waves, compute time < 0
    ({"sm_count": 0}, "sm_count"),  # was silently replaced by the datasheet's
    ({"sm_count": "x"}, "sm_count"),  # was exit 1 (ValueError)
    ({"sm_count": 13.5}, "sm_count"),  # was truncated to 13
    ({"peak_flops": {"bf16": "INF"}}, "finite"),  # was accepted: every matmul took 0 s
    ({"bandwidth_Bps": {"read": True, "write": 2.9e12}}, "number"),  # was 1 B/s
])
def test_malformed_calibration_values_are_errors(tmp_path, changes, match):
    with pytest.raises(MlsysError, match=match):
        load_ceilings(None, _cal(tmp_path, **changes))


def test_malformed_calibration_exits_2_through_the_cli(run_cli, tmp_path):
    code, _, err = run_cli("roofline", "gpt2", "--calibration", str(_cal(tmp_path, sm_count="x")))
    assert code == 2 and "sm_count" in err and "Traceback" not in err


def test_fractional_sweep_batch_is_an_error(run_cli):
    code, _, err = run_cli("roofline", "gpt2", "--sweep", "batch=1,1.5")  # was silently batch 1
    assert code == 2 and "whole number" in err


@pytest.mark.parametrize("args", [
    ["--phase", "decode", "--context", "1024"],  # 1025 positions > gpt2's 1024 learned ones
    ["--phase", "prefill", "--seq", "5000"],
    ["--phase", "train", "--seq", "2048"],
])
def test_learned_positions_bound_the_sequence(run_cli, args):
    code, _, err = run_cli("roofline", "gpt2", *args)
    assert code == 2 and "1024" in err and "position" in err
    assert run_cli("roofline", "gpt2", "--phase", "decode", "--context", "1023")[0] == 0


def test_tp_beyond_every_node_of_the_gpu_is_an_error(run_cli):
    # H100-SXM nodes (hgx-h100) hold 8 GPUs: --tp 16 used to fall back to an NVLink ring estimate
    code, _, err = run_cli("roofline", "llama3.1-405b", "--tp", "16", "--phase", "decode", "--context", "10",
                           "--dtype", "fp8")
    assert code == 2 and "8 GPUs" in err


@pytest.mark.parametrize("dtype", ["int4", "nf4"])
def test_training_4bit_weights_is_an_error(run_cli, dtype):
    code, _, err = run_cli("roofline", "gpt2", "--phase", "train", "--seq", "512", "--dtype", dtype)
    assert code == 2 and "weight-only" in err
