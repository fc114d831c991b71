"""scripts/serve_replay.py on the CPU (fp32, Triton interpreter): its paged decode path against the
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

    replay = load_script("serve_replay")
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
