"""`mlsys plan`: the enumeration against a brute-force oracle, the memoised search against `train_step`
and `train_memory`, the best against pinned layouts, and the CLI contract."""

from __future__ import annotations

import io
import itertools
import json
import random
import sys
from dataclasses import replace

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.calc.comm.step import PER_MICRO_BATCH
from mlsyscalc.calc.plan.search import _Memo, _search, plan
from mlsyscalc.calc.plan.memory import MemoryTable
from mlsyscalc.calc.plan.result import full_layout
from mlsyscalc.calc.parallel.pipeline_split import PipelineSplit, chunk_layers
from mlsyscalc.calc.plan.space import PlanOptions, execution_options, structures
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model
from mlsyscalc.calc.parallel.tensor_parallel import check_tp
from mlsyscalc.calc.comm.exposed import traffic

from .test_plan_split import _assert_candidates_are_train, _split_oracle

H100 = load_ceilings("H100-SXM")


@pytest.mark.parametrize("name,lay", [
    ("llama2-70b", dict(tp=8, pp=4, cp=2, dp=4, zero=1, recompute="selective", sp=True, batch=2, grad_accum=8)),
    ("llama2-70b", dict(tp=4, pp=8, cp=1, dp=8, zero=3, recompute="full", sp=False, batch=1, grad_accum=3)),
    ("mixtral-8x7b", dict(tp=2, pp=4, cp=1, dp=8, ep=4, zero=2, recompute="none", sp=True, batch=1, grad_accum=16)),
    ("gpt2", dict(tp=1, pp=2, cp=1, dp=4, zero=0, recompute="none", sp=False, batch=4, grad_accum=2)),  # tied head
    ("gpt2", dict(tp=2, pp=1, cp=1, dp=4, zero=3, recompute="full", sp=True, batch=4, grad_accum=2)),
    # torch: gradients absent until the first backward (no DDP buckets: dp 1), pipelining's buffers, interleaving
    ("llama3-8b", dict(tp=2, pp=4, cp=1, dp=1, zero=0, recompute="none", sp=True, batch=1, grad_accum=8, vp=2)),
    ("llama3-8b", dict(tp=1, pp=2, cp=1, dp=1, zero=0, recompute="selective", sp=False, batch=2, grad_accum=1)),
    ("qwen2.5-7b", dict(tp=2, pp=2, cp=2, dp=2, zero=3, recompute="none", sp=True, batch=1, grad_accum=4, vp=2)),
    # uneven stages: 80 layers + the embedding over 3 stages of 3 chunks (first chunk 8 layers, the rest 9);
    # 6/8/8/10 layers in chunks of half that
    ("llama2-70b", dict(tp=8, pp=3, cp=1, dp=2, zero=1, recompute="selective", sp=True, batch=1, grad_accum=6, vp=3,
                        pipeline_split=PipelineSplit(embedding=True))),
    ("llama3-8b", dict(tp=2, pp=4, cp=1, dp=1, zero=0, recompute="full", sp=True, batch=1, grad_accum=8, vp=2,
                       pipeline_split=PipelineSplit(first=6, last=10))),
])
@pytest.mark.parametrize("framework", ["megatron", "torch"])
def test_plan_memory_equals_train_memory(name, lay, framework):
    spec = load_model(name)
    ref = train_memory(spec, TrainOptions(seq=2048, framework=framework, **lay)).total
    got = MemoryTable(spec, 2048, "bf16", framework=framework).total_bytes(
        tp=lay["tp"], ep=lay.get("ep", 1), pp=lay["pp"], cp=lay["cp"], sp=lay["sp"], zero=lay["zero"],
        shard=lay["dp"] * lay["cp"], recompute=lay["recompute"], micro_batch=lay["batch"],
        micro_batches=lay["grad_accum"], vp=lay.get("vp", 1), split=lay.get("pipeline_split", PipelineSplit()))
    assert got == pytest.approx(ref, abs=16)


def _brute_force(spec, cluster, opts: PlanOptions) -> set[tuple]:
    """Every (tp, pp, dp, cp, ep, etp, vp, mb, layers of each stage's chunks) whose TrainStepOptions passes
    `validate` (sp on), by brute force, with the pipeline splits of `_split_oracle`; etp 1 or tp for an MoE model
    (the values plan_space searches unpinned), the default (tp) for a dense one."""
    out, n, tp_ok = set(), opts.gpus, {}
    etps = range(1, n + 1) if spec.moe is not None else (None,)
    for tp, pp, cp, ep, etp, vp, mb in itertools.product(range(1, n + 1), range(1, spec.num_layers + 1), (1, 2, 4, 8),
                                                         range(1, n + 1), etps, range(1, spec.num_layers + 3),
                                                         range(1, opts.max_micro_batch + 1)):
        if n % (tp * pp * cp) or (spec.moe is None and ep > 1) or etp not in (None, 1, tp):
            continue
        if etp is not None and (n // pp) % (etp * ep):  # the folding rule; skipped here only to keep this fast
            continue
        splits = _split_oracle(spec.num_layers, pp, vp, opts.even_splits_only)
        if not splits:
            continue
        c = replace(opts.base(), tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vp=vp, micro_batch=mb, sp=True,
                    pipeline_split=next(iter(splits.values())))
        if (tp, etp) not in tp_ok:  # validate = check_tp (costly: once per tp and etp) + check_layout
            tp_ok[tp, etp] = _passes(lambda: check_tp(spec, tp, experts=etp))
        if not tp_ok[tp, etp] or not _passes(lambda: c.check_layout(spec, cluster)):
            continue
        out |= {(tp, pp, c.data_parallel, cp, ep, c.expert_tp, vp, mb, chunks) for chunks in splits}
    return out



def _passes(check) -> bool:
    try:
        check()
    except MlsysError:
        return False
    return True


@pytest.mark.parametrize("even_only", [False, True])
@pytest.mark.parametrize("name,gpus,batch", [("gpt2", 8, 16), ("mixtral-8x7b", 16, 32)])
def test_enumeration_is_every_valid_layout(name, gpus, batch, even_only):
    """The structures against a brute force over every axis and every combination of Megatron-LM's split
    options (kept by the rule docs/plan.md states); `--even-splits-only` gives the even split alone."""
    spec, cluster = load_model(name, {"num_hidden_layers": 8} if name != "gpt2" else None), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=gpus, seq=1024, global_batch=batch, max_micro_batch=4, max_cp=8, even_splits_only=even_only)
    every = list(structures(spec, cluster, opts))
    got = {(c.tp, c.pp, c.data_parallel, c.cp, c.ep, c.expert_tp, c.vp, c.micro_batch,
            chunk_layers(spec.num_layers, c.pp, c.vp, c.pipeline_split)) for c in every}
    assert got == _brute_force(spec, cluster, opts) and len(got) == len(every) > 20
    assert any(not c.pipeline_split.even for c in every) != even_only
    assert len(execution_options(opts)) == 12


@pytest.mark.parametrize("name,framework", [("llama2-13b", "megatron"), ("mixtral-8x7b", "megatron"),
                                            ("llama2-13b", "torch")])
def test_dp_traffic_from_one_call_is_step_comm_at_every_m(name, framework):
    """per_micro_batch against comm_step itself: for every ZeRO stage, step_comm's DP seconds at m = 1, 3
    and 8 micro-batches are a + b m of the memo's (a, b), taken from one call at m = 1 (torch: FSDP2's ZeRO-2
    gathers every micro-batch)."""
    spec, cluster = load_model(name), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=64, seq=2048, global_batch=64, max_micro_batch=1, max_cp=2, framework=framework)
    memo = _Memo(spec, H100, cluster, opts)
    layouts = [c for c in structures(spec, cluster, opts) if c.data_parallel > 1 and c.vp == 1]
    assert len(layouts) > 5 and (spec.moe is None or any(c.ep > 1 for c in layouts))
    assert sorted(PER_MICRO_BATCH) == [0, 1, 2, 3]
    for c, zero in itertools.product(layouts, PER_MICRO_BATCH):
        ab = memo.dp_traffic(c, zero)
        for m in (1, 3, 8):
            o = StepOptions(dp=c.data_parallel, tp=c.tp, pp=c.pp, ep=c.ep, etp=c.etp, cp=c.cp, sp=c.sp_active, zero=zero,
                            seq=c.seq, grad_accum=m, fsdp=framework == "torch", grad_dtype=c.grad_reduce_dtype(zero))
            ref = traffic(step_comm(spec, o, cluster, parts=("dp",)).rows)
            assert ref.keys() == ab.keys() and ref
            for k, (a, b) in ab.items():
                assert a + b * m == pytest.approx(ref[k], rel=1e-12), (c.layout(), zero, m, k)


@pytest.mark.parametrize("name,gpus,batch", [("llama2-13b", 64, 64), ("mixtral-8x7b", 32, 64)])
def test_memoised_search_equals_train_step(name, gpus, batch):
    """Every candidate's step time and memory in the vectorised search is train_step's for that layout."""
    spec, cluster = load_model(name), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=gpus, seq=2048, global_batch=batch, max_micro_batch=2, max_cp=2)
    assert_search_equals_train_step(spec, H100, cluster, opts, samples=30, seed=0)


@pytest.mark.parametrize("name,gpus,batch", [("llama3-8b", 16, 64), ("mixtral-8x7b", 16, 32)])
def test_torch_search_equals_train_step(name, gpus, batch):
    """--framework torch (GQA and MoE): sampled candidates and the search's own top K price host time and
    memory as train_step --framework torch does; ep > 1 and ZeRO-1 are left out."""
    spec, cluster = load_model(name), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=gpus, seq=2048, global_batch=batch, max_micro_batch=2, max_cp=2, framework="torch")
    assert_search_equals_train_step(spec, H100, cluster, opts, samples=20, seed=1, top=6)
    assert all(c.ep == 1 for c in structures(spec, cluster, opts))
    assert {z for z, _ in execution_options(opts)} == {0, 2, 3}


def test_torch_host_moves_the_search():
    """The torch host term is priced in the search: with DTensor TP pinned the host paces the best layout
    (host_s > 0), and megatron's best layout is slower under torch (and, when torch runs it, no faster than
    torch's best)."""
    spec, cluster = load_model("llama3-8b"), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=8, seq=2048, global_batch=16, max_micro_batch=2, max_cp=1, top=1, fix=(("tp", 4),))
    best = {fw: plan(spec, H100, cluster, replace(opts, framework=fw)).candidates[0] for fw in ("megatron", "torch")}
    assert best["torch"].breakdown["host_s"] > 0 and best["megatron"].breakdown["host_s"] == 0
    again = train_step(spec, H100, cluster, replace(best["megatron"].options, framework="torch"))
    assert again.step_time_s > best["megatron"].step_time_s
    if best["megatron"].options.zero in (0, 3):  # a layout torch runs: its best is at least as fast
        assert best["torch"].step_time_s <= again.step_time_s


def assert_search_equals_train_step(spec, ceilings, cluster, opts, samples: int, seed: int, top: int = 0) -> None:
    """A seeded sample of the vectorised search's candidates and its `top` fastest fitting ones: step time and
    memory equal train_step's (same framework)."""
    memo = _Memo(spec, ceilings, cluster, opts)
    layouts, grid = list(structures(spec, cluster, opts)), execution_options(opts)
    step, memory = _search(memo, layouts, grid, None)
    assert len(step) == len(layouts) * len(grid)
    fits = [j for j in sorted(range(len(step)), key=lambda j: step[j]) if memory[j] <= memo.usable][:top]
    uneven = [j for j in range(len(step)) if not layouts[j // len(grid)].pipeline_split.even]
    picks = random.Random(seed).sample(range(len(step)), min(samples, len(step)))
    picks += random.Random(seed).sample(uneven, min(samples // 2, len(uneven)))  # Megatron-LM's uneven splits
    for j in picks + fits:
        zero, recompute = grid[j % len(grid)]
        c = replace(layouts[j // len(grid)], zero=zero, recompute=recompute)
        ref = train_step(spec, ceilings, cluster, c)
        assert step[j] == pytest.approx(ref.step_time_s, rel=1e-9), c.layout()
        assert memory[j] == pytest.approx(ref.memory_bytes_per_gpu, abs=8), c.layout()


@pytest.mark.parametrize("framework", ["megatron", "torch"])
@pytest.mark.parametrize("name,reserve,max_micro_batch", [("llama3-8b", "85%", 2), ("mixtral-8x7b", "10%", 1)])
def test_top_k_is_train_steps_own_top_k(name, reserve, max_micro_batch, framework):
    """The oracle is `train_step` itself on every candidate (no memo, no arrays): the fitting ones sorted by
    its step time give plan's top K, layouts and step times, and the same searched / feasible counts.
    Five-layer models (GQA; MoE with EP) on 4 GPUs, with a reserve that leaves some layouts out: two stages
    split 2/3 or 3/2 (Megatron-LM's account-for-embedding / loss splits), four do not split them."""
    spec, cluster = load_model(name, {"num_hidden_layers": 5}), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=4, seq=1024, global_batch=8, max_micro_batch=max_micro_batch, max_cp=2,
                       framework=framework, top=6, reserve=reserve, all_variants=True)
    every = [train_step(spec, H100, cluster, replace(c, zero=z, recompute=r))
             for c in structures(spec, cluster, opts) for z, r in execution_options(opts)]
    fitting = sorted((s for s in every if s.fits), key=lambda s: s.step_time_s)
    result = plan(spec, H100, cluster, opts)
    assert result.searched == len(every) and 6 < result.feasible == len(fitting) < len(every)
    want = [s.step_time_s for s in fitting[:6]]
    assert [c.step_time_s for c in result.candidates] == pytest.approx(want, rel=1e-12)
    for c in result.candidates:  # equal step times may come in either order: the layout is one of those
        assert full_layout(c.options) in [full_layout(s.options) for s in fitting
                                          if s.step_time_s == pytest.approx(c.step_time_s, rel=1e-12)]
    assert len({tuple(full_layout(c.options).items()) for c in result.candidates}) == 6
    assert spec.moe is None or any(c.ep > 1 for c in structures(spec, cluster, opts)) == (framework == "megatron")
    assert {s.options.pp for s in every} == {1, 2} and any(not s.options.pipeline_split.even for s in fitting[:100])


def test_best_never_worse_than_pinned_layouts():
    spec, cluster = load_model("llama2-13b"), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=32, seq=4096, global_batch=64, top=3)
    best = plan(spec, H100, cluster, opts)
    assert best.feasible <= best.searched and len(best.candidates) == 3
    times = [c.step_time_s for c in best.candidates]
    assert times == sorted(times) and all(c.fits for c in best.candidates)
    for fix in ((("tp", 8), ("pp", 4)), (("tp", 4), ("recompute", "selective")), (("zero", 1), ("pp", 2))):
        pinned = plan(spec, H100, cluster, replace(opts, fix=fix, top=1))
        assert pinned.searched < best.searched
        assert best.candidates[0].step_time_s <= pinned.candidates[0].step_time_s
        lay = pinned.candidates[0].options.layout()
        assert all(lay[k] == v for k, v in fix)
    # a Megatron-style layout given to `train` directly is never faster than the plan's best
    megatron = train_step(spec, H100, cluster, TrainStepOptions(gpus=32, seq=4096, global_batch=64, tp=8, pp=2,
                                                                 recompute="selective", zero=1))
    assert megatron.fits and best.candidates[0].step_time_s <= megatron.step_time_s


def test_plan_cli_json_and_fix(run_cli):
    data = run_cli.json("plan", "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--seq", "2048",
                        "--global-batch", "32", "--top", "4", "--fix", "tp=2", "--quiet")
    for key in ("candidates", "searched", "feasible", "search_s", "why"):
        assert key in data
    assert len(data["candidates"]) == 4 and 0 < data["feasible"] <= data["searched"]
    for c in data["candidates"]:
        assert c["layout"]["tp"] == 2 and c["fits"]
        assert c["step_time_s"] == pytest.approx(sum(c["breakdown"].values()))
        for key in ("tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "memory_bytes_per_gpu"):
            assert c[key] > 0
    steps = [c["step_time_s"] for c in data["candidates"]]
    assert steps == sorted(steps)
    assert data["why"].startswith(f"{steps[0]:.4g} s per step") and "_s (" in data["why"]
    # every candidate is what `mlsys train` says for its layout
    _assert_candidates_are_train(run_cli, data, "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--seq", "2048",
                                 "--global-batch", "32")


def test_plan_comm_sms_prices_as_train(run_cli):
    """--comm-sms reaches the search: its candidates are `mlsys train --comm-sms` of their layouts, and more SMs for
    NCCL never make the best step faster."""
    base = ("llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "32")
    data = run_cli.json("plan", *base, "--top", "3", "--comm-sms", "32", "--quiet")
    _assert_candidates_are_train(run_cli, data, *base, "--comm-sms", "32")
    free = run_cli.json("plan", *base, "--top", "1", "--comm-sms", "0", "--quiet")
    assert free["candidates"][0]["step_time_s"] <= data["candidates"][0]["step_time_s"]




@pytest.mark.parametrize("fix,message", [(("bogus=1",), "AXIS=VALUE"), (("tp=3",), "no layout"),
                                          (("sp=maybe",), "sp is on or off")])
def test_plan_bad_fix_exits_2(run_cli, fix, message):
    args = [a for f in fix for a in ("--fix", f)]
    code, out, err = run_cli("plan", "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--global-batch", "32", *args)
    assert code == 2 and message in err and out == ""


def test_70b_on_1024_gpus_searches_every_layout():
    """The issue's size: 70B on 1,024 GPUs. Counted, not timed (the bound is only a guard against a hang)."""
    spec, cluster = load_model("llama2-70b"), load_cluster("dgx-a100")
    result = plan(spec, load_ceilings("A100-80GB-SXM"), cluster, PlanOptions(gpus=1024, seq=4096, global_batch=1024))
    structures_count = sum(1 for _ in structures(spec, cluster, result.options))
    assert result.searched == 12 * structures_count > 20_000
    assert result.candidates and result.search_s < 120


def test_plan_cli_torch_matches_train_and_names_exclusions(run_cli):
    base = ["--gpus", "8", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "16"]
    data = run_cli.json("plan", "mixtral-8x7b", *base, "--top", "2", "--framework", "torch", "--quiet",
                        "--max-micro-batch", "2")
    assert data["framework"] == "torch" and {e["axis"] for e in data["excluded"]} == {"ep", "etp", "zero"}
    assert all(e["reason"] for e in data["excluded"])
    for c in data["candidates"]:
        lay = c["layout"]
        assert lay["ep"] == 1 and lay["zero"] in (0, 3)
        args = [f"--{k.replace('_', '-')}={lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch",
                                                              "zero", "recompute")]
        one = run_cli.json("train", "mixtral-8x7b", *base, *args, "--sp" if lay["sp"] else "--no-sp",
                           "--framework", "torch")
        assert one["step_time_s"] == pytest.approx(c["step_time_s"], rel=1e-12)
        assert one["memory_bytes_per_gpu"] == c["memory_bytes_per_gpu"]
    assert run_cli.json("plan", "llama2-7b", *base, "--quiet")["excluded"] == []
    code, out, err = run_cli("plan", "mixtral-8x7b", *base, "--framework", "torch", "--fix", "zero=1")
    assert code == 2 and "FSDP2" in err and out == ""


def test_fp8_search_equals_train_step():
    """--dtype fp8: the search prices Transformer Engine's scaling kernels, the weight casts once a step, the
    FP8 activations and the FP8 weight copies as train_step does (calc.precision.fp8)."""
    spec, cluster = load_model("llama3-8b"), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=16, seq=2048, global_batch=32, max_micro_batch=2, max_cp=2, dtype="fp8")
    assert_search_equals_train_step(spec, H100, cluster, opts, samples=25, seed=2, top=4)
    current = replace(opts, fp8_recipe="current", fp8_params=True)  # the weight casts then depend on ZeRO's shard
    assert_search_equals_train_step(spec, H100, cluster, current, samples=25, seed=3, top=4)
    moe = PlanOptions(gpus=16, seq=1024, global_batch=32, max_micro_batch=2, max_cp=1, dtype="fp8",
                      fp8_recipe="current", fp8_params=True)  # routed experts' weight casts follow ep
    assert_search_equals_train_step(load_model("mixtral-8x7b"), H100, cluster, moe, samples=25, seed=4, top=2)


@pytest.mark.parametrize("fp8_params", [False, True])
def test_fp8_plan_memory_equals_train_memory(fp8_params):
    """FP8 activations and FP8 weight copies (FP8 weights with fp8_params), per stage of an interleaved pipeline."""
    spec = load_model("llama3-8b")
    lay = dict(tp=2, pp=4, cp=1, dp=2, zero=1, recompute="none", sp=True, batch=1, grad_accum=8, vp=2)
    ref = train_memory(spec, TrainOptions(seq=2048, dtype="fp8", fp8_params=fp8_params, **lay))
    assert ref.peak_stage.detail["fp8_weight_copies"] > 0
    got = MemoryTable(spec, 2048, "fp8", fp8_params=fp8_params).total_bytes(tp=2, ep=1, pp=4, cp=1, sp=True, zero=1, shard=2,
                                                     recompute="none", micro_batch=1, micro_batches=8, vp=2)
    assert got == pytest.approx(ref.total, abs=16)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal_after_its_delay(monkeypatch):
    from mlsyscalc.cli import plan as plan_cli

    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    bar = plan_cli._Progress(True)
    bar(12, 120)
    assert bar.bar is None  # under a second: nothing yet
    bar.start -= 2 * bar.delay_s
    bar(60, 120)
    assert bar.bar is not None
    bar.close()
    assert "layouts" in tty.getvalue()
    for stream, enabled in ((io.StringIO(), True), (_Tty(), False)):  # a pipe or file; --quiet
        monkeypatch.setattr(sys, "stderr", stream)
        bar = plan_cli._Progress(enabled)
        bar.start -= 2 * bar.delay_s
        bar(60, 120)
        bar.close()
        assert bar.bar is None and stream.getvalue() == ""


def test_plan_json_stdout_stays_json_while_the_bar_runs(run_cli, monkeypatch):
    """With the bar on from the first layout (a terminal, no delay) it draws on stderr only."""
    from mlsyscalc.cli import plan as plan_cli

    monkeypatch.setattr(plan_cli, "_terminal", lambda: True)
    monkeypatch.setattr(plan_cli._Progress, "delay_s", 0.0)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws on CliRunner's stderr as on a terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    code, out, err = run_cli("plan", "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--seq", "2048",
                             "--global-batch", "32", "--top", "2", "--json")
    assert code == 0 and json.loads(out)["searched"] > 1000
    assert "layouts" in err and "layouts" not in out
