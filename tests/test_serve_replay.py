"""scripts/validate/serve_replay.py on the CPU (fp32, Triton interpreter): its paged decode path against the
model's own full-sequence prefill, and one short replay against the simulator's bookkeeping."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.conftest import load_script  # noqa: E402

TINY = ["num_hidden_layers=2", "hidden_size=64", "intermediate_size=128", "num_attention_heads=4",
        "num_key_value_heads=2", "vocab_size=256", "head_dim=16"]


def _runner(slots=3, max_len=64):
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    replay = load_script("validate/serve_replay")
    spec = load_model("llama3-8b", parse_overrides(tuple(TINY)))
    torch.manual_seed(0)
    model = build_model(spec, "float32", "cpu").eval()
    return replay, model, replay.PagedRunner(model, slots, max_len)


def test_paged_decode_equals_full_prefill():
    """Prefill 5 and 9 tokens into two slots, decode 3 steps as a batch: each step's logits equal the
    model's own prefill over the whole sequence so far (an independent, cache-free computation)."""
    _, model, runner = _runner()
    g = torch.Generator().manual_seed(1)
    seqs = {0: torch.randint(0, 256, (1, 5), generator=g), 2: torch.randint(0, 256, (1, 9), generator=g)}
    nxt = {s: runner.prefill(s, ids) for s, ids in seqs.items()}
    for _ in range(3):
        slots = torch.tensor(list(seqs))
        tokens = torch.cat([nxt[s] for s in seqs])
        pos = torch.tensor([seqs[s].shape[1] for s in seqs])
        logits = runner.decode(slots, tokens, pos)
        for k, s in enumerate(list(seqs)):
            seqs[s] = torch.cat([seqs[s], tokens[k].view(1, 1)], dim=1)
            n = seqs[s].shape[1]
            cache = [(torch.zeros(1, n, 2, 16), torch.zeros(1, n, 2, 16)) for _ in range(2)]
            want = model.prefill(seqs[s], cache)[0]
            torch.testing.assert_close(logits[k], want, rtol=1e-4, atol=1e-4)
            nxt[s] = logits[k].argmax().view(1)


def test_replay_finishes_every_request_in_order():
    replay, _, runner = _runner(slots=2, max_len=48)
    reqs = [(0.0, 12, 3), (0.0, 10, 1), (0.01, 16, 4)]
    times = replay.replay(runner, reqs, max_seqs=2, max_batch_tokens=16)
    assert times["iterations"] >= 3 + 3  # three prefills and at least the longest output's decode steps
    for i, (arrival, _, _) in enumerate(reqs):
        assert arrival <= times["sched_s"][i] < times["first_s"][i] <= times["finish_s"][i]
    assert times["first_s"][1] == pytest.approx(times["finish_s"][1])  # one output token: done at prefill
    summary = replay.measured_summary(reqs, times)
    assert summary["requests"] == 3 and summary["ttft_p50_s"] > 0
    clock = times["clock"]  # one row per iteration: kind, size, wall, GPU time (None on the CPU)
    assert len(clock) == times["iterations"] and all(w > 0 and g is None for _, _, w, g in clock)
    assert [k for k, _, _, _ in clock].count("prefill") == 3
    assert replay.host_overhead(clock) == {"all_s": None, "prefill_s": None, "decode_s": None}


def test_host_overhead_is_median_wall_minus_gpu():
    replay = load_script("validate/serve_replay")
    rows = [("prefill", 8, 0.030, 0.027), ("decode", 2, 0.012, 0.011), ("decode", 2, 0.013, 0.011),
            ("decode", 3, 0.020, 0.0105)]
    got = replay.host_overhead(rows)
    assert got["prefill_s"] == pytest.approx(0.003)
    assert got["decode_s"] == pytest.approx(0.002)  # of 0.001, 0.002, 0.0095
    assert got["all_s"] == pytest.approx((0.002 + 0.003) / 2)  # of 0.001, 0.002, 0.003, 0.0095


def test_report_fit_recovers_the_ceilings_that_made_the_steps():
    """Steps priced with known efficiencies and per-kernel cost (on the fit's grid) plus a host time:
    the GPU-time fit finds them again and its cost adds the host time once per iteration."""
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.calc.serve.iteration import IterationCost
    from mlsyscalc.specs.lookup import load_model

    report = load_script("validate/serve_replay_report")
    spec, ceil = load_model("llama3-8b"), resolve_ceilings("H100-SXM")
    truth = ceil.with_efficiency(memory=0.7, matmul=0.6)
    truth = type(truth)(**{**truth.__dict__, "launch_s": 4e-6})
    cost = IterationCost(spec, truth, RooflineOptions())
    steps = [{"kind": "prefill", "size": n, "context": 0} for n in (128, 1000)] + [
        {"kind": "decode", "size": b, "context": 700} for b in (1, 64)]
    for st in steps:
        st["gpu_s"] = cost.time_s(report._batch(st))
    err, _, fitted, params = report.fit(spec, ceil, steps, "gpu_s", 0.002)
    assert err == pytest.approx(0.0, abs=1e-12)
    assert params == {"memory": pytest.approx(0.7), "matmul": pytest.approx(0.6), "launch_s": pytest.approx(4e-6)}
    assert fitted.time_s(report._batch(steps[0])) == pytest.approx(steps[0]["gpu_s"] + 0.002, rel=1e-9)
