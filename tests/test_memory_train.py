"""Training memory: exact model-state arithmetic, Korthikanti's activation formulas, ZeRO,
pipeline stages, bad input."""

from __future__ import annotations

import re

import pytest

from mlsyscalc import load_model
from mlsyscalc.calc.counts.activations import Split, layer_bytes, layer_saved
from mlsyscalc.calc.parallel.shards import stage_params
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.errors import MlsysError

from .conftest import load_data

LLAMA2_7B = 6_738_415_616
HF = load_data("hf_params.json")["models"]


def model_states(r) -> int:
    b = r.breakdown
    return b["weights"] + b["gradients"] + b["optimizer"]


def test_llama2_7b_mixed_adamw_model_states_16_bytes():
    r = train_memory(load_model("llama2-7b"), TrainOptions())
    assert model_states(r) == 16 * LLAMA2_7B == 107_814_649_856
    assert r.model_state_bytes_unsharded == 107_814_649_856
    assert r.breakdown["weights"] == 2 * LLAMA2_7B and r.breakdown["optimizer"] == 12 * LLAMA2_7B


def test_zero3_on_8_gpus_is_an_eighth():
    r = train_memory(load_model("llama2-7b"), TrainOptions(dp=8, zero=3))
    assert model_states(r) * 8 == 107_814_649_856


def test_zero3_gathers_two_layers_and_the_root_unit():
    # llama2-7b: a decoder layer is 4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096 (norms) = 202,383,360 parameters;
    # the root unit (FSDP keeps it unsharded through backward) is the embedding and the untied head
    # (32000 x 4096 each) and the final norm (4096); 2 bytes each in bf16
    r = train_memory(load_model("llama2-7b"), TrainOptions(dp=8, zero=3))
    assert r.peak_stage.detail["temporaries_zero3_gather"] == 2 * (2 * 202_383_360 + 2 * 32000 * 4096 + 4096)
    assert train_memory(load_model("llama2-7b"), TrainOptions(dp=8, zero=2)).peak_stage.detail[
        "temporaries_zero3_gather"] == 0


@pytest.mark.parametrize("zero, per_param", [(0, 16), (1, 4 + 12 / 8), (2, 2 + 14 / 8), (3, 16 / 8)])
def test_zero_stages_match_the_zero_paper(zero, per_param):
    r = train_memory(load_model("llama2-7b"), TrainOptions(dp=8, zero=zero))
    assert model_states(r) == pytest.approx(per_param * LLAMA2_7B, abs=4)


def gpt_spec():
    return load_model("gpt2", {"n_embd": 1024, "n_head": 16, "n_layer": 4})


def test_gpt_layer_reduces_to_korthikanti_equation_1():
    """sbh(34 + 5as/h): LayerNorm, MHA, 4h GeLU MLP, dropout, no flash, 2-byte activations."""
    spec = gpt_spec()
    s, b, h, a = 2048, 4, spec.hidden_size, spec.num_heads
    items = layer_saved(spec, 0, flash=False, dropout=True)
    got = layer_bytes(items, Split(b * s, s, 1, False, 1), {"activation": 2, "mask": 1}, "none", h)
    assert got == 34 * s * b * h + 5 * a * s * s * b


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel_match_equations_2_and_3(t):
    spec = gpt_spec()
    s, b, h, a = 2048, 2, spec.hidden_size, spec.num_heads
    items = layer_saved(spec, 0, flash=False, dropout=True)
    nb = {"activation": 2, "mask": 1}
    tp_only = layer_bytes(items, Split(b * s, s, t, False, t), nb, "none", h)
    assert tp_only == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    with_sp = layer_bytes(items, Split(b * s, s, t, True, t), nb, "none", h)
    assert with_sp == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))
    selective = layer_bytes(items, Split(b * s, s, t, True, t), nb, "selective", h)
    assert selective == pytest.approx(s * b * h * 34 / t)  # equation 6
    full = layer_bytes(items, Split(b * s, s, t, True, t), nb, "full", h)
    assert full == pytest.approx(2 * s * b * h / t)


def test_flash_drops_the_scores_and_gated_mlp_saves_4I():
    spec = load_model("llama2-7b")
    s, b, h = 4096, 1, spec.hidden_size
    items = layer_saved(spec, 0, flash=True, dropout=False)
    got = layer_bytes(items, Split(b * s, s, 1, False, 1), {"activation": 2, "mask": 1}, "none", h)
    # norms 2h, qkv input h, Q K V 3h, o_proj input h, mlp input h, 4 x 11008
    assert got == 2 * s * b * (8 * h + 4 * spec.intermediate_size)
    no_flash = layer_bytes(layer_saved(spec, 0, False, False), Split(b * s, s, 1, False, 1),
                           {"activation": 2, "mask": 1}, "none", h)
    assert no_flash - got == 2 * spec.num_heads * s * s * b


def test_gqa_keeps_kv_at_kv_width():
    spec = load_model("llama3-8b")
    names = {i.name: i.per_token for i in layer_saved(spec, 0, True, False)}
    assert names["K (after rotary)"] == 8 * 128 and names["Q (after rotary)"] == 32 * 128


def test_mla_saves_latents_and_per_head_kv():
    spec = load_model("deepseek-v3")
    names = {i.name: i.per_token for i in layer_saved(spec, 0, True, False)}
    assert names["kv_a_layernorm input"] == 512 and names["q_a_layernorm input"] == 1536
    assert names["K (after rotary)"] == 128 * 192 and names["V"] == 128 * 128


def test_moe_routed_tokens_scale_with_top_k_and_capacity():
    spec = load_model("mixtral-8x7b")
    base = {i.name: i.per_token for i in layer_saved(spec, 0, True, False, 1.0)}
    more = {i.name: i.per_token for i in layer_saved(spec, 0, True, False, 1.25)}
    assert base["expert intermediates (k x 4I)"] == 2 * 4 * 14336
    assert more["expert intermediates (k x 4I)"] == round(1.25 * 2 * 4 * 14336)


@pytest.mark.parametrize("name", ["llama2-7b", "gpt2", "opt-350m", "deepseek-v3", "gemma2-9b", "phi-2"])
def test_one_stage_holds_every_parameter_transformers_counts(name):
    # the oracle is transformers' own count on the meta device (tests/data/hf_params.json)
    spec = load_model(name)
    sp = stage_params(spec, range(spec.num_layers), True, True, 1, 1, 1)
    assert sp.total == HF[name]["total_params"]


def test_tp_splits_projections_and_keeps_norms():
    spec = load_model("llama2-7b")
    one = stage_params(spec, range(32), True, True, 1, 1, 1).total
    two = stage_params(spec, range(32), True, True, 2, 1, 1).total
    norms = 32 * 2 * 4096 + 4096
    assert two == (one - norms) // 2 + norms


def test_pipeline_first_stage_holds_pp_micro_batches():
    spec = load_model("llama2-7b")
    r = train_memory(spec, TrainOptions(pp=4, grad_accum=8, seq=4096))
    first, last = r.stages[0], r.stages[-1]
    assert first.micro_batches_in_flight == 4 and last.micro_batches_in_flight == 1
    one = train_memory(spec, TrainOptions(seq=4096)).peak_stage.detail["activations_layers"]
    assert first.detail["activations_layers"] == one  # 4 micro-batches x 8 layers = 1 x 32 layers
    assert last.breakdown["temporaries"] > 0 and first.breakdown["temporaries"] == 0


def test_offload_moves_optimizer_to_cpu():
    r = train_memory(load_model("llama2-7b"), TrainOptions(dp=8, zero=2, offload="optimizer"))
    assert r.breakdown["optimizer"] == 0
    assert r.peak_stage.cpu_bytes == pytest.approx(12 * LLAMA2_7B / 8, abs=4)


def test_optimizers():
    spec = load_model("llama2-7b")
    states = {o: train_memory(spec, TrainOptions(optimizer=o)).breakdown["optimizer"]
              for o in ("adamw", "sgd-momentum", "adafactor", "adam8bit")}
    assert states["sgd-momentum"] == 8 * LLAMA2_7B
    assert states["adam8bit"] == pytest.approx(LLAMA2_7B * (4 + 2 * (1 + 4 / 2048)), abs=4)
    assert 4 * LLAMA2_7B < states["adafactor"] < 4.01 * LLAMA2_7B  # master + factored moments


def test_bytes_override_changes_the_assumption():
    r = train_memory(load_model("llama2-7b"), TrainOptions(bytes_overrides=(("grad", 4.0),)))
    assert r.breakdown["gradients"] == 4 * LLAMA2_7B and r.bytes_per_element["grad"] == 4.0


@pytest.mark.parametrize("opts, message", [
    (TrainOptions(tp=3), "num_heads over --tp: 32 is not divisible by 3"),
    (TrainOptions(pp=5), "num_layers over --pp: 32 is not divisible by 5"),
    (TrainOptions(zero=4), "--zero must be 0, 1, 2 or 3, got 4"),
    (TrainOptions(batch=-1), "--batch must be a positive integer, got -1"),
    (TrainOptions(dp=0), "--dp must be a positive integer, got 0"),
    (TrainOptions(ep=2), "--ep 2: llama2-7b has no routed experts"),
    (TrainOptions(world_size=8, dp=2), "rule tp*pp*dp*cp == gpus: 1*1*2*1 = 2, not --world-size 8"),
    (TrainOptions(offload="optimizer"), "--offload optimizer needs --zero 1, 2 or 3"),
    (TrainOptions(optimizer="lion"), "--optimizer must be one of adamw, sgd-momentum, adafactor, adam8bit"),
])
def test_bad_combinations_raise(opts, message):
    with pytest.raises(MlsysError, match=re.escape(message)):
        train_memory(load_model("llama2-7b"), opts)


def test_ep_must_divide_experts_and_dp():
    spec = load_model("mixtral-8x7b")
    with pytest.raises(MlsysError, match="rule experts % ep == 0: routed experts over --ep"):
        train_memory(spec, TrainOptions(ep=3, dp=3))
    r = train_memory(spec, TrainOptions(ep=8, dp=8, zero=1))
    assert r.total < train_memory(spec, TrainOptions(dp=8, zero=1)).total


def test_kv_projections_replicate_when_tp_exceeds_kv_heads():
    """llama3-8b (8 KV heads) on 16 ranks: each rank keeps one whole KV head's k/v projection
    (as at tp 8); every other projection and the vocabulary halve, norms stay."""
    spec = load_model("llama3-8b")
    at8 = stage_params(spec, range(32), True, True, 8, 1, 1).total
    at16 = stage_params(spec, range(32), True, True, 16, 1, 1).total
    kv = 32 * 2 * 4096 * 128  # k_proj + v_proj of one KV head, every layer
    norms = 32 * 2 * 4096 + 4096
    assert at16 == (at8 - kv - norms) // 2 + kv + norms


@pytest.mark.parametrize("name, tp", [("qwen2.5-0.5b", 14), ("qwen2.5-7b", 28)])
def test_tp_must_divide_the_mlp_width(name, tp):
    with pytest.raises(MlsysError, match="intermediate|up_proj|gate_proj|divisible"):
        train_memory(load_model(name), TrainOptions(tp=tp))


@pytest.mark.parametrize("opts, message", [
    (TrainOptions(capacity_factor=float("inf")), "--capacity-factor must be positive and finite, got inf"),
    (TrainOptions(bytes_overrides=(("weight", float("inf")),)), "--bytes weight: must be a finite number >= 0, got inf"),
])
def test_non_finite_inputs_raise(opts, message):
    with pytest.raises(MlsysError, match=re.escape(message)):
        train_memory(load_model("mixtral-8x7b"), opts)
