"""Value tests for the training step's host terms, breakdown defaults, layout rules, training and inference
memory boundaries and the collective step's option checks.

Each expected number is written out by hand from a definition or a measurement: the host costs are solved
from the measured step times in reports/train/measured.md ("Host time"), the schedules' chunk order is
Narayanan et al. 2021 (section 2.2.2), parameter tensors are those of transformers' GPT2LMHeadModel and
LlamaForCausalLM, and the boundaries follow each option's documented rule (docs/train.md, docs/memory.md)."""

from __future__ import annotations


import pytest

from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model


# --- train_host: the torch host costs are the measured fit ------------------------------------------------


def test_torch_host_costs_solve_the_measured_host_bound_steps():
    """reports/train/measured.md: f+b = 1,127 op_s + 675 dtensor_matmul_s [TP] + 32 fsdp_layer_s [FSDP2];
    4 x H200 TP 383.9 ms, FSDP2 198.0 ms, FSDP2 x TP 521.4 ms, solved exactly. Then
    fsdp_layer_s = (521.4 - 383.9) / 32, op_s = (198.0 - 32 fsdp_layer_s) / 1127,
    dtensor_matmul_s = (383.9 - 1127 op_s) / 675; dtensor_param_s: the optimizer steps 15.4, 14.6 and
    17.0 ms over 291 tensors; p2p_slowdown: 165.7 ms interleaved over 146.8 ms 1F1B, less one."""
    from mlsyscalc.calc.train.host import framework_costs

    fsdp = (521.4e-3 - 383.9e-3) / 32
    op = (198.0e-3 - 32 * fsdp) / 1127
    matmul = (383.9e-3 - 1127 * op) / 675
    torch = framework_costs("torch")
    assert torch.fsdp_layer_s == pytest.approx(fsdp, rel=2e-3)
    assert torch.op_s == pytest.approx(op, rel=2e-3)
    assert torch.dtensor_matmul_s == pytest.approx(matmul, rel=2e-3)
    assert torch.dtensor_param_s == pytest.approx((15.4e-3 + 14.6e-3 + 17.0e-3) / 3 / 291, rel=5e-3)
    assert torch.p2p_slowdown == pytest.approx(165.7 / 146.8 - 1, rel=5e-3)
    megatron = framework_costs("megatron")
    assert (megatron.op_s, megatron.dtensor_matmul_s, megatron.fsdp_layer_s, megatron.dtensor_param_s,
            megatron.p2p_slowdown, megatron.overlap_slowdown) == (0.0,) * 6


def test_framework_costs_without_slowdowns_have_none():
    """A FrameworkCosts given only its four host costs loses no compute to p2p kernels or overlap."""
    from mlsyscalc.calc.train.host import FrameworkCosts, interleaved_contention_s

    costs = FrameworkCosts(1.0, 10.0, 100.0, 1000.0)
    assert costs.p2p_slowdown == 0.0 and costs.overlap_slowdown == 0.0
    assert float(interleaved_contention_s(costs.p2p_slowdown, 2, 5.0, 1.0)) == 0.0


@pytest.mark.parametrize("value", ["fast", True, 1.0, 1.5, -0.1, None])
def test_host_override_outside_zero_one_is_named(value):
    """A calibration's torch_host fields are numbers in [0, 1): a string, a bool, 1 and beyond, a negative
    number are each named in the error."""
    from mlsyscalc.calc.train.host import host_overrides

    with pytest.raises(MlsysError, match=r"calibration: torch_host\.op_s must be a number in \[0, 1\)"):
        host_overrides({"torch_host": {"op_s": value}})


def test_host_override_inside_zero_one_replaces_the_field():
    """0 and 0.999 are accepted; fields come back in FrameworkCosts order, as floats."""
    from mlsyscalc.calc.train.host import framework_costs, host_overrides

    got = host_overrides({"torch_host": {"p2p_slowdown": 0.999, "op_s": 0}})
    assert got == (("op_s", 0.0), ("p2p_slowdown", 0.999))
    assert framework_costs("torch", got).p2p_slowdown == 0.999
    assert framework_costs("megatron", got).p2p_slowdown == 0.0  # megatron has no host term to override
    assert host_overrides(None) == () and host_overrides({}) == ()


def test_first_stage_tensors_are_embeddings_and_learned_positions():
    """The model as the torch benchmark builds it (separate q, k, v projections): gpt2's wte and wpe (2
    tensors) on the first stage; ln_f weight and bias on the last (lm_head is tied to wte); each block q, k,
    v, o, up and down with weight and bias (12) and two LayerNorms with weight and bias (4): 16. Llama:
    embed_tokens (1); norm and lm_head (2); each layer 7 bias-free projections and 2 RMSNorms: 9."""
    from mlsyscalc.calc.train.host import tensor_counts

    layers, first, last = tensor_counts(load_model("gpt2"))
    assert (first, last) == (2, 2) and layers == (16,) * 12
    layers, first, last = tensor_counts(load_model("llama3-8b"))
    assert (first, last) == (1, 2) and layers == (9,) * 32


def test_stage_work_counts_the_ends_only_where_the_stage_holds_them():
    """gpt2 at pp 2: stage 0 holds 6 layers of 16 tensors and the 2 embeddings (98); stage 1 the 6 layers and
    ln_f's 2 (98); pp 3's middle stage holds 4 layers and no end (64)."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.host import stage_work
    from mlsyscalc.calc.train.parts import pipeline_stages, roofline_pass, stage_parts

    spec = load_model("gpt2")
    result = roofline_pass(spec, load_ceilings("h100-sxm"), tp=1, cp=1, micro_batch=1, seq=128, dtype="bf16")
    parts = stage_parts(spec, result, sp=False)
    first, last = pipeline_stages(spec, 2, 1)
    assert stage_work(spec, parts, (first,), "none").tensors == 6 * 16 + 2
    assert stage_work(spec, parts, (last,), "none").tensors == 6 * 16 + 2
    middle = pipeline_stages(spec, 3, 1)[1]
    assert stage_work(spec, parts, (middle,), "none").tensors == 4 * 16
    assert stage_work(spec, parts, (middle,), "none").layers == 4


# --- train: the step breakdown's defaults and terms -------------------------------------------------------


def _windows():
    from mlsyscalc.calc.comm.exposed import Windows

    return Windows(0.01, 0.02, 0.005, 4)  # compute 4 x 0.03 = 0.12 s


def test_step_breakdown_defaults_add_no_contention_and_no_host():
    """pp 2, vp 2: bubble (pp - 1) / vp x (f + b) = 0.015 s; 0.01 s of dp gradient traffic hides under the
    0.02 s backward. With no sm_share, slowdowns or host seconds given, nothing else is added."""
    from mlsyscalc.calc.train.step import step_breakdown

    breakdown, total = step_breakdown(pp=2, vp=2, windows=_windows(), seconds={("dp", "grad"): 0.01}, zero=0,
                                      recompute="none", overlap=("dp",), optimizer=0.25)
    assert float(breakdown["compute_s"]) == pytest.approx(0.12, rel=1e-12)
    assert float(breakdown["bubble_s"]) == pytest.approx(0.015, rel=1e-12)
    assert float(breakdown["contention_s"]) == 0.0
    assert float(breakdown["host_s"]) == 0.0
    assert float(breakdown["dp_comm_s"]) == 0.0 and breakdown["optimizer_s"] == 0.25
    assert float(total["dp"]) == 0.01


def test_step_breakdown_terms_when_given():
    """sm_share 0.5 + overlap_slowdown 0.25 of the 0.01 s hidden: 0.0075 s; p2p_slowdown 0.1 x (compute 0.12 +
    bubble 0.015) = 0.0135 s; host (0.2, 0.3): 0.2 - GPU forward+backward (0.12 + 0.021 + 0.015 = 0.156) plus
    0.3 - optimizer 0.25, so 0.094 s."""
    from mlsyscalc.calc.train.step import step_breakdown

    breakdown, _ = step_breakdown(pp=2, vp=2, windows=_windows(), seconds={("dp", "grad"): 0.01}, zero=0,
                                  recompute="none", overlap=("dp",), optimizer=0.25, sm_share=0.5,
                                  overlap_slowdown=0.25, p2p_slowdown=0.1, host=(0.2, 0.3))
    assert float(breakdown["contention_s"]) == pytest.approx(0.0075 + 0.0135, rel=1e-12)
    assert float(breakdown["host_s"]) == pytest.approx(0.2 - 0.156 + 0.05, rel=1e-12)
    # at vp 1 the interleaved slowdown does not apply
    plain, _ = step_breakdown(pp=2, vp=1, windows=_windows(), seconds={}, zero=0, recompute="none", overlap=(),
                              optimizer=0.0, p2p_slowdown=0.1)
    assert float(plain["contention_s"]) == 0.0 and float(plain["bubble_s"]) == pytest.approx(0.03, rel=1e-12)


def _step(framework="megatron", host_costs=(), **opts):
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.step import train_step
    from mlsyscalc.calc.train.options import TrainStepOptions

    options = TrainStepOptions(**{"gpus": 1, "seq": 128, "global_batch": 1, **opts}, framework=framework,
                               host_costs=host_costs)
    return train_step(load_model("gpt2"), load_ceilings("h100-sxm"), "hgx-h100", options)


def test_host_calibration_is_reported_only_for_torch():
    """A calibration's torch_host replaces torch's costs; megatron has no host term, so its source names no
    override even when the file has one."""
    override = (("op_s", 1e-4),)
    megatron = _step("megatron", override).as_dict()
    assert "overridden" not in megatron["framework_source"]
    assert megatron["host_costs"]["op_s"] == 0.0
    torch = _step("torch", override).as_dict()
    assert torch["framework_source"].endswith("; overridden by the calibration file's torch_host")
    assert torch["host_costs"]["op_s"] == 1e-4
    assert "overridden" not in _step("torch").as_dict()["framework_source"]


# --- train_options: layout rules at their boundaries ------------------------------------------------------


def _layout(**kw):
    from mlsyscalc.calc.train.options import TrainStepOptions

    return TrainStepOptions(**{"seq": 1024, "global_batch": 8, **kw})


def test_every_overlap_dimension_together_is_valid():
    """--overlap takes any subset of the dimensions, all of them included; an unknown one is named."""
    from mlsyscalc.calc.train.options import OVERLAP_DIMS

    _layout(gpus=1, overlap=tuple(OVERLAP_DIMS)).validate_scalars()
    with pytest.raises(MlsysError, match="--overlap: dimensions are"):
        _layout(gpus=1, overlap=("dp", "xp")).validate_scalars()


def test_gpipe_takes_vp_one_only():
    """Interleaving (vp > 1) is a 1F1B schedule; GPipe at vp 1 is valid."""
    _layout(gpus=1, schedule="gpipe", vp=1).validate_scalars()
    _layout(gpus=1, schedule="1f1b", vp=2).validate_scalars()
    with pytest.raises(MlsysError, match="--vp interleaves the 1F1B schedule"):
        _layout(gpus=1, schedule="gpipe", vp=2).validate_scalars()


def test_micro_batches_need_not_divide_by_pp_without_vp():
    """Megatron-LM's rule m % pp == 0 is for the interleaved schedule only: pp 2 with 3 micro-batches is a
    valid plain 1F1B layout, and an error at vp 2."""
    from mlsyscalc.specs.cluster import load_cluster

    spec, cluster = load_model("llama3-8b"), load_cluster("hgx-h100")
    _layout(gpus=2, pp=2, global_batch=3).check_layout(spec, cluster)
    with pytest.raises(MlsysError, match="rule num_micro_batches % pp == 0 with --vp"):
        _layout(gpus=2, pp=2, vp=2, global_batch=3).check_layout(spec, cluster)


def test_unfused_attention_is_fine_without_context_parallelism():
    """The unfused attention core and the seq % (2 cp) rule apply only with cp > 1 (seq 1023 is odd)."""
    from mlsyscalc.specs.cluster import load_cluster

    spec, cluster = load_model("llama3-8b"), load_cluster("hgx-h100")
    _layout(gpus=1, attention="unfused", seq=1023).check_layout(spec, cluster)
    with pytest.raises(MlsysError, match="--attention unfused has no context parallelism"):
        _layout(gpus=2, cp=2, attention="unfused").check_layout(spec, cluster)


def test_dp_group_placement_uses_the_tp_stride():
    """tp 2, dp 6, pp 2 on 24 GPUs of 8-GPU nodes: dp ranks are 2 apart, so 4 per node and 6 % 4 != 0
    (uneven shares); tp 2, dp 4, pp 2 (16 GPUs) puts 4 dp ranks on each node and is valid."""
    from mlsyscalc.specs.cluster import load_cluster

    spec, cluster = load_model("llama3-8b"), load_cluster("hgx-h100")
    with pytest.raises(MlsysError, match=r"the dp group of 6 ranks \(stride 2\) puts an uneven share"):
        _layout(gpus=24, tp=2, pp=2, global_batch=12).check_layout(spec, cluster)
    _layout(gpus=16, tp=2, pp=2, global_batch=8).check_layout(spec, cluster)


# --- train_parts -------------------------------------------------------------------------------------------


def test_slowest_stage_is_the_one_with_most_forward_plus_backward():
    """Stage 0 holds 2 dense layers (f 3, b 1: 8 s), stage 1 two MoE layers (f 0.5, b 2: 5 s): the slowest is
    stage 0 although stage 1's backward is longer."""
    from mlsyscalc.calc.train.parts import StageParts, pipeline_stages, slowest_stage

    spec = load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": 2})
    stages = pipeline_stages(spec, 2, 1)
    assert [(s.dense, s.moe) for s in stages] == [(2, 0), (0, 2)]
    zero = {"forward": 0.0, "backward": 0.0}
    layer = {"dense": {"forward": 3.0, "backward": 1.0}, "moe": {"forward": 0.5, "backward": 2.0}}
    parts = StageParts(layer, {k: zero for k in layer}, zero, zero)
    assert slowest_stage(parts, stages, "none") == (6.0, 2.0, 0.0)


def test_stage_parts_default_capacity_factor_is_one():
    """Without a capacity factor the routed experts' matmuls are not padded: the same seconds as 1.0."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.parts import roofline_pass, stage_parts

    spec = load_model("mixtral-8x7b", {"num_hidden_layers": 2})
    result = roofline_pass(spec, load_ceilings("h100-sxm"), tp=1, cp=1, micro_batch=1, seq=256, dtype="bf16")
    assert stage_parts(spec, result, sp=False).layer_s == stage_parts(spec, result, sp=False,
                                                                      capacity_factor=1.0).layer_s


def test_unfused_memory_kernels_have_no_flops():
    """The softmax and dropout kernels of the unfused attention core are priced by their bytes alone."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.attention_time import unfused_attention_ops

    ops = unfused_attention_ops(load_model("gpt2"), load_ceilings("h100-sxm"), tp=1, micro_batch=1, seq=128)
    memory = [op for pass_ops in ops.values() for op in pass_ops if op.kind == "memory"]
    assert len(memory) == 4 and all(op.flops == 0 for op in memory)


# --- comm_step -----------------------------------------------------------------------------------------------


def test_step_comm_overlaps_every_dimension_together():
    """overlap may name every dimension at once (each row then runs beside compute); an unknown one is named."""
    from mlsyscalc.calc.comm.step import StepOptions, step_comm

    spec = load_model("llama3-8b")
    rows = step_comm(spec, StepOptions(dp=2, tp=2, pp=2, seq=1024, overlap=("dp", "tp", "pp", "ep", "cp")),
                     "hgx-h100").rows
    assert {r.dim for r in rows} == {"dp", "tp", "pp"} and all(r.overlapped for r in rows)
    with pytest.raises(MlsysError, match="overlap: unknown dimension"):
        step_comm(spec, StepOptions(dp=2, seq=1024, overlap=("dp", "zz")), "hgx-h100")



def test_a_one_byte_message_is_priced_as_one_byte():
    """A 2-wide toy gpt2 (2 heads, 2 layers), one fp8 token, tp 2, pp 2: the p2p activation is 1 token x 2 x 1 B
    / tp 2 = 1 byte, sent once a call; the tp all-reduce of 2 bytes over 2 ranks sends 2 (2 - 1) / 2 x 2 = 2."""
    from mlsyscalc.calc.comm.step import StepOptions, step_comm

    spec = load_model("gpt2", {"n_embd": 2, "n_head": 2, "n_layer": 2})
    rows = {r.dim: r for r in step_comm(spec, StepOptions(pp=2, tp=2, seq=1, dtype="fp8"), "hgx-h100").rows}
    assert (rows["pp"].message_bytes, rows["pp"].sent_bytes_per_call) == (1, 1.0)
    assert (rows["tp"].message_bytes, rows["tp"].sent_bytes_per_call) == (2, 2.0)

# --- layers and memory_common ----------------------------------------------------------------------------------


def test_active_params_of_two_experts_top_one():
    """Two expert copies of a 4 x 8 matrix with bias, one active per token: 2 x (32 + 8) = 80 parameters,
    40 of them active; a single (dense) projection's are all active."""
    from mlsyscalc.calc.counts.layers import Linear

    experts = Linear("experts.up_proj", 4, 8, True, "mlp", 2, 1)
    assert experts.params == 80 and experts.active_params == 40
    assert Linear("experts.up_proj", 4, 8, True, "mlp", 3, 2).active_params == 3 * 40 // 3 * 2
    assert Linear("up_proj", 4, 8, True, "mlp").active_params == 40


def test_uncompressed_mla_query_has_no_bias():
    """DeepSeek-V3 with q_lora_rank null (DeepSeek-V2-Lite's form): one bias-free q_proj 7168 -> 128 heads x
    192 replaces q_a_proj (7168 -> 1536), its RMSNorm (1536) and q_b_proj (1536 -> 24576), in each of 61
    layers (transformers DeepseekV3Attention: q_proj bias=False)."""
    from mlsyscalc.calc.counts.params import count_params

    base = load_model("deepseek-v3")
    plain = load_model("deepseek-v3", {"q_lora_rank": None})
    per_layer = 7168 * 24576 - (7168 * 1536 + 1536 + 1536 * 24576)
    assert count_params(plain).total - count_params(base).total == 61 * per_layer


def test_linear_params_per_rank_defaults_to_every_expert():
    """Without ep a rank holds all 8 experts of 64 x 32 with bias: 8 x (2048 + 32)."""
    from mlsyscalc.calc.counts.layers import Linear
    from mlsyscalc.calc.parallel.shards import linear_params_per_rank, linear_weight_per_rank

    up = Linear("experts.up_proj", 64, 32, True, "mlp", 8, 2)
    assert linear_params_per_rank(up, 1) == 8 * (64 * 32 + 32)
    assert linear_weight_per_rank(up, 1) == 8 * 64 * 32


# --- memory_schedule -------------------------------------------------------------------------------------------


def _chunk_of_forward(i: int, pp: int, vp: int) -> int:
    """Narayanan et al. 2021, 2.2.2: a rank runs its forwards in groups of pp micro-batches, chunk 0, 1, ...,
    vp - 1, then chunk 0 again."""
    return (i // pp) % vp


@pytest.mark.parametrize("pp,vp", [(2, 2), (4, 2), (2, 3), (3, 4)])
def test_chunk_forwards_counts_the_schedule_order(pp, vp):
    """chunk_forwards(held, pp, vp, c) = how many of the first `held` forwards are of chunk c, enumerated."""
    from mlsyscalc.calc.memory.schedule import chunk_forwards

    for held in range(3 * pp * vp + 1):
        for chunk in range(vp):
            want = sum(_chunk_of_forward(i, pp, vp) == chunk for i in range(held))
            assert chunk_forwards(held, pp, vp, chunk) == want, (held, chunk)


# --- memory_train ----------------------------------------------------------------------------------------------


def _train(name="gpt2", **kw):
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

    return train_memory(load_model(name), TrainOptions(**{"seq": 128, **kw}))


def test_world_size_is_the_product_of_the_dimensions():
    """dp 2 x tp 2 x pp 3 x cp 2 = 24 GPUs."""
    assert _train(dp=2, tp=2, pp=3, cp=2).world_size == 24
    assert _train(dp=3, tp=4, pp=2).world_size == 24


def test_adafactor_reports_no_unsharded_model_state():
    """Adafactor's factored states have no per-parameter byte count, so the one-GPU figure is 0; AdamW's is
    gpt2's 124,439,808 parameters x (2 + 2 + 4 + 8) bytes."""
    assert _train(optimizer="adafactor").model_state_bytes_unsharded == 0
    assert _train().model_state_bytes_unsharded == 16 * 124_439_808


def test_sequence_parallelism_is_off_by_default():
    """tp 2 without --sp keeps the norm and dropout activations whole on each rank: the same bytes as sp False,
    more than with sp True."""
    plain, off, on = _train(tp=2), _train(tp=2, sp=False), _train(tp=2, sp=True)
    assert plain.stages[0].breakdown == off.stages[0].breakdown
    assert plain.stages[0].breakdown["activations"] > on.stages[0].breakdown["activations"]


def test_torch_gradients_exist_after_an_earlier_backward_of_the_interleaved_step():
    """torch (gradients set to None), pp 2, vp 2, m 2: stage 1 holds 3 of its 4 chunk-forwards at its first
    backward (2 (pp - s - 1) + (vp - 1) pp + 1), so a backward has run: gradients exist, no later phase.
    Stage 0 holds all 4: no backward yet, so its peak has no gradients and a later backward follows."""
    mem = _train(framework="torch", pp=2, vp=2, grad_accum=2)
    first, last = mem.stages
    assert last.micro_batches_in_flight == 3 and set(last.phases) == {"backward", "optimizer"}
    assert first.micro_batches_in_flight == 4
    assert set(first.phases) == {"backward", "later_backward", "backward_end", "optimizer"}


@pytest.mark.parametrize("dp,cp", [(2, 1), (1, 2)])
def test_ddp_buckets_hold_gradients_with_two_replicas(dp, cp):
    """torch ZeRO-0 with dp x cp = 2 replicas: DDP's bucket buffers keep the gradients (2 B a parameter) even at
    the first backward of a single micro-batch (the peak is there); one replica has none there, and at dp 2 the
    per-rank activations are the same, so the backward phases differ by exactly the gradients."""
    mem = _train(framework="torch", dp=dp, cp=cp, seq=1024)
    assert mem.stages[0].phase == "backward"
    assert mem.stages[0].breakdown["gradients"] == 2 * 124_439_808
    if dp == 2:
        alone = _train(framework="torch", seq=1024).stages[0]
        assert mem.stages[0].phases["backward"] - alone.phases["backward"] == 2 * 124_439_808


def test_one_micro_batch_has_no_later_backward():
    """With one micro-batch in flight and no gradients (torch, no replicas) there is no later backward; with
    gradients resident (megatron) there is none either, however many are in flight."""
    assert set(_train(framework="torch").stages[0].phases) == {"backward", "backward_end", "optimizer"}
    for stage in _train(pp=2, grad_accum=4).stages:
        assert set(stage.phases) - {"backward_end"} == {"backward", "optimizer"}


def test_full_recompute_working_set_is_the_largest_layer():
    """DeepSeek-V3 cut to 2 dense then 2 MoE layers, vocabulary 1,000 (so the logits stay smaller): the layer
    being recomputed holds its full activations, the larger of a dense and a MoE layer's. Each layer's full
    activations are read from pp 4 with no recomputation (one layer a stage; stage s holds pp - s
    micro-batches under 1F1B)."""
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

    spec = load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": 2, "vocab_size": 1000})
    split = train_memory(spec, TrainOptions(seq=128, pp=4, grad_accum=4))
    per_layer = [s.detail["activations_layers"] / s.micro_batches_in_flight for s in split.stages]
    assert per_layer[0] == per_layer[1] != per_layer[2] == per_layer[3]
    full = train_memory(spec, TrainOptions(seq=128, recompute="full")).stages[0]
    assert full.detail["activations_recompute_working"] == pytest.approx(max(per_layer), abs=1)
    assert full.detail["temporaries_logits"] == 0


# --- memory_infer ----------------------------------------------------------------------------------------------


def test_unquantised_weights_carry_no_scale_bytes():
    """bf16 weights have no quantisation scales or zero points (0 bytes each); int4 (GPTQ/AWQ) an fp16 scale
    and a packed 4-bit zero point per group of 128: 2 + 0.5 bytes."""
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory

    bf16 = infer_memory(load_model("gpt2"), InferOptions(context=128))
    assert (bf16.bytes_per_element["scale"], bf16.bytes_per_element["zero"]) == (0.0, 0.0)
    assert bf16.detail["weights_scales"] == 0
    int4 = infer_memory(load_model("gpt2"), InferOptions(context=128, dtype="int4"))
    assert (int4.bytes_per_element["scale"], int4.bytes_per_element["zero"]) == (2.0, 0.5)


def test_solve_max_keeps_a_total_equal_to_the_usable_bytes():
    """A batch fits when its total is at most the usable bytes: with exactly batch 3's total usable, the
    largest batch is 3; one byte less, 2."""
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory, solve_max

    spec, opts = load_model("gpt2"), InferOptions(context=512)
    three = infer_memory(spec, InferOptions(context=512, batch=3)).total
    assert solve_max(spec, opts, "batch", three)[0] == 3
    assert solve_max(spec, opts, "batch", three - 1)[0] == 2


def test_group_size_is_checked_against_the_last_layers_experts():
    """DeepSeek-V3 cut to 4 layers, the first dense, then MoE every 3rd layer (moe_layer_freq 3): only layer 3,
    the last, is MoE. Its experts' down_proj reads moe_intermediate_size = 256 columns (128 per rank at tp 2,
    row-parallel), narrower than any dense layer's weight (kv_b_proj reads kv_lora_rank = 512), so an int4 group
    of 384 columns does not fit; 256 does at tp 1."""
    from mlsyscalc.calc.memory.inference import InferOptions

    spec = load_model("deepseek-v3", {"num_hidden_layers": 4, "first_k_dense_replace": 1, "moe_layer_freq": 3,
                                      "moe_intermediate_size": 256})
    assert [spec.layer_is_moe(i) for i in range(4)] == [False, False, False, True]
    InferOptions(dtype="int4", group_size=256).validate(spec)
    with pytest.raises(MlsysError, match=r"--group-size 384 is wider than the narrowest weight input \(256 columns"):
        InferOptions(dtype="int4", group_size=384).validate(spec)
    with pytest.raises(MlsysError, match=r"\(128 columns per rank\)"):
        InferOptions(dtype="int4", group_size=256, tp=2).validate(spec)


@pytest.mark.parametrize("schedule,pp,stage,m,vp,want", [
    ("1f1b", 4, 0, 8, 1, 4), ("1f1b", 4, 3, 8, 1, 1), ("1f1b", 4, 1, 2, 1, 2),  # min(pp - s, m)
    ("gpipe", 4, 2, 8, 1, 8), ("gpipe", 2, 0, 3, 1, 3),  # every micro-batch before any backward
    # interleaved: 2 (pp - s - 1) + (vp - 1) pp + 1 chunk-forwards, at most m vp
    ("1f1b", 4, 0, 8, 2, 11), ("1f1b", 4, 3, 8, 2, 5), ("1f1b", 2, 0, 2, 2, 4), ("1f1b", 2, 1, 4, 3, 5),
])
def test_in_flight_follows_the_schedules(schedule, pp, stage, m, vp, want):
    """Narayanan et al. 2021, section 2.2: forwards a stage holds at its first backward, written out."""
    from mlsyscalc.calc.memory.schedule import in_flight

    assert in_flight(schedule, pp, stage, m, vp) == want


@pytest.mark.parametrize("framework,schedule,held,forwards,zero,replicas,want", [
    ("megatron", "gpipe", 4, 4, 3, 1, True),  # persistent gradient buffers
    ("torch", "1f1b", 1, 1, 0, 2, True),  # DDP buckets
    ("torch", "1f1b", 1, 1, 3, 2, False),  # FSDP2: no buckets, no backward yet
    ("torch", "1f1b", 1, 2, 3, 1, True),  # accumulation: the first micro-batch's backward ran
    ("torch", "gpipe", 2, 4, 0, 1, False),  # GPipe: no backward before the last forward
    ("torch", "1f1b", 1, 1, 0, 1, False),
])
def test_gradients_resident_at_the_activation_peak(framework, schedule, held, forwards, zero, replicas, want):
    """memory_schedule's rule: persistent buffers or DDP buckets always hold gradients; gradients set to None
    exist only once a backward of the step has run (1F1B with more forwards than are in flight)."""
    from mlsyscalc.calc.memory.schedule import grads_resident

    assert grads_resident(framework, schedule, held, forwards, zero, replicas) is want
