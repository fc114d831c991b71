"""Value tests for training memory, layouts and the training step's parts.

Every expected number is written out from a definition: parameter counts pinned to transformers
elsewhere (gpt2: 124,439,808), bytes per element from docs/memory.md, the 1F1B / GPipe schedules of
Narayanan et al. 2021 (section 2.2) and Huang et al. 2019, and FSDP's sharding strategies (PyTorch FSDP
docs: NO_SHARD is DDP, SHARD_GRAD_OP is ZeRO-2, FULL_SHARD is ZeRO-3)."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.memory.training import TrainOptions, default_bytes, train_memory, zero_from_fsdp
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

GPT2_PARAMS = 124_439_808  # transformers GPT2LMHeadModel, tied head
GPT2_VOCAB, GPT2_HIDDEN = 50257, 768


@pytest.mark.parametrize("strategy,zero", [("no_shard", 0), ("shard_grad_op", 2), ("full_shard", 3),
                                           ("FULL_SHARD", 3)])
def test_fsdp_strategies_are_zero_stages(strategy, zero):
    assert zero_from_fsdp(strategy) == zero


def test_fsdp_unknown_strategy_is_named():
    with pytest.raises(MlsysError, match="--fsdp must be one of full_shard, shard_grad_op, no_shard, got 'hybrid'"):
        zero_from_fsdp("hybrid")


def test_optimizer_phase_holds_model_states_only():
    """bf16 mixed precision AdamW: 2 (weight) + 2 (grad) + 4 (master) + 8 (two fp32 moments) = 16 B a
    parameter; between micro-batches nothing else is held (no activations, no logits)."""
    stage = train_memory(load_model("gpt2"), TrainOptions(seq=128)).stages[0]
    assert stage.phases["optimizer"] == 16 * GPT2_PARAMS
    assert stage.phase == "backward"
    assert stage.breakdown["weights"] == stage.breakdown["gradients"] == 2 * GPT2_PARAMS
    assert stage.breakdown["optimizer"] == 12 * GPT2_PARAMS


def test_gpipe_keeps_every_earlier_micro_batchs_log_probs():
    """GPipe, pp 2, m 4: the last stage holds all 4 micro-batches at its first backward; the 3 others keep
    their loss's fp32 log-probs (4 B a logit); 1F1B's last stage holds one micro-batch, so none."""
    logits = 128 * GPT2_VOCAB
    gpipe = train_memory(load_model("gpt2"), TrainOptions(seq=128, pp=2, grad_accum=4, schedule="gpipe"))
    last = gpipe.stages[1]
    assert last.micro_batches_in_flight == 4
    assert last.detail["temporaries_logits_saved"] == 3 * logits * 4 == 77_194_752
    assert last.detail["temporaries_logits"] == logits * 12  # fp32 log-probs, their grad, the logits' grad
    assert gpipe.stages[0].detail["temporaries_logits_saved"] == 0  # the first stage has no head
    one_f = train_memory(load_model("gpt2"), TrainOptions(seq=128, pp=2, grad_accum=4)).stages[1]
    assert one_f.micro_batches_in_flight == 1 and one_f.detail["temporaries_logits_saved"] == 0


def test_embedding_dropout_mask_on_first_stage_and_head_inputs_on_last():
    """pp 2, m 2, dropout: stage 0 keeps the embedding dropout mask (1 B an element) of its 2 micro-batches
    in flight; stage 1 keeps the final norm and lm_head inputs (2 x h bf16 elements a token) of its one."""
    tokens = 2 * 256
    mem = train_memory(load_model("gpt2"), TrainOptions(batch=2, seq=256, pp=2, grad_accum=2, dropout=True))
    first, last = mem.stages
    assert (first.micro_batches_in_flight, last.micro_batches_in_flight) == (2, 1)
    assert first.detail["activations_embedding_head"] == 2 * tokens * GPT2_HIDDEN * 1
    assert last.detail["activations_embedding_head"] == 1 * tokens * 2 * GPT2_HIDDEN * 2


def test_torch_gradients_absent_at_first_backward_then_resident():
    """torch (gradients set to None), GPipe, m 2, one GPU: the first backward starts with both micro-batches
    in flight and no gradients; the later backward has one micro-batch fewer and every gradient (2 B each)."""
    opts = TrainOptions(batch=4, seq=1024, framework="torch", grad_accum=2, schedule="gpipe")
    stage = train_memory(load_model("gpt2"), opts).stages[0]
    assert stage.phase == "backward" and stage.breakdown["gradients"] == 0
    per_mb = stage.breakdown["activations"] / 2
    log_probs = 4 * 1024 * GPT2_VOCAB * 4  # the other micro-batch's fp32 log-probs, freed by the later backward
    later = stage.phases["backward"] - per_mb - log_probs + 2 * GPT2_PARAMS
    assert stage.phases["later_backward"] == pytest.approx(later, abs=2)
    assert stage.phases["optimizer"] == 16 * GPT2_PARAMS


@pytest.mark.parametrize("framework,tp,zero,expect", [
    ("megatron", 1, 0, {"logits": 12.0, "weight": 2.0, "grad": 2.0, "master": 4.0, "logits_kept": 0.0}),
    ("megatron", 2, 3, {"logits": 12.0, "weight": 2.0, "grad": 2.0, "master": 4.0}),
    ("torch", 2, 0, {"logits": 18.0, "weight": 2.0, "grad": 2.0, "master": 4.0, "logits_kept": 2.0}),
    ("torch", 1, 0, {"logits": 12.0}),
    # FSDP2: fp32 sharded parameters are the master weights; fp32 sharded gradients
    ("torch", 1, 3, {"weight": 4.0, "grad": 4.0, "master": 0.0, "logits_saved": 4.0}),
])
def test_bytes_per_element_by_framework(framework, tp, zero, expect):
    got = default_bytes(TrainOptions(framework=framework, tp=tp, zero=zero))
    assert {k: got[k] for k in expect} == expect


@pytest.mark.parametrize("opts,message", [
    (dict(vp=2), "rule vp needs pp > 1: the interleaved schedule splits a pipeline"),
    (dict(vp=2, pp=2, schedule="gpipe", grad_accum=2), "--vp interleaves the 1F1B schedule: not with --schedule gpipe"),
    (dict(vp=5, pp=2, grad_accum=2), "num_layers over --pp x --vp"),
    (dict(vp=2, pp=2, grad_accum=3), "--grad-accum over --pp with --vp"),
])
def test_interleaving_is_validated(opts, message):
    with pytest.raises(MlsysError, match=message.replace("(", r"\(").replace("+", r"\+")):
        train_memory(load_model("gpt2"), TrainOptions(**opts))


def test_interleaving_two_chunks_is_accepted():
    mem = train_memory(load_model("gpt2"), TrainOptions(vp=2, pp=2, grad_accum=2, seq=128))
    # interleaved warm-up on stage 0: 2 (pp - 1) + (vp - 1) pp + 1 = 5, capped at m x vp = 4 chunk-forwards
    assert mem.stages[0].micro_batches_in_flight == 4


def test_activation_items_are_those_of_layer_zero():
    """deepseek-v3 with one dense layer first: layer 0's saved tensors are the dense MLP's (no router)."""
    spec = load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": 1})
    names = [name for name, _ in train_memory(spec, TrainOptions(seq=128)).activation_items]
    assert not any("router" in n or "expert" in n for n in names)
    moe_first = load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": 0})
    moe_names = [name for name, _ in train_memory(moe_first, TrainOptions(seq=128)).activation_items]
    assert moe_names != names


# --- specs: a config.json without a key gets transformers' default for it ---------------------------

def _raw(name: str, drop: tuple[str, ...] = (), **changes):
    from mlsyscalc.specs.lookup import builtin_configs
    raw = {k: v for k, v in builtin_configs()[name].items() if k not in drop and not k.startswith("_")}
    return {**raw, **changes}


def _spec(raw):
    from mlsyscalc.specs.hf import from_hf_config
    return from_hf_config(raw, name="test", source="test")


def test_falcon_old_architecture_without_multi_query_key_is_multi_query():
    """transformers FalconConfig: multi_query=True by default; the old (7b) layout then has one KV head."""
    raw = _raw("falcon-40b", drop=("multi_query", "num_kv_heads"), new_decoder_architecture=False)
    assert _spec(raw).num_kv_heads == 1
    assert _spec({**raw, "multi_query": False}).num_kv_heads == _spec(raw).num_heads


def test_qwen2_sliding_window_needs_use_sliding_window():
    """transformers Qwen2Config: use_sliding_window=False by default, so a sliding_window value alone does
    not make any layer local; with it, the layers from max_window_layers on slide (qwen2.5-7b lists 28
    of its 28 layers there, so none does)."""
    raw = _raw("qwen2.5-7b", drop=("use_sliding_window",))
    spec = _spec(raw)
    assert (spec.sliding_window, spec.sliding_window_layers) == (None, 0)
    on = _spec({**raw, "use_sliding_window": True})
    assert (on.sliding_window, on.sliding_window_layers) == (131072, 0)
    assert _spec({**raw, "use_sliding_window": True, "max_window_layers": 20}).sliding_window_layers == 8


@pytest.mark.parametrize("name", ["llama3-8b", "mistral-7b", "qwen2.5-7b", "phi3-mini", "deepseek-v3"])
def test_rmsnorm_families_have_no_norm_bias(name):
    spec = load_model(name)
    assert (spec.norm, spec.norm_bias) == ("rmsnorm", False)


# --- layers and per-rank parameters -------------------------------------------------------------------

def test_mla_without_query_compression_has_only_the_kv_latent_norm():
    """DeepSeek-V2-Lite style (q_lora_rank null): one RMSNorm of kv_lora_rank (512) beside the layer's two
    hidden-size norms; with q_lora_rank 1536 a second latent norm of 1536."""
    from mlsyscalc.calc.counts.layers import layer_norm_params
    no_q = load_model("deepseek-v3", {"q_lora_rank": None})
    assert layer_norm_params(no_q) == 2 * 7168 + 512
    assert layer_norm_params(load_model("deepseek-v3")) == 2 * 7168 + 1536 + 512


def test_expert_bias_per_rank_follows_expert_parallelism():
    """8 routed experts with biased 64 -> 32 projections over ep 2: each rank holds 4 experts, so
    4 x (64 x 32) weights and 4 x 32 bias elements."""
    from mlsyscalc.calc.counts.layers import Linear
    from mlsyscalc.calc.parallel.shards import linear_params_per_rank
    up = Linear("experts.up", 64, 32, True, "mlp", copies=8, active=2)
    assert linear_params_per_rank(up, tp=1, ep=2) == 4 * 64 * 32 + 4 * 32
    assert linear_params_per_rank(up, tp=1, ep=1) == 8 * 64 * 32 + 8 * 32


def test_adafactor_factors_of_a_dense_projection_ignore_expert_parallelism():
    """Adafactor keeps rows + cols per matrix (Shazeer & Stern 2018); a dense (one-copy) projection is
    whole on every expert-parallel rank, so ep does not divide it."""
    from mlsyscalc.calc.counts.layers import Linear
    from mlsyscalc.calc.parallel.shards import _factors
    dense = Linear("mlp.up", 64, 32, False, "mlp")
    assert _factors(dense, 1, 2, 1) == _factors(dense, 1, 1, 1) == 64 + 32
    experts = Linear("experts.up", 64, 32, True, "mlp", copies=8, active=2)
    assert _factors(experts, 1, 2, 1) == 4 * (32 + 64 + 32)


def test_learned_positions_limit_without_max_position_embeddings():
    """gpt2 has 1024 learned rows: 1024 positions embed, 1025 do not, whatever max_position_embeddings says."""
    from dataclasses import replace

    from mlsyscalc.calc.counts.flops import check_positions
    spec = replace(load_model("gpt2"), max_position_embeddings=0)
    check_positions(spec, 1024, "prefill")
    with pytest.raises(MlsysError, match="1024 learned position embeddings; prefill needs 1025"):
        check_positions(spec, 1025, "prefill")


# --- communication of a pipelined tensor-parallel step ------------------------------------------------

def test_tp_all_reduces_count_only_this_stages_layers():
    """llama2-7b (32 layers), tp 2, pp 4, m 2: each rank runs 32 / 4 = 8 layers, 4 all-reduces a layer
    (2 forward, 2 backward, Megatron-LM) per micro-batch: 8 x 4 x 2 = 64 calls of B x S x h x 2 bytes."""
    from mlsyscalc.calc.comm.step import StepOptions, step_comm
    rows = step_comm(load_model("llama2-7b"), StepOptions(tp=2, pp=4, grad_accum=2, seq=1024), "hgx-h100").rows
    (tp,) = [r for r in rows if r.dim == "tp"]
    assert (tp.collective, tp.calls, tp.message_bytes) == ("all-reduce", 8 * 4 * 2, 1024 * 4096 * 2)


# --- the training step: host path, fits, kernel counts ------------------------------------------------

def _train(name="llama3-8b", overrides=None, **opts):
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.step import train_step
    from mlsyscalc.calc.train.options import TrainStepOptions
    return train_step(load_model(name, overrides), load_ceilings("h100-sxm"), "hgx-h100", TrainStepOptions(**opts))


def test_host_work_counts_every_matmul_of_forward_and_backward():
    """llama3-8b: 7 projections a layer (q, k, v, o, gate, up, down) forward, each with a data and a weight
    gradient backward: 21 matmuls x 32 layers, plus lm_head's 1 + 2."""
    work = _train(gpus=8, tp=2, global_batch=8, seq=2048, framework="torch").as_dict()["host_work"]
    assert work["matmuls"] == 32 * (7 + 14) + 3
    assert work["ops"] > work["matmuls"] and work["layers"] == 32


def test_host_bound_step_exposes_host_minus_gpu_path():
    """The forward+backward host path hides the GPU path (compute + contention + bubble + exposed comm)
    and the excess is host_s; the optimizer's host path is shorter than its GPU time, so adds nothing."""
    d = _train(gpus=8, tp=2, global_batch=8, seq=2048, framework="torch").as_dict()
    b, host = d["breakdown"], d["host_path_s"]
    gpu_fb = b["compute_s"] + b["contention_s"] + b["bubble_s"] + sum(v for k, v in b.items() if k.endswith("_comm_s"))
    assert host["forward_backward"] > gpu_fb and host["optimizer"] < b["optimizer_s"]
    assert b["host_s"] == pytest.approx(host["forward_backward"] - gpu_fb, rel=1e-12)
    assert d["step_time_s"] == pytest.approx(host["forward_backward"] + b["optimizer_s"], rel=1e-12)


def test_compute_is_linear_in_layers():
    """Each decoder layer costs the same at one clock: 1 -> 2 -> 3 layers add equal compute time (at sustained
    clocks the step's clock follows its kernel mix, which the head's share moves: calc.roofline.steady)."""
    c = [_train(overrides={"num_hidden_layers": n}, seq=1024, clocks="burst").breakdown["compute_s"] for n in (1, 2, 3)]
    assert c[2] - c[1] == pytest.approx(c[1] - c[0], rel=1e-9)
    assert c[1] - c[0] > 0


def test_fits_is_inclusive_of_the_usable_bytes():
    from dataclasses import replace
    step = _train(seq=1024)
    assert replace(step, usable_bytes=step.memory_bytes_per_gpu).fits
    assert not replace(step, usable_bytes=step.memory_bytes_per_gpu - 1).fits


def test_dp_gradient_all_reduce_carries_this_ranks_model_share():
    """llama2-7b (6,738,415,616 parameters, transformers) over tp 2 x pp 2, dp 2: each rank all-reduces the
    bf16 gradients of a quarter of the model (even split, as comm step documents)."""
    from mlsyscalc.calc.comm.step import StepOptions, step_comm
    comm = step_comm(load_model("llama2-7b"), StepOptions(dp=2, tp=2, pp=2, grad_accum=2, seq=1024), "hgx-h100")
    (dp,) = [r for r in comm.rows if r.dim == "dp"]
    assert dp.collective == "all-reduce" and dp.calls == 1
    assert dp.message_bytes == int(6_738_415_616 / 4 * 2)
    assert comm.params_per_gpu == 6_738_415_616 / 4
