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
from mlsyscalc.calc.serve import iteration as serve_cost
from mlsyscalc.calc.roofline.ops import CTA_ROWS, UNALIGNED_TILE_ROWS, resolve_ceilings
from mlsyscalc.calc.roofline.options import RooflineOptions
from mlsyscalc.calc.serve.simulator import KvCapacity, ServeOptions, WorkloadSpec, engine_limits
from mlsyscalc.calc.serve.iteration import AffineRow, IterationCost, _solve
from mlsyscalc.calc.serve.disagg import Layout, cluster_for, simulate_disagg
from mlsyscalc.calc.serve.engine import WATERMARK, Engine, EngineLimits
from mlsyscalc.calc.serve.spec import SpecDecode
from mlsyscalc.calc.serve.workload import LengthDist, Workload, synthetic
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
    """The unaligned GEMM's slower stream (calc.roofline.ops: from UNALIGNED_TILE_ROWS = 8 rows cuBLAS
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


def test_memory_not_affine_past_the_unaligned_rows_is_read_token_by_token(monkeypatch):
    """The rows are fitted below 8 tokens, scaled at 8 and checked at 2 x 8 + 1 = 17 tokens to 1e-6
    relative: a 1.5e-6 error there means the memory time steps again below 64 tokens (as gemma2-9b's
    k_proj does where cuBLAS's split-K changes), so that row is read from the roofline at every token
    count up to 64 (its 17-token time is the perturbed one) and scaled past 64 as before."""
    _perturbed(monkeypatch, 2 * UNALIGNED_TILE_ROWS + 1, "memory_s", 1 + 1.5e-6)
    row = next(r for r in _cost().token_rows if r.small_memory_s)
    real = serve_cost.predict_model(load_model("gpt2"), CEIL, RooflineOptions(phase="prefill", seq=17, check_fit=False,
                                                                              window="full"))  # the perturbed one
    want = next(r for r in real.rows if r.pred.kind == "matmul").pred.memory_s
    assert len(row.small_memory_s) == CTA_ROWS and row.small_memory_s[16] == pytest.approx(want, rel=1e-12)
    assert sum(1 for r in _cost().token_rows if r.small_memory_s) == 1  # the other rows keep their two steps


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
    = 32 tokens; no prefix given (a disaggregated pool) or caching off -> 0, even with 1-token blocks.
    The default vllm-v1 runs up to 1024 sequences on an 80 GB H100 (vLLM V1's default for the card)."""
    opts = ServeOptions(prefix_caching=caching, block_size=block)
    lim = engine_limits(_KV, CEIL, opts) if prefix is None else engine_limits(_KV, CEIL, opts, prefix)
    assert lim.shared_prefix == shared
    assert (lim.block_size, lim.total_blocks, lim.max_seqs, lim.max_batch_tokens) == (block, 100, 1024, 8192)


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


# ----- neighbours: padding, blocks, batch sums, speculation's arithmetic, layouts, KV capacity -----------

@pytest.mark.parametrize("t,padded", [(1, 1), (127, 127), (128, 128), (129, 256), (577, 640), (1024, 1024)])
def test_padded_tokens_by_hand(t, padded):
    """Below one 128-row tile a GEMM takes small tiles (t as is); from 128 tokens it computes whole tiles:
    129 -> 2 x 128 = 256, 577 -> 5 x 128 = 640 (the module docstring's example)."""
    assert serve_cost.padded_tokens(t) == padded


@pytest.mark.parametrize("tokens,blocks", [(0, 0), (1, 1), (16, 1), (17, 2), (164, 11)])
def test_kv_blocks_round_up(tokens, blocks):
    """ceil(tokens / 16): 17 tokens open a second block; 64 + 100 = 164 tokens take 11."""
    assert serve_cost.kv_blocks(tokens, 16) == blocks


def test_batch_sums_by_hand():
    """Chunks (10 new after 5 cached) and (4 new, none cached), decodes at contexts 7 and 9:
    T = 14 + 2 = 16, S = 2 + 2 = 4, prefill tokens 14, pairs 10 x 5 + 10^2 / 2 + 4^2 / 2 = 108,
    prefill keys 15 + 4 = 19, decodes 2, decode keys 8 + 10 = 18; samples may be overridden."""
    b = serve_cost.Batch.of(chunks=((10, 5), (4, 0)), contexts=(7, 9))
    assert (b.tokens, b.samples, b.prefill_tokens, b.prefill_pairs, b.prefill_keys, b.decodes, b.decode_keys) == \
        (16, 4, 14, 108.0, 19, 2, 18)
    assert serve_cost.Batch.of(chunks=((10, 5),), samples=0).samples == 0


class _Recorder(_FixedCost):
    """_FixedCost that records every call's arguments."""

    def __init__(self, decode: float, mixed: float) -> None:
        super().__init__(decode, mixed)
        self.calls: list[tuple] = []

    def decode_s(self, d, keys):
        self.calls.append(("decode", d, keys))
        return self.decode

    def mixed_s(self, *args):
        self.calls.append(("mixed", *args))
        return self.mixed


def test_speculative_step_arithmetic_by_hand():
    """d = 2 sequences at context 100 (keys = 2 x 101 = 202), k = 3: the draft decodes 3 steps at keys
    202, 204, 206 (one more token per sequence each); the target verifies c = 4 tokens per sequence:
    T = S = 8 tokens, prefill tokens 8, pairs c x ctx + d c^2 / 2 = 4 x 200 + 2 x 16 / 2 = 816,
    prefill keys ctx + T = 208. Expected tokens per step at a = 0.5: (1 - 0.5^4) / 0.5 = 1.875."""
    target, draft = _Recorder(1.0, 0.3), _Recorder(0.1, 0.0)
    sd = SpecDecode(target, draft, k=3, accept=0.5)
    assert sd.step_s(2, 202) == pytest.approx(3 * 0.1 + 0.3, rel=1e-12, abs=0)
    assert draft.calls == [("decode", 2, 202), ("decode", 2, 204), ("decode", 2, 206)]
    assert target.calls == [("mixed", 8, 8, 8, 816.0, 208, 0, 0)]
    assert sd.tokens_per_step == pytest.approx(1.875, rel=1e-12, abs=0)
    v = sd.verdict(2, 100)
    assert v["tpot_spec_s"] == pytest.approx(0.6 / 1.875, rel=1e-12, abs=0)
    assert v["speedup"] == pytest.approx(1.875 * 1.0 / 0.6, rel=1e-12, abs=0) and v["pays"] is True


def test_layout_gpus_and_name():
    """2 prefill instances of TP 2 and 3 decode instances of TP 4 use 2 x 2 + 3 x 4 = 16 GPUs."""
    lay = Layout(2, 3, 2, 4)
    assert lay.gpus == 16 and lay.name == "2P(tp2):3D(tp4)"


def test_engine_limits_swap_time_per_block():
    """A swap moves one block one way over PCIe: the H100-SXM spec lists 128 GB/s both ways, so a 2 MB
    block takes 2e6 / 64e9 = 31.25 us; the other limits are the options as given."""
    opts = ServeOptions(preemption="swap", max_batch_tokens=4096, max_seqs=64, chunk=256, block_size=32)
    lim = engine_limits(KvCapacity(77, 2e6, 0, 0, 1e9), CEIL, opts)
    assert CEIL.gpu.pcie_Bps == 128e9
    assert lim.swap_s_per_block == pytest.approx(2e6 / 64e9, rel=1e-12, abs=0)
    assert (lim.scheduler, lim.max_batch_tokens, lim.max_seqs, lim.chunk, lim.block_size, lim.total_blocks,
            lim.preemption) == ("vllm-v1", 4096, 64, 256, 32, 77, "swap")


def test_iteration_tokens_follow_the_scheduler():
    """Sarathi's per-iteration budget is its chunk; the others batch up to max_batch_tokens."""
    assert ServeOptions(scheduler="sarathi", chunk=300).iteration_tokens == 300
    for sched in ("static", "orca", "vllm"):
        assert ServeOptions(scheduler=sched, max_batch_tokens=5000, chunk=300).iteration_tokens == 5000


def test_kv_capacity_of_llama3_8b_by_hand():
    """Llama-3-8B (config.json: 32 layers, 8 KV heads of 128) keeps 2 x 32 x 8 x 128 x 2 bytes = 131,072
    bytes of bf16 KV per token, 16 x that = 2 MiB per block; blocks = floor((0.9 x GPU memory - weights
    - workspace) / block)."""
    from mlsyscalc.calc.serve.simulator import kv_capacity

    kv = kv_capacity(load_model("llama3-8b"), CEIL, ServeOptions())
    assert kv.block_bytes == 2 * 32 * 8 * 128 * 2 * 16
    assert kv.usable_bytes == pytest.approx(0.9 * CEIL.gpu.memory_bytes, rel=1e-12, abs=0)
    free = kv.usable_bytes - kv.weights_bytes - kv.activations_bytes
    assert kv.blocks == int(free // kv.block_bytes) and kv.blocks * kv.block_bytes <= free < (kv.blocks + 1) * kv.block_bytes
    assert kv_capacity(load_model("llama3-8b"), CEIL, ServeOptions(kv_blocks=5)).blocks == 5


@pytest.mark.parametrize("running,free,admitted", [(0, 2, True), (0, 1, False), (1, 4, True), (1, 3, False)])
def test_admission_watermark_only_with_running_sequences(running, free, admitted):
    """vLLM admits a prompt when free - needed >= watermark (1% of 200 = 2 blocks) once something runs;
    into an empty engine a prompt may take every free block. A 32-token prompt needs 2 blocks."""
    e = _engine("recompute")
    e.n_running, e.free = running, free
    assert e._can_admit(0, 0) is admitted


@pytest.mark.parametrize("scheduler,admitted", [("vllm", True), ("static", False), ("orca", False)])
def test_reserve_mode_admission_counts_prompt_and_output(scheduler, admitted):
    """Paged (vLLM) admission needs the prompt's blocks (32 tokens: 2); reserve mode (orca, and static's
    policy) needs prompt + output (32 + 10 = 42 tokens: 3 blocks). With 2 blocks free only vLLM admits."""
    e = _engine("recompute", scheduler=scheduler)
    e.free = 2
    assert e._can_admit(0, 0) is admitted


def test_static_batches_fill_up_to_the_kv_blocks():
    """Static batching takes arrived requests while prompt + output reservations fit: requests of
    ceil(40 / 16) = 3 blocks each into 10 blocks -> 3 per batch (9 blocks), so 7 requests run as batches
    of 3, 3 and 1; a batch's requests share its schedule time and first-token time."""
    reqs = [(0.0, 30, 10)] * 7
    e = _engine("recompute", total=10, requests=reqs, scheduler="static")
    trace = e.run()
    starts = sorted(set(trace.sched_s))
    assert len(starts) == 3
    assert [trace.sched_s.count(s) for s in starts] == [3, 3, 1]
    assert trace.iter_used_blocks[0] == 9 and trace.iter_used_blocks[-1] == 3
    for k in range(7):
        same = [j for j in range(7) if trace.sched_s[j] == trace.sched_s[k]]
        assert len({trace.first_s[j] for j in same}) == 1
