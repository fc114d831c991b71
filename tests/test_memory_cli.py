"""`mlsys memory train|infer` through click's CliRunner: JSON contract, verdicts, exit codes, plots."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_train_json_contract(run_cli):
    d = run_cli.json("memory", "train", "llama2-7b", "--seq", "4096", "--gpu", "H100-SXM")
    for key in ("total_bytes", "peak_bytes", "breakdown", "fits", "weights_bytes", "gradients_bytes",
                "optimizer_bytes", "activations_bytes", "temporaries_bytes", "bytes_per_element", "stages"):
        assert key in d
    assert sum(d["breakdown"].values()) == d["total_bytes"]
    assert d["weights_bytes"] + d["gradients_bytes"] + d["optimizer_bytes"] == 107_814_649_856
    assert d["fits"] is False and d["headroom_bytes"] < 0


def test_fsdp_alias_equals_zero_stage(run_cli):
    # --fsdp is PyTorch's FSDP: ZeRO-3 under --framework torch
    a = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--fsdp", "full_shard")
    b = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--zero", "3", "--framework", "torch")
    c = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--fsdp", "shard_grad_op")
    assert a["total_bytes"] == b["total_bytes"] and c["zero"] == 2
    assert a["framework"] == "torch"
    m = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--zero", "3")  # megatron: gradients resident
    assert (m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"]) * 8 == 107_814_649_856


def test_bytes_override_is_printed_and_used(run_cli):
    d = run_cli.json("memory", "train", "llama2-7b", "--bytes", "master=0")
    assert d["bytes_per_element"]["master"] == 0
    assert d["optimizer_bytes"] == 8 * 6_738_415_616


def test_infer_json_and_max(run_cli):
    d = run_cli.json("memory", "infer", "llama2-7b", "--context", "4096")
    assert d["kv_cache_bytes"] == 2_147_483_648 and sum(d["breakdown"].values()) == d["total_bytes"]
    m = run_cli.json("memory", "infer", "llama2-7b", "--gpu", "H100-SXM", "--max", "batch", "--reserve", "10%")
    assert m["solved_for"] == "batch" and m["max_batch"] == m["max_value"] == m["batch"] > 1
    assert m["fits"] is True and m["total_bytes"] <= m["usable_bytes"]


@pytest.mark.parametrize("args, message", [
    (["train", "llama2-7b", "--tp", "3"], "num_heads over --tp: 32 is not divisible by 3"),
    (["train", "llama2-7b", "--pp", "5"], "num_layers over --pp: 32 is not divisible by 5"),
    (["train", "llama2-7b", "--zero", "4"], "Invalid value for '--zero': 4 is not in the range 0<=x<=3"),
    (["train", "llama2-7b", "--batch", "-1"], "'--batch': -1 is not in the range x>=1"),
    (["train", "llama2-7b", "--dp", "0"], "Invalid value for '--dp': 0 is not in the range x>=1"),
    (["train", "llama2-7b", "--ep", "2"], "--ep 2: llama2-7b has no routed experts"),
    (["train", "llama2-7b", "--dp", "2", "--world-size", "8"], "rule tp*pp*dp*cp == gpus: 1*1*2*1 = 2, not --world-size 8"),
    (["train", "llama2-7b", "--fsdp", "bogus"], "--fsdp must be one of full_shard, shard_grad_op, no_shard"),
    (["infer", "llama2-7b", "--tp", "3"], "num_heads over --tp: 32 is not divisible by 3"),
    (["infer", "llama2-7b", "--dtype", "int3"], "unknown dtype 'int3'"),
    (["train", "llama2-7b", "--bytes", "nonsense=2"], "--bytes: unknown key 'nonsense'"),
])
def test_bad_input_exits_2(run_cli, args, message):
    code, _, err = run_cli("memory", *args)
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_human_formats_label_gib_and_gb(run_cli, fmt):
    code, out, _ = run_cli("memory", "infer", "llama3-8b", "--context", "8192", "--format", fmt)
    assert code == 0
    assert "1,073,741,824" in out or "1073741824" in out
    if fmt != "csv":
        assert "GiB" in out and "GB" in out


def test_plot_writes_a_file(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "zero.png"
    code, _, err = run_cli("memory", "train", "llama2-7b", "--dp", "8", "--plot", str(path), "--sweep", "zero")
    assert code == 0, err
    assert path.stat().st_size > 1000


def test_calculator_imports_no_torch():
    code = ("import sys; from mlsyscalc.cli.main import main\n"
            "try: main(['memory', 'train', 'llama2-7b', '--json'])\nexcept SystemExit: pass\n"
            "try: main(['memory', 'infer', 'llama2-7b', '--json'])\nexcept SystemExit: pass\n"
            "bad = [m for m in ('torch', 'triton', 'pandas', 'matplotlib', 'scipy') if m in sys.modules]\n"
            "print('BAD', bad) if bad else print('CLEAN')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("CLEAN")


@pytest.mark.parametrize("args, per_param, total_gib", [
    (["--no-master-weights"], 8, 60.3), ([], 16, 110.5), (["--bytes", "grad=4"], 18, 123.1),
    (["--bytes", "grad=6"], 20, 135.7),
])
def test_llama2_7b_peer_figures(run_cli, args, per_param, total_gib):
    """The assumption sets docs/memory.md names for the 50 / 110 / 113 / 125 GiB peer figures."""
    d = run_cli.json("memory", "train", "llama2-7b", *args)
    states = d["weights_bytes"] + d["gradients_bytes"] + d["optimizer_bytes"]
    assert states == per_param * 6_738_415_616
    assert round(d["total_bytes"] / 2**30, 1) == total_gib


def test_plot_sweep_skips_values_the_options_forbid(run_cli, tmp_path):
    """--offload optimizer needs ZeRO >= 1: the ZeRO sweep plots stages 1-3 instead of failing."""
    pytest.importorskip("matplotlib")
    path = tmp_path / "zero.png"
    code, _, err = run_cli("memory", "train", "gpt2", "--zero", "1", "--offload", "optimizer", "--plot", str(path))
    assert code == 0, err
    assert path.stat().st_size > 1000


@pytest.mark.parametrize("name", ["a-file/x.png", "x.nosuchformat"])
def test_unwritable_plot_exits_2(run_cli, tmp_path, name):
    pytest.importorskip("matplotlib")
    (tmp_path / "a-file").write_text("a file, not a folder")
    code, _, err = run_cli("memory", "infer", "gpt2", "--plot", str(tmp_path / name))
    assert code == 2 and "--plot" in err
