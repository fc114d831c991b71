"""`mlsys serve` simulator properties (each against an oracle that is not the simulator)."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.model import predict_model
from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.roofline.options import RooflineOptions
from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, iteration_cost, simulate
from mlsyscalc.calc.serve.iteration import Batch, IterationCost
from mlsyscalc.calc.serve.workload import parse_length
from mlsyscalc.specs.lookup import load_model

SPEC = load_model("llama3-8b")
CEIL = resolve_ceilings("H100-SXM")


def _work(rate, requests=400, prompt="uniform:64,1024", output="uniform:16,256", seed=1, burst=1.0):
    return WorkloadSpec(parse_length(prompt, "p"), parse_length(output, "o"), rate, requests, seed, burst).build()


def _run(work, **opts):
    return simulate(SPEC, CEIL, work, ServeOptions(**opts))


HOST_S = ServeOptions().iteration_overhead_s + ServeOptions().iteration_overhead_per_seq_s  # one sequence


@pytest.mark.parametrize("scheduler", ["static", "orca", "vllm", "sarathi", "vllm-v1"])
def test_vanishing_rate_is_one_prefill_and_one_decode(run_cli, scheduler):
    """At 1 request per 1000 s nothing queues: TTFT is one 512-token prefill (lm_head on the last
    token only) and TPOT is one batch-1 decode step at context 512 -- the roofline's number with the
    KV in pages (calc.roofline.paged), each plus one iteration's host time for one sequence."""
    r = _run(_work(0.001, requests=3, prompt="512", output="2"), scheduler=scheduler, chunk=512)
    decode = predict_model(SPEC, CEIL, RooflineOptions(phase="decode", context=512, kv_layout="paged")).time_s
    assert r.metrics["tpot_p50_s"] == pytest.approx(decode + HOST_S, rel=1e-3)
    assert r.metrics["tpot_p99_s"] == pytest.approx(decode + HOST_S, rel=1e-3)
    contiguous = run_cli.json("roofline", "llama3-8b", "--phase", "decode", "--context", "512")["totals"]["tpot_s"]
    assert decode > contiguous  # the split decode's combine kernel
    prefill = predict_model(SPEC, CEIL, RooflineOptions(phase="prefill", seq=512, kv_layout="paged"))
    lm_head_rest = sum(row.total_s for row in prefill.rows if row.pred.name == "lm_head") * 511 / 512
    # within the roofline's tile quantisation (the fast path averages it out; see test_serve_cost)
    assert r.metrics["ttft_p50_s"] == pytest.approx(prefill.time_s - lm_head_rest + HOST_S, rel=0.07)
    assert r.metrics["queue_delay_p99_s"] == pytest.approx(0.0, abs=1e-12)


def test_littles_law():
    """Time-averaged requests in the system = arrival rate x mean time in the system (Little 1961)."""
    work = _work(8.0, requests=1500)
    r = _run(work)
    m = r.metrics
    rate = len(work.requests) / m["makespan_s"]
    assert m["mean_in_system"] == pytest.approx(rate * m["e2e_mean_s"], rel=0.05)


def test_throughput_never_above_roofline_bound():
    """Overloaded: output tokens/s <= max_seqs / (one decode step of max_seqs at the shortest context)."""
    work = _work(500.0, requests=1200, prompt="uniform:64,512", output="uniform:64,256")
    r = _run(work, max_seqs=128)
    step = predict_model(SPEC, CEIL, RooflineOptions(phase="decode", batch=128, context=64)).time_s
    assert r.metrics["throughput_tokens_per_s"] <= 128 / step * 1.02
    assert r.metrics["throughput_tokens_per_s"] > 0.3 * 128 / step  # and the engine is actually saturated


def test_chunked_prefill_never_raises_p99_tpot():
    for rate in (4.0, 12.0, 20.0):
        work = _work(rate, requests=400, prompt="uniform:512,3000", output="uniform:32,256")
        vllm, sarathi = _run(work, scheduler="vllm"), _run(work, scheduler="sarathi", chunk=512)
        assert sarathi.metrics["tpot_p99_s"] <= vllm.metrics["tpot_p99_s"]


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_larger_kv_budget_never_lowers_throughput(preemption):
    work = _work(40.0, requests=400, prompt="uniform:256,1024", output="uniform:128,512")
    runs = [_run(work, kv_blocks=blocks, preemption=preemption) for blocks in (200, 400, 1000, 4000)]
    assert runs[0].metrics["preemptions"] > 0  # the small budget does preempt
    tput = [r.metrics["throughput_tokens_per_s"] for r in runs]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(tput, tput[1:])), tput


@pytest.mark.parametrize("scheduler", ["static", "orca", "vllm", "sarathi"])
def test_times_never_negative_and_ordered(scheduler):
    work = _work(30.0, requests=300, burst=0.3)
    r = _run(work, scheduler=scheduler, kv_blocks=600)
    lat = r.latencies
    assert min(lat["queue"]) >= 0 and min(lat["tpot"]) > 0
    assert all(q <= t <= e for q, t, e in zip(lat["queue"], lat["ttft"], lat["e2e"]))
    assert r.metrics["requests"] == 300


def test_static_batching_queues_behind_the_batch():
    """Orca's iteration-level scheduling cuts the queueing that request-level batching causes."""
    work = _work(10.0, requests=300)
    static, orca = _run(work, scheduler="static"), _run(work, scheduler="orca")
    assert orca.metrics["ttft_p50_s"] < static.metrics["ttft_p50_s"]


def test_seed_reproduces_and_changes():
    a, b, c = (_run(_work(10.0, requests=200, seed=s)).metrics for s in (3, 3, 4))
    assert a == b and a["ttft_p99_s"] != c["ttft_p99_s"]


def test_goodput_counts_requests_within_slo():
    from mlsyscalc.calc.serve.metrics import Slo

    work = _work(20.0, requests=300)
    loose = simulate(SPEC, CEIL, work, ServeOptions(slo=Slo(ttft_s=100.0, tpot_s=100.0))).metrics
    tight = simulate(SPEC, CEIL, work, ServeOptions(slo=Slo(tpot_s=1e-6))).metrics
    assert loose["goodput_requests_per_s"] == pytest.approx(loose["throughput_requests_per_s"])
    assert tight["goodput_requests_per_s"] == 0.0


def test_kv_capacity_from_memory_calculator():
    """Blocks = (0.9 x 80 GB - weights - workspace) / (2 MiB per 16-token block of Llama-3-8B:
    32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes x 16 tokens)."""
    r = _run(_work(1.0, requests=2))
    block = 32 * 8 * 128 * 2 * 2 * 16
    assert r.kv.block_bytes == block
    assert r.kv.blocks == int((0.9 * CEIL.gpu.memory_bytes - r.kv.weights_bytes - r.kv.activations_bytes) // block)


def test_ten_thousand_requests_simulate_fast():
    import time

    work = _work(20.0, requests=10000, prompt="lognormal:6,0.8", output="lognormal:5,0.8")
    cost = IterationCost(SPEC, CEIL, RooflineOptions())
    start = time.process_time()
    simulate(SPEC, CEIL, work, ServeOptions(), cost)
    assert time.process_time() - start < 30  # CPU seconds; the goal is < 2 s


def test_prefix_caching_skips_the_cached_blocks():
    """At a vanishing rate, the second request's TTFT is the prefill of its own tokens after the cached
    prefix: 1000-token prefix -> 992 cached tokens (62 whole 16-token blocks), chunk of 1100 - 992
    tokens at context 992 (fast path); the first request prefills all 1100."""
    work = WorkloadSpec(parse_length("100", "p"), parse_length("2", "o"), 0.001, 3, 0, 1.0, 1000).build()
    r = _run(work, prefix_caching=True)
    cost = iteration_cost(SPEC, CEIL, ServeOptions(prefix_caching=True))  # the simulator's own, host time included
    first, later = r.latencies["ttft"][0], r.latencies["ttft"][1:]
    assert first == pytest.approx(cost.time_s(Batch.of(chunks=((1100, 0),))), rel=1e-9)
    for ttft in later:
        assert ttft == pytest.approx(cost.time_s(Batch.of(chunks=((1100 - 992, 992),))), rel=1e-9)
    assert later[0] < first / 3


def test_prefix_caching_saves_kv_and_never_slows():
    work = WorkloadSpec(parse_length("uniform:50,200", "p"), parse_length("64", "o"), 10.0, 300, 0, 1.0, 1000).build()
    plain, cached = _run(work), _run(work, prefix_caching=True)
    assert cached.metrics["kv_utilization_mean"] < plain.metrics["kv_utilization_mean"] / 2
    assert cached.metrics["ttft_p99_s"] < plain.metrics["ttft_p99_s"]
