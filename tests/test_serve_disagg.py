"""Prefill/decode disaggregation in `mlsys serve` (DistServe, Zhong et al. 2024)."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.model import predict_model
from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.roofline.options import RooflineOptions
from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, simulate
from mlsyscalc.calc.serve.disagg import Layout, search_layouts, simulate_disagg
from mlsyscalc.calc.serve.metrics import Slo
from mlsyscalc.calc.serve.workload import parse_length
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

SPEC, CEIL, CLUSTER = load_model("llama3-8b"), resolve_ceilings("H100-SXM"), load_cluster("hgx-h100")


def _work(rate, requests, prompt, output):
    return WorkloadSpec(parse_length(prompt, "p"), parse_length(output, "o"), rate, requests, 5).build()


def test_vanishing_rate_ttft_and_tpot_with_transfer():
    """One request at a time: TTFT = one prefill; TPOT (2 tokens) = KV transfer + one decode step.
    Transfer by hand: 1000 tokens x 131072 B (32 layers x 8 KV heads x 128 x 2 x bf16) over NVLink
    370 GB/s achievable per direction + 3.4 us (hgx-h100.json)."""
    work = _work(0.001, 3, "1000", "2")
    r = simulate_disagg(SPEC, CEIL, work, ServeOptions(), Layout(1, 1), CLUSTER)
    colocated = simulate(SPEC, CEIL, work, ServeOptions())
    assert r.metrics["ttft_p50_s"] == pytest.approx(colocated.metrics["ttft_p50_s"], rel=1e-12)
    transfer = 1000 * 131072 / 370e9 + 3.4e-6
    assert r.pools["kv_transfer_mean_s"] == pytest.approx(transfer, rel=0.02)
    host = ServeOptions().iteration_overhead_s + ServeOptions().iteration_overhead_per_seq_s  # one sequence
    decode = predict_model(SPEC, CEIL, RooflineOptions(phase="decode", context=1000, kv_layout="paged")).time_s
    assert r.metrics["tpot_p50_s"] == pytest.approx(transfer + decode + host, rel=2e-3)


def test_disaggregation_removes_prefill_interference_from_tpot():
    work = _work(8.0, 300, "uniform:1024,4096", "uniform:32,128")
    colocated = simulate(SPEC, CEIL, work, ServeOptions(scheduler="vllm"))
    split = simulate_disagg(SPEC, CEIL, work, ServeOptions(scheduler="vllm"), Layout(1, 1), CLUSTER)
    assert split.metrics["tpot_p99_s"] < colocated.metrics["tpot_p99_s"]
    assert split.metrics["requests"] == 300


def test_search_ranks_by_goodput_per_gpu_within_budget():
    work = _work(6.0, 120, "uniform:256,1024", "uniform:32,128")
    s = search_layouts(SPEC, CEIL, work, ServeOptions(slo=Slo(ttft_s=0.2, tpot_s=0.02)), CLUSTER, 4)
    per_gpu = [r.pools["goodput_per_gpu_requests_per_s"] for r in s.layouts]
    assert per_gpu == sorted(per_gpu, reverse=True)
    assert all(r.layout.gpus <= 4 for r in s.layouts) and len(s.layouts) >= 5
    best = s.layouts[0]
    assert best.pools["goodput_per_gpu_requests_per_s"] == pytest.approx(best.metrics["goodput_requests_per_s"] / best.layout.gpus)


def test_cli_disagg(run_cli):
    data = run_cli.json("serve", "llama3-8b", "--rate", "4", "--requests", "60", "--disagg", "1:2")
    assert data["gpus"] == 3 and data["layout"] == "1P(tp1):2D(tp1)"
    for key in ("ttft_p99_s", "tpot_p99_s", "goodput_per_gpu_requests_per_s", "kv_transfer_mean_s"):
        assert key in data
    code, _, err = run_cli("serve", "llama3-8b", "--rate", "4", "--disagg", "two:1")
    assert code == 2 and "--disagg" in err


@pytest.mark.parametrize("scheduler", ["orca", "vllm", "sarathi"])
def test_every_scheduler_finishes_under_kv_pressure(scheduler):
    """Small KV budgets force preemptions on the decode instances; every request still finishes,
    after its first token, and the engine ends holding only the blocks it started with."""
    from mlsyscalc.calc.serve.simulator import engine_limits, kv_capacity
    from mlsyscalc.calc.serve.iteration import IterationCost
    from mlsyscalc.calc.serve.engine import Engine

    work = _work(30.0, 150, "uniform:200,800", "uniform:64,400")
    opts = ServeOptions(scheduler=scheduler, kv_blocks=300)
    r = simulate_disagg(SPEC, CEIL, work, opts, Layout(1, 1), CLUSTER)
    assert r.metrics["requests"] == 150 and r.metrics["tpot_p50_s"] > 0
    if scheduler != "orca":
        assert r.metrics["preemptions"] > 0
    reqs = [(a, p, o) for a, p, o in work.requests]
    engine = Engine(reqs, IterationCost(SPEC, CEIL, opts.roofline), engine_limits(kv_capacity(SPEC, CEIL, opts), CEIL, opts),
                    prefilled=True)
    trace = engine.run()
    assert min(trace.finish_s) > 0 and engine.free == 300 and engine.n_running == 0
