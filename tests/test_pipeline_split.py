"""Uneven pipeline stages (calc.parallel.pipeline_split) in `mlsys train` and `mlsys memory train`: Megatron-LM's split by
hand, the step and memory of an uneven split by hand, an even split given through the options equal to no options,
and every split Megatron-LM refuses an exit 2 naming the option."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.parallel.pipeline_split import PipelineSplit, chunk_layers, stage_layer_ids
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.calc.train.parts import StageParts
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

ACCOUNT_BOTH = PipelineSplit(embedding=True, loss=True)
H100 = ("--gpu", "H100-SXM")


# --- the split, as Megatron-LM builds it (transformer_block.py get_num_layers_to_build) ------------------------------

def test_llama3_405b_and_bloom_splits_by_hand():
    # Llama 3 405B: 126 layers + embedding + loss = 128 slots, 8 a stage over 16: the ends hold 7 decoder layers
    assert chunk_layers(126, 16, 1, ACCOUNT_BOTH) == ((7,),) + ((8,),) * 14 + ((7,),)
    # the same with 2 chunks a stage: 4 slots a chunk, the embedding in stage 0's first, the loss in stage 15's last
    assert chunk_layers(126, 16, 2, ACCOUNT_BOTH) == ((3, 4),) + ((4, 4),) * 14 + ((4, 3),)
    # BLOOM 176B: 70 layers, 12 stages; 5 on each end and (70 - 10) / 10 = 6 on each middle stage, either way
    bloom = ((5,),) + ((6,),) * 10 + ((5,),)
    assert chunk_layers(70, 12, 1, PipelineSplit(first=5, last=5)) == bloom == chunk_layers(70, 12, 1, ACCOUNT_BOTH)
    # only the first given: the other 7 - 3 = 4 layers on the last stage (no middle stage)
    assert chunk_layers(7, 2, 1, PipelineSplit(first=3)) == ((3,), (4,))
    # first and last with vp 2: 4 / 2, 2 / 2, and (12 - 6) / 3 = 2 a middle stage, 1 a chunk
    assert chunk_layers(12, 5, 2, PipelineSplit(first=4, last=2)) == ((2, 2), (1, 1), (1, 1), (1, 1), (1, 1))


def test_layer_order_of_the_interleaved_uneven_split():
    # 10 layers, pp 3, vp 2, embedding and loss counted: 12 slots, 2 a chunk. Round 0: stage 0 holds the embedding
    # and layer 0, stage 1 layers 1-2, stage 2 layers 3-4; round 1: stage 0 5-6, stage 1 7-8, stage 2 layer 9 and
    # the loss (Megatron-LM's get_transformer_layer_offset: 0 * 6 + 0, 0 * 6 + 2 - 1, ..., 1 * 6 + 4 - 1)
    assert stage_layer_ids(10, 3, 2, ACCOUNT_BOTH) == ((0, 5, 6), (1, 2, 7, 8), (3, 4, 9))
    # vp 1: contiguous blocks
    assert stage_layer_ids(10, 3, 1, PipelineSplit(first=2, last=4)) == ((0, 1), (2, 3, 4, 5), (6, 7, 8, 9))
    # the even split is today's: stage s holds chunks s and s + pp of layers / (pp vp) each
    assert stage_layer_ids(12, 3, 2) == ((0, 1, 6, 7), (2, 3, 8, 9), (4, 5, 10, 11))


# --- the step runs at its slowest stage (hand arithmetic with chosen kernel seconds) --------------------------------

def _parts() -> StageParts:
    # one dense layer: 1 s forward, 2 s backward; embedding 0.5 / 1 s; final norm + lm_head + loss 4 / 8 s
    layer = {"dense": {"forward": 1.0, "backward": 2.0, "recompute_selective": 0.0, "recompute_full": 1.0},
             "moe": {"forward": 0.0, "backward": 0.0, "recompute_selective": 0.0, "recompute_full": 0.0}}
    none = {k: {p: 0.0 for p in v} for k, v in layer.items()}
    ops = {k: {p: (1.0, 1.0) for p in v} for k, v in (layer | {"first": layer["moe"], "last": layer["moe"]}).items()}
    return StageParts(layer, none, {"forward": 0.5, "backward": 1.0}, {"forward": 4.0, "backward": 8.0}, ops)


@pytest.mark.parametrize("split,stage_s,slowest", [
    # stage 0: 3 layers + embedding = 3.5 + 7 s; stage 1: 4 layers + head = 8 + 16 = 24 s (the slowest)
    (PipelineSplit(first=3), (10.5, 24.0), 1),
    # stage 0: 4 layers + embedding = 4.5 + 9 = 13.5 s; stage 1: 3 layers + head = 7 + 14 = 21 s
    (PipelineSplit(last=3), (13.5, 21.0), 1),
])
def test_uneven_step_by_hand(split, stage_s, slowest):
    spec = load_model("llama2-7b", {"num_hidden_layers": 7})
    opts = TrainStepOptions(gpus=2, pp=2, seq=1024, global_batch=8, pipeline_split=split)
    step = train_step(spec, load_ceilings("H100-SXM"), "hgx-h100", opts, parts=_parts())
    m, worst = 8, max(stage_s)  # micro-batches: 8 / (dp 1 x micro-batch 1)
    assert step.breakdown["compute_s"] == m * worst  # m x (f + b) of the slowest stage
    assert step.breakdown["bubble_s"] == (2 - 1) * worst  # (p - 1) x the slowest stage's f + b
    pipe = step.as_dict()["pipeline"]
    assert [st["forward_s"] + st["backward_s"] for st in pipe["stages"]] == list(stage_s)
    assert [st["layers"] for st in pipe["stages"]] == [len(x) for x in stage_layer_ids(7, 2, 1, split)]
    assert pipe["slowest_stage"] == slowest and pipe["split"]["decoder_first_pipeline_num_layers"] == split.first
    assert step.step_time_s == pytest.approx(sum(step.breakdown.values()), rel=1e-12)


# --- memory: each stage's own layers, the peak stage named ----------------------------------------------------------

def _layer_activation_bytes(spec) -> float:
    """One decoder layer's saved activations for one micro-batch: a one-stage step holding one micro-batch."""
    one = train_memory(spec, TrainOptions(seq=1024))
    return one.peak_stage.detail["activations_layers"] / spec.num_layers


def test_uneven_stage_memory_equals_the_even_stage_of_the_same_content():
    """7 layers, pp 2, first 3: stage 0 holds what stage 0 of an even 6-layer split holds (3 layers, the embedding,
    min(pp, m) = 2 micro-batches in flight), stage 1 what stage 1 of an even 8-layer split holds (4 layers, the head,
    1 micro-batch)."""
    opts = TrainOptions(seq=1024, grad_accum=8, pp=2)
    uneven = train_memory(load_model("llama2-7b", {"num_hidden_layers": 7}), TrainOptions(
        seq=1024, grad_accum=8, pp=2, pipeline_split=PipelineSplit(first=3)))
    six = train_memory(load_model("llama2-7b", {"num_hidden_layers": 6}), opts)
    eight = train_memory(load_model("llama2-7b", {"num_hidden_layers": 8}), opts)
    assert [s.layers for s in uneven.stages] == [3, 4]
    assert uneven.stages[0].breakdown == six.stages[0].breakdown
    assert uneven.stages[1].breakdown == eight.stages[1].breakdown
    per_layer = _layer_activation_bytes(load_model("llama2-7b", {"num_hidden_layers": 7}))
    assert uneven.stages[0].detail["activations_layers"] == round(2 * 3 * per_layer)  # 2 in flight x 3 layers
    assert uneven.stages[1].detail["activations_layers"] == round(1 * 4 * per_layer)


def test_interleaved_uneven_chunks_weigh_their_own_layers():
    """7 layers + embedding, pp 2, vp 2: chunks of 2 slots, stage 0's first holds 1 layer, its second 2. Stage 0 holds
    2 (pp - 1) + (vp - 1) pp + 1 = 5 chunk-forwards at its peak, chunk 0, 0, 1, 1, 0 (groups of pp micro-batches):
    3 x 1 + 2 x 2 = 7 layer-forwards."""
    spec = load_model("llama2-7b", {"num_hidden_layers": 7})
    mem = train_memory(spec, TrainOptions(seq=1024, grad_accum=4, pp=2, vp=2,
                                          pipeline_split=PipelineSplit(embedding=True)))
    first = mem.stages[0]
    assert first.layers == 3 and first.micro_batches_in_flight == 5
    assert first.detail["activations_layers"] == round(7 * _layer_activation_bytes(spec))


def test_memory_train_cli_reports_the_split_and_the_peak_stage(run_cli):
    data = run_cli.json("memory", "train", "llama2-7b", "--set", "num_hidden_layers=30", "--pp", "4", "--grad-accum",
                        "8", "--seq", "1024", "--account-for-embedding-in-pipeline-split",
                        "--account-for-loss-in-pipeline-split")
    assert [s["layers"] for s in data["stages"]] == [7, 8, 8, 7]  # (30 + 2) / 4 = 8 slots a stage
    assert data["parallel"]["pipeline_split"]["account_for_loss_in_pipeline_split"] is True
    peak = max(data["stages"], key=lambda s: s["total_bytes"])
    assert data["peak_stage"] == peak["stage"] and data["total_bytes"] == peak["total_bytes"]
    assert all(sum(s["breakdown"].values()) == s["total_bytes"] for s in data["stages"])


# --- an even split given through the options is today's even split ------------------------------------------------

@pytest.mark.parametrize("flags", [("--decoder-first-pipeline-num-layers", "10", "--decoder-last-pipeline-num-layers",
                                    "10"), ("--decoder-first-pipeline-num-layers", "10")])
def test_even_split_through_the_options_equals_no_options(run_cli, flags):
    base = ("train", "llama2-70b", "--gpus", "256", "--gpu", "A100-80GB-SXM", "--seq", "4096", "--global-batch", "256",
            "--tp", "8", "--pp", "8", "--vp", "2", "--recompute", "selective", "--zero", "1")
    even, given = run_cli.json(*base), run_cli.json(*base, *flags)
    for key in ("step_time_s", "breakdown", "comm_total_s", "memory_bytes_per_gpu", "memory"):
        assert given[key] == even[key], key
    assert [st["layers"] for st in even["pipeline"]["stages"]] == [10] * 8
    mem = ("memory", "train", "llama2-70b", "--pp", "8", "--vp", "2", "--grad-accum", "16", "--tp", "8", "--sp")
    assert run_cli.json(*mem, *flags)["stages"] == run_cli.json(*mem)["stages"]


# --- splits Megatron-LM refuses: exit 2 with the rule -----------------------------------------------------------

BAD = [
    (("--decoder-first-pipeline-num-layers", "50", "--decoder-last-pipeline-num-layers", "40"), "more than the model's 80"),
    (("--decoder-first-pipeline-num-layers", "0"), "--decoder-first-pipeline-num-layers must be a positive integer, got 0"),
    (("--decoder-last-pipeline-num-layers", "-3"), "--decoder-last-pipeline-num-layers must be a positive integer, got -3"),
    (("--decoder-first-pipeline-num-layers", "9"), "do not split evenly over the 7 middle stages"),
    (("--decoder-first-pipeline-num-layers", "38", "--decoder-last-pipeline-num-layers", "38"), "each stage needs at least one layer"),
    (("--decoder-first-pipeline-num-layers", "10", "--account-for-loss-in-pipeline-split"), "not both"),
    (("--account-for-embedding-in-pipeline-split",), "81 slots do not split evenly over --pp 8"),
    (("--decoder-first-pipeline-num-layers", "3", "--vp", "2"), "must divide by --vp 2"),
]


@pytest.mark.parametrize("flags,message", BAD)
def test_bad_splits_exit_2(run_cli, flags, message):
    code, out, err = run_cli("train", "llama2-70b", "--gpus", "64", *H100, "--seq", "4096", "--global-batch", "64",
                             "--tp", "8", "--pp", "8", *flags)
    assert code == 2 and message in err and "Traceback" not in err and out == ""
    code, out, err = run_cli("memory", "train", "llama2-70b", "--pp", "8", "--grad-accum", "8", *flags)
    assert code == 2 and message in err and "Traceback" not in err and out == ""


def test_two_stages_must_hold_every_layer(run_cli):
    code, _, err = run_cli("memory", "train", "llama2-7b", "--pp", "2", "--decoder-first-pipeline-num-layers", "10",
                           "--decoder-last-pipeline-num-layers", "10")
    assert code == 2 and "the model has 32 and --pp 2 leaves no middle stage" in err
    with pytest.raises(MlsysError, match="need --pp > 1"):
        chunk_layers(32, 1, 1, PipelineSplit(first=32))


def test_layers_that_do_not_divide_name_the_options(run_cli):
    code, _, err = run_cli("train", "llama3.1-405b", "--gpus", "1024", *H100, "--tp", "8", "--pp", "16", "--seq",
                           "8192", "--global-batch", "64")
    assert code == 2 and "layers % (pp*vp)" in err and "--account-for-embedding-in-pipeline-split" in err
    code, _, err = run_cli("memory", "train", "llama2-7b", "--pp", "5")
    assert code == 2 and "num_layers over --pp: 32 is not divisible by 5" in err
    assert "--decoder-first-pipeline-num-layers" in err


# --- the published runs price the splits their papers used -------------------------------------------------------

def test_published_llama3_and_bloom_runs_use_their_true_layers_and_split(tmp_path):
    import json
    from pathlib import Path

    from .conftest import load_script

    tp, root = load_script("validate/train_published"), Path(__file__).resolve().parents[1]
    runs = json.loads((root / "reports/train/published_runs.json").read_text())["runs"]
    expect = {"llama3-2024-table4": [7] + [8] * 14 + [7], "bigscience-2022-bloom": [5] + [6] * 10 + [5]}
    for run in (r for r in runs if r["group"] in expect):
        assert "overrides" not in run and "split_source" in run
        args = tp.train_args(run, tp.model_ref(run, tmp_path))
        assert "--account-for-embedding-in-pipeline-split" in args and "--account-for-loss-in-pipeline-split" in args
        stages = tp.cli_runner()(args)["pipeline"]["stages"]
        assert [st["layers"] for st in stages] == expect[run["group"]], run["name"]
