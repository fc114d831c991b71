"""Serving defaults as a current engine runs them: vLLM V1's scheduler, the closed-loop client, the
replay's host time, the paged attention kernels and the custom TP all-reduce. Oracles: hand traces of
the scheduler rules (docs/serving.md), the cited sources' own numbers, and the replay rows."""

from __future__ import annotations

import math

import pytest

from mlsyscalc.calc.serve.engine import POLICIES, Engine, EngineLimits
from tests.conftest import load_script

STEP = 1.0


class FixedCost:
    """Every iteration lasts STEP seconds; records the batch sums it is asked to price."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mixed_s(self, tokens, samples, prefill_tokens, prefill_pairs, prefill_keys, decodes, decode_keys):
        self.calls.append(("mixed", prefill_tokens, decodes))
        return STEP

    def decode_s(self, decodes, decode_keys):
        self.calls.append(("decode", 0, decodes))
        return STEP


def _run(reqs, scheduler="vllm-v1", blocks=100, block=4, seqs=8, batch_tokens=16, chunk=16, concurrency=0):
    cost = FixedCost()
    lim = EngineLimits(scheduler, batch_tokens, seqs, chunk, block, blocks, "recompute", 0.0)
    trace = Engine(reqs, cost, lim, concurrency=concurrency).run()
    return cost.calls, trace


def test_policies_are_rows_of_flags():
    """vllm-v1 is sarathi's mixing and chunking with the other budget, no watermark and vLLM V1's
    per-card limits; every old policy keeps its behaviour."""
    v1, sarathi = POLICIES["vllm-v1"], POLICIES["sarathi"]
    assert (v1.mixed, v1.paged, v1.chunked) == (sarathi.mixed, sarathi.paged, sarathi.chunked) == (True, True, True)
    assert (v1.chunk_budget, v1.watermark, v1.engine_defaults) == (False, False, True)
    assert (sarathi.chunk_budget, sarathi.watermark, sarathi.engine_defaults) == (True, True, False)
    assert [n for n, p in POLICIES.items() if not p.iteration_level] == ["static"]


def test_v1_budget_is_max_batch_tokens_not_chunk():
    """A 10-token prompt, max_batch_tokens 6, chunk 2: vllm-v1 prefills 6 then 4 tokens (its budget is
    max_num_batched_tokens); sarathi takes 2 a step under its chunk."""
    calls, _ = _run([(0.0, 10, 2)], batch_tokens=6, chunk=2)
    assert [c for c in calls if c[1]] == [("mixed", 6, 0), ("mixed", 4, 0)]
    calls, _ = _run([(0.0, 10, 2)], scheduler="sarathi", batch_tokens=6, chunk=2)
    assert [c[1] for c in calls if c[1]] == [2, 2, 2, 2, 2]


def test_v1_admits_without_the_watermark():
    """101 blocks of 4 tokens: A takes 1, B needs all 100 others. V0's 1% watermark keeps int(1.01) = 1
    block free once a sequence runs, so sarathi cannot admit B beside A; vllm-v1 admits it at once."""
    reqs = [(0.0, 4, 3), (0.0, 4 * 100, 1)]
    _, v1 = _run(reqs, blocks=101, batch_tokens=500, chunk=500)
    _, sarathi = _run(reqs, scheduler="sarathi", blocks=101, batch_tokens=500, chunk=500)
    assert v1.sched_s == [0.0, 0.0]
    assert sarathi.sched_s[1] > 0.0


def test_closed_loop_sends_the_next_request_when_one_finishes():
    """Two clients, four requests (3-token prompts, 2 outputs) all due at 0: requests 2 and 3 are sent
    when 0 and 1 finish; TTFT counts from the sending, as benchmark_serving's clients do."""
    from mlsyscalc.calc.serve.metrics import latencies

    reqs = [(0.0, 3, 2)] * 4
    calls, t = _run(reqs, concurrency=2)
    # it1 prefills 0 and 1 (first tokens), it2 decodes both (they finish at 2.0): 2 and 3 sent at 2.0
    assert t.arrival_s == [0.0, 0.0, 2.0, 2.0]
    assert t.first_s == [1.0, 1.0, 3.0, 3.0] and t.finish_s == [2.0, 2.0, 4.0, 4.0]
    assert latencies(reqs, t)["ttft"] == [1.0, 1.0, 1.0, 1.0]
    _, open_loop = _run(reqs)
    assert open_loop.first_s == [1.0] * 4 and latencies(reqs, open_loop)["ttft"] == [1.0] * 4


def test_closed_loop_keeps_a_later_arrival():
    """With a rate as well, a client does not send before the request's own arrival time."""
    reqs = [(0.0, 3, 2), (10.0, 3, 2)]
    _, t = _run(reqs, concurrency=1)
    assert t.arrival_s == [0.0, 10.0] and t.first_s[1] == 11.0


def test_cli_concurrency_alone_is_a_closed_loop_from_time_zero(run_cli):
    d = run_cli.json("serve", "llama3-8b", "--concurrency", "4", "--requests", "12", "--prompt-len", "200",
                     "--output-len", "20")
    assert "4 clients" in d["workload"] and d["requests"] == 12
    assert d["mean_in_system"] <= 4.0 + 1e-9


def test_host_fit_reproduces_the_default():
    """scripts/serve_host_fit.py over the committed H200 replay gives ServeOptions' defaults."""
    import json
    from pathlib import Path

    from mlsyscalc.calc.serve.simulator import ServeOptions

    fit = load_script("serve_host_fit")
    data = json.loads((Path(__file__).resolve().parents[1] / "reports/serving/replay_h200.json").read_text())
    rows = fit.decode_rows(data)
    base, per_seq = fit.fit(rows)
    assert len(rows) == 11686
    assert round(base * 1e6) == round(ServeOptions().iteration_overhead_s * 1e6) == 155
    assert round(per_seq * 1e7) == round(ServeOptions().iteration_overhead_per_seq_s * 1e7) == 74


def test_host_time_per_sequence_that_samples():
    """A decode step of 10 sequences pays 155 us + 10 x 7.4 us on top of its kernels."""
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("llama3-8b"), resolve_ceilings("H100-SXM")
    with_host = iteration_cost(spec, ceil, ServeOptions())
    without = iteration_cost(spec, ceil, ServeOptions(iteration_overhead_s=0.0, iteration_overhead_per_seq_s=0.0))
    assert with_host.decode_s(10, 5000) - without.decode_s(10, 5000) == pytest.approx(155e-6 + 10 * 7.4e-6, rel=1e-9)


@pytest.mark.parametrize(("d", "ctx"), [(1, 4000), (8, 700), (64, 300)])
def test_fast_path_matches_the_paged_roofline(d, ctx):
    """A decode-only iteration of the serving cost (paged, no host time) equals predict_model with the
    KV in pages at the same batch and context, within the fast path's 0.2% (docs/serving.md)."""
    from mlsyscalc.calc.roofline.model import predict_model
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.calc.serve.iteration import IterationCost
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("llama3-8b"), resolve_ceilings("H100-SXM")
    cost = IterationCost(spec, ceil, RooflineOptions(kv_layout="paged"))
    roof = predict_model(spec, ceil, RooflineOptions(phase="decode", batch=d, context=ctx, kv_layout="paged"))
    assert cost.decode_s(d, d * (ctx + 1)) == pytest.approx(roof.time_s, rel=2e-3)
    assert not math.isclose(cost.decode_s(1, 4001), IterationCost(spec, ceil, RooflineOptions()).decode_s(1, 4001))


def test_a_new_policy_row_takes_its_behaviour_from_its_flags(monkeypatch):
    """Schedulers are read by their flags, never by name: a row added to POLICIES with sarathi's flags runs
    sarathi's schedule and budget, one with vllm-v1's runs vllm-v1's (engine, options and the CLI's unused
    options alike), so a new chunked scheduler cannot silently take the wrong token budget."""
    from mlsyscalc.calc.serve.engine import Policy
    from mlsyscalc.calc.serve.simulator import ServeOptions

    monkeypatch.setitem(POLICIES, "new-chunked", Policy(mixed=True, paged=True, chunked=True, chunk_budget=True))
    monkeypatch.setitem(POLICIES, "new-v1", Policy(mixed=True, paged=True, chunked=True, watermark=False,
                                                   engine_defaults=True))
    reqs = [(0.0, 10, 2), (0.5, 7, 3)]
    for new, old in (("new-chunked", "sarathi"), ("new-v1", "vllm-v1")):
        calls, trace = _run(reqs, scheduler=new, batch_tokens=6, chunk=2)
        assert (calls, trace) == _run(reqs, scheduler=old, batch_tokens=6, chunk=2)
    assert [c[1] for c in _run([(0.0, 10, 2)], scheduler="new-chunked", batch_tokens=6, chunk=2)[0] if c[1]] == [2] * 5
    resolved = {name: ServeOptions(scheduler=name, max_batch_tokens=6, max_seqs=8, chunk=2).iteration_tokens
                for name in ("new-chunked", "sarathi", "new-v1", "vllm-v1")}
    assert resolved == {"new-chunked": 2, "sarathi": 2, "new-v1": 6, "vllm-v1": 6}


def test_unused_option_messages_name_the_chunk_budget_policies_from_the_table(monkeypatch):
    """--chunk is refused for a scheduler whose budget is not --chunk; the message names the rows whose
    budget is (read from POLICIES), so a new chunk-budget row is named there too."""
    from mlsyscalc.calc.serve.engine import Policy
    from mlsyscalc.cli import serve as serve_cli

    assert serve_cli.chunk_budget_schedulers() == "sarathi"
    monkeypatch.setitem(POLICIES, "new-chunked", Policy(mixed=True, paged=True, chunked=True, chunk_budget=True))
    assert serve_cli.chunk_budget_schedulers() == "sarathi, new-chunked"
