"""Value tests for the training-memory, spec, parameter, FLOP, communication and training-time outputs that
the second discovery run of planted bugs found unpinned (docs/mutation.md). Expected numbers are hand
arithmetic from the model's config.json (model_specs/models/) written out here, a documented default, or
another configuration of the same calculator that must differ by a known amount; never the code under test
computing the same quantity the same way.

llama2-7b (config.json): hidden 4096, 32 layers, 32 heads, intermediate 11008, vocabulary 32000, untied
embeddings, no biases. Parameters P = 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 2 x 32000 x 4096
+ 4096 = 6,738,415,616 (transformers' LlamaForCausalLM.num_parameters()).
"""

from __future__ import annotations

import pytest

LAYER = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096  # llama2-7b decoder layer: q, k, v, o, gate, up, down, 2 norms
P = 32 * LAYER + 2 * 32000 * 4096 + 4096
TOKENS = 2048  # the default --seq, --batch 1


def test_llama2_7b_parameter_count_by_hand():
    assert P == 6_738_415_616


# ---------------------------------------------------------------- memory train: model states (ZeRO, FSDP)

@pytest.mark.parametrize("fsdp,weights,grads,optimizer", [
    # ZeRO (Rajbhandari et al. 2020): bf16 weights and grads 2 + 2 B, fp32 master + Adam states 12 B per
    # parameter; FSDP's strategies are ZeRO-3 (full_shard), ZeRO-2 (shard_grad_op), ZeRO-0 (no_shard)
    ("full_shard", 2 * P // 2, 2 * P // 2, 12 * P // 2),
    ("shard_grad_op", 2 * P, 2 * P // 2, 12 * P // 2),
    ("no_shard", 2 * P, 2 * P, 12 * P),
])
def test_fsdp_strategies_shard_like_their_zero_stage(run_cli, fsdp, weights, grads, optimizer):
    # --fsdp prices PyTorch's FSDP (--framework torch) at its ZeRO stage; the stage's shards by hand (megatron)
    stage = {"full_shard": 3, "shard_grad_op": 2, "no_shard": 0}[fsdp]
    f = run_cli.json("memory", "train", "llama2-7b", "--fsdp", fsdp, "--dp", "2")
    assert (f["zero"], f["framework"]) == (stage, "torch")
    assert f["total_bytes"] == run_cli.json("memory", "train", "llama2-7b", "--zero", str(stage), "--dp", "2",
                                            "--framework", "torch")["total_bytes"]
    d = run_cli.json("memory", "train", "llama2-7b", "--zero", str(stage), "--dp", "2")
    assert (d["weights_bytes"], d["optimizer_bytes"]) == (weights, optimizer)
    assert d["phases"]["optimizer_bytes"] == weights + grads + optimizer


def test_optimizer_phase_holds_model_states_only(run_cli):
    # the optimizer step (pp = 1) holds weights, all gradients and optimizer states: 16 B per parameter,
    # no activation and no logits byte (Rajbhandari et al. 2020, section 3: 2 + 2 + 12)
    d = run_cli.json("memory", "train", "llama2-7b")
    assert d["phases"]["optimizer_bytes"] == 16 * P == d["model_state_bytes_unsharded"]


def test_fsdp2_keeps_fp32_sharded_weights_and_gradients(run_cli):
    # torch FSDP2 with mixed precision keeps fp32 sharded parameters (the master weights, no extra copy)
    # and fp32 sharded gradients: 4 + 4 + 8 (Adam states) B per parameter over dp = 2
    d = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--zero", "3", "--dp", "2")
    assert d["weights_bytes"] == 4 * P // 2
    assert d["optimizer_bytes"] == 8 * P // 2 and d["detail"]["master_weights_bytes"] == 0
    assert d["phases"]["optimizer_bytes"] == (4 + 4 + 8) * P // 2


def test_torch_gradients_are_absent_at_the_first_backward(run_cli):
    # zero_grad(set_to_none=True): at the first backward of a step no gradient exists, so that phase is
    # exactly the megatron one (persistent gradient buffers, 2 B per parameter) less 2P; the optimizer
    # phase holds all gradients in both
    torch = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch")
    megatron = run_cli.json("memory", "train", "llama2-7b")
    assert torch["phases"]["backward_bytes"] == megatron["phases"]["backward_bytes"] - 2 * P
    assert torch["phases"]["optimizer_bytes"] == megatron["phases"]["optimizer_bytes"] == 16 * P


def test_later_backward_has_every_gradient(run_cli):
    # torch, GPipe, 2 stages, 4 micro-batches, short sequences (activations far below gradients): the
    # second backward holds all gradients and one micro-batch fewer, so it is the peak and it exceeds
    # the optimizer phase (weights + gradients + states) by the activations of 3 micro-batches
    d = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--schedule", "gpipe", "--pp", "2",
                     "--grad-accum", "4", "--seq", "128")
    ph = d["phases"]
    assert d["peak_phase"] == "later_backward"
    assert ph["later_backward_bytes"] > ph["optimizer_bytes"] > ph["backward_bytes"]
    # stage 1: 16 layers, final norm and lm_head (pp > 1: its own copy), 2 + 2 + 12 B a parameter; torch
    # pipelining keeps the 4 micro-batches' bf16 outputs (128 x 32000) and a receive buffer per micro-batch
    # for the hidden states it gets from stage 0 (128 x 4096, bf16) to the end of the step
    stage1 = 16 * LAYER + 4096 + 32000 * 4096
    assert ph["optimizer_bytes"] == 16 * stage1 + 4 * 128 * 32000 * 2 + 4 * 128 * 4096 * 2


def test_gpipe_keeps_the_log_probs_of_every_other_micro_batch(run_cli):
    # GPipe, 4 micro-batches on the last stage: at the first backward the other 3 micro-batches keep their
    # fp32 log-probs (4 B a logit) of 128 tokens x 32000 vocabulary (megatron: gradients resident, so the
    # first backward is the peak)
    d = run_cli.json("memory", "train", "llama2-7b", "--schedule", "gpipe", "--pp", "2", "--grad-accum", "4",
                     "--seq", "128")
    assert (d["peak_stage"], d["peak_phase"]) == (1, "backward") and d["bytes_per_element"]["logits_saved"] == 4.0
    assert d["detail"]["temporaries_logits_saved_bytes"] == 3 * 128 * 32000 * 4
    assert d["detail"]["temporaries_logits_kept_bytes"] == 0
    # torch, peak at the second backward (2 others in flight); pipelining keeps each micro-batch's bf16
    # output to the end of the step: 4 x 128 x 32000 x 2
    t = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--schedule", "gpipe", "--pp", "2",
                     "--grad-accum", "4", "--seq", "128")
    assert (t["peak_stage"], t["peak_phase"]) == (1, "later_backward")
    assert t["detail"]["temporaries_logits_saved_bytes"] == 2 * 128 * 32000 * 4
    assert t["detail"]["temporaries_logits_kept_bytes"] == 4 * 128 * 32000 * 2


def test_loss_parallel_logits_temporaries_under_tp(run_cli):
    # torch loss_parallel (tp > 1): 18 B per logit of this rank (fp32 log-probs, zeros_like, exp, their sum
    # and the bf16 logits); megatron's fused cross-entropy 12 B; 2048 tokens x 32000 / 2 logits a rank
    torch = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--tp", "2", "--batch", "2")
    assert torch["peak_phase"] == "backward"
    assert torch["bytes_per_element"]["logits"] == 18.0
    assert torch["detail"]["temporaries_logits_bytes"] == 2 * TOKENS * 16000 * 18
    megatron = run_cli.json("memory", "train", "llama2-7b", "--tp", "2")
    assert megatron["detail"]["temporaries_logits_bytes"] == TOKENS * 16000 * 12
    one = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--tp", "1")
    assert one["bytes_per_element"]["logits"] == 12.0


def test_dropout_adds_the_embedding_mask_on_the_first_stage(run_cli):
    # Korthikanti et al. 2022: the embedding dropout mask is 1 byte per element (s x b x h) on the first
    # stage; the last stage saves the final norm and lm_head inputs (2 x s x b x h in bf16)
    plain = run_cli.json("memory", "train", "llama2-7b")
    drop = run_cli.json("memory", "train", "llama2-7b", "--dropout")
    ends = TOKENS * 2 * 4096 * 2
    assert plain["detail"]["activations_embedding_head_bytes"] == ends
    assert drop["detail"]["activations_embedding_head_bytes"] == ends + TOKENS * 4096 * 1


def test_per_layer_activation_items_describe_layer_0(run_cli):
    # deepseek-v3 with one leading dense layer: layer 0 is a dense SwiGLU MLP (intermediate 18432), so
    # the per-layer items show gate, act, up and product (4 x s x I in bf16) and no router
    d = run_cli.json("memory", "train", "deepseek-v3", "--set", "first_k_dense_replace=1")
    items = d["activation_bytes_per_layer"]
    assert items["gate, act(gate), up, product (4I)"] == 4 * TOKENS * 18432 * 2
    assert not any("router" in name or "expert" in name for name in items)


@pytest.mark.parametrize("args,message", [
    (("--vp", "2"), "rule vp needs pp > 1: the interleaved schedule splits a pipeline"),
    (("--vp", "2", "--pp", "2", "--schedule", "gpipe"), "--vp interleaves the 1F1B schedule"),
    (("--vp", "3", "--pp", "2"), "num_layers over --pp x --vp"),  # 32 layers over 6 chunks
    (("--vp", "2", "--pp", "2", "--grad-accum", "3"), "--grad-accum over --pp"),
])
def test_virtual_pipeline_checks(run_cli, args, message):
    code, _, err = run_cli("memory", "train", "llama2-7b", *args)
    assert code == 2 and message in err


def test_stage_parameter_counts_are_integers_with_biases(run_cli):
    # gpt2 (biases on every projection): a rank's parameter count is a whole number, 124,439,808 in all
    # (transformers' GPT2LMHeadModel, tied head), and the JSON prints it as an integer
    d = run_cli.json("memory", "train", "gpt2")
    assert d["stages"][0]["params"] == 124_439_808 and isinstance(d["stages"][0]["params"], int)
    tp = run_cli.json("memory", "train", "gpt2", "--tp", "2")
    assert isinstance(tp["stages"][0]["params"], int)


# ---------------------------------------------------------------- positions, spec defaults, MLA norms

@pytest.mark.parametrize("model,positions", [("opt-350m", 2048), ("gpt2", 1024)])
def test_learned_position_limit_is_max_position_embeddings(run_cli, model, positions):
    # OPT's table has 2050 rows (an offset of 2) but max_position_embeddings = 2048 usable positions;
    # gpt2: n_positions = 1024 (config.json)
    assert run_cli("flops", model, "--seq", str(positions))[0] == 0
    code, _, err = run_cli("flops", model, "--seq", str(positions + 1))
    assert code == 2 and f"has {positions} learned position embeddings" in err


def _spec(model: str, drop: tuple[str, ...] = (), **changes):
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    raw = {k: v for k, v in builtin_configs()[model].items() if k not in drop}
    return from_hf_config({**raw, **changes}, name=f"{model}-test", source="test")


def test_hf_defaults_of_missing_keys():
    # defaults for a key the file leaves out: Qwen2Config.use_sliding_window False (the window is then
    # unused), FalconConfig.multi_query True (one K/V head), DeepseekV3Config.first_k_dense_replace 3
    assert _spec("qwen2.5-7b").sliding_window is None
    assert _spec("qwen2.5-7b", ("use_sliding_window",)).sliding_window is None
    assert _spec("qwen2.5-7b", use_sliding_window=True).sliding_window == 131072
    assert _spec("falcon-7b", ("multi_query",)).num_kv_heads == 1
    assert _spec("falcon-7b", multi_query=False).num_kv_heads == 71
    moe = _spec("deepseek-v3", ("first_k_dense_replace",)).moe
    assert moe is not None and moe.first_dense_layers == 3


def test_llama_rmsnorm_has_no_bias():
    # LlamaRMSNorm holds a weight only: 2 norms a layer + the final norm = (2 x 32 + 1) x 4096 parameters
    from mlsyscalc.calc.counts.params import count_params

    spec = _spec("llama3-8b")
    assert (spec.norm, spec.norm_bias) == ("rmsnorm", False)
    assert count_params(spec).breakdown["norms"] == (2 * 32 + 1) * 4096


def test_mla_without_query_compression_has_no_query_norm():
    # DeepseekV3Attention with q_lora_rank = None (as DeepSeek-V2-Lite): a plain q_proj and no q_a_layernorm,
    # so each of the 61 layers has 2 RMSNorms of 7168 and the kv_a_layernorm of 512; plus the final norm
    from mlsyscalc.calc.counts.params import count_params

    norms = count_params(_spec("deepseek-v3", q_lora_rank=None)).breakdown["norms"]
    assert norms == 61 * (2 * 7168 + 512) + 7168
    assert count_params(_spec("deepseek-v3")).breakdown["norms"] == 61 * (2 * 7168 + 1536 + 512) + 7168


# ---------------------------------------------------------------- comm step: per-stage layer counts

@pytest.mark.parametrize("pp,sp", [(2, False), (4, False), (2, True)])
def test_tp_collectives_count_the_stage_layers(run_cli, pp, sp):
    # Megatron TP: 2 all-reduces per layer forward and 2 backward (with SP: that many all-gathers and as many
    # reduce-scatters) on each of the 32 / pp layers of a stage; message 2048 tokens x 4096 x 2 B
    args = ("comm", "step", "llama2-7b", "--tp", "2", "--pp", str(pp)) + (("--sp",) if sp else ())
    d = run_cli.json(*args)
    tp = [r for r in d["rows"] if r["dim"] == "tp"]
    assert {r["collective"] for r in tp} == ({"all-gather", "reduce-scatter"} if sp else {"all-reduce"})
    assert all(r["calls"] == 4 * 32 // pp for r in tp)
    assert all(r["message_bytes"] == 2048 * 4096 * 2 for r in tp)


# ---------------------------------------------------------------- train step: host path, contention, fit

def _train(run_cli, *args):
    return run_cli.json("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--no-sp", *args)


def test_host_term_is_what_the_host_adds_beyond_the_gpu(run_cli):
    # torch, tp 2, short sequences: the host issues kernels slower than the GPU runs them. By the documented
    # rule host_s = max(0, host_fb - gpu_fb) + max(0, host_opt - optimizer_s), where gpu_fb is every GPU part
    # of forward + backward: compute, contention, bubble and each exposed comm time (TP is not overlapped)
    d = _train(run_cli, "--tp", "2", "--global-batch", "2", "--micro-batch", "2", "--seq", "256", "--framework", "torch")
    b, host = d["breakdown"], d["host_path_s"]
    comm = sum(v for k, v in b.items() if k.endswith("_comm_s"))
    assert b["tp_comm_s"] > 0 and host["forward_backward"] > 0 and host["optimizer"] > 0
    assert host["forward_backward"] != host["optimizer"]
    gpu_fb = b["compute_s"] + b["contention_s"] + b["bubble_s"] + comm
    assert host["forward_backward"] > gpu_fb
    expected = max(0.0, host["forward_backward"] - gpu_fb) + max(0.0, host["optimizer"] - b["optimizer_s"])
    assert b["host_s"] == pytest.approx(expected, rel=1e-9, abs=0)
    assert d["step_time_s"] == pytest.approx(sum(b.values()), rel=1e-12, abs=0)


def test_interleaved_schedule_adds_the_p2p_slowdown(run_cli, monkeypatch):
    # torch pipelining with vp > 1 loses p2p_slowdown x (compute + bubble) to its interleaved p2p (the
    # framework's fitted share, calc.train.host); megatron's share is 0, everything else is the same layout
    # (both priced with the fused kernel list here, so the compute is the same)
    import mlsyscalc.calc.train.step as train
    from mlsyscalc.calc.train.host import FRAMEWORKS

    monkeypatch.setattr(train, "kernel_impl", lambda framework, dtype: "fused")

    args = ("--pp", "2", "--vp", "2", "--global-batch", "4", "--micro-batch", "1", "--seq", "512")
    torch, megatron = _train(run_cli, *args, "--framework", "torch"), _train(run_cli, *args)
    slow = FRAMEWORKS["torch"].p2p_slowdown
    assert slow > 0 and FRAMEWORKS["megatron"].p2p_slowdown == 0
    bt, bm = torch["breakdown"], megatron["breakdown"]
    assert (bt["compute_s"], bt["bubble_s"]) == (bm["compute_s"], bm["bubble_s"]) and bt["bubble_s"] > 0
    extra = slow * (bt["compute_s"] + bt["bubble_s"])
    assert bt["contention_s"] == pytest.approx(bm["contention_s"] + extra, rel=1e-9, abs=0)


def test_fits_includes_an_exact_fit(run_cli):
    # fits means memory <= usable: with the reserve set to capacity - memory the step fits exactly, one byte
    # more and it does not
    base = ("--global-batch", "2", "--micro-batch", "1")
    cap = _train(run_cli, *base, "--reserve", "0%")["usable_bytes"]
    assert _train(run_cli, *base)["usable_bytes"] == cap - cap // 10  # the default reserve: 10% of the card
    need = _train(run_cli, *base)["memory_bytes_per_gpu"]
    exact = _train(run_cli, *base, "--reserve", f"{cap - need}B")
    assert (exact["usable_bytes"], exact["fits"]) == (need, True)
    short = _train(run_cli, *base, "--reserve", f"{cap - need + 1}B")
    assert (short["usable_bytes"], short["fits"]) == (need - 1, False)


def test_host_work_counts_kernels_and_matmuls(run_cli):
    # a llama layer's priced kernels: forward 14 (7 matmuls: q, k, v, o, gate, up, down), backward 21 (14
    # matmuls: a dgrad and a wgrad each); ends: embedding (5 kernels: forward, sort, fill, scatter, main-gradient
    # add), final norm + lm_head + the fp32 loss (13, 3 matmuls)
    d = _train(run_cli, "--global-batch", "2", "--micro-batch", "1")
    assert (d["host_work"]["ops"], d["host_work"]["matmuls"]) == (32 * 35 + 5 + 13, 32 * 21 + 3)


def test_stage_parts_per_layer_counts_and_attention_override():
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.parts import roofline_pass, stage_parts
    from mlsyscalc.specs.lookup import load_model

    ceil = load_ceilings("H100-SXM")
    spec = load_model("llama2-7b")
    result = roofline_pass(spec, ceil, tp=1, cp=1, micro_batch=1, seq=512, dtype="bf16")
    parts = stage_parts(spec, result, sp=False)
    assert parts.ops["dense"]["forward"] == (14, 7) and parts.ops["dense"]["backward"] == (21, 14)
    # measured attention-core seconds replace the roofline's: the forward's in the forward and in both
    # recomputed forwards, the backward's in the backward
    att = stage_parts(spec, result, sp=False, attention={"forward": 1.0, "backward": 3.0})
    assert att.attention_s["dense"] == {"forward": 1.0, "backward": 3.0, "recompute_selective": 1.0,
                                        "recompute_full": 1.0}
    # per-layer figures do not depend on how many layers share them: deepseek-v3 cut to 4 layers with one
    # or two leading dense layers has the same one-dense-layer seconds and kernel counts
    one, two = (load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": k}) for k in (1, 2))
    p1, p2 = (stage_parts(s, roofline_pass(s, ceil, tp=8, cp=1, micro_batch=1, seq=512, dtype="bf16"), sp=False)
              for s in (one, two))
    assert p1.ops["dense"] == p2.ops["dense"] and p1.ops["moe"] == p2.ops["moe"]
    assert p1.layer_s["dense"] == pytest.approx(p2.layer_s["dense"], rel=1e-12, abs=0)


# ---------------------------------------------------------------- memory train: optimizers, offload, cp

@pytest.mark.parametrize("args,weights,grads,optimizer", [
    # fp32 master copy + 2 fp32 Adam states (ZeRO paper: 2 + 2 + 12)
    ((), 2 * P, 2 * P, 12 * P),
    # SGD with momentum: master copy + one fp32 state
    (("--optimizer", "sgd-momentum"), 2 * P, 2 * P, 8 * P),
    # bitsandbytes 8-bit Adam: 2 states of 1 byte + one fp32 absmax per 2048 elements, beside the master copy
    (("--optimizer", "adam8bit"), 2 * P, 2 * P, 4 * P + round(2 * P * (1 + 4 / 2048))),
    # no master weights: everything in bf16 (2 states of 2 bytes)
    (("--no-master-weights",), 2 * P, 2 * P, 4 * P),
    # fp32 training: 4-byte weights and grads, 2 fp32 states, no separate master copy
    (("--dtype", "fp32"), 4 * P, 4 * P, 8 * P),
])
def test_optimizer_state_bytes_per_parameter(run_cli, args, weights, grads, optimizer):
    d = run_cli.json("memory", "train", "llama2-7b", *args)
    assert (d["weights_bytes"], d["gradients_bytes"], d["optimizer_bytes"]) == (weights, grads, optimizer)
    assert d["phases"]["optimizer_bytes"] == weights + grads + optimizer


def test_offload_moves_master_and_states_to_the_cpu(run_cli):
    # ZeRO-Offload (Ren et al. 2021) with ZeRO-1 over 2 ranks: the fp32 master copy and Adam states (12 B a
    # parameter, sharded) live in CPU memory; the GPU keeps bf16 weights and gradients
    d = run_cli.json("memory", "train", "llama2-7b", "--zero", "1", "--dp", "2", "--offload", "optimizer")
    assert d["cpu_offload_bytes"] == 12 * P // 2 and d["optimizer_bytes"] == 0
    assert (d["weights_bytes"], d["gradients_bytes"]) == (2 * P, 2 * P)


def test_context_parallel_ranks_shard_zero_and_split_the_sequence(run_cli):
    # ZeRO shards over dp x cp; each cp rank saves activations of seq / cp tokens; 4 GPUs in all
    d = run_cli.json("memory", "train", "llama2-7b", "--zero", "1", "--cp", "2", "--dp", "2")
    assert d["parallel"]["world_size"] == 4
    assert d["optimizer_bytes"] == 12 * P // 4
    full = run_cli.json("memory", "train", "llama2-7b", "--seq", "1024")
    assert d["activations_bytes"] == full["activations_bytes"]
    assert d["detail"]["temporaries_logits_bytes"] == 1024 * 32000 * 12


def test_more_hf_defaults_of_missing_keys():
    # PhiConfig.partial_rotary_factor = 0.5; GPTNeoXConfig.attention_bias = True (q, k, v and dense biases);
    # phi-2: one LayerNorm a layer (attention and MLP read the same normed input)
    phi = _spec("phi-2", ("partial_rotary_factor",))
    assert phi.rotary_fraction == 0.5 and phi.norms_per_layer == 1
    neox = _spec("pythia-1.4b", ("attention_bias",))
    assert neox.qkv_bias and neox.o_bias
    assert not _spec("pythia-1.4b", attention_bias=False).qkv_bias


@pytest.mark.parametrize("seq,ok", [(16, True), (12, False)])
def test_sequence_parallel_splits_the_context_shard(run_cli, seq, ok):
    # --sp splits each cp rank's seq / cp tokens over the tp ranks: 16 / 2 = 8 splits over 4, 12 / 2 = 6 does not
    # (both are whole 2*cp chunks, so the sequence rule passes and the sp rule decides)
    code, _, err = run_cli("memory", "train", "llama2-7b", "--sp", "--tp", "4", "--cp", "2", "--seq", str(seq))
    assert code == (0 if ok else 2)
    assert ok or "rule (seq/cp) % tp == 0 with --sp" in err


def test_options_must_be_positive_integers():
    from mlsyscalc.calc.memory.training import TrainOptions
    from mlsyscalc.errors import MlsysError
    from mlsyscalc.specs.lookup import load_model

    spec = load_model("llama2-7b")
    for bad in (dict(batch=0), dict(grad_accum=1.5), dict(dp=-1)):
        with pytest.raises(MlsysError, match="must be a positive integer"):
            TrainOptions(**bad).validate(spec)


def test_full_recompute_keeps_layer_inputs_and_one_working_layer(run_cli):
    # full recomputation: each of the 32 layers keeps only its input (s x b x h in bf16); while a layer is
    # recomputed it holds its whole activations, the sum of the per-layer items. With 1-byte logits
    # temporaries (2048 x 32000 B, smaller than that layer) the working layer is the larger, kept alone
    d = run_cli.json("memory", "train", "llama2-7b", "--recompute", "full", "--bytes", "logits=1")
    layer = sum(d["activation_bytes_per_layer"].values())
    assert d["detail"]["activations_layers_bytes"] == 32 * TOKENS * 4096 * 2
    assert layer > TOKENS * 32000
    assert d["detail"]["activations_recompute_working_bytes"] == layer
    assert d["detail"]["temporaries_logits_bytes"] == 0
    # default 12-byte logits (786,432,000 B) are the larger: the working layer is not counted beside them
    big = run_cli.json("memory", "train", "llama2-7b", "--recompute", "full")
    assert big["detail"]["temporaries_logits_bytes"] == TOKENS * 32000 * 12
    assert big["detail"]["activations_recompute_working_bytes"] == 0


def test_zero3_gathers_two_layers_and_the_root_unit(run_cli):
    # FSDP with each decoder layer wrapped: the layer in use and the prefetched one, plus the root unit
    # (embedding, final norm, lm_head) unsharded, in bf16
    d = run_cli.json("memory", "train", "llama2-7b", "--zero", "3", "--dp", "2")
    root = 32000 * 4096 + 4096 + 32000 * 4096
    assert d["detail"]["temporaries_zero3_gather_bytes"] == (2 * LAYER + root) * 2


def test_torch_keeps_no_pipeline_outputs_without_a_pipeline(run_cli):
    d = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch")
    assert d["detail"]["temporaries_logits_kept_bytes"] == 0
    assert d["detail"]["temporaries_receive_buffers_bytes"] == 0


def test_tp_vocabulary_split_rounds_up(run_cli):
    # gpt2 under tp 2 (Megatron): column-parallel c_attn (768 x 2304) and c_fc (768 x 3072) split with their
    # biases; row-parallel c_proj's (768 x 768, 3072 x 768) weights split, their biases replicated; the 2 x 2
    # LayerNorm vectors replicated. The 50257-row embedding gives ceil(50257 / 2) = 25129 rows a rank; the
    # 1024 learned positions and the final LayerNorm (2 x 768) are whole; the tied head adds nothing
    layer = (768 * 2304 + 2304) // 2 + 768 * 768 // 2 + 768 + (768 * 3072 + 3072) // 2 + 3072 * 768 // 2 + 768 + 4 * 768
    d = run_cli.json("memory", "train", "gpt2", "--tp", "2")
    assert d["stages"][0]["params"] == 12 * layer + 25129 * 768 + 1024 * 768 + 2 * 768


@pytest.mark.parametrize("sp", [True, False])
def test_moe_step_collectives_by_hand(run_cli, sp):
    # mixtral-8x7b, dp 2 with ep 2, tp 2, ZeRO-3, 4 micro-batches of 2048 tokens, fp32 gradients on the wire:
    # - EP all-to-all: dispatch + combine, forward and backward = 4 per MoE layer per micro-batch (32 layers),
    #   each token's hidden state (4096 x 2 B) sent to its top-2 experts; with SP a rank routes 2048 / tp tokens
    # - ZeRO-3: parameters all-gathered forward and backward (2 m calls) in bf16, gradients reduce-scattered
    #   once per micro-batch (m calls) in fp32: twice the all-gather's message
    args = ("comm", "step", "mixtral-8x7b", "--dp", "2", "--ep", "2", "--tp", "2", "--zero", "3", "--grad-accum", "4",
            "--grad-dtype", "fp32") + (("--sp",) if sp else ())
    d = run_cli.json(*args)
    rows = {(r["dim"], r["collective"]): r for r in d["rows"]}
    ep = rows["ep", "all-to-all"]
    assert (ep["calls"], ep["message_bytes"]) == (4 * 32 * 4, (2048 // (2 if sp else 1)) * 2 * 4096 * 2)
    gather, scatter = rows["dp", "all-gather"], rows["dp", "reduce-scatter"]
    assert (gather["calls"], scatter["calls"]) == (2 * 4, 4)
    assert scatter["message_bytes"] == 2 * gather["message_bytes"]
    for dim, total in d["by_dim"].items():  # each dimension's totals are the sums of its rows
        mine = [r for r in d["rows"] if r["dim"] == dim]
        assert total["bytes_per_gpu"] == pytest.approx(sum(r["bytes_per_gpu"] for r in mine), rel=1e-12, abs=0)
        assert total["time_s"] == pytest.approx(sum(r["time_s"] for r in mine), rel=1e-12, abs=0)


def test_pipeline_p2p_per_chunk(run_cli):
    # interleaved 1F1B: activations forward and gradients backward once per micro-batch and model chunk
    # (2 m v calls), each a micro-batch's hidden states split over tp: 2048 x 4096 x 2 B / 2
    d = run_cli.json("comm", "step", "llama2-7b", "--pp", "2", "--tp", "2", "--interleave", "2", "--grad-accum", "4")
    (p2p,) = [r for r in d["rows"] if r["dim"] == "pp"]
    assert (p2p["calls"], p2p["message_bytes"]) == (2 * 4 * 2, 2048 * 4096 * 2 // 2)


def test_gemma2_alternates_sliding_layers():
    # Gemma 2: even layers use the sliding window, odd layers global attention: 42 layers -> 21 sliding,
    # 43 -> 22 (layers 0, 2, ..., 42)
    assert _spec("gemma2-9b").sliding_window_layers == 21
    assert _spec("gemma2-9b", num_hidden_layers=43).sliding_window_layers == 22


def test_reserve_and_byte_override_bounds(run_cli):
    # a reserve of the whole card leaves nothing; --bytes takes any finite value >= 0, 0 included
    cap = _train(run_cli, "--global-batch", "2", "--reserve", "0%")["usable_bytes"]
    code, _, err = run_cli("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--global-batch", "2",
                           "--reserve", f"{cap}B")
    assert code == 2 and "leave nothing" in err
    assert _train(run_cli, "--global-batch", "2", "--reserve", f"{cap - 1}B")["usable_bytes"] == 1
    zero = run_cli.json("memory", "train", "llama2-7b", "--bytes", "logits=0")
    assert zero["detail"]["temporaries_logits_bytes"] == 0
    code, _, err = run_cli("memory", "train", "llama2-7b", "--bytes", "logits=-1")
    assert code == 2 and "--bytes logits" in err


@pytest.mark.parametrize("model,sets,pp,moe_layers", [
    ("mixtral-8x7b", (), 2, 16),  # 32 MoE layers over 2 stages
    # deepseek-v3 cut to 4 layers, layer 0 dense: stage 0 holds layers 0-1 (1 MoE), stage 1 layers 2-3 (2)
    ("deepseek-v3", ("--set", "num_hidden_layers=4", "--set", "first_k_dense_replace=1"), 2, 2),
])
def test_ep_all_to_all_counts_the_busiest_stage(run_cli, model, sets, pp, moe_layers):
    # dispatch + combine, forward and backward: 4 all-to-alls per MoE layer of the busiest stage, per micro-batch
    d = run_cli.json("comm", "step", model, *sets, "--dp", "2", "--ep", "2", "--pp", str(pp), "--grad-accum", "2")
    (ep,) = [r for r in d["rows"] if r["dim"] == "ep"]
    assert ep["calls"] == 4 * moe_layers * 2


def test_no_vocab_parallel_keeps_embedding_and_head_whole_on_each_tp_rank():
    """llama2-7b (V = 32000, h = 4096), TP 2, PP 2: the first stage holds the embedding, the last the lm_head;
    whole, each is 32000 x 4096 = 131,072,000 parameters on every TP rank instead of 65,536,000, and the last
    stage's plain fp32 cross-entropy holds 12 B for each of tokens x 32000 logits (torch's loss_parallel:
    18 B for tokens x 16000)."""
    from mlsyscalc.calc.parallel.shards import stage_params
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory
    from mlsyscalc.specs.lookup import load_model

    spec = load_model("llama2-7b")
    split = stage_params(spec, range(16), True, False, 2, 1, 2)
    whole = stage_params(spec, range(16), True, False, 2, 1, 2, vocab_parallel=False)
    assert whole.dense - split.dense == 65_536_000
    head_split = stage_params(spec, range(16, 32), False, True, 2, 1, 2)
    head_whole = stage_params(spec, range(16, 32), False, True, 2, 1, 2, vocab_parallel=False)
    assert head_whole.dense - head_split.dense == 65_536_000
    opts = dict(batch=1, seq=2048, grad_accum=8, tp=2, pp=2, framework="torch")
    a = train_memory(spec, TrainOptions(**opts))
    b = train_memory(spec, TrainOptions(**opts, vocab_parallel=False))
    last_a, last_b = a.stages[-1].detail, b.stages[-1].detail
    assert last_a["temporaries_logits"] == 2048 * 16_000 * 18
    assert last_b["temporaries_logits"] == 2048 * 32_000 * 12
    assert b.bytes_per_element["logits"] == 12.0 and a.bytes_per_element["logits"] == 18.0
    # 16 bytes a parameter (bf16 weight and gradient, fp32 master and two moments) on the larger first stage
    assert b.stages[0].total - a.stages[0].total == 65_536_000 * 16
