"""`mlsys serve` passes each option to the simulator it names, in the unit it names: the CLI's JSON equals
calc.serve.simulate called here with the options spelled out, and each option shows up in `options`.
Options that conflict or do not apply exit 2 with the sentence docs/cli.md promises."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, simulate
from mlsyscalc.calc.serve.slo import parse_slo
from mlsyscalc.calc.serve.workload import parse_length
from mlsyscalc.specs.lookup import load_model

ARGS = ("serve", "llama2-7b", "--requests", "24", "--rate", "6", "--scheduler", "sarathi", "--max-seqs", "12",
        "--chunk", "768", "--block-size", "32", "--gpu-memory-utilization", "0.8", "--preemption", "swap",
        "--iteration-overhead-us", "150", "--iteration-overhead-per-seq-us", "7", "--tp", "2", "--kv-dtype", "fp8",
        "--seed", "3", "--burstiness", "0.5", "--prompt-len", "uniform:100,900", "--output-len", "40",
        "--slo", "ttft_p90=0.3", "--gpu", "h100")


def test_serve_json_is_the_simulator_called_with_the_options():
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli
    import json

    data = json.loads(CliRunner().invoke(cli, [*ARGS, "--json"]).stdout)
    opts = ServeOptions(scheduler="sarathi", max_seqs=12, chunk=768, block_size=32, gpu_memory_utilization=0.8,
                        preemption="swap", tp=2, kv_dtype="fp8", slo=parse_slo("ttft_p90=0.3"),
                        iteration_overhead_s=150e-6, iteration_overhead_per_seq_s=7e-6)
    work = WorkloadSpec(parse_length("uniform:100,900", "p"), parse_length("40", "o"), 6.0, 24, 3, 0.5, 0, 0)
    result = simulate(load_model("llama2-7b"), load_ceilings("h100", None), work.build(), opts)
    for key, value in result.metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert data[key] == pytest.approx(value, rel=1e-12), key
    assert data["kv_blocks"] == result.kv.blocks and data["kv_block_bytes"] == result.kv.block_bytes
    assert data["kv_block_bytes"] == 32 * 32 * 2 * (4096 // 2) * 1   # block x layers x K,V x hidden/tp x fp8
    o = data["options"]
    assert (o["scheduler"], o["max_seqs"], o["chunk"], o["block_size"], o["preemption"], o["tp"], o["kv_dtype"]) == (
        "sarathi", 12, 768, 32, "swap", 2, "fp8")
    assert o["gpu_memory_utilization"] == 0.8
    assert o["iteration_overhead_s"] == pytest.approx(150e-6) and o["iteration_overhead_per_seq_s"] == pytest.approx(7e-6)
    assert data["workload"] == "rate 6/s, burstiness 0.5, seed 3" and data["requests"] == 24
    assert data["slo"]["terms"][0]["metric"] == "ttft" and data["slo"]["terms"][0]["percentile"] == 90


@pytest.mark.parametrize("extra,message", [
    (["--chunk", "512"], "--chunk does not apply with --scheduler vllm-v1"),
    (["--scheduler", "sarathi", "--max-batch-tokens", "4096"], "--max-batch-tokens does not apply with --scheduler sarathi"),
    (["--spec-k", "3"], "--spec-k does not apply without --draft"),
    (["--accept", "0.5"], "--accept does not apply without --draft"),
    (["--max-gpus", "4"], "--max-gpus does not apply without --search or --min-gpus"),
    (["--scheduler", "orca", "--preemption", "swap"], "--preemption does not apply with --scheduler orca"),
    (["--sweep", "rate=1,2"], "--rate and --sweep conflict: give one of them"),
    (["--max-rate"], "--max-rate searches the rate: it does not take --rate or --trace"),
    (["--max-rate", "--min-gpus"], "--max-rate and --min-gpus ask different questions: give one of them"),
    (["--search", "--price-per-gpu-hour", "2", "--slo", "ttft_p99=1"], "--price-per-gpu-hour prices one layout: not "
                                                                       "with --search"),
    (["--prompt-len", "csv:only"], "--prompt-len: expected csv:FILE:COLUMN, got 'csv:only'"),
])
def test_serve_refusals(run_cli, extra, message):
    code, out, err = run_cli("serve", "llama2-7b", "--requests", "10", "--rate", "2", *extra)
    assert code == 2 and out == "" and message in " ".join(err.split()), err


def test_serve_sweep_rate_rules(run_cli):
    code, _, err = run_cli("serve", "llama2-7b", "--requests", "10", "--sweep", "rate=1,-2")
    assert code == 2 and "--sweep: a rate must be a positive finite number, got -2" in err
    code, _, err = run_cli("serve", "llama2-7b", "--requests", "10", "--sweep", "dt=1,2")
    assert code == 2 and "--sweep expects rate=R1,R2,..., got 'dt=1,2'" in err
    code, _, err = run_cli("serve", "llama2-7b", "--requests", "10", "--sweep", "rate=1,x")
    assert code == 2 and "--sweep: cannot parse the rates in 'rate=1,x'" in err
    code, _, err = run_cli("serve", "llama2-7b", "--requests", "10", "--sweep", "rate=" + ",".join(["1"] * 10_001))
    assert code == 2 and "--sweep: 10,001 rates; at most" in err
    code, _, err = run_cli("serve", "llama2-7b", "--requests", "10")
    assert code == 2 and "give exactly one of --rate R or --trace FILE" in err
