"""The 2026 cards (Blackwell, Blackwell Ultra, CDNA 3/4, the export parts): every figure from a cited datasheet,
dense, and the ratios the datasheets state between them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mlsyscalc
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.gpu import COMPUTE_DTYPES, load_gpu

FOLDER = Path(mlsyscalc.__file__).parent.parent / "model_specs" / "gpus"
NEW = ("B200", "B300", "GB200", "GB300", "MI325X", "MI355X", "H20", "L20")
CITED = ("memory_GB", "memory_MiB_reported", "memory_bandwidth_GBps", "sm_count", "l2_MB", "boost_clock_MHz",
         "nvlink_GBps", "pcie_GBps", "tdp_W")


def _data(name: str) -> dict:
    return json.loads((FOLDER / f"{name}.json").read_text())


@pytest.mark.parametrize("name", NEW)
def test_every_figure_is_cited(name):
    data = _data(name)
    cites = data["citations"]
    # every tensor rate, recorded or null (a null says why), and every other figure recorded
    assert {f"peak_dense_tflops.{dtype}" for dtype in COMPUTE_DTYPES} <= set(cites)
    assert [key for key in CITED if data.get(key) is not None and key not in cites] == []
    assert "dense" in data["notes"] and data["source"]


def test_fp4_and_fp6_only_where_the_hardware_has_them():
    for name in ("B200", "B300", "GB200", "GB300", "MI355X"):
        gpu = load_gpu(name)
        assert gpu.peak_flops("fp4") > gpu.peak_flops("fp8") and gpu.peak_flops("fp6") >= gpu.peak_flops("fp8")
    for name in ("H100", "H200", "H20", "L20", "MI300X", "MI325X", "A100-80GB"):
        with pytest.raises(MlsysError, match="no fp4 peak is published"):
            load_gpu(name).peak_flops("fp4")


def test_datasheet_ratios():
    # NVIDIA: FP8/FP6 share one rate; FP4 twice it on Blackwell (HGX B200 144 | 72 PFLOPS), 14 of 18 on B300 (sparse | dense
    # per GPU), 15 PFLOPS dense on GB300; GB200 runs 2.5 PFLOPS bf16 dense (10 a superchip with sparsity / 2 / 2)
    b200, b300, gb200, gb300 = (load_gpu(n) for n in ("B200", "B300", "GB200", "GB300"))
    assert b200.peak_flops("fp4") == 2 * b200.peak_flops("fp8") == 4 * b200.peak_flops("bf16") == 9e15
    assert b300.peak_flops("fp4") == 14e15 and b300.peak_flops("fp6") == b300.peak_flops("fp8") == 4.5e15
    assert gb200.peak_flops("bf16") == 2.5e15 and gb200.peak_flops("fp4") == 10e15
    assert gb300.peak_flops("fp4") == 15e15 and gb300.memory_bytes == 288e9
    assert gb200.memory_bytes == 186e9 == pytest.approx(13.4e12 / 72, rel=0.001)
    # AMD: peak = CUs x FLOP/clk/CU x clock (CDNA 3: 2,048 dense fp16; CDNA 4: 4,096, fp8 x2, MXFP4/MXFP6 x4)
    mi325, mi355 = load_gpu("MI325X"), load_gpu("MI355X")
    assert mi325.peak_flops("bf16") == pytest.approx(304 * 2048 * 2.1e9, rel=1e-4) == load_gpu("MI300X").peak_flops("bf16")
    assert mi355.peak_flops("bf16") == pytest.approx(256 * 4096 * 2.4e9, rel=1e-4)
    assert mi355.peak_flops("fp4") == mi355.peak_flops("fp6") == pytest.approx(4 * mi355.peak_flops("bf16"), rel=1e-4)
    # the export parts: H20's tensor rate 15% of H100's with more bandwidth; L20 a third of L40S's rate
    h20 = load_gpu("H20")
    assert h20.peak_flops("bf16") / load_gpu("H100").peak_flops("bf16") == pytest.approx(0.15, abs=0.001)
    assert h20.memory_bandwidth_Bps > load_gpu("H100").memory_bandwidth_Bps
    assert load_gpu("L20").peak_flops("fp8") == pytest.approx(load_gpu("L40S").peak_flops("fp8") / 3.07, rel=0.01)


def test_gpus_command_lists_fp4_and_citations(run_cli):
    gpus = {g["name"]: g for g in run_cli.json("gpus")["gpus"]}
    assert set(NEW) <= set(gpus)
    assert gpus["GB300"]["peak_flops"]["fp4"] == 15e15 and gpus["H100-SXM"]["peak_flops"]["fp4"] is None
    assert "HGX" in gpus["B300"]["citations"]["peak_dense_tflops.fp4"]


def test_a_card_without_a_measured_ceiling_says_so(run_cli):
    args = ("train", "llama3-8b", "--gpus", "8", "--seq", "2048", "--global-batch", "8", "--json")
    gb200 = run_cli.json(*args, "--gpu", "GB200")["notes"]
    assert any("GB200: no measured ceiling; a datasheet prediction" in n for n in gb200)
    assert not any("no measured ceiling" in n for n in run_cli.json(*args, "--gpu", "H100")["notes"])
    serve = run_cli.json("serve", "llama3-8b", "--gpu", "MI355X", "--rate", "5", "--requests", "20")["notes"]
    assert any("MI355X: no measured ceiling" in n for n in serve)
