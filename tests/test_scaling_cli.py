"""`mlsys scaling` through click's CliRunner: JSON contract, suffix parsing, bad input, plots, imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlsyscalc.cli.main import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, ["scaling", *args])


def run_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_optimal_json_contract():
    data = run_json("optimal", "--compute", "5.76e23")
    for key in ("params", "tokens", "compute_flops", "loss", "law", "loss_law", "tokens_per_param"):
        assert isinstance(data[key], (int, float, str)), key
    assert data["law"] == "approach1" and data["compute_flops"] == 5.76e23
    assert data["params"] == pytest.approx(67e9, rel=0.03)  # Hoffmann et al. 2022, Table 3
    assert 6 * data["params"] * data["tokens"] == pytest.approx(5.76e23, rel=1e-12)
    parts = data["loss_breakdown"]
    assert parts["irreducible"] + parts["params_term"] + parts["data_term"] == pytest.approx(data["loss"])


def test_suffixes_are_accepted():
    by_params = run_json("optimal", "--params", "70B", "--law", "tpp20")
    assert by_params["params"] == 70e9 and by_params["tokens"] == pytest.approx(1.4e12)
    by_tokens = run_json("optimal", "--tokens", "1.4T", "--law", "tpp20")
    assert by_tokens["params"] == pytest.approx(70e9)
    loss = run_json("loss", "--params", "70B", "--tokens", "1.4T")
    assert loss["compute_flops"] == pytest.approx(6 * 70e9 * 1.4e12)
    # eq. (10): 1.69 + 406.4 / 70e9^0.34 + 410.7 / 1.4e12^0.28
    assert loss["loss"] == pytest.approx(1.69 + 406.4 / 70e9**0.34 + 410.7 / 1.4e12**0.28, rel=1e-12)
    assert loss["excess_loss"] >= 0


def test_table_shows_approach3_disagreement():
    data = run_json("table", "--law", "approach3")
    gopher = [r for r in data["rows"] if r["compute_flops"] == 5.76e23][0]
    assert gopher["paper_params"] == 67e9
    assert gopher["params"] == pytest.approx(32e9, rel=0.03)
    assert gopher["params_ratio"] == pytest.approx(gopher["params"] / 67e9)
    assert len(data["own_rows"]) == 9 and data["own_rows"][0]["reference"] == "Table A3 (approach 3)"
    every = run_json("table", "--law", "all")
    assert len(every["rows"]) == 5 * 9 and {r["law"] for r in every["rows"]} == {
        "approach1", "approach2", "approach3", "epoch", "tpp20"}


def test_budget_json_and_reverse():
    data = run_json("budget", "--compute", "5.76e23", "--peak-tflops", "989", "--gpus", "1024",
                    "--mfu", "0.4", "--price-per-gpu-hour", "2")
    assert data["gpu_hours"] == pytest.approx(5.76e23 / (989e12 * 0.4) / 3600)
    assert data["cost"] == pytest.approx(2 * data["gpu_hours"])
    assert data["wall_s"] == pytest.approx(data["gpu_hours"] * 3600 / 1024)
    back = run_json("budget", "--days", str(data["wall_days"]), "--peak-tflops", "989", "--gpus", "1024")
    assert back["compute_flops"] == pytest.approx(5.76e23, rel=1e-9)


def test_budget_takes_the_peak_from_gpu_specs():
    from mlsyscalc.specs.gpu import load_gpu

    data = run_json("budget", "--compute", "1e23", "--gpu", "H100-SXM", "--dtype", "bf16", "--gpus", "8")
    assert data["peak_flops_per_s"] == load_gpu("H100-SXM").peak_flops("bf16")
    assert data["gpu_hours"] == pytest.approx(1e23 / (data["peak_flops_per_s"] * 0.4) / 3600)
    override = run_json("budget", "--compute", "1e23", "--gpu", "H100-SXM", "--peak-tflops", "500")
    assert override["peak_flops_per_s"] == 500e12
    unknown = invoke("budget", "--compute", "1e23", "--gpu", "no-such-gpu")
    assert unknown.exit_code == 2 and "unknown GPU 'no-such-gpu'" in unknown.output


@pytest.mark.parametrize("args, message", [
    (["optimal", "--compute", "0"], "compute: must be positive, got '0'"),
    (["optimal", "--compute", "-5e20"], "compute: must be positive, got '-5e20'"),
    (["optimal", "--compute", "lots"], "compute: 'lots' is not a number"),
    (["optimal", "--params", "70X"], "unknown suffix 'x' in '70X'"),
    (["optimal"], "give exactly one of compute, params or tokens"),
    (["optimal", "--compute", "1e20", "--params", "1B"], "give exactly one of compute, params or tokens"),
    (["loss", "--params", "70B", "--tokens", "0"], "tokens: must be positive, got '0'"),
    (["loss", "--params", "70B", "--tokens", "1.4T", "--law", "approach1"], "'approach1' is not one of 'approach3', 'epoch'"),
    (["budget", "--compute", "1e23"], "give --gpu NAME or --peak-tflops X"),
    (["budget", "--compute", "1e23", "--peak-tflops", "989", "--mfu", "0"], "Invalid value for '--mfu': 0.0 is not in the range 0<x<=1"),
    (["budget", "--compute", "1e23", "--peak-tflops", "989", "--mfu", "1.5"], "Invalid value for '--mfu': 1.5 is not in the range 0<x<=1"),
    (["budget", "--compute", "1e23", "--peak-tflops", "-1"], "Invalid value for '--peak-tflops': -1.0 is not in the range x>0"),
    (["budget", "--cost", "1e6", "--peak-tflops", "989"], "a cost budget needs a price per GPU-hour"),
    (["budget", "--compute", "1e23", "--peak-tflops", "989", "--gpus", "0"], "Invalid value for '--gpus': 0 is not in the range x>=1"),
    (["table", "--law", "kaplan"], "'kaplan' is not one of"),
    (["optimal", "--compute", "1e20", "--plot", "out.jpg"], "--plot out.jpg: use a .png or .svg file name"),
])
def test_bad_input_exits_2(args, message):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, suffix", [
    (["optimal", "--compute", "1e22"], ".png"),
    (["loss", "--params", "7B", "--tokens", "140B"], ".svg"),
    (["table", "--law", "all"], ".png"),
])
def test_plots_are_written(tmp_path: Path, args, suffix):
    out = tmp_path / f"figure{suffix}"
    data = run_json(*args, "--plot", str(out))
    assert data["plot"] == str(out)
    head = out.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in out.read_bytes()
    assert out.stat().st_size > 10_000


def test_calculator_commands_stay_import_light():
    code = (
        "import sys; from click.testing import CliRunner; from mlsyscalc.cli.main import cli\n"
        "for args in (['optimal', '--compute', '1e23'], ['loss', '--params', '7B', '--tokens', '1T'],"
        " ['table', '--law', 'all'], ['budget', '--compute', '1e23', '--peak-tflops', '989']):\n"
        "    assert CliRunner().invoke(cli, ['scaling', *args, '--json']).exit_code == 0\n"
        "print(sorted(m for m in ('scipy', 'matplotlib', 'torch', 'pandas', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_cites_sources():
    result = invoke("optimal", "--help")
    assert result.exit_code == 0
    for text in ("arXiv:2203.15556", "arXiv:2404.10102", "Table 3", "least squares", "C = 6ND"):
        assert text in result.output
