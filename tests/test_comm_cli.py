"""`mlsys comm ...` through click's CliRunner: JSON contract, totals that add up, exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_all_reduce_json(run_cli):
    data = run_cli.json("comm", "all-reduce", "--size", "1GiB", "--gpus", "8")
    assert data["size_bytes"] == 2**30 and data["gpus"] == 8 and data["cluster"] == "hgx-h100"
    assert data["time_s"] == pytest.approx(14 * 3.4e-6 + 1.75 * 2**30 / 370e9)
    assert data["algbw_GBps"] == pytest.approx(2**30 / data["time_s"] / 1e9)
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 1.75)
    assert data["time_s"] == pytest.approx(sum(p["time_s"] for p in data["phases"]))
    assert data["time_s"] == pytest.approx(data["latency_s"] + data["transfer_s"])


def test_overrides_and_hierarchical(run_cli):
    data = run_cli.json("comm", "all-gather", "--size", "256MB", "--gpus", "4", "--bandwidth", "100", "--latency", "0")
    assert data["busbw_GBps"] == pytest.approx(100)
    multi = run_cli.json("comm", "all-reduce", "--gpus", "16", "--nodes", "2", "--algo", "hierarchical",
                         "--cluster", "dgx-a100")
    assert [p["gpus"] for p in multi["phases"]] == [8, 2, 8]


def test_step_json_parts_add_up(run_cli):
    data = run_cli.json("comm", "step", "llama2-70b", "--dp", "4", "--tp", "8", "--pp", "4", "--sp",
                        "--grad-accum", "8", "--zero", "1", "--overlap", "dp,pp", "--gpus", "128")
    assert data["gpus"] == 128 and data["nodes"] == 16 and data["layout"]["zero"] == 1
    assert data["total_time_s"] == pytest.approx(sum(r["time_s"] for r in data["rows"]))
    assert data["total_bytes_per_gpu"] == pytest.approx(sum(r["bytes_per_gpu"] for r in data["rows"]))
    exposed = sum(r["time_s"] for r in data["rows"] if r["dim"] not in ("dp", "pp"))
    assert data["exposed_time_s"] == pytest.approx(exposed)
    assert data["bubble_fraction"] == pytest.approx(3 / 11)
    assert {r["dim"] for r in data["rows"]} == {"dp", "tp", "pp"}
    assert all(r["rule"] for r in data["rows"])


def test_clusters_listing(run_cli):
    names = {c["name"] for c in run_cli.json("comm", "clusters")["clusters"]}
    assert {"dgx-a100", "hgx-h100", "hgx-h200", "pcie-l40s"} <= names


@pytest.mark.parametrize("args, message", [
    (("comm", "all-reduce", "--size", "-1"), "must be a positive size"),
    (("comm", "all-reduce", "--size", "lots"), "is not a number"),
    (("comm", "all-reduce", "--gpus", "16"), "a hgx-h100 node has 8"),
    (("comm", "all-reduce", "--cluster", "hgx-h10"), "did you mean"),
    (("comm", "all-gather", "--algo", "tree"), "tree is defined for"),
    (("comm", "step", "llama2-7b", "--tp", "3"), "not divisible by 3"),
    (("comm", "step", "llama2-7b", "--dp", "2", "--tp", "2", "--gpus", "8"), "does not match"),
])
def test_bad_input_exits_2(run_cli, args, message):
    code, _, err = run_cli(*args)
    assert code == 2 and message in err


def test_zero_gpus_is_a_usage_error(run_cli):
    code, _, err = run_cli("comm", "all-reduce", "--gpus", "0")
    assert code == 2 and "--gpus" in err


def test_comm_step_is_import_light():
    probe = ("import sys, io, contextlib\nfrom mlsyscalc.cli.main import main\n"
             "sys.argv=['mlsys','comm','step','mixtral-8x7b','--dp','8','--ep','4','--json']\n"
             "buf=io.StringIO()\ntry:\n  with contextlib.redirect_stdout(buf): main()\n"
             "except SystemExit as e: assert e.code in (0, None), e.code\n"
             "print([m for m in ('torch','triton','pandas','matplotlib','scipy','numpy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")
