"""Serving calculators by hand: the affine kernel rows, their fit's error checks, the engine's KV
watermark and accounting, the speculative verdict's break-even and the disaggregated pools.

Expected values are hand arithmetic from the formulas in docs/serving.md and the module docstrings,
vLLM's block-manager rules (vllm/core/block_manager.py: a prompt or a swapped sequence is admitted
when free blocks - needed blocks >= watermark blocks), the CLI's documented defaults, or properties
that must hold whatever the numbers (every KV block comes back when every request has finished).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc import MlsysError
from mlsyscalc.calc import serve_cost
from mlsyscalc.calc.roofline_ops import UNALIGNED_TILE_ROWS, resolve_ceilings
from mlsyscalc.calc.roofline_options import RooflineOptions
from mlsyscalc.calc.serve import KvCapacity, ServeOptions, WorkloadSpec, engine_limits
from mlsyscalc.calc.serve_cost import AffineRow, IterationCost, _solve
from mlsyscalc.calc.serve_disagg import Layout, cluster_for, simulate_disagg
from mlsyscalc.calc.serve_engine import WATERMARK, Engine, EngineLimits
from mlsyscalc.calc.serve_spec import SpecDecode
from mlsyscalc.calc.serve_workload import LengthDist, Workload, synthetic
from mlsyscalc.specs.lookup import load_model

CEIL = resolve_ceilings("H100-SXM")
_ROW = {"flops": (10.0, 2.0), "memory_s": (3.0, 0.5), "read_bytes": (0.0, 0.0), "write_bytes": (0.0, 0.0)}


# ----- AffineRow: count x (max(compute, memory, floor) + launch) ------------------------------------

def test_affine_row_defaults_price_plain_max_of_compute_and_memory():
    """With no floor and no wide scale given, a row costs count x (max(spf x flops, memory) + launch):
    at x = (1, 4): flops = 10 + 2 x 4 = 18, compute = 0.25 x 18 = 4.5 s; memory = 3 + 0.5 x 4 = 5 s;
    3 x (max(4.5, 5) + 0.1) = 15.3 s. At x = (1, 20): compute = 0.25 x 50 = 12.5 s, memory = 3 + 10 = 13 s;
    3 x 13.1 = 39.3 s."""
    row = AffineRow("r", 3, _ROW, 0.25, 0.1)
    assert row.floor_s == 0.0 and row.wide_scale == 1.0
    assert row.time_s((1.0, 4)) == pytest.approx(15.3, rel=1e-12, abs=0)
    assert row.time_s((1.0, 20)) == pytest.approx(39.3, rel=1e-12, abs=0)
    # compute counted at other features (the padded tokens of a tiled GEMM): (1, 40) -> 0.25 x 90 = 22.5 s
    assert row.time_s((1.0, 20), (1.0, 40)) == pytest.approx(3 * 22.6, rel=1e-12, abs=0)


def test_affine_row_floor_is_a_lower_bound():
    """A plain GEMM never runs shorter than its floor: floor 7 s over compute 4.5 s and memory 5 s
    gives 2 x (7 + 0) = 14 s."""
    row = AffineRow("r", 2, _ROW, 0.25, 0.0, floor_s=7.0)
    assert row.time_s((1.0, 4)) == pytest.approx(14.0, rel=1e-12, abs=0)


@pytest.mark.parametrize("tokens,scaled", [(UNALIGNED_TILE_ROWS - 1, False), (UNALIGNED_TILE_ROWS, True),
                                           (UNALIGNED_TILE_ROWS + 1, True)])
def test_wide_scale_applies_from_the_unaligned_row_count(tokens, scaled):
    """The unaligned GEMM's slower stream (calc.roofline_ops: from UNALIGNED_TILE_ROWS = 8 rows cuBLAS
    runs CUTLASS align1 kernels) multiplies memory time from exactly 8 tokens: memory = (3 + 0.5 t) x 2
    there, x 1 below. Compute is zero here so memory decides."""
    row = AffineRow("r", 1, _ROW, 0.0, 0.0, wide_scale=2.0)
    memory = 3 + 0.5 * tokens
    assert row.time_s((1.0, tokens)) == pytest.approx(memory * (2.0 if scaled else 1.0), rel=1e-12, abs=0)


def test_grouped_rows_ignore_the_wide_scale():
    """An expert (grouped) row's features are (T, distinct experts); the dense-GEMM scale never applies:
    memory = 3 x 16 + 0.5 x 4 = 50 s."""
    row = AffineRow("r", 1, _ROW, 0.0, 0.0, grouped=True, wide_scale=2.0)
    assert row.time_s((16.0, 4.0)) == pytest.approx(50.0, rel=1e-12, abs=0)


# ----- _solve: Gauss-Jordan with partial pivoting -----------------------------------------------------

def test_solve_needs_pivoting():
    """x2 = 2, x1 = 3 from [[0, 1], [1, 0]]: the first pivot is 0, so only a row swap (the largest
    |entry| as pivot) solves it."""
    assert _solve([[0.0, 1.0], [1.0, 0.0]], [2.0, 3.0]) == pytest.approx((3.0, 2.0), rel=1e-12, abs=0)


def test_solve_three_by_three_by_hand():
    """x = (1, 2, 3) in [[2, 1, 0], [1, 3, 1], [0, 1, 4]]: b = (4, 10, 14); a tiny first-column entry
    (1e-13) would be a singular pivot without row exchanges."""
    rows = [[1e-13, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]]
    b = [r[0] * 1 + r[1] * 2 + r[2] * 3 for r in rows]
    assert _solve(rows, b) == pytest.approx((1.0, 2.0, 3.0), rel=1e-9, abs=0)
    with pytest.raises(MlsysError, match="singular"):
        _solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0])


# ----- the fit's internal checks: a roofline that stops being affine is refused -----------------------

def _perturbed(monkeypatch, seq: int, part: str, factor: float):
    """predict_model whose first plain matmul row's `part` is x factor at prefill `seq` tokens."""
    real = serve_cost.predict_model

    def fake(spec, ceilings, opts):
        out = real(spec, ceilings, opts)
        if opts.phase != "prefill" or opts.seq != seq:
            return out
        rows = list(out.rows)
        i = next(k for k, r in enumerate(rows) if r.pred.kind == "matmul")
        pred = rows[i].pred
        rows[i] = replace(rows[i], pred=replace(pred, **{part: getattr(pred, part) * factor}))
        return replace(out, rows=rows)

    monkeypatch.setattr(serve_cost, "predict_model", fake)


def _cost() -> IterationCost:
    return IterationCost(load_model("gpt2"), CEIL, RooflineOptions())


def test_memory_not_affine_past_the_unaligned_rows_is_refused(monkeypatch):
    """The rows are fitted below 8 tokens, scaled at 8 and checked at 2 x 8 + 1 = 17 tokens to 1e-6
    relative: a 1.5e-6 error there is an internal error naming the row and the 8-token regime."""
    _perturbed(monkeypatch, 2 * UNALIGNED_TILE_ROWS + 1, "memory_s", 1 + 1.5e-6)
    with pytest.raises(MlsysError, match=f"memory_s is not affine from {UNALIGNED_TILE_ROWS} tokens"):
        _cost()


def test_memory_within_tolerance_past_the_unaligned_rows_is_accepted(monkeypatch):
    """0.5e-6 relative at 17 tokens is within the 1e-6 tolerance: the fit stands."""
    _perturbed(monkeypatch, 2 * UNALIGNED_TILE_ROWS + 1, "memory_s", 1 + 0.5e-6)
    assert _cost().token_rows


def test_flops_not_affine_at_the_check_point_is_refused(monkeypatch):
    """Coefficients are solved at 1 and 2 tokens and checked at 7 to 1e-6 relative: 1.5e-6 off is refused."""
    _perturbed(monkeypatch, 7, "flops", 1 + 1.5e-6)
    with pytest.raises(MlsysError, match="flops is not affine in the batch sums"):
        _cost()


def test_a_row_with_no_memory_time_keeps_scale_one(monkeypatch):
    """A plain row whose memory time is 0 at every shape has nothing to scale: wide_scale stays 1
    (no division by its zero memory time at 8 tokens)."""
    real = serve_cost.predict_model

    def fake(spec, ceilings, opts):
        out = real(spec, ceilings, opts)
        rows = list(out.rows)
        i = next(k for k, r in enumerate(rows) if r.pred.kind == "matmul")
        rows[i] = replace(rows[i], pred=replace(rows[i].pred, memory_s=0.0))
        return replace(out, rows=rows)

    monkeypatch.setattr(serve_cost, "predict_model", fake)
    cost = _cost()
    assert cost.token_rows[0].wide_scale == 1.0
    assert cost.token_rows[0].coef["memory_s"] == pytest.approx((0.0, 0.0), abs=1e-30)


# ----- engine limits and defaults ---------------------------------------------------------------------

_KV = KvCapacity(blocks=100, block_bytes=1e6, weights_bytes=0, activations_bytes=0, usable_bytes=1e8)


@pytest.mark.parametrize("prefix,caching,block,shared", [(None, True, 1, 0), (None, True, 16, 0), (40, True, 16, 32),
                                                         (40, False, 16, 0), (48, True, 16, 48), (5, True, 1, 5)])
def test_engine_limits_shared_prefix_in_whole_blocks(prefix, caching, block, shared):
    """Prefix caching keeps whole blocks of the shared prefix: 40 tokens in 16-token blocks -> 2 blocks
    = 32 tokens; no prefix given (a disaggregated pool) or caching off -> 0, even with 1-token blocks."""
    opts = ServeOptions(prefix_caching=caching, block_size=block)
    lim = engine_limits(_KV, CEIL, opts) if prefix is None else engine_limits(_KV, CEIL, opts, prefix)
    assert lim.shared_prefix == shared
    assert (lim.block_size, lim.total_blocks, lim.max_seqs) == (block, 100, 256)


def test_workload_spec_default_requests_match_the_cli():
    """`mlsys serve --requests` defaults to 1000 (mlsyscalc/cli/serve.py, docs/serving.md's flag table):
    the calculator's recipe uses the same number when none is given."""
    from mlsyscalc.cli.serve import serve

    cli_default = next(p.default for p in serve.params if p.name == "requests")
    assert cli_default == 1000
    spec = WorkloadSpec(LengthDist("fixed", (8.0,)), LengthDist("fixed", (2.0,)), rate=1.0)
    assert spec.requests == cli_default
    assert len(spec.build().requests) == 1000


# ----- the engine: vLLM's watermark and its block accounting ------------------------------------------

def _engine(preemption: str = "swap", total: int = 200, requests=((0.0, 32, 10),), scheduler: str = "vllm") -> Engine:
    lim = EngineLimits(scheduler, 8192, 256, 512, 16, total, preemption, 1e-3)
    return Engine(list(requests), _cost(), lim)


@pytest.mark.parametrize("free,swapped_in", [(3, False), (4, True), (5, True)])
def test_swap_in_keeps_the_watermark(free, swapped_in):
    """vLLM swaps a sequence back in when free - needed >= watermark: a 32-token KV needs 2 blocks of 16,
    the watermark is int(0.01 x 200) = 2 blocks, so 4 free blocks suffice (2 stay free) and 3 do not."""
    e = _engine()
    assert int(WATERMARK * 200) == 2
    e.swapped.append(0)
    e.free = free
    swap_s = e._swap_in()
    assert (e.n_running == 1) is swapped_in
    assert e.free == (free - 2 if swapped_in else free)
    assert swap_s == pytest.approx(2e-3 if swapped_in else 0.0, rel=1e-12, abs=0)


@pytest.mark.parametrize("scheduler,preemption", [("vllm", "recompute"), ("vllm", "swap"), ("sarathi", "recompute"),
                                                  ("orca", "recompute")])
def test_every_block_returns_after_heavy_preemption(scheduler, preemption):
    """Six 64-token prompts with 100-token outputs need 11 blocks each (164 / 16, rounded up) and the GPU
    holds 20: sequences are preempted again and again, yet when every request has finished no sequence
    decodes, no key is counted and all 20 blocks are free again; each request got its first token after
    being scheduled and finished after it."""
    reqs = [(0.001 * k, 64, 100) for k in range(6)]
    e = _engine(preemption, 20, reqs, scheduler)
    trace = e.run()
    if scheduler == "vllm":
        assert trace.preempt_s, "the scenario must preempt"
    assert (e.d, e.keys, e.free, e.n_running, e.n_done) == (0, 0, 20, 0, 6)
    assert not any(e.decoding)
    for k, (arrival, _, _) in enumerate(reqs):
        assert arrival <= trace.sched_s[k] <= trace.first_s[k] <= trace.finish_s[k]


# ----- speculative decoding's verdict ------------------------------------------------------------------

class _FixedCost:
    """A stand-in IterationCost with fixed step times (decode_s for the plain step, mixed_s for verify)."""

    def __init__(self, decode: float, mixed: float) -> None:
        self.decode, self.mixed = decode, mixed

    def decode_s(self, d, keys):
        return self.decode

    def mixed_s(self, *args):
        return self.mixed


@pytest.mark.parametrize("draft,pays", [(0.5, False), (0.25, True), (0.75, False)])
def test_speculation_pays_only_above_break_even(draft, pays):
    """Leviathan et al. 2023: it pays when E[tokens] x plain step > speculative step. With accept 0 one
    token comes per step (equation 1: (1 - 0^2) / (1 - 0) = 1); plain step 1 s; k = 1 draft step of
    `draft` s plus a 0.5 s verify: 0.5 + 0.5 = 1 s is break-even (speedup exactly 1) and does not pay."""
    sd = SpecDecode(_FixedCost(1.0, 0.5), _FixedCost(draft, 0.0), k=1, accept=0.0)
    v = sd.verdict(1, 100)
    assert v["expected_tokens_per_step"] == 1.0
    assert v["speedup"] == pytest.approx(1.0 / (draft + 0.5), rel=1e-12, abs=0)
    assert v["pays"] is pays


# ----- disaggregation: a prefill-only layout ------------------------------------------------------------

def test_disagg_without_decode_pool_reports_zero_decode_busy():
    """One-token outputs need no decode instance: with Layout(1 prefill, 0 decode) nothing moves, the
    decode pool's busy fraction is 0 (it does not exist) and the prefill instance's is in (0, 1]."""
    work = Workload(tuple((0.01 * k, 100, 1) for k in range(4)), "by hand")
    res = simulate_disagg(load_model("gpt2"), CEIL, work, ServeOptions(), Layout(1, 0), cluster_for(CEIL, None))
    assert res.pools["decode_busy_fraction"] == 0.0
    assert res.pools["kv_transfer_mean_s"] == 0.0
    assert res.pools["gpus"] == 1
    assert 0 < res.pools["prefill_busy_fraction"] <= 1


def test_disagg_one_to_one_counts_both_pools():
    """1P:1D on two GPUs: every request with output > 1 moves its KV once (mean transfer > 0), both pools
    work, and goodput per GPU is the goodput over 2."""
    work = synthetic(LengthDist("fixed", (200.0,)), LengthDist("fixed", (8.0,)), 5.0, 6, seed=1)
    res = simulate_disagg(load_model("gpt2"), CEIL, work, ServeOptions(), Layout(1, 1), cluster_for(CEIL, None))
    p = res.pools
    assert p["gpus"] == 2 and p["kv_transfer_mean_s"] > 0
    assert 0 < p["decode_busy_fraction"] <= 1 and 0 < p["prefill_busy_fraction"] <= 1
    assert p["goodput_per_gpu_requests_per_s"] == pytest.approx(res.metrics["goodput_requests_per_s"] / 2,
                                                                rel=1e-12, abs=0)
