"""Second, independent value tests for core-quantity mutants that one test function alone killed
(scripts/mutation.py --count-killers; the sites are listed in docs/mutation.md).

Each test reaches the quantity through another entry point than the first test (the CLI's JSON where
the first used the API, `mlsys train` or `mlsys comm step` where it used `mlsys memory train`) or checks
it against another oracle: hand arithmetic from the model's config.json (model_specs/models), a paper's
formula (cited), transformers' parameter counts (tests/data/hf_params.json), or a property that must
hold (parts that add up, a limit case, two commands that must agree, an error that names the problem).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

from .conftest import load_data

HF = load_data("hf_params.json")["models"]  # transformers parameter counts, meta device
H100_BYTES = 81559 * 2**20  # H100-SXM as the driver reports it (model_specs/gpus)

# gpt2 (config.json): hidden 768, 12 layers, 12 heads, vocabulary 50257, 1024 positions, tied head
GPT2_P = 124_439_808
# llama2-7b (config.json): hidden 4096, 32 layers, 32 heads, intermediate 11008, vocabulary 32000
L2_LAYER = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096  # q, k, v, o; gate, up, down; two RMSNorms
L2_P = 32 * L2_LAYER + 2 * 32000 * 4096 + 4096  # + embedding, lm_head, final norm
# mixtral-8x7b (config.json): hidden 4096, 32 layers, 32 heads, 8 KV heads of 128, experts 14336 wide, top 2
MIX_ATTN = 2 * 4096 * 4096 + 2 * 4096 * 1024
MIX_EXPERT = 3 * 4096 * 14336  # gate, up, down of one expert


def _mem(model: str, overrides: dict | None = None, **opts):
    from mlsyscalc.calc.memory_train import TrainOptions, train_memory

    return train_memory(load_model(model, overrides), TrainOptions(**opts))


def _infer(model: str, overrides: dict | None = None, **opts):
    from mlsyscalc.calc.memory_infer import InferOptions, infer_memory

    return infer_memory(load_model(model, overrides), InferOptions(**opts))


# ---- memory_train: option defaults, phases, the recompute working set, world size ---------------------


def test_default_train_options_hold_one_micro_batch_without_sp_and_with_flash():
    """TrainOptions() as an API caller gets it (docs/memory.md: --grad-accum 1, --no-sp, --flash): a 1F1B
    first stage of pp 2 holds min(pp, m) = min(2, 1) = 1 micro-batch (Narayanan et al. 2021, section
    2.2.1); without SP the norm inputs (2 x h a token, bf16) are whole on each of 2 TP ranks, 2 x 4096 x
    2048 x 2 B as at tp 1 (Korthikanti et al. 2022, section 4.2.2); flash saves no softmax output."""
    first = _mem("llama2-7b", pp=2).stages[0]
    assert first.micro_batches_in_flight == 1
    items = dict(_mem("llama2-7b", tp=2).activation_items)
    assert items["norm inputs (2 x h)"] == 2 * 4096 * 2048 * 2
    assert "softmax output" not in items and "Q (after rotary)" in items


def test_cp_ranks_are_gradient_replicas_for_torch_ddp(run_cli):
    """torch with ZeRO-0: the gradient all-reduce spans dp x cp ranks (`mlsys comm step --dp 2 --cp 4`
    prints one over 8 GPUs), so DDP's buckets keep the gradients (2 B a parameter of gpt2) at the first
    backward, also where dp alone is smaller than cp."""
    comm = run_cli.json("comm", "step", "gpt2", "--dp", "2", "--cp", "4")
    (dp_row,) = [r for r in comm["rows"] if r["dim"] == "dp"]
    assert dp_row["group_size"] == 8 and dp_row["message_bytes"] == 2 * GPT2_P
    mem = run_cli.json("memory", "train", "gpt2", "--framework", "torch", "--dp", "2", "--cp", "4")
    assert mem["peak_phase"] == "backward" and mem["gradients_bytes"] == 2 * GPT2_P


def test_torch_one_micro_batch_peaks_at_the_optimizer_step(run_cli):
    """torch, one micro-batch of 128 tokens of llama2-7b: the optimizer step holds bf16 weights and
    gradients, fp32 master weights and two moments, 16 B a parameter (ZeRO, Rajbhandari et al. 2020,
    section 3), more than the first backward (no gradients yet); no later backward exists."""
    d = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--seq", "128")
    assert set(d["phases"]) == {"backward_bytes", "optimizer_bytes"}
    assert d["peak_phase"] == "optimizer" and d["total_bytes"] == 16 * L2_P
    assert d["breakdown"]["activations_bytes"] == 0 and d["breakdown"]["gradients_bytes"] == 2 * L2_P


def test_gpipe_second_backward_holds_every_gradient(run_cli):
    """torch, GPipe, 2 micro-batches of 128 tokens of llama2-7b: the first backward starts with no gradient;
    the second has all of them (2 B each) and one micro-batch's activations, more than the optimizer step's
    16 B a parameter, so it is the peak."""
    d = run_cli.json("memory", "train", "llama2-7b", "--framework", "torch", "--seq", "128",
                     "--schedule", "gpipe", "--grad-accum", "2")
    assert "later_backward_bytes" in d["phases"] and d["peak_phase"] == "later_backward"
    assert d["breakdown"]["gradients_bytes"] == 2 * L2_P
    assert d["phases"]["later_backward_bytes"] > d["phases"]["optimizer_bytes"] == 16 * L2_P


@pytest.mark.parametrize("logits_bytes", [12, 1])
def test_full_recompute_activations_and_temporaries_add_up(logits_bytes):
    """gpt2, 2048 tokens, --recompute full: each of 12 layers keeps its input (768 a token, bf16), the last
    stage the final norm and lm_head inputs (2 x 768); the loss's logits temporaries (50257 a token at
    12 B, or 1 B by override) and the recomputed layer's working set are never both alive: the larger is
    counted, the other is exactly 0."""
    from mlsyscalc.calc.memory_train import TrainOptions, train_memory

    opts = TrainOptions(recompute="full", bytes_overrides=(("logits", float(logits_bytes)),))
    stage = train_memory(load_model("gpt2"), opts).stages[0]
    layer = sum(v for _, v in train_memory(load_model("gpt2")).activation_items)  # one layer's full activations
    logits = 2048 * 50257 * logits_bytes
    ends = 2048 * 2 * 768 * 2
    inputs = 12 * 2048 * 768 * 2
    if logits >= layer:
        assert stage.breakdown["activations"] == inputs + ends
        assert stage.breakdown["temporaries"] == logits
    else:
        assert stage.breakdown["activations"] == pytest.approx(inputs + ends + layer, abs=1)
        assert stage.breakdown["temporaries"] == 0


def test_adafactor_one_gpu_model_state_is_zero_in_the_cli(run_cli):
    """docs/memory.md: `model_state_bytes_unsharded` is parameters x (weight + gradient + optimizer) bytes;
    Adafactor's factored states have no per-parameter size, so it is 0; SGD with momentum: 2 + 2 + 4 + 4."""
    assert run_cli.json("memory", "train", "gpt2", "--optimizer", "adafactor")["model_state_bytes_unsharded"] == 0
    sgd = run_cli.json("memory", "train", "gpt2", "--optimizer", "sgd-momentum")
    assert sgd["model_state_bytes_unsharded"] == 12 * GPT2_P


def test_recompute_working_set_is_the_largest_layer_of_the_model():
    """DeepSeek-V3 cut to 1 dense and 1 MoE layer (vocabulary 1000, 128 tokens): with --recompute full at pp 1 the
    working set is the larger of the two layers' full activations, which pp 2 puts one on each stage."""
    over = {"num_hidden_layers": 2, "first_k_dense_replace": 1, "vocab_size": 1000}
    whole = _mem("deepseek-v3", over, seq=128, recompute="full").stages[0]
    dense, moe = (s.detail["activations_recompute_working"]
                  for s in _mem("deepseek-v3", over, seq=128, recompute="full", pp=2).stages)
    assert dense != moe
    assert whole.detail["activations_recompute_working"] == max(dense, moe)


def test_world_size_check_through_the_cli(run_cli):
    """--world-size must equal dp x tp x pp x cp: 2 x 2 x 2 x 2 = 16 and 1 x 2 x 1 x 4 = 8 pass and are echoed;
    8 for 16 GPUs is refused with the product written out."""
    d = run_cli.json("memory", "train", "llama3-8b", "--dp", "2", "--tp", "2", "--pp", "2", "--cp", "2",
                     "--world-size", "16")
    assert d["parallel"]["world_size"] == 16
    assert run_cli.json("memory", "train", "llama3-8b", "--tp", "2", "--cp", "4", "--world-size", "8")[
        "parallel"]["world_size"] == 8
    code, out, err = run_cli("memory", "train", "llama3-8b", "--dp", "2", "--tp", "2", "--pp", "2", "--cp", "2",
                             "--world-size", "8")
    assert code == 2 and out == "" and "2*2*2*2 = 16" in err


def test_sequence_parallel_needs_the_cp_shard_to_split_over_tp():
    """--sp splits each CP rank's seq / cp tokens over TP: 4100 / 4 = 1025 tokens do not split over 2 ranks
    (though 4100 does); 4096 / 4 = 1024 do."""
    _mem("llama2-7b", seq=4096, cp=4, tp=2, sp=True)
    with pytest.raises(MlsysError, match="--seq over --tp with --sp: 1025 is not divisible by 2"):
        _mem("llama2-7b", seq=4100, cp=4, tp=2, sp=True)


def test_no_vocab_parallel_rank_through_the_cli(run_cli):
    """llama2-7b, tp 2, --no-vocab-parallel: each rank holds half of every layer's projections, both norms
    whole, and the 32000 x 4096 embedding, lm_head and final norm whole: 3,500,412,928 parameters; the
    loss's fp32 logits temporaries cover all 32000 columns (12 B each, 2048 tokens)."""
    per_rank = 32 * ((L2_LAYER - 2 * 4096) // 2 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert per_rank == 3_500_412_928
    d = run_cli.json("memory", "train", "llama2-7b", "--tp", "2", "--no-vocab-parallel")
    assert d["stages"][0]["params"] == per_rank
    assert d["detail"]["temporaries_logits_bytes"] == 2048 * 32000 * 12
    assert d["weights_bytes"] == 2 * per_rank


# ---- memory_common: per-rank parameters, Adafactor factors, the fit verdict --------------------------


def test_adafactor_factors_of_gpt2_at_tp_2():
    """gpt2 at tp 2 (biases everywhere), per rank: column-parallel q, k, v (384 rows + 768 cols + 384 bias
    rows each) and the MLP's up (1536 + 768 + 1536); row-parallel o (768 rows + 384 cols + 768 bias rows)
    and down (768 + 1536 + 768); two LayerNorms of 2 x 768. Outside the layers: the first stage's
    ceil(50257 / 2) = 25129 embedding rows + 768 cols, the 1024 x 768 learned positions (whole), the tied
    head (the same table on one stage: nothing more), the final norm's 768."""
    from mlsyscalc.calc.memory_common import stage_params

    layer = 3 * (384 + 768 + 384) + (768 + 384 + 768) + (1536 + 768 + 1536) + (768 + 1536 + 768) + 2 * 2 * 768
    factors = 12 * layer + (25129 + 768) + 1024 * 768 + 768
    assert stage_params(load_model("gpt2"), range(12), True, True, 2, 1, 1).matrix_factors == factors


def test_adafactor_factors_of_opt_project_out_on_the_last_stage():
    """opt-350m at pp 2, the last stage: 12 layers (q, k, v, o 1024 x 1024 with bias: rows + cols + bias rows;
    fc1 1024 -> 4096 and fc2 4096 -> 1024 with bias; two LayerNorms of 2 x 1024), the tied lm_head's own copy
    of the 50272 x 512 table (Megatron keeps one on the last stage) and project_out 1024 -> 512 (rows + cols);
    opt-350m has no final norm."""
    from mlsyscalc.calc.memory_common import stage_params

    layer = 4 * (1024 + 1024 + 1024) + (4096 + 1024 + 4096) + (1024 + 4096 + 1024) + 2 * 2 * 1024
    got = stage_params(load_model("opt-350m"), range(12, 24), False, True, 1, 1, 2)
    assert got.matrix_factors == 12 * layer + (50272 + 512) + (1024 + 512)


def test_two_experts_split_over_ep_in_zero_and_adafactor(run_cli):
    """mixtral cut to 2 experts, dp 2: with ep 2 each rank keeps one expert a layer. ZeRO-1 shards the dense
    parameters over dp = 2 ranks and the local expert over dp / ep = 1 rank: 12 B (fp32 master + two moments)
    x (dense / 2 + 32 x one expert). Adafactor (ZeRO-0) keeps rows + cols of each local expert matrix
    (gate, up 14336 + 4096; down 4096 + 14336, 4 B each): ep 2 holds 32 x 3 of them fewer than ep 1."""
    over = ("--set", "num_local_experts=2", "--dp", "2")
    routed = 32 * 2 * MIX_EXPERT
    dense = 12_879_138_816 - routed  # `mlsys params`: embedding, lm_head, attention, router, norms
    assert dense == 2 * 32000 * 4096 + 32 * (MIX_ATTN + 4096 * 2 + 2 * 4096) + 4096
    zero1 = run_cli.json("memory", "train", "mixtral-8x7b", *over, "--ep", "2", "--zero", "1")
    assert zero1["optimizer_bytes"] == 12 * (dense // 2 + routed // 2)
    one, two = (run_cli.json("memory", "train", "mixtral-8x7b", *over, "--ep", ep, "--optimizer", "adafactor")
                for ep in ("1", "2"))
    diff = one["detail"]["optimizer_states_bytes"] - two["detail"]["optimizer_states_bytes"]
    assert diff == 4 * 32 * 3 * (4096 + 14336)


def test_a_rank_without_parallelism_holds_every_projection_whole():
    """tp 1 and no ep: each projection of a real layer (MoE experts with their copies, MLA, biases) is held
    whole on the rank, exactly Linear.params."""
    from mlsyscalc.calc.layers import layer_linears
    from mlsyscalc.calc.memory_common import linear_params_per_rank

    for name, layer in (("mixtral-8x7b", 0), ("deepseek-v3", 3), ("gpt2", 0), ("qwen2.5-0.5b", 0)):
        for lin in layer_linears(load_model(name), layer):
            assert linear_params_per_rank(lin, 1) == lin.params, (name, lin.name)


def test_an_exact_fit_fits_through_the_cli(run_cli):
    """`mlsys memory train gpt2 --gpu H100-SXM` with a reserve that leaves exactly the step's bytes usable:
    it fits with 0 headroom; one byte more reserved and it does not (-1)."""
    total = run_cli.json("memory", "train", "gpt2")["total_bytes"]
    exact = run_cli.json("memory", "train", "gpt2", "--gpu", "H100-SXM", "--reserve", f"{H100_BYTES - total}B")
    assert exact["usable_bytes"] == total and exact["fits"] is True and exact["headroom_bytes"] == 0
    short = run_cli.json("memory", "train", "gpt2", "--gpu", "H100-SXM", "--reserve", f"{H100_BYTES - total + 1}B")
    assert short["fits"] is False and short["headroom_bytes"] == -1


@pytest.mark.parametrize("reserve", ["100%", "100.5%"])
def test_reserve_of_the_whole_card_or_more_is_refused_by_the_cli(run_cli, reserve):
    """A percentage reserve must be below 100: the CLI exits 2 with the allowed range named."""
    code, out, err = run_cli("memory", "infer", "gpt2", "--gpu", "H100-SXM", "--reserve", reserve)
    assert code == 2 and out == ""
    assert f"--reserve: percentage must be in [0, 100), got {reserve}" in err


# ---- memory_infer: the prefill workspace, weights, scales, the KV cache, the solver ------------------


def test_unfused_prefill_workspace_of_gpt2_at_tp_2(run_cli):
    """gpt2 at tp 2, no flash, 1024-token context (one 1024-token chunk): per rank q, k, v and the attention
    output are 768 / 2 wide each, and the scores 12 / 2 heads x 1024 keys: 1536 + 6144 = 7680, wider than
    the MLP's 2 x 3072 / 2 (GELU, ungated); plus the residual and the norm output (2 x 768), 2 B each.
    The scores grow with the context at 6 heads x 2 B a token and key (the chunk stays 1024 tokens)."""
    d = run_cli.json("memory", "infer", "gpt2", "--no-flash", "--tp", "2", "--context", "1024")
    assert d["detail"]["activations_workspace_bytes"] == 1024 * (2 * 768 + 4 * 384 + 6 * 1024) * 2
    longer = run_cli.json("memory", "infer", "gpt2", "--no-flash", "--tp", "2", "--context", "2048",
                          "--prefill-chunk", "1024")
    slope = longer["detail"]["activations_workspace_bytes"] - d["detail"]["activations_workspace_bytes"]
    assert slope == 1024 * 6 * 1024 * 2


def test_largest_batch_with_an_exactly_fitting_reserve(run_cli):
    """`mlsys memory infer gpt2 --max batch` with a reserve that leaves exactly batch 5's total usable: the
    answer is 5 with 0 headroom (a total equal to the usable bytes fits)."""
    five = run_cli.json("memory", "infer", "gpt2", "--context", "512", "--batch", "5")["total_bytes"]
    d = run_cli.json("memory", "infer", "gpt2", "--context", "512", "--gpu", "H100-SXM", "--max", "batch",
                     "--reserve", f"{H100_BYTES - five}B")
    assert d["max_batch"] == 5 and d["headroom_bytes"] == 0


def test_group_size_bound_read_from_the_last_layer(run_cli):
    """DeepSeek-V3 cut to 7 layers, layer 0 dense, MoE every 3rd (layers 3 and 6; the last is MoE) with
    256-wide experts: the narrowest weight input is an expert's down_proj, 256 columns; an int4 group of
    320 does not fit and the CLI names it."""
    over = ("--set", "num_hidden_layers=7", "--set", "first_k_dense_replace=1", "--set", "moe_layer_freq=3",
            "--set", "moe_intermediate_size=256", "--dtype", "int4")
    code, _, err = run_cli("memory", "infer", "deepseek-v3", *over, "--group-size", "320")
    assert code == 2 and "--group-size 320 is wider than the narrowest weight input (256 columns per rank)" in err
    assert run_cli("memory", "infer", "deepseek-v3", *over, "--group-size", "256")[0] == 0


def test_kv_cache_is_tokens_cached_times_bytes_per_token():
    """The parts agree: the KV cache is batch x tokens cached per sequence x bytes per token, for a full
    cache (llama3-8b, 3 sequences of 4096), a windowed one (mistral-7b keeps 4096 of 8192) and a paged one
    (1000-token blocks: 5000 slots for 4096 tokens)."""
    for model, opts in (("llama3-8b", dict(batch=3)), ("mistral-7b", dict(context=8192)),
                        ("llama3-8b", dict(block_size=1000))):
        r = _infer(model, **opts)
        assert r.breakdown["kv_cache"] == r.options.batch * r.kv_tokens_cached * r.kv_bytes_per_token
    assert _infer("mistral-7b", context=8192).kv_tokens_cached == 4096


def test_prefill_workspace_takes_the_dense_mlp_over_the_experts(run_cli):
    """DeepSeek-V3 with 16 query heads (so MLA's attention phase, 16 x 192 + 2 x 16 x 192 + 16 x 128 = 11264,
    is narrower): the first 3 dense layers' gated MLP, 3 x 18432, is wider than the routed top-8 x 2048
    experts' 3 x 16384; plus 2 x 7168, 2 B each for a 2048-token chunk."""
    d = run_cli.json("memory", "infer", "deepseek-v3", "--set", "num_attention_heads=16",
                        "--set", "num_key_value_heads=16")
    assert d["detail"]["activations_workspace_bytes"] == 2048 * (2 * 7168 + 3 * 18432) * 2


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_unquantised_weights_report_zero_scale_bytes_in_the_cli(run_cli, dtype):
    """Weights in bf16, fp16 or fp32 have no quantisation scales or zero points: 0 B each, no scale bytes."""
    d = run_cli.json("memory", "infer", "gpt2", "--dtype", dtype)
    assert (d["bytes_per_element"]["scale"], d["bytes_per_element"]["zero"]) == (0.0, 0.0)
    assert d["detail"]["weights_scales_bytes"] == 0


def test_bf16_inference_weights_are_transformers_parameters_times_two():
    """One GPU holds every expert: mixtral's bf16 weights are transformers' 46,702,792,704 parameters x 2 B
    (projections in --dtype, the rest in --base-dtype, both bf16)."""
    r = _infer("mixtral-8x7b")
    assert r.breakdown["weights"] == 2 * HF["mixtral-8x7b"]["total_params"]
    assert r.detail["weights_quantised"] == 2 * 32 * (MIX_ATTN + 4096 * 8 + 8 * MIX_EXPERT)


def test_ungated_mlp_workspace_holds_two_intermediates():
    """pythia-1.4b (GPT-NeoX MLP: dense_h_to_4h, GELU, dense_4h_to_h; no gate): the MLP phase holds the
    8192-wide projection and its activation, 2 x 8192, wider than attention's 4 x 2048; plus 2 x 2048,
    2 B each for a 2048-token chunk."""
    assert _infer("pythia-1.4b").detail["activations_workspace"] == 2048 * (2 * 2048 + 2 * 8192) * 2


def test_int4_group_of_one_column_through_the_cli(run_cli):
    """int4 with --group-size 1: one fp16 scale and one 4-bit zero point per weight, 2.5 B x every projection
    weight of gpt2's 12 layers (4 x 768 x 768 + 2 x 768 x 3072)."""
    d = run_cli.json("memory", "infer", "gpt2", "--dtype", "int4", "--group-size", "1")
    assert d["detail"]["weights_scales_bytes"] == 12 * (4 * 768 * 768 + 2 * 768 * 3072) * 2.5


def test_base_dtype_outside_float_types_is_refused_by_the_cli(run_cli):
    """--base-dtype (embeddings, norms, activations) must be a float type: int8 exits 2 naming the choices."""
    code, out, err = run_cli("memory", "infer", "gpt2", "--base-dtype", "int8")
    assert code == 2 and out == "" and "--base-dtype must be fp32, bf16 or fp16" in err
