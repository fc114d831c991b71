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

from mlsyscalc.calc.serve.engine import Engine, EngineLimits, Trace

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

    def time_s(self, b):
        """A calc.serve.iteration.Batch (static batching prices whole Batch objects)."""
        self.calls.append(("batch", b.tokens, b.samples, b.prefill_tokens, b.prefill_pairs, b.prefill_keys,
                           b.decodes, b.decode_keys))
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


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi"])
def test_swap_preemption_pays_pcie_both_ways_and_resumes(scheduler):
    """The same pair (vllm, or sarathi, whose 16-token budget takes both prompts at once) with --preemption swap and 0.5 s per block: B's one block (its KV: prompt +
    token 1 = 4 positions) goes out when it3 lacks a block (it3 lasts 1 + 0.5 s) and comes back once
    A is done (it9 lasts 1 + 0.5 s); B has 2 of 8 tokens, so 6 more decode steps (keys 5..10)."""
    calls, t = _engine([(0.0, 3, 8), (0.0, 3, 8)], scheduler=scheduler, blocks=3, preemption="swap", swap_s=0.5)
    assert calls == [("mixed", 6, 2, 6, 9.0, 6, 0, 0), ("decode", 2, 8)] + _decodes(5, 6) + _decodes(5, 6)
    assert t.iter_end_s == [1.0, 2.0, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert t.finish_s == [8.5, 15.0]
    assert t.preempt_s == [2.0]
    assert t.busy_s == 15.0
    assert t.iter_used_blocks == [2, 2, 2, 2, 2, 2, 3, 3, 2, 2, 2, 2, 3, 3]


def test_swap_in_and_a_prefill_share_an_iteration():
    """--max-seqs 2, 3 blocks of 4, swap: A, B (3 + 8) run, C and D (3 + 1) wait for a seat. B is
    swapped out at it3 as before; C may not jump the swapped B. When A is done (8.5) B comes back
    (0.5 s) and C, admitted beside it, is prefilled in the same iteration (1 + 0.5 s: done at 10);
    D (the 2nd seat is B's) follows at 11, then B decodes its last 6 tokens."""
    calls, t = _engine([(0.0, 3, 8), (0.0, 3, 8), (0.0, 3, 1), (0.0, 3, 1)], blocks=3, seqs=2,
                       preemption="swap", swap_s=0.5)
    prefill = ("mixed", 3, 1, 3, 4.5, 3, 0, 0)
    assert calls == [("mixed", 6, 2, 6, 9.0, 6, 0, 0), ("decode", 2, 8)] + _decodes(5, 6) + [prefill] * 2 + _decodes(5, 6)
    assert t.sched_s == [0.0, 0.0, 8.5, 10.0]
    assert t.finish_s == [8.5, 17.0, 10.0, 11.0]
    assert t.iter_end_s[7:10] == [8.5, 10.0, 11.0]
    assert t.iter_in_system[7:10] == [4, 3, 2]


def test_a_swapped_sequence_finishes_on_its_own_schedule_after_swap_in():
    """vllm, block 2, 5 blocks, swap at 0.5 s a block. A (t=0, 1-token prompt, 5 outputs); B, C (t=2,
    2-token prompts, 2 and 5 outputs). it1 prefill A; it2 decode A (keys 2); it3 prefill B, C (pairs
    2 x 2^2/2). At it4 A, B and C each need a block, 2 are free: C (1 block, 1 token) swaps out
    (it4: 1.5 s; B done). C swaps back at it5 (1.5 s) with 4 tokens to go: decode steps at g = 2..5,
    so its old finish step (g = 5, from before the swap) must not end it: C is done at 9, not 8."""
    calls, t = _engine([(0.0, 1, 5), (2.0, 2, 2), (2.0, 2, 5)], block=2, blocks=5, preemption="swap", swap_s=0.5)
    assert calls == [("mixed", 1, 1, 1, 0.5, 1, 0, 0), ("decode", 1, 2), ("mixed", 4, 2, 4, 4.0, 4, 0, 0),
                     ("decode", 2, 6), ("decode", 2, 7), ("decode", 2, 9), ("decode", 1, 5), ("decode", 1, 6)]
    assert t.iter_end_s == [1.0, 2.0, 3.0, 4.5, 6.0, 7.0, 8.0, 9.0]
    assert t.finish_s == [7.0, 4.5, 9.0]
    assert t.iter_used_blocks == [1, 1, 3, 4, 4, 5, 3, 3]


def test_swap_in_keeps_the_watermark():
    """Block 1, 200 blocks (2 in reserve), swap at 0.25 s a block. A (100-token prompt, 6 outputs)
    and B (97, 6) fill 197 blocks; at it3 B (98 blocks of KV, 2 tokens) swaps out (24.5 s). C arrives
    at 3: at 27.5 B's 98 blocks do not fit 98 free - 2 in reserve, so B stays out (and C may not pass
    it) until A is done at 30.5; then B comes back (24.5 s) beside C's prefill (1 s): C done at 56,
    B's last 4 tokens at 57..60."""
    calls, t = _engine([(0.0, 100, 6), (0.0, 97, 6), (3.0, 1, 1)], block=1, blocks=200, preemption="swap",
                       swap_s=0.25)
    assert calls == ([("mixed", 197, 2, 197, 100 * 100 / 2 + 97 * 97 / 2, 197, 0, 0), ("decode", 2, 199)]
                     + _decodes(102, 4) + [("mixed", 1, 1, 1, 0.5, 1, 0, 0)] + _decodes(99, 4))
    assert t.sched_s == [0.0, 0.0, 30.5]
    assert t.finish_s == [30.5, 60.0, 56.0]
    assert t.iter_end_s == [1.0, 2.0, 27.5, 28.5, 29.5, 30.5, 56.0, 57.0, 58.0, 59.0, 60.0]


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


def test_swap_with_a_cached_prefix_moves_only_the_own_blocks():
    """Prefix caching (4-token prefix = 1 block kept for good) with swap, block 4, 4 blocks: A, B
    (7-token prompts, 6 outputs) each hold 1 block of their own after it1. At it3 both need a 3rd
    position block, 1 is free: B (KV 8 positions: the prefix block + 1 own) swaps out 1 block
    (0.5 s) and back in once A is done (0.5 s), then decodes its last 4 tokens (keys 9..12)."""
    calls, t = _engine([(0.0, 7, 6), (0.0, 7, 6)], blocks=4, shared=4, preemption="swap", swap_s=0.5)
    assert calls == [("mixed", 14, 2, 14, 49.0, 14, 0, 0), ("decode", 2, 16)] + _decodes(9, 4) + _decodes(9, 4)
    assert t.iter_end_s == [1.0, 2.0, 3.5, 4.5, 5.5, 6.5, 8.0, 9.0, 10.0, 11.0]
    assert t.iter_used_blocks == [3] * 10  # the prefix block + 2 of one sequence's own


@pytest.mark.parametrize(("prompt", "admitted"), [(98, 1.0), (99, 3.0)])
def test_watermark_keeps_one_percent_of_blocks_when_admitting(prompt, admitted):
    """vLLM admits a prompt while others run only if 1% of the blocks stay free (block 1, 200
    blocks: int(0.01 x 200) = 2 in reserve). A (100-token prompt, 3 outputs) holds 100 blocks after
    it1; B (t=0.5) of 98 tokens fits 98 <= 200 - 100 - 2 at it2 (t=1); one of 99 waits until A is
    done at t=3 (then nothing else runs and the reserve is 0)."""
    calls, t = _engine([(0.0, 100, 3), (0.5, prompt, 1)], blocks=200, block=1)
    assert calls[0] == ("mixed", 100, 1, 100, 5000.0, 100, 0, 0)
    assert ("mixed", prompt, 1, prompt, prompt * prompt / 2, prompt, 0, 0) in calls
    assert t.sched_s == [0.0, admitted]
    assert t.iter_used_blocks[:2] == ([100, 198] if admitted == 1.0 else [100, 101])


def test_reserved_kv_has_no_watermark():
    """Orca reserves prompt + output on admission and keeps no watermark: A (50 + 10 = 60 blocks of
    one token) and B (39 + 1 = 40) fill all 100 blocks together in it1."""
    calls, t = _engine([(0.0, 50, 10), (0.0, 39, 1)], scheduler="orca", blocks=100, block=1)
    assert calls[0] == ("mixed", 89, 2, 89, 50 * 50 / 2 + 39 * 39 / 2, 89, 0, 0)
    assert t.sched_s == [0.0, 0.0]
    assert t.iter_used_blocks[0] == 100


def test_a_request_must_fit_the_whole_kv_cache():
    """A request needs ceil((prompt + output) / block) blocks: 10 + 6 tokens = 4 blocks of 4 fit a
    4-block cache exactly (and run alone: prefill, 5 decode steps); 10 + 7 = 5 blocks do not."""
    from mlsyscalc.errors import MlsysError

    calls, t = _engine([(0.0, 10, 6)], blocks=4)
    assert t.finish_s == [6.0] and max(t.iter_used_blocks) == 4
    with pytest.raises(MlsysError) as err:
        _engine([(0.0, 10, 7)], blocks=4)
    assert str(err.value).startswith("a request of 10 + 7 tokens needs 5 KV blocks; the GPU holds 4 (")


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


def test_sarathi_uses_a_one_token_budget_left_by_decodes():
    """sarathi, chunk 3: A, B (1-token prompts, 5 outputs) and the first token of C (2-token prompt)
    fill it1; at it2 the two decodes leave a budget of 1, which takes C's last token (pairs 1 x 1 +
    1/2, keys 2), so C is done at 2."""
    calls, t = _engine([(0.0, 1, 5), (0.0, 1, 5), (0.0, 2, 1)], scheduler="sarathi", chunk=3)
    assert calls == [("mixed", 3, 2, 3, 1.5, 3, 0, 0), ("mixed", 3, 3, 1, 1.5, 2, 2, 4)] + _decodes(6, 3, 2)
    assert t.finish_s == [5.0, 5.0, 2.0]


def test_first_token_time_is_kept_through_a_recompute():
    """The recompute pair again with 0.25 s iterations: B's re-prefill (at 2.25 s) samples a token
    but its first token stays the one at 0.25 s."""
    _, t = _engine([(0.0, 3, 8), (0.0, 3, 8)], blocks=3, step_s=0.25)
    assert t.first_s == [0.25, 0.25]
    assert t.finish_s == [2.0, 3.5]


def test_sarathi_preempts_a_half_prefilled_prompt_and_starts_it_again():
    """sarathi, chunk 4, block 4, 6 blocks. A (4-token prompt, 10 outputs) is prefilled in it1 and
    opens its 2nd block at it2; B (16 tokens, 4 blocks) is admitted at it2 and gets 3 tokens an
    iteration beside A's decode (it2..it5: 12 done). At it6 A's 9th position needs a block and none
    is free: B, the latest admitted, loses its 4 blocks and goes back to the queue (it cannot come
    back while A holds 3 blocks: 4 > 6 - 3). A decodes alone to its 10th token (it6..it10); then B's
    16 tokens are prefilled again from the start, 4 an iteration (it11..it14)."""
    calls, t = _engine([(0.0, 4, 10), (0.0, 16, 1)], scheduler="sarathi", chunk=4, blocks=6)
    prefill_b = [("mixed", 4, 1, 3, 3 * p + 4.5, p + 3, 1, 5 + g) for g, p in enumerate((0, 3, 6, 9))]
    again = [("mixed", 4, 1 if p == 12 else 0, 4, 4 * p + 8.0, p + 4, 0, 0) for p in (0, 4, 8, 12)]
    assert calls == [("mixed", 4, 1, 4, 8.0, 4, 0, 0)] + prefill_b + _decodes(9, 5) + again
    assert t.preempt_s == [5.0]
    assert t.sched_s == [0.0, 1.0]  # the first admission counts for the queueing delay
    assert t.first_s == [1.0, 14.0]
    assert t.finish_s == [10.0, 14.0]
    assert t.iter_used_blocks == [1, 6, 6, 6, 6, 3, 3, 3, 3, 4, 4, 4, 4, 4]


def test_prefilled_requests_are_prefilled_again_after_recompute():
    """A disaggregated decode instance (requests arrive with their prompt's KV and first token):
    the same 3 + 8 pair on 3 blocks of 4 starts decoding at once (keys 4 + 4), B is preempted at
    it2 with tokens 1 and 2, and is then prefilled here (prompt + 2 = 5 tokens) after A is done."""
    calls, t = _engine([(0.0, 3, 8), (0.0, 3, 8)], blocks=3, prefilled=True)
    assert calls == [("decode", 2, 8)] + _decodes(5, 6) + [("mixed", 5, 1, 5, 12.5, 5, 0, 0)] + _decodes(6, 5)
    assert t.finish_s == [7.0, 13.0]
    assert t.preempt_s == [1.0]


def test_prefilled_reservation_counts_the_first_token_as_generated():
    """orca on a decode instance reserves prompt + the outputs still to come: 7 + 2 - 1 = 8 tokens =
    2 blocks of 4 for each of A and B, so both run on 4 blocks (7 + 2 = 9 would need 3 each)."""
    calls, t = _engine([(0.0, 7, 2), (0.0, 7, 2)], scheduler="orca", blocks=4, prefilled=True)
    assert calls == [("decode", 2, 16)]
    assert t.sched_s == [0.0, 0.0]
    assert t.iter_used_blocks == [4]


def test_sarathi_decode_instance_opens_a_block_for_a_full_prompt():
    """sarathi on a decode instance: a 4-token prompt fills its one block, so its first decode step
    (in the admitting iteration) opens a 2nd: 2 blocks used."""
    calls, t = _engine([(0.0, 4, 2)], scheduler="sarathi", prefilled=True)
    assert calls == [("decode", 1, 5)]
    assert t.iter_used_blocks == [2]


def test_prefix_caching_computes_the_shared_blocks_once():
    """vllm, block 4, an 8-token shared prefix (2 blocks kept for good). A (10-token prompt, 2
    outputs) computes all 10 tokens (1 block of its own); B (t=0.5, 10, 1) then prefills only its
    last 2 (pairs 2 x 8 + 2^2/2 = 18, keys 10); C (t=2.5) again 2 after A's and B's blocks are back."""
    calls, t = _engine([(0.0, 10, 2), (0.5, 10, 1), (2.5, 10, 1)], shared=8)
    after_prefix = ("mixed", 2, 1, 2, 18.0, 10, 0, 0)
    assert calls == [("mixed", 10, 1, 10, 50.0, 10, 0, 0), after_prefix, ("decode", 1, 11), after_prefix]
    assert t.iter_used_blocks == [3, 4, 3, 3]
    assert t.finish_s == [3.0, 2.0, 4.0]


def test_prefix_is_ready_once_a_chunk_reaches_its_end():
    """sarathi, chunk 8 = the 8-token prefix: A's first chunk computes exactly the prefix, so B
    (t=1) starts after it, beside A's last 4 tokens (pairs 2 x (4 x 8 + 8) = 80, keys 2 x 12)."""
    calls, t = _engine([(0.0, 12, 1), (1.0, 12, 1)], scheduler="sarathi", chunk=8, shared=8)
    assert calls == [("mixed", 8, 0, 8, 32.0, 8, 0, 0), ("mixed", 8, 2, 8, 80.0, 24, 0, 0)]
    assert t.finish_s == [2.0, 2.0]


def test_orca_reservation_leaves_out_the_shared_prefix():
    """orca reserves prompt + output minus the cached prefix blocks: with a 4-token prefix (1 block),
    A and B (8 + 4 tokens = 3 blocks each) hold 2 blocks each beside the prefix's: 5 of 5 blocks."""
    calls, t = _engine([(0.0, 8, 4), (0.0, 8, 4)], scheduler="orca", blocks=5, shared=4)
    assert t.sched_s == [0.0, 0.0]
    assert t.iter_used_blocks[0] == 5


class FixedSpec:
    """A speculative step of fixed time emitting `tokens_per_step` tokens a sequence."""

    def __init__(self, tokens_per_step: float, step_s: float = 0.25) -> None:
        self.tokens_per_step, self.time, self.calls = tokens_per_step, step_s, []

    def step_s(self, d, keys):
        self.calls.append((d, keys))
        return self.time


def test_speculative_steps_advance_keys_by_the_expected_tokens():
    """orca with a draft (2.5 tokens a step): A (4-token prompt, 8 outputs) needs ceil(7 / 2.5) = 3
    speculative steps after its first token. it1 prefills A (1 s). it2 prefills B (t=1) in its own
    pass (1 s) then one speculative step of A (0.25 s, keys 5). it3, it4: speculative steps alone
    (keys 5 + 2.5, 5 + 5), 0.25 s each."""
    spec = FixedSpec(2.5)
    calls, t = _engine([(0.0, 4, 8), (1.0, 4, 1)], scheduler="orca", spec=spec)
    assert calls == [("mixed", 4, 1, 4, 8.0, 4, 0, 0)] * 2
    assert spec.calls == [(1, 5), (1, 7.5), (1, 10.0)]
    assert t.iter_end_s == [1.0, 2.25, 2.5, 2.75]
    assert t.finish_s == [2.75, 2.25]


# ----- static batching ------------------------------------------------------------------------------

def test_static_batches_by_kv_reservation_by_hand():
    """static, block 4, 6 blocks. A (8-token prompt, 3 outputs: 3 blocks), B (6, 2: 2 blocks), C
    (4, 2: 2 blocks), all at t=0: A + B = 5 blocks fit, C would make 7. Batch 1 prefills 2 x 8 padded
    tokens (pairs 2 x 8^2/2), then decodes both padded rows (keys 2 x (8 + step)) until A's 3rd
    token; B is done after step 1. Batch 2 is C alone from t=3."""
    calls, t = _engine([(0.0, 8, 3), (0.0, 6, 2), (0.0, 4, 2)], scheduler="static", blocks=6)
    assert calls == [("batch", 16, 2, 16, 64.0, 16, 0, 0), ("batch", 2, 2, 0, 0.0, 0, 2, 18),
                     ("batch", 2, 2, 0, 0.0, 0, 2, 20), ("batch", 4, 1, 4, 8.0, 4, 0, 0),
                     ("batch", 1, 1, 0, 0.0, 0, 1, 5)]
    assert t.sched_s == [0.0, 0.0, 3.0]
    assert t.first_s == [1.0, 1.0, 4.0]
    assert t.finish_s == [3.0, 2.0, 5.0]
    assert t.iter_end_s == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert t.iter_used_blocks == [5, 5, 5, 2, 2]
    assert t.iter_batch_tokens == [16, 2, 2, 4, 1]
    assert t.iter_in_system == [3, 2, 1, 1, 0]
    assert t.busy_s == 5.0


def test_static_batch_fills_the_kv_exactly_and_waits_for_arrivals():
    """6 blocks: A (3 blocks) + B (2) + C (2 + 2 = 4 tokens, 1 block) fill all 6, one batch. D
    arrives at 2.5, during that batch (it ends at 3): it is batched at t=3 and waits 0.5 s."""
    calls, t = _engine([(0.0, 8, 3), (0.0, 6, 2), (0.0, 2, 2), (2.5, 4, 1)], scheduler="static", blocks=6,
                       step_s=1.0)
    assert t.sched_s == [0.0, 0.0, 0.0, 3.0]
    assert t.iter_used_blocks == [6, 6, 6, 2]
    # B and C are done at 2; D counts from the iteration ending at 3 (arrived 2.5)
    assert t.iter_in_system == [3, 1, 1, 0]
    assert t.finish_s == [3.0, 2.0, 2.0, 4.0]


def test_static_batch_holds_at_most_max_seqs():
    """--max-seqs 1: static batches of one request: A (t=0, 4-token prompt, 2 outputs) at 0 to 2,
    then B at 2 to 4."""
    calls, t = _engine([(0.0, 4, 2), (0.0, 4, 2)], scheduler="static", seqs=1)
    assert calls == [("batch", 4, 1, 4, 8.0, 4, 0, 0), ("batch", 1, 1, 0, 0.0, 0, 1, 5)] * 2
    assert t.sched_s == [0.0, 2.0]
    assert t.finish_s == [2.0, 4.0]


# ----- metrics -----------------------------------------------------------------------------------

def _trace(sched, first, finish, ends=(), used=(), tokens=(), in_system=(), preempt=(), busy=0.0):
    return Trace(list(sched), list(first), list(finish), list(ends), list(used), list(tokens), list(in_system),
                 list(preempt), busy)


# A (t=0.5, 10-token prompt, 3 outputs): scheduled 0.5, first token 0.75, last 1.25;
# B (t=0.625, 20, 1): scheduled 0.75, its one token at 0.875. Four iterations end at 0.75, 0.875,
# 1.0, 1.25 with 2, 5, 3, 3 of 10 KV blocks used, 10, 21, 1, 1 tokens, 2, 2, 1, 1 requests in the
# system; 0.625 s busy. Binary fractions, so every sum below is exact.
HAND_REQS = [(0.5, 10, 3), (0.625, 20, 1)]
HAND_TRACE = _trace([0.5, 0.75], [0.75, 0.875], [1.25, 0.875], [0.75, 0.875, 1.0, 1.25], [2, 5, 3, 3],
                    [10, 21, 1, 1], [2, 2, 1, 1], (), 0.625)


def test_summary_of_a_hand_trace():
    """docs/serving.md: TTFT = first - arrival, TPOT = (last - first) / (outputs - 1), end-to-end =
    last - arrival, queueing = scheduled - arrival; rates over the makespan (first arrival to last
    token: 1.25 - 0.5 = 0.75 s); time averages weight each iteration by its length, from the 2nd on."""
    from mlsyscalc.calc.serve.metrics import Slo, summary

    m = summary(HAND_REQS, HAND_TRACE, 10, Slo())
    assert m["ttft_mean_s"] == 0.25 and m["ttft_p99_s"] == 0.25
    assert m["tpot_mean_s"] == (1.25 - 0.75) / 2 and m["tpot_p50_s"] == 0.25  # B has no TPOT
    assert m["e2e_mean_s"] == (0.75 + 0.25) / 2
    assert m["queue_delay_mean_s"] == 0.125 / 2
    assert m["makespan_s"] == 0.75
    assert m["requests"] == 2 and m["iterations"] == 4
    assert m["throughput_requests_per_s"] == pytest.approx(2 / 0.75, rel=1e-12)
    assert m["throughput_tokens_per_s"] == pytest.approx(4 / 0.75, rel=1e-12)
    assert m["input_tokens_per_s"] == pytest.approx(30 / 0.75, rel=1e-12)
    assert m["goodput_requests_per_s"] == pytest.approx(2 / 0.75, rel=1e-12)
    assert m["busy_fraction"] == pytest.approx(0.625 / 0.75, rel=1e-12)
    assert m["slo_attainment"] == 1.0
    # in system: (2 x 0.125 + 1 x 0.125 + 1 x 0.25) / 0.5; KV: (5 x 0.125 + 3 x 0.125 + 3 x 0.25) / 0.5 / 10
    assert m["mean_in_system"] == 1.25
    assert m["kv_utilization_mean"] == pytest.approx(0.35, rel=1e-12)
    assert m["kv_utilization_max"] == 0.5
    assert m["mean_batch_tokens"] == 33 / 4
    assert m["preemptions"] == 0


@pytest.mark.parametrize(("ttft", "tpot", "good"), [(0.25, 0.25, 2), (0.25, 0.125, 1), (0.125, None, 0),
                                                    (None, 0.25, 2), (None, 0.2, 1)])
def test_slo_is_met_at_its_bound(ttft, tpot, good):
    """Goodput counts requests whose TTFT and TPOT are <= the SLO (DistServe section 2); both of
    TTFT 0.25 s, A's TPOT 0.25 s: an SLO at exactly those values keeps both."""
    from mlsyscalc.calc.serve.metrics import Slo, summary

    m = summary(HAND_REQS, HAND_TRACE, 10, Slo(ttft_s=ttft, tpot_s=tpot))
    assert m["slo_attainment"] == good / 2
    assert m["goodput_requests_per_s"] == pytest.approx(good / 0.75, rel=1e-12)


def test_percentile_interpolates_like_numpy():
    """numpy.percentile's default ('linear') interpolation is the documented rule."""
    import numpy as np

    from mlsyscalc.calc.serve.metrics import percentile

    rng = random.Random(7)
    for n in (1, 2, 3, 4, 7, 10):
        values = [rng.uniform(0, 10) for _ in range(n)]
        for q in (0, 25, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12, abs=0)
    assert percentile([1.0, 2.0, 4.0, 8.0], 50) == 3.0
    assert percentile([], 50) is None


def test_zero_length_run_reports_zero_rates_not_inf():
    """A run whose last token comes at its first arrival (makespan 0, no iterations): every rate,
    fraction and mean is 0, never a division by zero."""
    from mlsyscalc.calc.serve.metrics import Slo, series, summary

    m = summary([(1.0, 5, 1)], _trace([1.0], [1.0], [1.0]), 4, Slo())
    for key in ("busy_fraction", "throughput_requests_per_s", "throughput_tokens_per_s", "input_tokens_per_s",
                "goodput_requests_per_s", "kv_utilization_mean", "kv_utilization_max", "mean_batch_tokens",
                "mean_in_system", "makespan_s"):
        assert m[key] == 0.0, key
    assert series(_trace([1.0], [1.0], [1.0]), 4) == []


def test_one_iteration_means():
    """One iteration: its own batch tokens and in-system count are the means."""
    from mlsyscalc.calc.serve.metrics import Slo, summary

    m = summary([(0.0, 6, 1)], _trace([0.0], [0.5], [0.5], [0.5], [2], [6], [1], (), 0.5), 4, Slo())
    assert m["mean_batch_tokens"] == 6.0
    assert m["mean_in_system"] == 1.0
    assert m["kv_utilization_mean"] == 0.5
    assert m["busy_fraction"] == 1.0
    assert m["throughput_tokens_per_s"] == 2.0


def test_series_buckets_by_hand():
    """4 buckets over 4 s: iterations end at 1 s (4 blocks of 8, 8 tokens) and 4 s (2 blocks, 1
    token; the last end falls in the last bucket), a preemption at 2 s; empty buckets report 0."""
    from mlsyscalc.calc.serve.metrics import series

    s = series(_trace([0.0], [1.0], [4.0], [1.0, 4.0], [4, 2], [8, 1], [1, 1], [2.0], 2.0), 8, points=4)
    assert [b["t_s"] for b in s] == [1.0, 2.0, 3.0, 4.0]
    assert [b["iterations"] for b in s] == [0, 1, 0, 1]
    assert [b["kv_utilization"] for b in s] == [0.0, 0.5, 0.0, 0.25]
    assert [b["batch_tokens_mean"] for b in s] == [0.0, 8.0, 0.0, 1.0]
    assert [b["preemptions"] for b in s] == [0, 0, 1, 0]


# ----- options, KV capacity, engine limits, speculation, sweeps -----------------------------------

def _spec_and_ceilings(name="llama3-8b"):
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.specs.lookup import load_model

    return load_model(name), resolve_ceilings("H100-SXM")


def test_documented_defaults():
    """docs/serving.md: the vllm-v1 scheduler with vLLM V1's per-card limits (8192 tokens and 1024
    sequences on an 80 GB H100 or a 141 GB H200; 2048 and 256 on an A100 80GB or a 24 GB RTX 4090);
    vLLM V0's 256 sequences and 8192 tokens for the other schedulers; block 16, 90% of GPU memory;
    Sarathi-Serve's 512-token chunk; recompute preemption; the replay's host time, 155 us + 7.4 us a
    sequence."""
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.specs.gpu import load_gpu

    o = ServeOptions()
    assert o.scheduler == "vllm-v1" and (o.max_seqs, o.max_batch_tokens, o.chunk, o.block_size) == (None, None, 512, 16)
    assert (o.gpu_memory_utilization, o.preemption) == (0.9, "recompute")
    assert (o.iteration_overhead_s, o.iteration_overhead_per_seq_s) == (155e-6, 7.4e-6)
    assert (o.spec_k, o.accept, o.kv_blocks, o.prefix_caching) == (4, 0.7, None, False)
    limits = {g: (o.resolved(load_gpu(g)).max_batch_tokens, o.resolved(load_gpu(g)).max_seqs)
              for g in ("H100-SXM", "H200", "A100-80GB-SXM", "RTX-4090")}
    assert limits == {"H100-SXM": (8192, 1024), "H200": (8192, 1024), "A100-80GB-SXM": (2048, 256),
                      "RTX-4090": (2048, 256)}
    h100 = load_gpu("H100-SXM")
    assert o.resolved(h100).iteration_tokens == 8192
    assert replace(o, max_batch_tokens=300).resolved(h100).max_seqs == 300  # V1: max_num_seqs <= the budget
    for name, want in (("sarathi", 512), ("vllm", 8192), ("orca", 8192)):
        r = replace(o, scheduler=name).resolved(h100)
        assert (r.iteration_tokens, r.max_seqs) == (want, 256), name


@pytest.mark.parametrize("name", ["max_batch_tokens", "max_seqs", "chunk", "block_size", "tp"])
@pytest.mark.parametrize("value", [0, -3])
def test_limits_must_be_positive_integers(name, value):
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.errors import MlsysError

    flag = "--" + name.replace("_", "-")
    with pytest.raises(MlsysError, match=f"^{flag} must be a positive integer, got {value}$"):
        replace(ServeOptions(), **{name: value}).validate()
    replace(ServeOptions(), **{name: 1}).validate()  # 1 is allowed


@pytest.mark.parametrize(("opts", "message"), [
    ({"iteration_overhead_s": -5e-6}, "--iteration-overhead-us must be >= 0, got -5"),
    ({"iteration_overhead_s": math.inf}, "--iteration-overhead-us must be >= 0, got inf"),
    ({"kv_blocks": 0}, "--kv-blocks must be >= 1, got 0"),
    ({"gpu_memory_utilization": 0.0}, "--gpu-memory-utilization must be in (0, 1], got 0.0"),
    ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization must be in (0, 1], got 1.5"),
    ({"scheduler": "fifo"}, "--scheduler must be one of static, orca, vllm, sarathi, vllm-v1, got 'fifo'"),
    ({"preemption": "drop"}, "--preemption must be one of recompute, swap"),
    ({"prefix_caching": True, "scheduler": "static"},
     "--prefix-caching needs an iteration-level scheduler (orca, vllm, sarathi, vllm-v1)"),
    ({"spec_k": 0}, "--spec-k must be >= 1, got 0"),
    ({"accept": 1.5}, "--accept must be in [0, 1], got 1.5"),
])
def test_option_errors_name_the_problem(opts, message):
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError) as err:
        replace(ServeOptions(), **opts).validate()
    assert str(err.value) == message


@pytest.mark.parametrize("name", ["ttft", "tpot"])
def test_slo_must_be_positive(name):
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.calc.serve.metrics import Slo
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError) as err:
        ServeOptions(slo=Slo(**{f"{name}_s": 0.0})).validate()
    assert str(err.value) == f"--slo {name} must be positive, got 0.0"
    with pytest.raises(MlsysError, match=f"--slo {name} must be positive, got -1"):
        ServeOptions(slo=Slo(**{f"{name}_s": -1.0})).validate()
    ServeOptions(slo=Slo(**{f"{name}_s": 1e-9}), kv_blocks=1, iteration_overhead_s=0.0).validate()


def test_kv_capacity_with_a_draft_shares_the_budget():
    """qwen2.5-7b with a qwen2.5-0.5b draft on one H100 (85,520,809,984 B): both models' bf16
    weights (7,615,616,512 and 494,032,768 parameters, their HF model cards) and both KV caches per
    block: 16 x (28 layers x 4 KV heads x 128 x 2 x 2 B + 24 x 2 x 64 x 2 x 2 B) = 16 x (57344 +
    12288) B."""
    from mlsyscalc.calc.serve.simulator import ServeOptions, kv_capacity
    from mlsyscalc.specs.lookup import load_model

    target, ceil = _spec_and_ceilings("qwen2.5-7b")
    kv = kv_capacity(target, ceil, ServeOptions(), load_model("qwen2.5-0.5b"))
    assert kv.weights_bytes == 2 * (7_615_616_512 + 494_032_768)
    assert kv.block_bytes == 16 * (57344 + 12288)
    assert kv.usable_bytes == pytest.approx(0.9 * 85_520_809_984, rel=1e-15)
    assert kv.blocks == (kv.usable_bytes - kv.weights_bytes - kv.activations_bytes) // kv.block_bytes
    alone = kv_capacity(target, ceil, ServeOptions())
    assert alone.weights_bytes == 2 * 7_615_616_512 and alone.block_bytes == 16 * 57344
    assert alone.activations_bytes == kv.activations_bytes  # the draft runs between the target's passes


def test_kv_blocks_override_and_no_room_message():
    from mlsyscalc.calc.serve.simulator import ServeOptions, kv_capacity
    from mlsyscalc.errors import MlsysError

    spec, ceil = _spec_and_ceilings()
    assert kv_capacity(spec, ceil, ServeOptions(kv_blocks=1)).blocks == 1
    big, _ = _spec_and_ceilings("llama3-70b")
    with pytest.raises(MlsysError) as err:  # 70.6e9 params x 2 B > 0.9 x 85.5 GB
        kv_capacity(big, ceil, ServeOptions())
    assert "llama3-70b leaves no room for a KV cache on one H100-SXM: weights 141.1 GB" in str(err.value)
    assert "of 77.0 GB usable" in str(err.value)


def test_swap_time_per_block_over_one_pcie_direction():
    """H100: PCIe Gen5 x16, 128 GB/s both directions (its spec): a 16-token llama3-8b block of
    16 x 131072 B moves one way at 64 GB/s. Without a PCIe figure swap is refused; recompute needs none."""
    from mlsyscalc.calc.serve.simulator import ServeOptions, engine_limits, kv_capacity
    from mlsyscalc.errors import MlsysError

    spec, ceil = _spec_and_ceilings()
    kv = kv_capacity(spec, ceil, ServeOptions())
    lim = engine_limits(kv, ceil, ServeOptions(preemption="swap"))
    assert lim.swap_s_per_block == pytest.approx(16 * 131072 / 64e9, rel=1e-12, abs=0)
    assert lim.total_blocks == kv.blocks and lim.shared_prefix == 0
    no_pcie = replace(ceil, gpu=replace(ceil.gpu, pcie_Bps=None))
    with pytest.raises(MlsysError, match="H100-SXM: no PCIe bandwidth in its spec for --preemption swap"):
        engine_limits(kv, no_pcie, ServeOptions(preemption="swap"))
    assert engine_limits(kv, no_pcie, ServeOptions()).swap_s_per_block == 0.0
    # prefix caching keeps whole blocks of the shared prefix: 40 tokens -> 32
    assert engine_limits(kv, ceil, ServeOptions(prefix_caching=True), prefix=40).shared_prefix == 32
    assert engine_limits(kv, ceil, ServeOptions(), prefix=40).shared_prefix == 0


@pytest.mark.parametrize(("trace", "mean_batch"), [([(0.0, 1, 20)], 1), ([(0.0, 200, 3), (0.0, 300, 2)], 251)])
def test_speculative_verdicts_use_batch_one_and_the_mean_batch(trace, mean_batch):
    """The report's `batch1` verdict is at batch 1, `mean_batch` at the run's mean batch tokens
    rounded (at least 1), both at the first request's prompt as context. One 1-token prompt and 20
    outputs: every iteration has 1 token. 200 + 300 prompt tokens in one prefill, then one
    speculative step of both (llama3-8b drafting for itself, k 3, accept 1: 4 tokens a step cover the
    2 and 1 tokens left): (500 + 2) / 2 = 251."""
    from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
    from mlsyscalc.calc.serve.workload import from_trace

    spec, ceil = _spec_and_ceilings()
    opts = ServeOptions(scheduler="orca", accept=1.0, spec_k=3)
    r = simulate(spec, ceil, from_trace(trace, "hand"), opts, draft=spec)
    s = r.metrics["speculative"]
    assert (s["batch1"]["batch"], s["batch1"]["context"]) == (1, trace[0][1])
    assert (s["mean_batch"]["batch"], s["mean_batch"]["context"]) == (mean_batch, trace[0][1])
    assert s["batch1"]["expected_tokens_per_step"] == 4.0
    assert (s["draft"], s["spec_k"], s["accept"]) == ("llama3-8b", 3, 1.0)


def test_a_sweep_of_one_rate_and_of_none():
    from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, sweep_rates
    from mlsyscalc.calc.serve.workload import LengthDist
    from mlsyscalc.errors import MlsysError

    spec, ceil = _spec_and_ceilings()
    work = WorkloadSpec(LengthDist("fixed", (8,)), LengthDist("fixed", (2,)), 1.0, requests=2)
    (one,) = sweep_rates(spec, ceil, work, (3.0,), ServeOptions())
    assert one.workload.source.startswith("rate 3/s")
    with pytest.raises(MlsysError, match=r"--sweep rate=\.\.\. needs at least one rate"):
        sweep_rates(spec, ceil, work, (), ServeOptions())


def test_workload_spec_defaults_are_seed_0_and_poisson():
    """WorkloadSpec and synthetic() default to seed 0, burstiness 1 (Poisson: gamma of shape 1) and
    no shared prefix: arrivals are random.Random(0)'s gamma(1, 1/rate) gaps added up."""
    from mlsyscalc.calc.serve.simulator import WorkloadSpec
    from mlsyscalc.calc.serve.workload import LengthDist, synthetic

    rng = random.Random(0)
    t, want = 0.0, []
    for _ in range(5):
        t += rng.gammavariate(1.0, 1 / 4.0)
        want.append((t, 9, 3))
    fixed9, fixed3 = LengthDist("fixed", (9,)), LengthDist("fixed", (3,))
    for work in (WorkloadSpec(fixed9, fixed3, 4.0, requests=5).build(), synthetic(fixed9, fixed3, 4.0, 5)):
        assert work.requests == tuple(want)
        assert work.shared_prefix == 0
        assert work.source == "rate 4/s, burstiness 1, seed 0"


# ----- workloads ---------------------------------------------------------------------------------

def _raises(fn, message: str) -> None:
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError) as err:
        fn()
    assert message in str(err.value)


def test_length_column_needs_positive_lengths():
    from mlsyscalc.calc.serve.workload import LengthDist, parse_length

    assert parse_length("", "prompt", (5,)) == LengthDist("empirical", (5,))  # one value is a column
    assert parse_length("", "prompt", (1, 7)).mean == 4.0
    _raises(lambda: parse_length("", "prompt", ()), "prompt: the column needs positive integer lengths")
    _raises(lambda: parse_length("", "output", (3, 0)), "output: the column needs positive integer lengths")


@pytest.mark.parametrize(("text", "message"), [
    ("uniform:3,2", "prompt: uniform:a,b needs integers 1 <= a <= b, got 'uniform:3,2'"),
    ("uniform:0,2", "prompt: uniform:a,b needs integers 1 <= a <= b, got 'uniform:0,2'"),
    ("uniform:1.5,3", "prompt: uniform:a,b needs integers 1 <= a <= b, got 'uniform:1.5,3'"),
    ("uniform:1,2.5", "prompt: uniform:a,b needs integers 1 <= a <= b, got 'uniform:1,2.5'"),
    ("normal:100,-1", "prompt: the spread must be >= 0, got 'normal:100,-1'"),
    ("normal:0.5,1", "prompt: the mean must be >= 1, got 'normal:0.5,1'"),
    ("lognormal:1,-0.5", "prompt: the spread must be >= 0, got 'lognormal:1,-0.5'"),
    ("normal:100", "prompt: normal takes 2 numbers, got 'normal:100'"),
    ("pareto:1,2", "prompt: unknown distribution 'pareto'"),
    ("0", "prompt: a length must be >= 1, got 0"),
    ("normal:nan,1", "prompt: parameters must be finite, got 'normal:nan,1'"),
    ("uniform:a,b", "prompt: cannot parse 'uniform:a,b'"),
])
def test_length_errors_name_the_problem(text, message):
    from mlsyscalc.calc.serve.workload import parse_length

    _raises(lambda: parse_length(text, "prompt"), message)


def test_length_edges_that_are_allowed():
    """A spread of 0 (every draw the mean), uniform:a,a, lognormal of a mean below 1 (its log)."""
    from mlsyscalc.calc.serve.workload import parse_length

    rng = random.Random(3)
    assert {parse_length("normal:100,0", "p").draw(rng) for _ in range(5)} == {100}
    assert {parse_length("uniform:7,7", "p").draw(rng) for _ in range(5)} == {7}
    assert parse_length("lognormal:0.5,0", "p").mean == pytest.approx(math.exp(0.5), rel=1e-15)
    assert parse_length("uniform:2,6", "p").mean == 4.0


def test_workload_checks_and_defaults():
    from mlsyscalc.calc.serve.workload import Workload, from_trace

    assert Workload(((0.0, 1, 1),), "x").shared_prefix == 0  # 1-token prompt and output are fine
    assert from_trace([(1.0, 5, 2), (0.0, 9, 1)], "t").requests == ((0.0, 9, 1), (1.0, 5, 2))
    assert from_trace([(0.0, 5, 2)], "t").shared_prefix == 0
    assert from_trace([(2.5, 5, 2), (0.5, 5, 2)], "t").duration_s == 2.5  # the last arrival
    assert Workload(((0.0, 5, 1), (1.0, 10, 1)), "x", 5).shared_prefix == 5  # the shortest prompt is 5
    _raises(lambda: Workload((), "x"), "the workload has no requests")
    _raises(lambda: Workload(((0.0, 10, 1), (1.0, 5, 1)), "x", 8), "--prefix-len 8 is longer than a 5-token prompt")
    _raises(lambda: Workload(((0.0, 5, 1),), "x", -1), "--prefix-len must be >= 0, got -1")
    _raises(lambda: Workload(((-1.0, 5, 1),), "x"), "arrival times must be finite and >= 0, got -1.0")
    _raises(lambda: Workload(((math.inf, 5, 1),), "x"), "arrival times must be finite and >= 0, got inf")
    _raises(lambda: Workload(((0.0, 0, 5),), "x"), "prompt and output lengths must be >= 1, got 0, 5")
    _raises(lambda: Workload(((0.0, 5, 0),), "x"), "prompt and output lengths must be >= 1, got 5, 0")


def test_synthetic_arguments_are_checked():
    from mlsyscalc.calc.serve.workload import LengthDist, synthetic

    one = LengthDist("fixed", (4,))
    assert len(synthetic(one, one, 2.0, 1).requests) == 1
    _raises(lambda: synthetic(one, one, 0.0, 5), "--rate must be a positive number, got 0.0")
    _raises(lambda: synthetic(one, one, math.nan, 5), "--rate must be a positive number, got nan")
    # rate inf sends every request at time 0, as benchmark_serving's --request-rate inf
    assert [a for a, _, _ in synthetic(one, one, math.inf, 3).requests] == [0.0, 0.0, 0.0]
    _raises(lambda: synthetic(one, one, 1.0, 0), "--requests must be >= 1, got 0")
    _raises(lambda: synthetic(one, one, 1.0, 5, burstiness=0.0), "--burstiness must be positive, got 0.0")
    prefixed = synthetic(one, one, 1.0, 3, prefix=6)
    assert {p for _, p, _ in prefixed.requests} == {10} and prefixed.shared_prefix == 6


# ----- disaggregation ----------------------------------------------------------------------------

U = 100.0  # s of host overhead per iteration (docs/serving.md): kernels add milliseconds


def _disagg(layout, trace, cluster="hgx-h100", **opts):
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.calc.serve.disagg import simulate_disagg
    from mlsyscalc.calc.serve.workload import from_trace
    from mlsyscalc.specs.cluster import load_cluster

    spec, ceil = _spec_and_ceilings()
    return simulate_disagg(spec, ceil, from_trace(trace, "hand"), ServeOptions(**opts), layout, load_cluster(cluster))


def test_disaggregated_schedule_by_hand():
    """1P:1D under a 100 s iteration overhead. A (100-token prompt, 3 outputs), B (100, 2), C (100, 1)
    at t=0: the prefill instance prefills all three in one iteration (first tokens at U; C is done);
    A's and B's KV moves (~40 us) and the decode instance decodes both (B done at 2U), then A (3U).
    Busy: prefill U, decode 2U, over a 3U makespan. TTFT U each; TPOT (3U - U) / 2 and (2U - U) / 1."""
    from mlsyscalc.calc.serve.disagg import Layout

    r = _disagg(Layout(1, 1), [(0.0, 100, 3), (0.0, 100, 2), (0.0, 100, 1)], iteration_overhead_s=U)
    m, pools = r.metrics, r.pools
    rel = 1e-4
    assert m["makespan_s"] == pytest.approx(3 * U, rel=rel)
    assert pools["prefill_busy_fraction"] == pytest.approx(1 / 3, rel=rel)
    assert pools["decode_busy_fraction"] == pytest.approx(2 / 3, rel=rel)
    assert m["ttft_mean_s"] == pytest.approx(U, rel=rel)
    assert m["tpot_p50_s"] == pytest.approx(U, rel=rel)
    assert m["e2e_mean_s"] == pytest.approx((3 * U + 2 * U + U) / 3, rel=rel)  # C: its one token at U
    assert m["e2e_p50_s"] == pytest.approx(2 * U, rel=rel)
    assert m["throughput_tokens_per_s"] == pytest.approx(6 / (3 * U), rel=rel)
    assert m["goodput_requests_per_s"] == pytest.approx(3 / (3 * U), rel=rel)
    assert pools["goodput_per_gpu_requests_per_s"] == pytest.approx(1 / (3 * U) / 2 * 3, rel=rel)
    assert (pools["gpus"], pools["layout"]) == (2, "1P(tp1):1D(tp1)")
    for key in ("busy_fraction", "mean_in_system", "mean_batch_tokens", "iterations", "kv_utilization_mean"):
        assert key not in m  # per-pool quantities: not reported for the whole



def test_disaggregated_decode_pool_busy_fraction_counts_its_instances():
    """1P:2D, the same three requests: A and B decode on one instance each (B done at 2U after one
    iteration, A at 3U after two), so the pool is busy U + 2U of its 2 instances x 3U: one half."""
    from mlsyscalc.calc.serve.disagg import Layout

    r = _disagg(Layout(1, 2), [(0.0, 100, 3), (0.0, 100, 2), (0.0, 100, 1)], iteration_overhead_s=U)
    assert r.metrics["makespan_s"] == pytest.approx(3 * U, rel=1e-4)
    assert r.pools["decode_busy_fraction"] == pytest.approx((U + 2 * U) / (2 * 3 * U), rel=1e-4)

def _p2p_s(tokens, nodes, tp_prefill=1):
    """One prompt's llama3-8b KV (32 layers x 8 KV heads x 128 x 2 x 2 B = 131072 B a token) over
    the communication calculator's point-to-point time, 2 ranks."""
    from mlsyscalc.calc.comm.collectives import collective_cost
    from mlsyscalc.specs.cluster import load_cluster

    return collective_cost("p2p", tokens * 131072 // tp_prefill, 2, load_cluster("hgx-h100"), nodes).time_s


@pytest.mark.parametrize(("layout", "nodes"), [((4, 4), 1), ((5, 4), 2), ((1, 1), 1)])
def test_kv_transfer_within_a_node_and_across(layout, nodes):
    """hgx-h100 has 8 GPUs a node: 4P:4D (8 GPUs) moves KV over NVLink (370 GB/s a direction +
    3.4 us, hgx-h100.json), 5P:4D (9) over the inter-node link. Only requests with more than one
    output move KV: the mean is over A alone."""
    from mlsyscalc.calc.serve.disagg import Layout

    r = _disagg(Layout(*layout), [(0.0, 1000, 2), (0.0, 500, 1)])
    assert r.pools["kv_transfer_mean_s"] == pytest.approx(_p2p_s(1000, nodes), rel=1e-12)
    if nodes == 1:
        assert r.pools["kv_transfer_mean_s"] == pytest.approx(1000 * 131072 / 370e9 + 3.4e-6, rel=0.02)
    assert r.metrics["e2e_p50_s"] >= r.metrics["ttft_p50_s"]


def test_kv_transfer_shard_splits_over_prefill_tp():
    """Each of tp_prefill ranks sends its 1/tp share at once; an fp8 KV cache moves 1 byte an element."""
    from mlsyscalc.calc.serve.disagg import Layout

    r = _disagg(Layout(1, 1, 2, 1), [(0.0, 1000, 2)])
    assert r.pools["kv_transfer_mean_s"] == pytest.approx(_p2p_s(1000, 1, 2), rel=1e-12)
    assert r.pools["gpus"] == 3
    fp8 = _disagg(Layout(1, 1), [(0.0, 1000, 2)], kv_dtype="fp8")
    assert fp8.pools["kv_transfer_mean_s"] == pytest.approx(_p2p_s(500, 1), rel=1e-12)  # half the bytes


@pytest.mark.parametrize(("text", "message"), [
    ("0:2", "--disagg needs P >= 1 and D >= 1, got '0:2'"), ("2:0", "--disagg needs P >= 1 and D >= 1, got '2:0'"),
    ("x:1", "--disagg expects P:D instance counts, e.g. 1:2, got 'x:1'"), ("3", "--disagg expects P:D"),
])
def test_layout_parsing(text, message):
    from mlsyscalc.calc.serve.disagg import Layout, parse_layout

    assert parse_layout("1:1", 2) == Layout(1, 1, 2, 2)
    assert parse_layout("2:3", 1).gpus == 5
    _raises(lambda: parse_layout(text, 1), message)


def test_layout_search_tries_every_split_within_the_budget():
    """3 GPUs, TP of 1 or 2 per role (TP sizes below the budget): every (P, D, tp_p, tp_d) with
    P tp_p + D tp_d <= 3, enumerated here directly."""
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.calc.serve.disagg import Layout, search_layouts
    from mlsyscalc.calc.serve.workload import from_trace
    from mlsyscalc.specs.cluster import load_cluster

    spec, ceil = _spec_and_ceilings()
    s = search_layouts(spec, ceil, from_trace([(0.0, 100, 2)], "t"), ServeOptions(), load_cluster("hgx-h100"), 3)
    want = {Layout(p, d, a, b).name for a in (1, 2) for b in (1, 2) for p in range(1, 4) for d in range(1, 4)
            if p * a + d * b <= 3}
    names = [r.layout.name for r in s.layouts]
    assert sorted(names) == sorted(want) and len(want) == 5
    assert s.max_gpus == 3
    per_gpu = [r.pools["goodput_per_gpu_requests_per_s"] for r in s.layouts]
    assert per_gpu == sorted(per_gpu, reverse=True)
    assert s.layouts[0].layout.gpus == 2  # one request: the smallest layout has the most goodput per GPU


def test_layout_search_limits():
    """llama3-70b (141 GB of bf16 weights) needs TP 2 on an H100: with 4 GPUs only 1P(tp2):1D(tp2);
    with 2 GPUs no TP size fits. A budget below 2 GPUs is refused. An 8-GPU node allows TP 8."""
    from mlsyscalc.calc.serve.simulator import ServeOptions
    from mlsyscalc.calc.serve.disagg import tp_fits, search_layouts
    from mlsyscalc.calc.serve.workload import from_trace
    from mlsyscalc.specs.cluster import load_cluster

    big, ceil = _spec_and_ceilings("llama3-70b")
    cluster, work = load_cluster("hgx-h100"), from_trace([(0.0, 100, 2)], "t")
    s = search_layouts(big, ceil, work, ServeOptions(tp=2), cluster, 4)
    assert [r.layout.name for r in s.layouts] == ["1P(tp2):1D(tp2)"]
    _raises(lambda: search_layouts(big, ceil, work, ServeOptions(tp=2), cluster, 2),
            "llama3-70b: no tensor-parallel size in (1, 2, 4, 8) fits within 2 GPUs")
    _raises(lambda: search_layouts(big, ceil, work, ServeOptions(tp=2), cluster, 1),
            "--max-gpus must be >= 2 for a prefill and a decode instance, got 1")
    assert tp_fits(big, ceil, ServeOptions(), 8, cluster)
    assert not tp_fits(big, ceil, ServeOptions(), 1, cluster)
    assert not tp_fits(big, ceil, ServeOptions(), 8, replace(cluster, gpus_per_node=4))


def test_cluster_for_picks_a_cluster_of_the_gpu():
    from mlsyscalc.calc.serve.disagg import cluster_for

    _, ceil = _spec_and_ceilings()
    assert cluster_for(ceil, None).gpu == "H100-SXM"
    assert cluster_for(ceil, "hgx-h100").name == "hgx-h100"
    odd = replace(ceil, gpu=replace(ceil.gpu, name="B999"))
    _raises(lambda: cluster_for(odd, None), "no built-in cluster of B999 GPUs for the KV transfer")


# ----- iteration cost and speculation ------------------------------------------------------------

def _cost(name="llama3-8b", ceil=None, **ro):
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.calc.serve.iteration import IterationCost

    spec, h100 = _spec_and_ceilings(name)
    return IterationCost(spec, ceil or h100, RooflineOptions(**ro))


def test_padded_tokens_round_up_to_128_row_tiles():
    """docs: below one 128-row tile tokens are as is; from 128 up whole tiles (577 -> 640)."""
    from mlsyscalc.calc.serve.iteration import M_TILE, padded_tokens

    assert M_TILE == 128
    assert [padded_tokens(t) for t in (1, 127, 128, 129, 256, 577)] == [1, 127, 128, 256, 256, 640]


def test_batch_sums_by_hand():
    """Batch.of: chunks (c new, p cached) of 4 @ 10 and 2 @ 0, decodes at contexts 7 and 9: tokens
    4 + 2 + 2, samples 4 (every sequence), pairs 4 x 10 + 16/2 + 0 + 4/2 = 50, prefill keys
    14 + 2, decode keys 8 + 10. The empty batch is all zeros."""
    from mlsyscalc.calc.serve.iteration import Batch

    assert Batch.of(((4, 10), (2, 0)), (7, 9)) == Batch(8, 4, 6, 50.0, 16, 2, 18)
    assert Batch.of(((4, 10),), samples=0).samples == 0
    assert Batch() == Batch(0, 0, 0, 0.0, 0, 0, 0)
    assert Batch(tokens=3) == Batch(3, 0, 0, 0.0, 0, 0, 0)


def _row(model, name):
    return next(r for r in model.rows if r.pred.name == name)


def test_compute_rates_are_read_at_the_documented_large_shapes():
    """Seconds per FLOP of token rows come from an 8192-token prefill (capped below a learned
    position table: gpt2's 1024; qwen2.5's 32768 does not cap it), prefill attention from a min(4096, that - 1)-token prompt (gpt2:
    1023) and decode attention from 64 sequences at that context: predict_model at those shapes."""
    from mlsyscalc.calc.roofline.model import predict_model
    from mlsyscalc.calc.roofline.options import RooflineOptions

    for name, rate, long in (("llama3-8b", 8192, 4096), ("qwen2.5-0.5b", 8192, 4096), ("gpt2", 1024, 1023)):
        spec, ceil = _spec_and_ceilings(name)
        cost = _cost(name)
        big = predict_model(spec, ceil, RooflineOptions(phase="prefill", batch=1, seq=rate))
        for row in cost.token_rows:
            pred = _row(big, row.name).pred
            want = pred.compute_s / pred.flops if pred.flops else 0.0
            assert row.seconds_per_flop == pytest.approx(want, rel=1e-12, abs=0), (name, row.name)
        attn = _row(predict_model(spec, ceil, RooflineOptions(phase="prefill", batch=1, seq=long)), "attention").pred
        assert cost.prefill_rows[0].seconds_per_flop == pytest.approx(attn.compute_s / attn.flops, rel=1e-12, abs=0)
        dec = _row(predict_model(spec, ceil, RooflineOptions(phase="decode", batch=64, seq=1, context=long)),
                   "attention").pred
        assert cost.decode_rows[0].seconds_per_flop == pytest.approx(dec.compute_s / dec.flops, rel=1e-12, abs=0)


def test_token_rows_price_compute_over_padded_tokens():
    """docs/serving.md: a row costs count x (max(compute, memory) + launch); a dense matmul row's
    compute is over the tokens padded to 128-row tiles (577 -> 640), the rest over 577."""
    cost = _cost()
    t, padded = 577, 640
    want = 0.0
    for row in cost.token_rows:
        f = row.coef["flops"]
        flops = f[0] + f[1] * (padded if row.tiled else t)
        memory = row.coef["memory_s"][0] + row.coef["memory_s"][1] * t
        want += row.count * (max(row.seconds_per_flop * flops, memory) + row.launch_s)
    assert cost.token_s(t) == pytest.approx(want, rel=1e-12, abs=0)
    assert any(r.tiled for r in cost.token_rows) and not all(r.tiled for r in cost.token_rows)
    assert cost.token_s(0) == 0.0 and cost.sample_s(0) == 0.0  # nothing to price


def test_tp_collectives_split_between_tokens_and_samples():
    """tp 2: the per-token collectives (all-reduces) go with the token rows, the logits all-gather
    with the sampled rows (calc.comm.tp_rows's rows for a prefill of that many tokens)."""
    from mlsyscalc.calc.comm.tp_rows import tp_comm_rows
    from mlsyscalc.calc.roofline.options import RooflineOptions

    spec, ceil = _spec_and_ceilings()
    cost, single = _cost(tp=2), _cost(tp=2)
    for t in (16, 300):
        rows = tp_comm_rows(spec, ceil.gpu, RooflineOptions(tp=2, batch=1, seq=t, phase="prefill"), 2)
        reduce = sum(r.total_s for r in rows if r.collective != "all-gather")
        gather = sum(r.total_s for r in rows if r.collective == "all-gather")
        assert reduce > 0 and gather > 0
        assert cost.token_s(t) == pytest.approx(single._linear_s(single.token_rows, t) + reduce, rel=1e-12, abs=0)
        assert cost.sample_s(t) == pytest.approx(single._linear_s(single.sample_rows, t) + gather, rel=1e-12, abs=0)


def test_decode_attention_prices_the_larger_of_compute_and_memory():
    """With the FLOP rate cut 10^5-fold decode attention is compute-bound: its time is the affine
    row's count x (spf x FLOPs(d, keys) + launch), as AffineRow.time_s prices any row."""
    spec, ceil = _spec_and_ceilings()
    slow = replace(ceil, base_flops={k: v * 1e-5 if v else v for k, v in ceil.base_flops.items()})
    cost = _cost(ceil=slow)
    for d, keys in ((1, 101), (4, 4004), (16, 100)):
        want = sum(r.time_s((d, keys)) for r in cost.decode_rows)
        assert cost.decode_attention_s(d, keys) == pytest.approx(want, rel=1e-12, abs=0)
        row = cost.decode_rows[0]
        assert row.seconds_per_flop * row.part("flops", (d, keys)) > row.part("memory_s", (d, keys))


def test_speculative_verify_is_a_chunk_per_sequence():
    """Leviathan et al. eq. 1 with k = 1, a = 0.5: (1 - 0.25) / 0.5 = 1.5 tokens a step. The verify
    pass of d sequences is a (k+1)-token chunk at each one's context, sampled at every token: the
    same as pricing Batch.of those chunks with every token sampled."""
    from mlsyscalc.calc.serve.iteration import Batch
    from mlsyscalc.calc.serve.spec import SpecDecode, expected_tokens

    assert expected_tokens(0.5, 1) == 1.5
    assert expected_tokens(1.0, 1) == 2.0
    target = _cost()
    sd = SpecDecode(target, _cost("qwen2.5-0.5b"), 1, 0.5)
    for d, ctx in ((1, 100), (3, 40)):
        batch = Batch.of(((2, ctx),) * d, samples=2 * d)
        assert sd.verify_s(d, d * (ctx + 1)) == pytest.approx(target.time_s(batch), rel=1e-12, abs=0)
        draft = sd.draft.decode_s(d, d * (ctx + 1))  # k = 1: one draft step
        assert sd.step_s(d, d * (ctx + 1)) == pytest.approx(draft + target.time_s(batch), rel=1e-12, abs=0)


@pytest.mark.parametrize(("opts", "tokens", "seqs"), [({}, 8192, 1024), ({"scheduler": "sarathi"}, 512, 256),
                                                      ({"max_seqs": 8, "max_batch_tokens": 1024}, 1024, 8)])
def test_kv_capacity_workspace_is_one_iteration_of_the_engine(opts, tokens, seqs):
    """docs/serving.md: the workspace is the inference memory calculator's for one iteration's token
    budget (max-batch-tokens, or sarathi's chunk) with the logits of max-seqs sequences."""
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
    from mlsyscalc.calc.serve.simulator import ServeOptions, kv_capacity

    spec, ceil = _spec_and_ceilings()
    kv = kv_capacity(spec, ceil, ServeOptions(**opts))
    mem = infer_memory(spec, InferOptions(batch=seqs, context=tokens, prefill_chunk=tokens))
    assert kv.activations_bytes == mem.breakdown["activations"]
    assert kv.weights_bytes == 2 * 8_030_261_248  # llama3-8b's parameters (HF model card), bf16
    assert kv.blocks == int((0.9 * 85_520_809_984 - kv.weights_bytes - kv.activations_bytes) // (16 * 131072))


def test_kv_capacity_per_gpu_of_a_tp_group():
    """tp 2, fp8 KV: each GPU holds 4 of llama3-8b's 8 KV heads at 1 byte: 32 x 4 x 128 x 2 x 1 B a
    token, 16 tokens a block; weights split over the 2 GPUs (about half)."""
    from mlsyscalc.calc.serve.simulator import ServeOptions, kv_capacity

    spec, ceil = _spec_and_ceilings()
    kv = kv_capacity(spec, ceil, ServeOptions(tp=2, kv_dtype="fp8"))
    assert kv.block_bytes == 16 * 32 * 4 * 128 * 2 * 1
    assert 0.5 * 2 * 8_030_261_248 < kv.weights_bytes < 0.56 * 2 * 8_030_261_248  # embeddings split too
    assert kv.blocks == int((kv.usable_bytes - kv.weights_bytes - kv.activations_bytes) // kv.block_bytes)


def test_length_draws_replay_the_documented_rules():
    """Each kind's draw from one random.Random, replayed here: uniform a..b inclusive, an empirical
    list's uniformly chosen value, normal and lognormal rounded to the nearest integer and clipped at
    1; means (a + b) / 2, the list's mean, mu, exp(mu + sigma^2 / 2)."""
    from mlsyscalc.calc.serve.workload import LengthDist, parse_length

    cases = [("uniform:3,9", lambda r: r.randint(3, 9)),
             ("normal:5,4", lambda r: max(1, round(r.gauss(5.0, 4.0)))),
             ("lognormal:1,1.5", lambda r: max(1, round(r.lognormvariate(1.0, 1.5))))]
    for text, replay in cases:
        dist, a, b = parse_length(text, "p"), random.Random(11), random.Random(11)
        assert [dist.draw(a) for _ in range(200)] == [replay(b) for _ in range(200)], text
    column, a, b = parse_length("", "p", (4, 9, 30)), random.Random(5), random.Random(5)
    assert [column.draw(a) for _ in range(50)] == [(4, 9, 30)[b.randrange(3)] for _ in range(50)]
    assert min(parse_length("normal:1,30", "p").draw(a) for _ in range(100)) == 1  # clipped at 1
    assert parse_length("lognormal:1,0.5", "p").mean == pytest.approx(math.exp(1.125), rel=1e-15)
    assert (parse_length("normal:7,2", "p").mean, parse_length("uniform:3,8", "p").mean, column.mean) == (7.0, 5.5, 43 / 3)
    assert LengthDist("fixed", (12,)).mean == 12 and LengthDist("fixed", (12,)).draw(a) == 12


def test_bursty_arrivals_are_gamma_gaps_with_the_rate_kept():
    """Burstiness b: gaps from gamma(shape b, scale 1 / (rate b)) (mean 1 / rate), vLLM's
    benchmark_serving rule; drawn before each request's lengths, from the same generator."""
    from mlsyscalc.calc.serve.workload import parse_length, synthetic

    prompt = parse_length("uniform:1,50", "p")
    work = synthetic(prompt, parse_length("7", "o"), 2.0, 6, seed=9, burstiness=0.25, prefix=3)
    rng, t, want = random.Random(9), 0.0, []
    for _ in range(6):
        t += rng.gammavariate(0.25, 1.0 / (2.0 * 0.25))
        want.append((t, 3 + rng.randint(1, 50), 7))
    assert work.requests == tuple(want)
    assert work.source == "rate 2/s, burstiness 0.25, seed 9, 3-token shared prefix"


def test_requests_go_round_robin_to_the_instances():
    """2P:1D, --max-seqs 1, 100 s iteration overhead: A and B (t=0) are prefilled at once on the two
    prefill instances (both first tokens at U); the decode instance then serves A (done 2U), then B
    (its one decode step at 3U). One prefill instance would give B its first token at 2U."""
    from mlsyscalc.calc.serve.disagg import Layout

    trace = [(0.0, 100, 2), (0.0, 100, 2)]
    two = _disagg(Layout(2, 1), trace, iteration_overhead_s=U, max_seqs=1)
    one = _disagg(Layout(1, 1), trace, iteration_overhead_s=U, max_seqs=1)
    assert two.metrics["ttft_mean_s"] == pytest.approx(U, rel=1e-4)
    assert two.metrics["e2e_mean_s"] == pytest.approx(2.5 * U, rel=1e-4)
    assert one.metrics["ttft_mean_s"] == pytest.approx(1.5 * U, rel=1e-4)
    assert one.metrics["queue_delay_mean_s"] == pytest.approx(0.5 * U, rel=1e-4)  # B waits for A's prefill
    assert two.metrics["queue_delay_mean_s"] == 0.0
    assert two.pools["prefill_busy_fraction"] == pytest.approx(2 * U / (2 * 3 * U), rel=1e-4)
    assert (two.pools["prefill_instances"], two.pools["decode_instances"]) == (2, 1)


def test_simulate_result_parts():
    """One request (t=0, 100-token prompt, 3 outputs) under a 100 s iteration overhead: 3 iterations
    (prefill, 2 decodes); the series spans them in 100 buckets; latencies per request; the KV
    capacity's JSON keys."""
    from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
    from mlsyscalc.calc.serve.workload import from_trace

    spec, ceil = _spec_and_ceilings()
    r = simulate(spec, ceil, from_trace([(0.0, 100, 3)], "hand"), ServeOptions(iteration_overhead_s=U))
    assert (r.model, r.gpu) == ("llama3-8b", "H100-SXM")
    assert len(r.series) == 100 and r.series[-1]["t_s"] == pytest.approx(3 * U, rel=1e-4)
    assert sum(b["iterations"] for b in r.series) == 3 == r.metrics["iterations"]
    assert r.latencies["ttft"] == [pytest.approx(U, rel=1e-4)]
    assert r.latencies["tpot"] == [pytest.approx(U, rel=1e-4)]
    assert r.latencies["e2e"] == [pytest.approx(3 * U, rel=1e-4)] and r.latencies["queue"] == [0.0]
    assert r.kv.as_dict() == {"kv_blocks": r.kv.blocks, "kv_block_bytes": 16 * 131072,
                              "weights_bytes": 2 * 8_030_261_248, "activations_bytes": r.kv.activations_bytes,
                              "usable_bytes": pytest.approx(0.9 * 85_520_809_984, rel=1e-15)}
    # 100 prompt tokens = 7 blocks of 16 (+ the 101st/102nd positions in the same 7th block)
    assert r.metrics["kv_utilization_max"] == pytest.approx(7 / r.kv.blocks, rel=1e-12)


def test_kv_capacity_in_fp32_counts_four_bytes_everywhere():
    """--dtype fp32: weights, activations and KV all in fp32 (4 B): 4 x 8,030,261,248 B of weights,
    16 x 32 x 8 x 128 x 2 x 4 B a block, the workspace of the memory calculator in fp32."""
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
    from mlsyscalc.calc.serve.simulator import ServeOptions, kv_capacity

    spec, ceil = _spec_and_ceilings()
    kv = kv_capacity(spec, ceil, ServeOptions(dtype="fp32"))
    assert kv.weights_bytes == 4 * 8_030_261_248
    assert kv.block_bytes == 16 * 32 * 8 * 128 * 2 * 4
    mem = infer_memory(spec, InferOptions(batch=1024, context=8192, dtype="fp32", base_dtype="fp32", kv_dtype="fp32",
                                          prefill_chunk=8192))  # vllm-v1 on an H100: 8192 tokens, 1024 sequences
    assert kv.activations_bytes == mem.breakdown["activations"]


def test_speculative_verdict_arithmetic():
    """k = 2 draft steps (keys growing by d a step), a = 0.7: (1 - 0.7^3) / 0.3 = 2.19 tokens a step;
    speed-up = tokens x plain step / speculative step; it pays above 1."""
    from mlsyscalc.calc.serve.spec import SpecDecode

    target, draft = _cost(), _cost("qwen2.5-0.5b")
    sd = SpecDecode(target, draft, 2, 0.7)
    e = (1 - 0.7**3) / 0.3
    assert sd.tokens_per_step == pytest.approx(e, rel=1e-15)
    d, ctx = 4, 1000
    keys = d * (ctx + 1)
    v = sd.verdict(d, ctx)
    plain = target.decode_s(d, keys)
    drafts = draft.decode_s(d, keys) + draft.decode_s(d, keys + d)
    assert v["draft_s"] == pytest.approx(drafts, rel=1e-12, abs=0)
    assert v["spec_step_s"] == pytest.approx(drafts + v["verify_s"], rel=1e-12, abs=0)
    assert v["plain_step_s"] == v["tpot_plain_s"] == pytest.approx(plain, rel=1e-12, abs=0)
    assert v["tpot_spec_s"] == pytest.approx(v["spec_step_s"] / e, rel=1e-12, abs=0)
    assert v["speedup"] == pytest.approx(e * plain / v["spec_step_s"], rel=1e-12, abs=0)
    assert v["pays"] == (v["speedup"] > 1) and (v["batch"], v["context"]) == (4, 1000)
    never = SpecDecode(target, draft, 2, 0.0).verdict(d, ctx)  # nothing accepted: one token a step
    assert never["expected_tokens_per_step"] == 1.0 and never["pays"] is False
