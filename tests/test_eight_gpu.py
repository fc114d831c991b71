"""Issue 42, the 8-GPU run: its plan, the device script's bookkeeping, the committed predictions and the scoring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
plan = load_script("eight_gpu_plan")
STEP_NAMES = ["comm-8", "train-tp", "train-fsdp", "train-tp-pp", "train-fsdp-tp", "comm-2", "comm-4"]


def _stubbed_run(tmp_path: Path, **env: str) -> tuple[list[dict], str]:
    """scripts/device_8gpu.sh with a python3 that runs the plan and fails (exit 3) at everything else."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text(f'#!/bin/sh\ncase "$1" in */eight_gpu_plan.py) exec {sys.executable} "$@" ;; esac\n'
                                  'echo "stub python3 $*"\nexit 3\n')
    (stub / "python3").chmod(0o755)
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(ROOT / "scripts/device_8gpu.sh")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "OUT": str(out), **env})
    assert done.returncode == 0, done.stderr
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    return steps, (out / "log.txt").read_text()


def test_device_script_runs_every_step_of_the_plan_through_failures(tmp_path):
    """A step that fails is recorded and the next one runs: the 8-GPU sweep, the four cases, then 2 and 4 GPUs,
    each with the plan's flags."""
    steps, log = _stubbed_run(tmp_path)
    assert [s["step"] for s in steps] == STEP_NAMES
    assert all(s["exit"] == 3 and s["limit_s"] <= 150 for s in steps)
    assert "bench comm --nproc 8 --min-size 1KiB --max-size 1GiB --graph --backend nccl" in log
    assert "--nproc_per_node 8 " in log and "--case tp-pp" in log
    assert "--model llama2-7b --seq 2048 --seqs-per-gpu 2 --warmup 3 --steps 8 --no-host-probe" in log


def test_device_script_starts_nothing_once_the_budget_is_spent(tmp_path):
    steps, _ = _stubbed_run(tmp_path, BUDGET_S="10")
    assert [s["step"] for s in steps] == STEP_NAMES and all(s["skipped"] == "budget spent" for s in steps)


def test_plan_prints_bash_and_refuses_anything_else():
    done = subprocess.run([sys.executable, str(ROOT / "scripts/eight_gpu_plan.py"), "shell"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "TRAIN_CASES='tp fsdp tp-pp fsdp-tp'" in done.stdout and "FIT_GPUS='2 4'" in done.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "scripts/eight_gpu_plan.py"), "run"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr
