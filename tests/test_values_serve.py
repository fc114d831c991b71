"""Value tests of the serving simulator (`mlsys serve`), each against an oracle written out here.

Engine schedules: a stand-in iteration cost charges a fixed time per iteration and records the batch
sums it is asked to price, so a trace of two or three requests can be worked out by hand from the
scheduler rules of docs/serving.md (vLLM's prefill-first paged KV with recompute or swap
preemption, Orca's mixed iterations, Sarathi's chunk budget, prefix caching, speculative steps).
Metrics: hand-built traces. Options, workloads, KV capacity and disaggregation: their documented
rules and error messages, and the inference memory calculator as a second oracle.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from mlsyscalc.calc.serve_engine import Engine, EngineLimits, Trace

STEP = 1.0  # seconds every stand-in iteration lasts


class FixedCost:
    """A constant-time iteration that records what the engine asks it to price."""

    def __init__(self, step_s: float = STEP) -> None:
        self.step, self.calls = step_s, []

    def mixed_s(self, tokens, samples, prefill_tokens, prefill_pairs, prefill_keys, decodes, decode_keys):
        # with no decodes their keys go unused (IterationCost.mixed_s skips decode attention)
        self.calls.append(("mixed", tokens, samples, prefill_tokens, prefill_pairs, prefill_keys, decodes,
                           decode_keys if decodes else 0))
        return self.step

    def decode_s(self, decodes, decode_keys):
        self.calls.append(("decode", decodes, decode_keys))
        return self.step


def _engine(reqs, scheduler="vllm", blocks=100, block=4, seqs=8, batch_tokens=1000, chunk=16,
            preemption="recompute", swap_s=0.5, shared=0, prefilled=False, spec=None, step_s=STEP):
    cost = FixedCost(step_s)
    lim = EngineLimits(scheduler, batch_tokens, seqs, chunk, block, blocks, preemption, swap_s, shared)
    trace = Engine(reqs, cost, lim, spec=spec, prefilled=prefilled).run()
    return cost.calls, trace


def _decodes(first_keys: int, steps: int, d: int = 1) -> list[tuple]:
    """`steps` decode-only iterations of d sequences, keys growing by d a step."""
    return [("decode", d, first_keys + d * k) for k in range(steps)]


# ----- vLLM: paged KV and preemption -----------------------------------------------------------

def test_recompute_preemption_keeps_the_generated_tokens():
    """A, B: 3-token prompts, 8 outputs, block 4, 3 KV blocks. it1 prefills both (one block each;
    pairs 2 x 3^2/2 = 9), each samples token 1. it2 decodes both (keys (3+1) x 2 = 8; KV now 4 = one
    full block each, token 2 sampled). it3: both need a 2nd block, 1 free: B (latest) is preempted,
    with 2 tokens generated, so vLLM recomputes prompt + 2 = 5 tokens later. A decodes alone (keys 5
    up) until its 8th token at it8 (1 + 7 steps). it9 prefills B's 5 tokens (pairs 12.5; token 3),
    then 5 decode steps (keys 6..10) to token 8 at it14."""
    calls, t = _engine([(0.0, 3, 8), (0.0, 3, 8)], blocks=3)
    assert calls == ([("mixed", 6, 2, 6, 9.0, 6, 0, 0), ("decode", 2, 8)] + _decodes(5, 6)
                     + [("mixed", 5, 1, 5, 12.5, 5, 0, 0)] + _decodes(6, 5))
    assert t.sched_s == [0.0, 0.0]
    assert t.first_s == [1.0, 1.0]  # B's re-prefill does not move its first token
    assert t.finish_s == [8.0, 14.0]
    assert t.preempt_s == [2.0]
    assert t.iter_end_s == [float(k) for k in range(1, 15)]
    # blocks held after each iteration: 1 + 1; A's 5th..8th positions open its 2nd block at it4
    # (written at it5..); B's 5 prompt tokens take 2 blocks; its 9th position opens a 3rd
    assert t.iter_used_blocks == [2, 2, 2, 2, 2, 2, 3, 3, 2, 2, 2, 2, 3, 3]
    assert t.iter_batch_tokens == [6, 2, 1, 1, 1, 1, 1, 1, 5, 1, 1, 1, 1, 1]
    assert t.iter_in_system == [2] * 8 + [1] * 6
    assert t.busy_s == 14.0


def test_swap_preemption_pays_pcie_both_ways_and_resumes():
    """The same pair with --preemption swap and 0.5 s per block: B's one block (its KV: prompt +
    token 1 = 4 positions) goes out when it3 lacks a block (it3 lasts 1 + 0.5 s) and comes back once
    A is done (it9 lasts 1 + 0.5 s); B has 2 of 8 tokens, so 6 more decode steps (keys 5..10)."""
    calls, t = _engine([(0.0, 3, 8), (0.0, 3, 8)], blocks=3, preemption="swap", swap_s=0.5)
    assert calls == [("mixed", 6, 2, 6, 9.0, 6, 0, 0), ("decode", 2, 8)] + _decodes(5, 6) + _decodes(5, 6)
    assert t.iter_end_s == [1.0, 2.0, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert t.finish_s == [8.5, 15.0]
    assert t.preempt_s == [2.0]
    assert t.busy_s == 15.0
    assert t.iter_used_blocks == [2, 2, 2, 2, 2, 2, 3, 3, 2, 2, 2, 2, 3, 3]


def test_swap_time_scales_with_blocks_moved():
    """Two swapped blocks cost 2 x 0.25 s out and 2 x 0.25 s back in. A, B: 5-token prompts, 8
    outputs, block 4, 4 blocks. it1 prefills (2 blocks each, all 4 used). it2 decodes (positions 6;
    keys 6 + 6). it3: no block opens (positions 7, 8). ... position 9 opens a 3rd block at it5:
    none free, B (2 blocks, KV 5 + 3 = 8 positions, 4 tokens generated) swaps out: it5 = 1.5 s."""
    calls, t = _engine([(0.0, 5, 8), (0.0, 5, 8)], blocks=4, preemption="swap", swap_s=0.25)
    assert calls[:4] == [("mixed", 10, 2, 10, 25.0, 10, 0, 0), ("decode", 2, 12), ("decode", 2, 14),
                         ("decode", 2, 16)]
    assert t.preempt_s == [4.0]
    assert t.iter_end_s[:5] == [1.0, 2.0, 3.0, 4.0, 5.5]
    # A: tokens 5..8 at it5..it8; then B swaps in (0.5 s) and decodes its last 4 tokens (keys 9..12)
    assert calls[4:] == _decodes(9, 4) + _decodes(9, 4)
    assert t.finish_s == [8.5, 13.0]
    assert t.iter_end_s[8] == 10.0


def test_watermark_keeps_one_percent_of_blocks_when_admitting():
    """vLLM admits a prompt while others run only if 1% of the blocks stay free (block 1, 200
    blocks: int(0.01 x 200) = 2 in reserve). A (100-token prompt, 3 outputs) holds 100 blocks after
    it1; B (t=0.5, 98 tokens) fits 98 <= 200 - 100 - 2 at it2 (t=1); a 2% watermark (4 blocks) would
    hold it until A is done at t=3."""
    calls, t = _engine([(0.0, 100, 3), (0.5, 98, 1)], blocks=200, block=1)
    assert calls[0] == ("mixed", 100, 1, 100, 5000.0, 100, 0, 0)
    assert calls[1] == ("mixed", 98, 1, 98, 4802.0, 98, 0, 0)
    assert t.sched_s == [0.0, 1.0]
    assert t.iter_used_blocks[:2] == [100, 198]


def test_reserved_kv_has_no_watermark():
    """Orca reserves prompt + output on admission and keeps no watermark: A (50 + 10 = 60 blocks of
    one token) and B (39 + 1 = 40) fill all 100 blocks together in it1."""
    calls, t = _engine([(0.0, 50, 10), (0.0, 39, 1)], scheduler="orca", blocks=100, block=1)
    assert calls[0] == ("mixed", 89, 2, 89, 50 * 50 / 2 + 39 * 39 / 2, 89, 0, 0)
    assert t.sched_s == [0.0, 0.0]
    assert t.iter_used_blocks[0] == 100


def test_max_seqs_limits_the_running_batch():
    """--max-seqs 1: B waits until A (2 outputs) is done at t=2, then is prefilled alone."""
    calls, t = _engine([(0.0, 4, 2), (0.0, 4, 2)], seqs=1)
    assert calls == [("mixed", 4, 1, 4, 8.0, 4, 0, 0), ("decode", 1, 5),
                     ("mixed", 4, 1, 4, 8.0, 4, 0, 0), ("decode", 1, 5)]
    assert t.sched_s == [0.0, 2.0]
    assert t.finish_s == [2.0, 4.0]


@pytest.mark.parametrize("scheduler", ["vllm", "orca"])
def test_max_batch_tokens_bounds_one_iteration_prompts(scheduler):
    """--max-batch-tokens 100: two 50-token prompts fill one iteration exactly (50 + 50 <= 100); a
    third of 1 token waits for the next iteration."""
    calls, t = _engine([(0.0, 50, 1), (0.0, 50, 1), (0.0, 1, 1)], scheduler=scheduler, batch_tokens=100)
    assert calls == [("mixed", 100, 2, 100, 2 * 1250.0, 100, 0, 0), ("mixed", 1, 1, 1, 0.5, 1, 0, 0)]
    assert t.sched_s == [0.0, 0.0, 1.0]
    assert t.finish_s == [1.0, 1.0, 2.0]


def test_sarathi_chunks_under_the_budget_beside_decodes():
    """sarathi, chunk 8, block 4: A (10-token prompt, 3 outputs), B (6, 2) at t=0, C (8, 1) at t=2.
    it1: A's first 8 tokens (pairs 8^2/2 = 32); the budget is spent, B waits. it2: A's last 2
    (pairs 2 x 8 + 2^2/2 = 18, keys 10) and B's 6 (pairs 18, keys 6): both sample. it3: 2 decodes
    (keys 11 + 7) leave 6 of the budget to C (pairs 18). it4: 1 decode (A: keys 12), C's last 2
    tokens after 6 cached (pairs 2 x 6 + 2 = 14, keys 8)."""
    calls, t = _engine([(0.0, 10, 3), (0.0, 6, 2), (2.0, 8, 1)], scheduler="sarathi", chunk=8)
    assert calls == [("mixed", 8, 0, 8, 32.0, 8, 0, 0), ("mixed", 8, 2, 8, 36.0, 16, 0, 0),
                     ("mixed", 8, 2, 6, 18.0, 6, 2, 18), ("mixed", 3, 2, 2, 14.0, 8, 1, 12)]
    assert t.sched_s == [0.0, 1.0, 2.0]
    assert t.first_s == [2.0, 2.0, 4.0]
    assert t.finish_s == [4.0, 3.0, 4.0]
    assert t.iter_used_blocks == [3, 5, 7, 5]  # A 3 blocks, B 2, C 2 (ceil(8 / 4))
    assert t.iter_batch_tokens == [8, 8, 8, 3]
    assert t.iter_in_system == [2, 2, 3, 2]


def test_prompt_first_decode_waits_for_an_arrival_on_the_iteration_end():
    """A decode run stops when a request has arrived by the end of an iteration (arrival 3.0 = the
    end of it3), so it4 is B's prefill, not another decode of A."""
    calls, t = _engine([(0.0, 4, 10), (3.0, 4, 1)])
    assert calls[:4] == [("mixed", 4, 1, 4, 8.0, 4, 0, 0), ("decode", 1, 5), ("decode", 1, 6),
                         ("mixed", 4, 1, 4, 8.0, 4, 0, 0)]
    assert t.sched_s == [0.0, 3.0]
    assert t.finish_s == [11.0, 4.0]
