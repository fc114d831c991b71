"""Pipeline schedules, gradient lifetime and framework buffers of `calc.memory.training` (`calc.memory.schedule`):
values by hand arithmetic on the 2.7B llama of scripts/train_measure.py (reports/train/memory.md), and
properties over many layouts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc import load_model
from mlsyscalc.calc.memory.schedule import grads_resident, in_flight, receive_buffers
from mlsyscalc.calc.memory.training import TrainOptions, train_memory

# hidden 2560, 32 layers, MLP 6912, vocabulary 32000, untied head (scripts/train_measure.py's MODEL)
SPEC = load_model("llama2-7b", {"hidden_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 20,
                                "num_key_value_heads": 20, "intermediate_size": 6912})
H, MLP, V, S = 2560, 6912, 32000, 2048
LAYER = 4 * H * H + 3 * H * MLP + 2 * H  # 79,303,680 parameters a decoder layer
EMBED = V * H  # embedding and head, 81,920,000 each
P = 32 * LAYER + 2 * EMBED + H  # 2,701,560,320
ACT = (8 * H + 4 * MLP) * 2  # 96,256 saved bytes a token a layer (flash, SwiGLU, bf16)
TORCH = TrainOptions(seq=S, framework="torch")


def test_hand_arithmetic_parameters():
    assert (LAYER, P, ACT) == (79_303_680, 2_701_560_320, 96_256)


def test_single_gpu_torch_has_no_gradients_at_the_peak():
    """One micro-batch of 2 x 2048 tokens: bf16 weights + fp32 master + moments (14 B a parameter), every layer's
    activations, the final norm and head inputs, 12 B a logit; gradients are None until the first backward."""
    tokens = 2 * S
    want = 14 * P + 32 * ACT * tokens + 2 * H * 2 * tokens + 12 * tokens * V
    r = train_memory(SPEC, replace(TORCH, batch=2))
    assert want == 52_053_117_952 and r.total == want
    assert r.breakdown["gradients"] == 0 and r.peak_stage.phase == "backward"
    # Megatron's persistent buffers add the 2 B a parameter
    assert train_memory(SPEC, TrainOptions(seq=S, batch=2)).total == want + 2 * P


def test_ddp_buckets_keep_gradients_under_torch():
    r = train_memory(SPEC, replace(TORCH, batch=2, dp=4))
    assert r.breakdown["gradients"] == 2 * P


def test_fsdp2_holds_fp32_shards_and_no_gradients():
    """FSDP2 over 4 ranks: fp32 parameter shards (4 B) + fp32 moments (8 B) over 4; two gathered bf16 layers and
    the bf16 root unit (embedding, head, final norm)."""
    tokens = 2 * S
    want = 12 * P // 4 + 32 * ACT * tokens + 2 * H * 2 * tokens + 12 * tokens * V + 2 * (2 * LAYER) + 2 * (2 * EMBED + H)
    r = train_memory(SPEC, replace(TORCH, batch=2, dp=4, zero=3))
    assert r.total == want == 22_980_854_272
    assert r.breakdown["gradients"] == 0 and r.breakdown["weights"] == 4 * P // 4


def test_tp_loss_parallel_is_18_bytes_a_logit():
    """TP 4, 8 sequences: the logits of a rank are 16,384 x 8,000; torch's loss_parallel holds 18 B each."""
    r = train_memory(SPEC, replace(TORCH, batch=8, tp=4))
    assert r.peak_stage.detail["temporaries_logits"] == 18 * 8 * S * V // 4
    assert r.bytes_per_element["logits"] == 18


def test_gpipe_last_stage_by_hand():
    """pp 4, 8 micro-batches of one sequence, GPipe: the last stage holds all 8 micro-batches (8 layers each, plus
    the final norm and head inputs), no gradients, the kept bf16 logits of all 8, the saved fp32 log-probs of 7,
    12 B a logit of the one in backward; its activation receive buffers are all the first layer's inputs."""
    p3 = 8 * LAYER + EMBED + H
    logits = S * V
    want = 14 * p3 + 8 * (8 * ACT * S + 2 * H * 2 * S) + 8 * 2 * logits + 7 * 4 * logits + 12 * logits
    r = train_memory(SPEC, replace(TORCH, grad_accum=8, pp=4, schedule="gpipe"))
    last = r.stages[3]
    assert last.total == want == 26_483_182_592 and r.peak_stage is last
    # stage 0: 8 micro-batches of its layers, the embedding, 8 gradient receive buffers of S x h bf16
    first = 14 * (8 * LAYER + EMBED) + 8 * 8 * ACT * S + 8 * S * H * 2
    assert r.stages[0].total == first == 22_729_244_672


def test_1f1b_stage_0_has_gradients_after_its_first_backward():
    """1F1B, 8 micro-batches: stage 0 holds 4 and has run a backward before its peak (8 > 4): 16 B a parameter."""
    p0 = 8 * LAYER + EMBED
    want = 16 * p0 + 4 * 8 * ACT * S + 8 * S * H * 2
    r = train_memory(SPEC, replace(TORCH, grad_accum=8, pp=4))
    assert r.stages[0].total == want == 17_853_710_336 and r.peak_stage.stage == 0


def test_schedule_rules():
    assert [in_flight("1f1b", 4, s, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [in_flight("1f1b", 4, s, 2) for s in range(4)] == [2, 2, 2, 1]
    assert [in_flight("gpipe", 4, s, 8) for s in range(4)] == [8] * 4
    assert grads_resident("megatron", "gpipe", 8, 8, 3, 1)
    assert grads_resident("torch", "1f1b", 1, 1, 0, 4)  # DDP buckets
    assert not grads_resident("torch", "1f1b", 1, 1, 0, 1) and grads_resident("torch", "1f1b", 1, 2, 0, 1)
    assert not grads_resident("torch", "gpipe", 8, 8, 1, 4)
    assert receive_buffers("megatron", 4, 1, 3, 8) == 0 and receive_buffers("torch", 1, 0, 1, 8) == 0
    assert [receive_buffers("torch", 4, s, h, 8) for s, h in enumerate((4, 3, 2, 1))] == [8, 13, 14, 7]


def test_optimizer_phase_wins_when_activations_are_small():
    """Gradients set to None and a tiny batch: the optimizer step (all gradients, no activations) is the peak."""
    r = train_memory(SPEC, replace(TORCH, seq=16))
    peak = r.peak_stage
    assert peak.phase == "optimizer" and peak.breakdown["activations"] == 0
    assert peak.total == 16 * P and peak.phases["optimizer"] > peak.phases["backward"]


opts = st.builds(TrainOptions, batch=st.integers(1, 4), seq=st.sampled_from([256, 2048]), grad_accum=st.integers(1, 16),
                 dp=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2, 4]),
                 zero=st.integers(0, 3), recompute=st.sampled_from(["none", "full"]),
                 framework=st.sampled_from(["megatron", "torch"]))


@settings(max_examples=40, deadline=None)
@given(opts)
def test_gpipe_never_less_than_1f1b_and_more_micro_batches_never_less(o):
    one = train_memory(SPEC, o)
    gpipe = train_memory(SPEC, replace(o, schedule="gpipe"))
    for a, b in zip(one.stages, gpipe.stages):
        assert b.micro_batches_in_flight >= a.micro_batches_in_flight and b.total >= a.total
    for schedule in ("1f1b", "gpipe"):
        base = train_memory(SPEC, replace(o, schedule=schedule)).total
        assert train_memory(SPEC, replace(o, schedule=schedule, grad_accum=o.grad_accum + 1)).total >= base


@settings(max_examples=40, deadline=None)
@given(opts, st.sampled_from(["1f1b", "gpipe"]))
def test_phases_are_consistent(o, schedule):
    for stage in train_memory(SPEC, replace(o, schedule=schedule)).stages:
        assert stage.total == max(stage.phases.values()) == stage.phases[stage.phase]
        assert sum(stage.breakdown.values()) == stage.total
        assert sum(stage.detail.values()) == stage.breakdown["optimizer"] + stage.breakdown["activations"] + \
            stage.breakdown["temporaries"]
        if o.framework == "megatron":  # persistent gradients: the start of backward holds everything, unless
            # the embedding's gradient at the backward's end (first stage only) outweighs the activations
            assert stage.breakdown["gradients"] > 0
            assert stage.phase == "backward" or (stage.phase, stage.stage) == ("backward_end", 0)
        assert "backward_end" not in stage.phases or stage.stage == 0


@pytest.mark.parametrize("bad,message", [({"schedule": "zb"}, "--schedule"), ({"framework": "jax"}, "--framework"),
                                         ({"vp": 2}, "rule vp needs pp > 1"),
                                         ({"vp": 2, "pp": 4, "grad_accum": 8, "schedule": "gpipe"}, "--vp interleaves"),
                                         ({"vp": 2, "pp": 4, "grad_accum": 6}, "--grad-accum over --pp")])
def test_bad_options_are_clear_errors(bad, message):
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError, match=message):
        train_memory(SPEC, replace(TORCH, **bad))


def test_later_backward_holds_all_gradients_and_one_micro_batch_less():
    """torch, no pipeline, 2 micro-batches of 256 tokens under GPipe order (both forwards first): at the second
    backward all 2 B-a-parameter gradients exist beside one micro-batch's activations and its loss temporaries;
    with activations this small that is the peak (the first backward holds two micro-batches, no gradients)."""
    tokens = 256
    one_mb = 32 * ACT * tokens + 2 * H * 2 * tokens
    r = train_memory(SPEC, replace(TORCH, seq=tokens, grad_accum=2, schedule="gpipe"))
    peak = r.peak_stage
    assert peak.phases["backward"] == 14 * P + 2 * one_mb + 4 * tokens * V + 12 * tokens * V
    assert peak.phase == "later_backward" and peak.total == 16 * P + one_mb + 12 * tokens * V
    # 1F1B order (forward, backward, forward, backward) reaches the same state at its second backward
    assert train_memory(SPEC, replace(TORCH, seq=tokens, grad_accum=2)).total == peak.total


def test_interleaved_chunk_forwards_by_hand():
    """pp 4, vp 2 (4 layers a chunk), 8 micro-batches: rank r runs 2 (4 - r - 1) + 4 warm-up chunk-forwards and
    one more before its first backward: 11, 9, 7, 5. Rank 0 holds 11 x 4 layers (Korthikanti's 1.375 x 1F1B's
    4 x 8), gradients (a forward follows its first backward), and torch pipelining's receive buffers: 8 gradient
    buffers for each of its 2 chunks and 8 activation buffers for chunk 4, less the 4 of its forwards in flight
    (chunk-forwards run in groups of 4: chunk 0, chunk 4, chunk 0: 7 of chunk 0, 4 of chunk 4)."""
    r = train_memory(SPEC, replace(TORCH, grad_accum=8, pp=4, vp=2))
    assert [s.micro_batches_in_flight for s in r.stages] == [11, 9, 7, 5]
    p0 = 8 * LAYER + EMBED
    want = 16 * p0 + 11 * 4 * ACT * S + (16 + 8 - 4) * S * H * 2
    assert r.stages[0].total == want and r.peak_stage.stage == 0
    # 1F1B's first stage holds 4 x 8 layers: interleaving adds (p - 1) / (p v) = 3/8 of them
    one = train_memory(SPEC, replace(TORCH, grad_accum=8, pp=4)).stages[0]
    assert r.stages[0].breakdown["activations"] - one.breakdown["activations"] == 3 * 4 * 8 * ACT * S // 8


def test_cli_memory_train_and_train_report_the_same_phases(run_cli, tmp_path):
    """`mlsys memory train` and `mlsys train` take --schedule / --framework and agree on the bytes; the JSON
    parts add up; a bad choice exits 2."""
    config = tmp_path / "model.json"
    base = json.loads((Path(__file__).resolve().parents[1] / "model_specs/models/llama2-7b.json").read_text())
    config.write_text(json.dumps({k: v for k, v in base.items() if not k.startswith("_")}
                                 | {"hidden_size": H, "num_hidden_layers": 32, "num_attention_heads": 20,
                                    "num_key_value_heads": 20, "intermediate_size": MLP}))
    mem = run_cli.json("memory", "train", str(config), "--pp", "4", "--grad-accum", "8", "--schedule", "gpipe",
                       "--framework", "torch")
    assert mem["total_bytes"] == 26_483_182_592 and mem["peak_stage"] == 3 and mem["peak_phase"] == "backward"
    assert sum(mem["breakdown"].values()) == mem["total_bytes"] == max(mem["phases"].values())
    assert mem["detail"]["temporaries_logits_kept_bytes"] == 8 * 2 * S * V
    step = run_cli.json("train", str(config), "--gpus", "4", "--cluster", "hgx-h200", "--seq", str(S),
                        "--global-batch", "8", "--micro-batch", "1", "--pp", "4", "--no-sp", "--schedule", "gpipe",
                        "--framework", "torch")
    assert step["memory_bytes_per_gpu"] == mem["total_bytes"] == sum(step["memory"]["breakdown"].values())
    assert step["memory"]["schedule"] == "gpipe" and step["memory"]["micro_batches_in_flight"] == 8
    code, _, err = run_cli("memory", "train", str(config), "--schedule", "zb")
    assert code == 2 and "zb" in err
