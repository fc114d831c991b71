"""Value tests of `mlsys plan`'s search (calc.plan.search, calc.plan.memory, calc.plan.space) written against
the mutants the tests before them let live (docs/mutation.md). Oracles: `train_memory` and `train_step`
(the per-layout calculators the search memoises), `calc.memory.schedule`'s documented rules for when
gradients exist (DDP buckets vs gradients set to None), `default_bytes`' documented bytes per element,
docs/train.md's search rules (--max-micro-batch 16; a fitting layout needs memory <= usable)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.plan.search import _Memo, _search, plan
from mlsyscalc.calc.plan.memory import MemoryTable
from mlsyscalc.calc.plan.space import PlanOptions, execution_options, structures
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("H100-SXM")
GPT2 = load_model("gpt2")  # 12 layers: pp 1, 2, 4 and vp 3 divide them


def _layouts():
    """Every 1F1B schedule shape of gpt2 at pp 1, 2, 4 (vp 3 where 12 layers allow it), m = 1-4 (fewer and
    more micro-batches than stages), ZeRO 0, 1, 3, one replica or two (DDP buckets), no or full recompute."""
    for pp, m, vp, zero, dp, rc in itertools.product((1, 2, 4), (1, 2, 3, 4), (1, 3), (0, 1, 3), (1, 2),
                                                     ("none", "full")):
        if vp > 1 and (pp == 1 or m % pp or 12 % (pp * vp)):
            continue
        yield dict(tp=1, pp=pp, cp=1, dp=dp, zero=zero, recompute=rc, sp=False, batch=2, grad_accum=m, vp=vp)


LAYOUTS = list(_layouts())


def _table_bytes(table: MemoryTable, lay: dict) -> float:
    return table.total_bytes(tp=lay["tp"], ep=1, pp=lay["pp"], cp=lay["cp"], sp=lay["sp"], zero=lay["zero"],
                             shard=lay["dp"] * lay["cp"], recompute=lay["recompute"], micro_batch=lay["batch"],
                             micro_batches=lay["grad_accum"], vp=lay["vp"])


@pytest.mark.parametrize("seq,batch", [(1024, 2), (128, 1)])
@pytest.mark.parametrize("framework", ["megatron", "torch"])
def test_memory_table_equals_train_memory_byte_for_byte(framework, seq, batch):
    """One MemoryTable (its memo shared, as in the search) prices every layout of the grid exactly as
    `train_memory` does, to the byte (abs=0: gpt2's parts are whole bytes at bf16): every phase (first
    backward, later backward, optimizer step), gradients absent or present, pipeline outputs and receive
    buffers of torch, ZeRO-3's gathered layers. At seq 1024 the activations make the first backward the
    peak; at 128 tokens gpt2's 248 MB of bf16 gradients outweigh them, so the optimizer step is."""
    table = MemoryTable(GPT2, seq, "bf16", framework=framework)
    for lay in LAYOUTS:
        lay = {**lay, "batch": batch}
        ref = train_memory(GPT2, TrainOptions(seq=seq, framework=framework, **lay)).total
        assert _table_bytes(table, lay) == pytest.approx(ref, abs=0), (framework, lay)


@pytest.mark.parametrize("framework", ["megatron", "torch"])
def test_memory_table_batched_peaks_equal_one_at_a_time(framework):
    """`peak_bytes` over many layouts of one pp in one call (as `_search` calls it: mixed m, vp, ZeRO and
    replicas) gives each layout's `train_memory` total, in order."""
    table = MemoryTable(GPT2, 1024, "bf16", framework=framework)
    for pp in (1, 2, 4):
        lays = [lay for lay in LAYOUTS if lay["pp"] == pp][::-1]
        got = table.peak_bytes(
            pp, [table.state_key(1, 1, pp, lay["zero"], lay["dp"]) for lay in lays],
            [table.activation_key(1, 1, False, lay["recompute"], pp) for lay in lays],
            np.array([lay["batch"] for lay in lays]), np.array([lay["grad_accum"] for lay in lays]),
            np.array([lay["vp"] for lay in lays]), np.array([lay["zero"] for lay in lays]),
            np.array([lay["dp"] for lay in lays]))
        ref = [train_memory(GPT2, TrainOptions(seq=1024, framework=framework, **lay)).total for lay in lays]
        assert got.tolist() == pytest.approx(ref, abs=0)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "llama3-8b"])
@pytest.mark.parametrize("framework", ["megatron", "torch"])
def test_memory_table_shards_moe_and_gqa_as_train_memory(name, framework):
    """MoE (mixtral: 8 experts, routed experts sharded over dp x cp / ep) and GQA (llama3-8b: 8 KV heads)
    under tp 1-2 with sequence parallelism, cp 1-2, ep 1-2, pp 1-2, every ZeRO stage the framework runs
    (torch: 0 and 3) and recompute none/selective/full, 4 data-parallel replicas: the table's bytes are
    `train_memory`'s to the byte."""
    spec = load_model(name)
    table = MemoryTable(spec, 1024, "bf16", framework=framework)
    zeros = (0, 1, 2, 3) if framework == "megatron" else (0, 3)
    eps = (1, 2) if spec.moe is not None else (1,)
    recomputes = ("none", "selective", "full")
    for tp, cp, ep, zero, pp, rc in itertools.product((1, 2), (1, 2), eps, zeros, (1, 2), recomputes):
        lay = dict(tp=tp, pp=pp, cp=cp, dp=4, ep=ep, zero=zero, recompute=rc, sp=tp > 1, batch=1, grad_accum=2)
        ref = train_memory(spec, TrainOptions(seq=1024, framework=framework, **lay)).total
        got = table.total_bytes(tp=tp, ep=ep, pp=pp, cp=cp, sp=tp > 1, zero=zero, shard=4 * cp, recompute=rc,
                                micro_batch=1, micro_batches=2, vp=1)
        assert got == pytest.approx(ref, abs=0), lay


@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("zero", [0, 3])
def test_later_backward_with_two_forwards_held_is_the_peak(pp, zero):
    """torch without DDP buckets, 2 micro-batches: stages 0..pp-2 hold 2 forwards at their first backward
    with no gradients yet (m = 2 forwards are not more than 2 held), so a later backward (1 forward held,
    gradients present) is a phase. At 8 tokens gpt2's stage 0 (wte and the 1024 x 768 wpe) outweighs the last
    stage's tied head plus its 8 x 50,257 logits; the later backward outweighs the first. Without ZeRO the
    embedding's 77 MB gradient at the backward's end outweighs both (8 tokens of activations); with ZeRO-3 the
    layers and root unit gathered at the later backward outweigh it. That is the peak `train_memory` reports;
    the table gives the same bytes."""
    lay = dict(tp=1, pp=pp, cp=1, dp=1, zero=zero, recompute="none", sp=False, batch=1, grad_accum=2, vp=1)
    ref = train_memory(GPT2, TrainOptions(seq=8, framework="torch", **lay))
    peak = max(ref.stages, key=lambda st: st.total)
    assert (peak.stage, peak.phase) == (0, "backward_end" if zero == 0 else "later_backward")
    assert peak.phases["later_backward"] > peak.phases["backward"]
    assert peak.phases["backward_end"] - peak.phases["optimizer"] == 50257 * 768 * 2
    table = MemoryTable(GPT2, 8, "bf16", framework="torch")
    assert _table_bytes(table, lay) == pytest.approx(ref.total, abs=0)


def test_schedule_gradients_follow_ddp_buckets_not_the_memo():
    """calc.memory.schedule: with torch, gradients exist at the first backward only with DDP's buckets
    (ZeRO 0 and more than one replica) or after an earlier backward of the step. At pp 1 and m 1 there is
    no earlier backward, so one table must answer False for one replica or ZeRO 1, True for two replicas
    at ZeRO 0, whatever order it is asked in; megatron's persistent buffers are always there."""
    torch_table = MemoryTable(GPT2, 1024, "bf16", framework="torch")
    for zero, replicas, want in ((0, 1, False), (0, 2, True), (1, 2, False), (0, 3, True), (3, 1, False)):
        sch = torch_table.schedule(1, 1, 1, zero, replicas)
        assert sch.grads.tolist() == [want], (zero, replicas)
        assert sch.held.tolist() == [1] and sch.later.tolist() == [False]
    megatron = MemoryTable(GPT2, 1024, "bf16")
    assert megatron.schedule(1, 1, 1, 0, 1).grads.tolist() == [True]


def test_schedule_counts_of_a_four_stage_pipeline():
    """1F1B on 4 stages, 4 micro-batches, torch without DDP (gradients None until the first backward):
    stage s holds pp - s forwards at its first backward (4, 3, 2, 1). Gradients exist only where an earlier
    backward ran, i.e. m = 4 forwards > held: not on stage 0. A later backward is a phase where gradients
    were absent and more than one forward is held (stage 0 only), with one forward fewer. Without
    interleaving every held forward but the one being back-propagated keeps its log-probs (held - 1)."""
    sch = MemoryTable(GPT2, 1024, "bf16", framework="torch").schedule(4, 4, 1, 3, 1)
    assert sch.held.tolist() == [4, 3, 2, 1]
    assert sch.grads.tolist() == [False, True, True, True]
    assert sch.later.tolist() == [True, False, False, False]
    assert sch.saved.tolist() == [3, 2, 1, 0] and sch.saved_later.tolist() == [2, 1, 0, 0]


def test_nbytes_defaults_are_zero0_tp1():
    """default_bytes (docs/memory.md): bf16 weights 2 bytes, FSDP2 (torch ZeRO-3) keeps fp32 shards (4);
    the loss's logits temporaries are 12 bytes per logit (fp32 log-probs, their gradient, the logits'
    gradient), 18 with torch's loss_parallel at tp > 1. `nbytes()` means ZeRO 0 and tp 1."""
    torch_table = MemoryTable(GPT2, 1024, "bf16", framework="torch")
    assert torch_table.nbytes()["logits"] == 12.0 and torch_table.nbytes(0, 2)["logits"] == 18.0
    assert torch_table.nbytes()["weight"] == 2.0 and torch_table.nbytes(3)["weight"] == 4.0
    assert torch_table.nbytes()["logits_kept"] == 2.0 and torch_table.nbytes()["logits_saved"] == 4.0
    assert MemoryTable(GPT2, 1024, "bf16").nbytes()["logits_kept"] == 0.0


def test_search_prices_every_sharded_layout_as_train_step():
    """gpt2 on 8 H100s: every candidate with data parallelism and ZeRO 1 or 3 (ZeRO-3 swaps the gradient
    all-reduce for all-gathers and reduce-scatters; the optimizer shards over dp x cp) has the step time
    and memory `train_step` gives the same layout, also with cp pinned to 2 (then no cp = 1 layout comes
    first to the memo); the sampled check of tests/test_plan.py misses some."""
    cluster = load_cluster("hgx-h100")
    checked = set()
    for fix in ((), (("cp", 2),)):
        opts = PlanOptions(gpus=8, seq=1024, global_batch=16, max_micro_batch=2, max_cp=2, fix=fix)
        memo = _Memo(GPT2, H100, cluster, opts)
        layouts, grid = list(structures(GPT2, cluster, opts)), execution_options(opts)
        step, memory = _search(memo, layouts, grid, None)
        for j in range(len(step)):
            zero, recompute = grid[j % len(grid)]
            c = replace(layouts[j // len(grid)], zero=zero, recompute=recompute)
            if zero not in (1, 3) or recompute != "none" or c.data_parallel == 1:
                continue
            ref = train_step(GPT2, H100, cluster, c)
            assert step[j] == pytest.approx(ref.step_time_s, rel=1e-9), c.layout()
            assert memory[j] == pytest.approx(ref.memory_bytes_per_gpu, abs=8), c.layout()
            checked.add((fix, c.cp, zero, c.pp > 1))
    assert {((), 2, 1, False), ((), 2, 3, False), ((), 1, 3, True), ((), 1, 1, True),
            ((("cp", 2),), 2, 1, False), ((("cp", 2),), 2, 3, False)} <= checked


def test_a_layout_using_exactly_the_usable_memory_fits():
    """docs/train.md: `fits` is memory <= the GPU's memory less --reserve. With a reserve that leaves exactly
    the smallest candidate's memory, that layout is feasible and the plan returns it, fitting."""
    cluster = load_cluster("hgx-h100")
    opts = PlanOptions(gpus=8, seq=1024, global_batch=16, max_micro_batch=2, max_cp=1, top=1)
    memo = _Memo(GPT2, H100, cluster, opts)
    _, memory = _search(memo, list(structures(GPT2, cluster, opts)), execution_options(opts), None)
    least = int(memory.min())
    assert least == memory.min()  # whole bytes: the boundary is exact
    cap = int(H100.gpu.memory_bytes)
    got = plan(GPT2, H100, cluster, replace(opts, reserve=f"{cap - least}B"))
    assert got.feasible == int((memory == least).sum()) >= 1
    best = got.candidates[0]
    assert best.fits and best.memory_bytes_per_gpu == least
    assert plan(GPT2, H100, cluster, replace(opts, reserve=f"{cap - least + 1}B")).feasible == 0


def test_micro_batch_search_stops_at_16_by_default():
    """docs/train.md: micro-batch over divisors of global_batch / dp up to --max-micro-batch, default 16.
    One GPU, global batch 34 (divisors 1, 2, 17, 34): micro-batches 1 and 2 only."""
    opts = PlanOptions(gpus=1, seq=1024, global_batch=34, max_cp=1)
    assert opts.max_micro_batch == 16
    got = {c.micro_batch for c in structures(GPT2, load_cluster("hgx-h100"), opts)}
    assert got == {1, 2}
    wider = {c.micro_batch for c in structures(GPT2, load_cluster("hgx-h100"), replace(opts, max_micro_batch=17))}
    assert wider == {1, 2, 17}
