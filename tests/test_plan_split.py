"""`mlsys plan` with Megatron-LM's uneven pipeline splits (calc.plan.space.pipeline_splits): the splits searched
against a brute force over the four options, uneven candidates against `mlsys train`, the top K of an evenly
divisible model against the even-only search, and a BLOOM-shaped model."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.parallel.pipeline_split import PipelineSplit, chunk_layers, stage_layer_ids
from mlsyscalc.calc.plan.search import plan
from mlsyscalc.calc.plan.result import full_layout
from mlsyscalc.calc.plan.space import PlanOptions
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("H100-SXM")

_SPLIT_ORACLE: dict[tuple, dict] = {}


def _split_oracle(layers: int, pp: int, vp: int, even_only: bool) -> dict[tuple, PipelineSplit]:
    """The splits docs/plan.md says the search spans, found by trying every combination of Megatron-LM's four
    options and keeping, by the layers each stage holds: the even split; an account-for split; first/last sizes
    whose middle stages are equal, of 2 vp layers or more, and whose ends are each within vp layers of them
    (pp = 2: within 2 vp of each other, each 2 vp or more), or whose middle stages hold ceil(layers / (pp vp))
    vp >= 2 vp layers and whose ends differ by at most vp. Keyed by the layers of each stage's chunks."""
    key = (layers, pp, vp, even_only)
    if key in _SPLIT_ORACLE:
        return _SPLIT_ORACLE[key]
    found: dict[tuple, PipelineSplit] = {}
    sizes = [None, *range(1, layers + 1)]
    for first, last, emb, loss in itertools.product(sizes, sizes, (False, True), (False, True)):
        split = PipelineSplit(first, last, emb, loss)
        if even_only and not split.even:
            continue
        try:
            chunks = chunk_layers(layers, pp, vp, split)
        except MlsysError:
            continue
        counts = [sum(c) for c in chunks]
        if first is not None or last is not None:
            middle = set(counts[1:-1])
            near = (abs(counts[0] - counts[1]) <= 2 * vp and min(counts) >= 2 * vp if pp == 2 else
                    len(middle) == 1 and counts[1] >= 2 * vp and all(abs(counts[i] - counts[1]) <= vp for i in (0, -1)))
            fullest = (pp > 2 and len(middle) == 1 and counts[1] == -(-layers // (pp * vp)) * vp >= 2 * vp
                       and abs(counts[0] - counts[-1]) <= vp)
            if not (near or fullest):
                continue
        found.setdefault(chunks, split)
    _SPLIT_ORACLE[key] = found
    return found



SPLIT_KEYS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
              "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def train_args(lay: dict) -> list[str]:
    """`mlsys train` flags of a plan candidate's layout, Megatron-LM's split options included."""
    args = [f"--{k.replace('_', '-')}={lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch", "zero",
                                                          "recompute")]
    args += [f"--{k.replace('_', '-')}={lay[k]}" for k in SPLIT_KEYS[:2] if lay[k] is not None]
    return args + [f"--{k.replace('_', '-')}" for k in SPLIT_KEYS[2:] if lay[k]] + ["--sp" if lay["sp"] else "--no-sp"]


def _assert_candidates_are_train(run_cli, data: dict, *base: str) -> None:
    for c in data["candidates"]:
        lay = c["layout"]
        one = run_cli.json("train", *base, *train_args(lay))
        assert one["step_time_s"] == pytest.approx(c["step_time_s"], rel=1e-12)
        assert {**one["layout"], **one["pipeline"]["split"]} == lay
        assert one["memory_bytes_per_gpu"] == c["memory_bytes_per_gpu"] and one["breakdown"] == c["breakdown"]


def test_plan_cli_uneven_candidates_are_train(run_cli):
    """pp = 3 does not divide llama2-7b's 32 layers: every candidate is an uneven split (the first or last stage
    one layer lighter: 10/11/11 or 11/11/10), named by Megatron-LM's options in `layout` and priced as
    `mlsys train` with those options prices it; --fix pins a split, --even-splits-only leaves none."""
    base = ("llama2-7b", "--gpus", "24", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "48")
    data = run_cli.json("plan", *base, "--top", "4", "--fix", "pp=3", "--fix", "tp=8", "--quiet")
    lays = [c["layout"] for c in data["candidates"]]
    assert len(lays) == 4 and {(x["account_for_embedding_in_pipeline_split"], x["account_for_loss_in_pipeline_split"])
                               for x in lays} <= {(True, False), (False, True)}
    _assert_candidates_are_train(run_cli, data, *base)
    pinned = run_cli.json("plan", *base, "--top", "2", "--fix", "pp=3", "--fix", "decoder-first-pipeline-num-layers=12",
                          "--quiet")
    assert [(c["layout"]["decoder_first_pipeline_num_layers"], c["layout"]["pp"]) for c in pinned["candidates"]] == [
        (12, 3)] * 2
    _assert_candidates_are_train(run_cli, pinned, *base)
    code, out, err = run_cli("plan", *base, "--fix", "pp=3", "--even-splits-only", "--quiet")
    assert code == 2 and "no layout" in err and out == ""


def _assert_top_k_merges_even_and_uneven(spec, cluster, opts: PlanOptions) -> tuple:
    """The default search's top K are the K fastest of the even-only top K and its own uneven candidates: each
    even layout of it is in the even-only top K, in order, and no even layout drops out but for a faster uneven
    one. Returns (default, even-only) plans."""
    both, even = plan(spec, H100, cluster, opts), plan(spec, H100, cluster, replace(opts, even_splits_only=True))
    assert both.searched > even.searched and all(c.options.pipeline_split.even for c in even.candidates)
    kept = [full_layout(c.options) for c in both.candidates if c.options.pipeline_split.even]
    assert kept == [full_layout(c.options) for c in even.candidates][:len(kept)]
    merged = sorted([c.step_time_s for c in even.candidates]
                    + [c.step_time_s for c in both.candidates if not c.options.pipeline_split.even])[:opts.top]
    assert [c.step_time_s for c in both.candidates] == pytest.approx(merged, rel=1e-12)
    return both, even


def test_even_layers_keep_their_top_k_unless_an_uneven_split_is_faster():
    """llama2-13b (40 layers) on 32 H100: the same top 3 as the even-only search (its best layouts do not
    pipeline). Llama 3 8B (32 layers, a 128K-vocabulary head about 2.4 layers' weights) with 4 stages: 9/8/8/7
    (the last stage one layer lighter, the first one heavier) beats every even split: the head no longer
    paces the pipeline; train_step of both layouts agrees."""
    both, even = _assert_top_k_merges_even_and_uneven(load_model("llama2-13b"), load_cluster("hgx-h100"),
                                                      PlanOptions(gpus=32, seq=4096, global_batch=64, top=3))
    assert [full_layout(c.options) for c in both.candidates] == [full_layout(c.options) for c in even.candidates]
    spec, cluster = load_model("llama3-8b"), load_cluster("hgx-h100")
    both, even = _assert_top_k_merges_even_and_uneven(
        spec, cluster, PlanOptions(gpus=16, seq=4096, global_batch=64, top=3, fix=(("pp", 4),)))
    best = both.candidates[0]
    assert (best.options.pipeline_split.first, best.options.pipeline_split.last) == (9, 7)
    again = train_step(spec, H100, cluster, best.options), train_step(spec, H100, cluster, even.candidates[0].options)
    assert again[0].step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    assert best.step_time_s < 0.95 * again[1].step_time_s
    stages = again[0].pipeline_parts()["stages"]
    assert [st["layers"] for st in stages] == [9, 8, 8, 7]


def test_bloom_shaped_pipeline_finds_a_layout():
    """BLOOM's shape: 70 layers (gpt2 blocks, tied head) on GPUs whose count carries a factor 3 that only pp can
    take (tp divides the 8-GPU node, cp is a power of two, dp must divide the power-of-two global batch). No pp
    in 3, 6, 12, 24 divides 70, so the even split finds nothing; Megatron-LM's account-for-embedding-and-loss
    split of 72 slots (first and last stage one layer fewer) does, and it is the best (24/23/23, the first stage
    heavier, comes next); every candidate is uneven and train_step's own."""
    spec, cluster = load_model("gpt2", {"n_layer": 70}), load_cluster("hgx-h100")
    opts = PlanOptions(gpus=24, seq=1024, global_batch=16, top=3, max_micro_batch=2)
    with pytest.raises(MlsysError, match="no layout"):
        plan(spec, H100, cluster, replace(opts, even_splits_only=True))
    result = plan(spec, H100, cluster, opts)
    assert result.candidates and all(c.options.pp % 3 == 0 for c in result.candidates)
    best = result.candidates[0].options
    counts = [len(layers) for layers in stage_layer_ids(70, best.pp, best.vp, best.pipeline_split)]
    slots = 72 // best.pp
    assert best.pipeline_split == PipelineSplit(embedding=True, loss=True)
    assert counts == [slots - 1] + [slots] * (best.pp - 2) + [slots - 1]
    for c in result.candidates:
        assert not c.options.pipeline_split.even
        assert train_step(spec, H100, cluster, c.options).step_time_s == pytest.approx(c.step_time_s, rel=1e-12)
