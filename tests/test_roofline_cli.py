"""`mlsys roofline` through click's CliRunner: JSON keys, exit codes, calibration, plots, import cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_op_matmul_json(run_cli):
    data = run_cli.json("roofline", "op", "matmul", "--m", "4096", "--n", "4096", "--k", "4096", "--gpu", "H200")
    assert data["flops"] == 2 * 4096**3
    assert data["bytes"] == 3 * 4096 * 4096 * 2
    assert data["bound"] == "compute"
    assert data["intensity_flops_per_byte"] == pytest.approx(2 * 4096 / 6)
    assert data["predicted_s"] == pytest.approx(data["compute_s"] + data["overhead_s"])
    assert data["tiling"]["waves"] == 4
    assert data["ceilings"]["source"] == "datasheet" and data["ceilings"]["sm_count"] == 132


@pytest.mark.parametrize("args,bound", [
    (["attention", "--seq", "1", "--kv-len", "8192", "--heads", "32", "--kv-heads", "8"], "memory"),
    (["attention", "--seq", "4096", "--causal"], "compute"),
    (["elementwise", "--elements", "256M", "--inputs", "2"], "memory"),
    (["norm", "--tokens", "8192"], "memory"),
    (["softmax"], "memory"),
    (["rotary"], "memory"),
    (["embedding", "--tokens", "1"], "overhead"),
])
def test_op_kinds(run_cli, args, bound):
    data = run_cli.json("roofline", "op", *args)
    assert data["bound"] == bound
    assert data["predicted_s"] >= data["roofline_s"]


def test_model_shortcut_equals_model_subcommand(run_cli):
    args = ["--phase", "decode", "--context", "128", "--gpu", "a100-80gb"]
    short = run_cli.json("roofline", "llama2-7b", *args)
    full = run_cli.json("roofline", "model", "llama2-7b", *args)
    assert short == full
    assert short["predicted_s"] == short["totals"]["tpot_s"]
    assert short["bound"] == "memory" and short["totals"]["tpot_s"] > 6.6e-3
    assert {"name", "predicted_s", "bound", "intensity_flops_per_byte", "count", "total_s"} <= set(short["ops"][0])
    assert short["totals"]["predicted_s"] == pytest.approx(sum(op["total_s"] for op in short["ops"]))


def test_model_prefill_train_and_tp(run_cli):
    prefill = run_cli.json("roofline", "llama2-7b", "--seq", "512", "--gpu", "a100-80gb")
    assert prefill["phase"] == "prefill" and "ttft_s" in prefill["totals"]
    train = run_cli.json("roofline", "llama2-7b", "--phase", "train", "--seq", "1024", "--batch", "2")
    assert "step_s" in train["totals"] and 0 < train["mfu"] < 1
    assert {op["pass"] for op in train["ops"]} == {"forward", "backward", "optimizer"}
    tp = run_cli.json("roofline", "llama3-70b", "--phase", "decode", "--context", "1024", "--tp", "8")
    assert tp["totals"]["comm_s"] > 0 and tp["comm"][0]["collective"] == "all-reduce"


@pytest.mark.parametrize("args,message", [
    (["roofline", "llama2-7b", "--gpu", "H300"], "did you mean"),
    (["roofline", "llama2-7b", "--tp", "3"], "not divisible"),
    (["roofline", "llama2-7b", "--phase", "decode"], "--context"),
    (["roofline", "llama2-70b", "--phase", "decode", "--context", "10"], "does not fit"),
    (["roofline", "llama2-7b", "--efficiency", "matmul=2"], "efficiency"),
    (["roofline", "llama2-7b", "--sweep", "seq=1,2"], "batch="),
    (["roofline", "op", "matmul", "--plot", "x.pdf"], ".png or .svg"),
])
def test_bad_input_exits_2(run_cli, args, message):
    code, _, err = run_cli(*args)
    assert code == 2
    assert message in err


def test_sweep_json(run_cli):
    data = run_cli.json("roofline", "llama2-7b", "--phase", "decode", "--context", "1",
                        "--sweep", "batch=1,2,4,8,16,32,64,128,256,512")
    points = data["sweep"]
    assert [p["batch"] for p in points] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    rates = [p["tokens_per_s"] for p in points]
    assert rates == sorted(rates)
    cross = data["compute_bound_batch"]
    assert all(p["bound"] == ("compute" if p["batch"] >= cross else "memory") for p in points)


def test_calibration_option(run_cli, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"gpu": "NVIDIA H200", "sm_count": 132, "peak_flops": {"bf16": 732e12},
                               "bandwidth_Bps": {"copy": 4.26e12}, "env": {}, "measured_at": "now"}))
    data = run_cli.json("roofline", "op", "matmul", "--calibration", str(cal))
    assert data["gpu"] == "H200"
    assert data["ceilings"]["matmul_flops_per_s"] == 732e12
    assert data["ceilings"]["bandwidth_Bps"] == pytest.approx(4.26e12)
    assert data["ceilings"]["source"] == str(cal)


def test_plots_are_written(run_cli, tmp_path):
    png, svg = tmp_path / "roof.png", tmp_path / "sweep.svg"
    code, _, err = run_cli("roofline", "llama2-7b", "--phase", "decode", "--context", "64", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = run_cli("roofline", "llama2-7b", "--phase", "decode", "--context", "64",
                           "--sweep", "batch=1,4,16,64", "--plot", str(svg))
    assert code == 0, err
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "tokens/s" in text


def test_roofline_cli_is_import_light_and_fast():
    probe = (
        "import sys, time; t = time.process_time();"
        "from mlsyscalc.cli.main import main\n"
        "try:\n main(['roofline', 'llama2-7b', '--phase', 'decode', '--context', '128', '--sweep',"
        " 'batch=' + ','.join(str(b) for b in range(1, 65)), '--json'])\n"
        "except SystemExit: pass\n"
        "heavy = [m for m in ('torch', 'triton', 'pandas', 'matplotlib', 'scipy') if m in sys.modules]\n"
        "print('RESULT', heavy, time.process_time() - t, file=sys.stderr)"
    )
    err = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stderr
    _, heavy, seconds = err.strip().splitlines()[-1].split(" ", 2)
    assert heavy == "[]"
    assert float(seconds) < 1.5  # CPU seconds of a 64-point sweep, CLI import included
