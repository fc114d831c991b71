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
plan = load_script("validate/eight_gpu_plan")
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
    done = subprocess.run([sys.executable, str(ROOT / "scripts/validate/eight_gpu_plan.py"), "shell"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "TRAIN_CASES='tp fsdp tp-pp fsdp-tp'" in done.stdout and "FIT_GPUS='2 4'" in done.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "scripts/validate/eight_gpu_plan.py"), "run"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_bench_comm_checks_every_collective_on_8_gloo_ranks(tmp_path):
    """The 8-rank path of `mlsys bench comm` with the plan's flags, on the CPU: every collective's result checked
    (p2p pairs 0<->1 .. 6<->7), busbw with the 8-rank factors."""
    pytest.importorskip("torch.distributed")
    out = tmp_path / "rows.jsonl"
    cmd = [sys.executable, "-m", "mlsyscalc", "bench", "comm", "--nproc", "8", *plan.comm_flags(), "--max-size", "1KiB",
           "--backend", "gloo", "--out", str(out), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)["rows"]
    assert len(rows) == 7 and all(r["ok"] and r["gpus"] == 8 and r["size_bytes"] == 1024 for r in rows)
    factor = {r["collective"]: r["busbw_GBps"] / r["algbw_GBps"] for r in rows}
    assert factor["all-reduce"] == pytest.approx(1.75) and factor["all-gather"] == pytest.approx(0.875)
    assert factor["p2p"] == pytest.approx(1.0)


def test_committed_predictions_price_exactly_the_plan():
    """The files scored later cover every planned collective, size and case, and price the rows the run will write
    (a change to the plan must come with new predictions, committed before its run)."""
    from mlsyscalc.calc.comm.collectives import COLLECTIVES

    comm = json.loads((ROOT / "reports/comm/predictions_8gpu.json").read_text())
    assert comm["primary"] == "h200-nvlink-measured" and comm["sizes_bytes"] == plan.comm_sizes()
    for p in comm["predictors"]:
        priced = {(e["collective"], e["size_bytes"]) for e in comm["predictions"] if e["predictor"] == p["name"]}
        collectives = [c for c in COLLECTIVES if p["timing"] == "eager" or c != "p2p"]
        assert priced == {(c, n) for c in collectives for n in plan.comm_sizes()}, p["name"]
    assert all(e["gpus"] == 8 and e["time_s"] > 0 for e in comm["predictions"])
    train = json.loads((ROOT / "reports/train/predictions_8gpu.json").read_text())
    assert [p["row"] for p in train["predictions"]] == [plan.planned_row(c) for c in plan.TRAIN_CASES]
    assert train["measure_flags"] == plan.train_flags() and train["framework"] == "torch"
    assert len(comm["made_at_commit"]) == len(train["made_at_commit"]) == 40
    # the committed 2-GPU fit carried to 8 GPUs: busbw at 1 GiB near its documented 345 GB/s (docs/comm.md)
    at = {e["collective"]: e["busbw_GBps"] for e in comm["predictions"]
          if e["predictor"] == "h200-nvlink-measured" and e["size_bytes"] == 2**30}
    assert at["all-reduce"] == pytest.approx(345, abs=1)


def _synthetic_run(folder: Path, eager: float = 0.8, graph: float = 0.95, step: float = 1.05, memory: float = 1.02,
                   card: str = "NVIDIA H200") -> None:
    """A run folder whose 8-GPU rows are the committed predictions divided by known factors (so the error is the
    factor - 1), the committed 2- and 4-GPU rows of h200-x4-graph beside them, and 3 of the 4 training cases."""
    comm = json.loads((ROOT / "reports/comm/predictions_8gpu.json").read_text())
    old = [json.loads(x) for x in (ROOT / "reports/comm/h200-x4-graph/rows.jsonl").read_text().splitlines()]
    env = old[0]["env"] | {"gpu": card, "world_size": 8, "gpu_count_local": 8, "git_commit": _head()}
    price = {(e["predictor"], e["collective"], e["size_bytes"]): e["time_s"] for e in comm["predictions"]}
    rows = []
    for (name, c, n), t in price.items():
        if name == "h200-nvlink-measured":
            g = price.get(("graph-fit-2gpu", c, n))
            rows.append({"collective": c, "size_bytes": n, "gpus": 8, "nodes": 1, "backend": "nccl", "ok": True,
                         "time_s": t / eager, "busbw_GBps": 1.0, **({"graph_time_s": g / graph} if g else {}),
                         "measured_at": "2027-01-01T00:00:00+00:00", "env": env})
    (folder / "comm").mkdir(parents=True)
    (folder / "comm/rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + old))
    train = json.loads((ROOT / "reports/train/predictions_8gpu.json").read_text())
    lines = []
    for p in train["predictions"][:3]:
        peak = p["memory_bytes_per_gpu"] / memory
        lines.append(p["row"] | {"step_time_s": p["step_time_s"] / step, "fwd_bwd_s": 0.5, "optimizer_s": 0.01,
                                 "first_loss": 10.5, "peak_bytes_per_rank": [peak * 0.9] * 7 + [peak],
                                 "env": {"device": card, "torch": "2.11.0+cu130", "nccl": "2.28.9", "commit": _head()}})
    (folder / "train").mkdir()
    (folder / "train/train_rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    steps = [{"step": s, "exit": 1 if s == "train-fsdp-tp" else 0, "at_s": 0, "wall_s": 5, "limit_s": 100}
             for s in STEP_NAMES]
    (folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))


def _head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_score_writes_both_pages_with_the_known_errors(tmp_path):
    pytest.importorskip("scipy")
    score = load_script("validate/score_8gpu")
    run, reports = tmp_path / "run", tmp_path / "reports"
    _synthetic_run(run)
    score.main([str(run), "--reports", str(reports)])
    comm = (reports / "comm/runs/h200-x8-heldout/README.md").read_text()
    # eager rows at predicted / 0.8: every point -20.0%; graph rows at predicted / 0.95: -5.0%
    assert "0 of 77 (collective, size) points within 10%" in comm
    primary = comm[comm.index("### `h200-nvlink-measured` (primary)"):comm.index("### `shared-fit-2+4gpu`")]
    assert "| all | 77 | 0 | 20.0% | 20.0% | -20.0% |" in primary
    graph = comm[comm.index("### `graph-fit-2gpu`"):]
    assert "| all | 66 | 66 | 5.0% | 5.0% | -5.0% |" in graph
    assert "HELD OUT" in comm and "committed in" in comm and "fitted after the run" in comm
    # refitted from the same committed 2-GPU rows, the fit code gives back the committed spec: -20.0% again
    refit = comm[comm.index("### `shared-fit-2gpu`"):comm.index("### `graph-fit-2gpu`: device fit (no host floor, "
                                                                 "sizes >= 1 MiB) of the 2-GPU CUDA-graph rows of this")]
    assert "| all | 77 | 0 | 20.0% | 20.0% | -20.0% |" in refit
    assert (reports / "comm/runs/h200-x8-heldout/rows.jsonl").is_file()
    train = (reports / "train/runs/h200-x8-heldout/README.md").read_text()
    tp = next(x for x in train.splitlines() if x.startswith("| tp |"))
    assert "TP 8" in tp and "+5.0%" in tp and "+2.0%" in tp  # the step at predicted / 1.05, the largest rank / 1.02
    assert "| fsdp-tp | TP 2 x FSDP2 4 |" in train and "no row" in train and "train-fsdp-tp: exit 1" in train
    assert "| step time | 3 | 3 (within 10%) | 5.0% | 5.0% | +5.0% |" in train
    assert "| peak memory | 3 | 3 (within 3%) | 2.0% | 2.0% | +2.0% |" in train


def test_score_refuses_bad_input_with_exit_2(tmp_path, capsys):
    score = load_script("validate/score_8gpu")

    def fails(*args: str) -> str:
        with pytest.raises(SystemExit) as stop:
            score.main([*args, "--reports", str(tmp_path / "reports")])
        assert stop.value.code == 2
        return capsys.readouterr().err

    assert "is not a folder" in fails(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    assert "nothing to score" in fails(str(tmp_path / "empty"))
    _synthetic_run(tmp_path / "h100", card="NVIDIA H100 80GB HBM3")
    assert "the predictions are for NVIDIA H200" in fails(str(tmp_path / "h100"))
    (tmp_path / "bad.json").write_text('{"predictions": []}')
    assert "no predictors" in fails(str(tmp_path / "h100"), "--comm-predictions", str(tmp_path / "bad.json"))
    assert not (tmp_path / "reports").exists()


def test_score_keeps_cpu_dry_runs_out_of_reports(tmp_path, capsys):
    score = load_script("validate/score_8gpu")
    run = tmp_path / "dry"
    (run / "comm").mkdir(parents=True)
    row = {"collective": "all-reduce", "size_bytes": 1024, "gpus": 8, "nodes": 1, "backend": "gloo", "ok": True,
           "time_s": 1e-4, "env": {"gpu": "cpu (gloo)"}}
    (run / "comm/rows.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(SystemExit) as stop:
        score.main([str(run)])
    assert stop.value.code == 2 and "outside reports/" in capsys.readouterr().err
    assert not (ROOT / "reports/comm/runs/cpu-x8-heldout").exists()
    score.main([str(run), "--reports", str(tmp_path / "out")])
    assert "8 x cpu" in (tmp_path / "out/comm/runs/cpu-x8-heldout/README.md").read_text()
