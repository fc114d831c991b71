"""calc.serve.iteration: the affine fast path against calc.roofline.model.predict_model (the oracle)."""

from __future__ import annotations

import random

import pytest

from mlsyscalc.calc.roofline.model import predict_model
from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.roofline.options import RooflineOptions
from mlsyscalc.calc.serve.iteration import Batch, IterationCost
from mlsyscalc.specs.lookup import load_model

CEIL = resolve_ceilings("H100-SXM")


def _cost(name: str, tp: int = 1) -> IterationCost:
    return IterationCost(load_model(name), CEIL, RooflineOptions(tp=tp))


def _roofline(name, phase, batch, seq, context=0, tp=1):
    return predict_model(load_model(name), CEIL, RooflineOptions(phase=phase, batch=batch, seq=seq, context=context,
                                                                 tp=tp, check_fit=False, window="full"))


def _all_token_head(b: Batch) -> Batch:
    """`mlsys roofline --phase prefill` runs lm_head over every prompt token; serving samples one."""
    return Batch(**{**b.__dict__, "samples": b.tokens})


@pytest.mark.parametrize("name,tp", [("llama3-8b", 1), ("gpt2", 1), ("mixtral-8x7b", 2), ("llama3-70b", 4),
                                     ("phi-2", 1)])
def test_decode_step_equals_roofline(name, tp):
    """Decode is memory-bound: the fast path reproduces the roofline's step time (phi-2: its 2560-wide
    projections priced by their 40 CTAs up to 64 rows, by the HBM stream from 65)."""
    cost = _cost(name, tp)
    for batch, ctx in ((1, 512), (64, 1000), (65, 1000)):
        want = _roofline(name, "decode", batch, 1, ctx, tp).time_s
        assert cost.time_s(Batch.of(contexts=(ctx,) * batch)) == pytest.approx(want, rel=2e-3)


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "gpt2"])
def test_prefill_within_tile_quantisation(name):
    """Prefill compute drops the roofline's wave quantisation: within 10% of predict_model."""
    cost = _cost(name)
    for batch, seq in ((1, 128), (1, 512), (1, 1000), (4, 1000)):
        want = _roofline(name, "prefill", batch, seq).time_s
        got = cost.time_s(_all_token_head(Batch.of(chunks=((seq, 0),) * batch)))
        assert got == pytest.approx(want, rel=0.10)


@pytest.mark.parametrize("name", ["llama3-8b", "mixtral-8x7b", "deepseek-v3"])
def test_random_mixed_batches_flops_and_bytes_equal_roofline(name):
    """On random mixed batches, the fast path's FLOPs and bytes equal the sum of the roofline's
    kernels for the same work: linears over all T tokens, lm_head over the S sampling sequences,
    each prefill chunk's attention at its own context, each decode's attention at its context."""
    cost, rng = _cost(name), random.Random(7)
    for _ in range(3):
        chunks = tuple((rng.randint(1, 300), rng.randint(0, 900)) for _ in range(rng.randint(1, 3)))
        contexts = tuple(rng.randint(1, 2000) for _ in range(rng.randint(1, 5)))
        b = Batch.of(chunks=chunks, contexts=contexts)
        want = dict.fromkeys(("flops", "read_bytes", "write_bytes"), 0.0)

        def add(rows, keep):
            for r in rows:
                if keep(r):
                    for k in want:
                        want[k] += r.count * getattr(r.pred, k)

        def is_head(r):
            return r.group == "head" and r.pred.name != "embedding"

        add(_roofline(name, "prefill", 1, b.tokens).rows, lambda r: r.pred.kind != "attention" and not is_head(r))
        add(_roofline(name, "prefill", 1, b.samples).rows, is_head)
        for c, p in chunks:
            add(_roofline(name, "prefill", 1, c, p).rows, lambda r: r.pred.kind == "attention")
        for ctx in contexts:
            add(_roofline(name, "decode", 1, 1, ctx).rows, lambda r: r.pred.kind == "attention")
        got = cost.totals(b)
        for k in want:
            assert got[k] == pytest.approx(want[k], rel=1e-9), k


def test_decode_s_equals_mixed_path():
    cost = _cost("llama3-8b")
    b = Batch.of(contexts=(100, 2000, 37))
    assert cost.decode_s(b.decodes, b.decode_keys) == pytest.approx(cost.time_s(b), rel=1e-12)


def test_more_work_never_faster():
    cost = _cost("llama3-8b")
    base = cost.time_s(Batch.of(chunks=((256, 0),), contexts=(500,) * 8))
    assert cost.time_s(Batch.of(chunks=((512, 0),), contexts=(500,) * 8)) > base
    assert cost.time_s(Batch.of(chunks=((256, 0),), contexts=(500,) * 9)) > base
    assert cost.time_s(Batch.of(chunks=((256, 0),), contexts=(900,) * 8)) > base


def test_dense_matmuls_compute_over_whole_128_row_tiles():
    """From 128 tokens up a GEMM computes whole 128-row tiles (the roofline's BLOCK_M): 577 tokens cost
    what 640 cost (compute-bound, so memory cannot hide it), 641 a tile more; below 128 nothing is
    padded (skinny shapes take small tiles)."""
    from mlsyscalc.calc.serve.iteration import padded_tokens

    assert [padded_tokens(t) for t in (1, 127, 128, 129, 577, 640, 641)] == [1, 127, 128, 256, 640, 640, 768]
    cost = _cost("llama3-8b")
    def unpadded(t):
        return sum(row.time_s((1.0, t)) for row in cost.token_rows)

    assert cost.token_s(577) == pytest.approx(cost.token_s(640), rel=0.01)  # norms, rotary: 63 rows' bytes less
    assert cost.token_s(577) > 1.05 * unpadded(577)  # the matmuls: 640 / 577 = 1.11 x the FLOPs
    assert cost.token_s(641) > 1.1 * cost.token_s(640)
    assert cost.token_s(100) == pytest.approx(unpadded(100), rel=1e-12)
    # the FLOP count stays the work done (padding is time, not work)
    assert cost.totals(Batch.of(chunks=((577, 0),)))["flops"] < cost.totals(Batch.of(chunks=((640, 0),)))["flops"]
