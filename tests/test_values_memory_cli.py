"""Second, independent value tests for core-quantity mutants that one test function alone killed
(tools/mutation.py --count-killers; the sites are listed in docs/mutation.md).

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
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

    return train_memory(load_model(model, overrides), TrainOptions(**opts))


def _infer(model: str, overrides: dict | None = None, **opts):
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory

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
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

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
    """--sp splits each CP rank's seq / cp tokens over TP: 4104 / 4 = 1026 tokens do not split over 4 ranks
    (though 4104 does, and 4104 % (2*4) == 0); 4096 / 4 = 1024 do."""
    _mem("llama2-7b", seq=4096, cp=4, tp=4, sp=True)
    with pytest.raises(MlsysError, match=r"rule \(seq/cp\) % tp == 0 with --sp: 1026 is not divisible by 4"):
        _mem("llama2-7b", seq=4104, cp=4, tp=4, sp=True)


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
    ceil(50257 / 2) = 25129 embedding rows + 768 cols, the 1024 x 768 learned positions (a matrix, whole on
    each rank: 1024 + 768), the tied head (the same table on one stage: nothing more), the final
    LayerNorm's weight and bias (2 x 768)."""
    from mlsyscalc.calc.parallel.shards import stage_params

    layer = 3 * (384 + 768 + 384) + (768 + 384 + 768) + (1536 + 768 + 1536) + (768 + 1536 + 768) + 2 * 2 * 768
    factors = 12 * layer + (25129 + 768) + (1024 + 768) + 2 * 768
    assert stage_params(load_model("gpt2"), range(12), True, True, 2, 1, 1).matrix_factors == factors


def _adafactor_state_elements(modules) -> int:
    """Elements of torch.optim.Adafactor's state after one step over the modules' parameters."""
    import torch

    params = list(torch.nn.ModuleList(modules).parameters())
    opt = torch.optim.Adafactor(params)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return sum(v.numel() for s in opt.state.values() for k, v in s.items() if k != "step")


def test_adafactor_states_match_torch_adafactor_on_tiny_models():
    """torch.optim.Adafactor (Shazeer & Stern 2018) after one step keeps a row and a column accumulator for
    every parameter of two or more dimensions and a full one for every vector. Two 1-layer models of width 8
    built in torch as the calculator splits them; the state's element count is stage_params' matrix_factors:
    a gpt2 (2 heads, 16 learned positions, vocabulary 32, tied head: q, k, v, o, up, down with biases, two
    LayerNorms in the layer and a final one, token and position tables) and a llama (2 heads, 1 KV head of 4,
    intermediate 16, no biases, RMSNorm weights, rotary positions: no table, an untied head)."""
    torch = pytest.importorskip("torch")
    from mlsyscalc.calc.parallel.shards import stage_params

    nn, h = torch.nn, 8
    gpt2 = [nn.Linear(h, h) for _ in range(4)] + [nn.Linear(h, 4 * h), nn.Linear(4 * h, h)]
    gpt2 += [nn.LayerNorm(h) for _ in range(3)] + [nn.Embedding(32, h), nn.Embedding(16, h)]
    spec = load_model("gpt2", {"n_embd": h, "n_head": 2, "n_layer": 1, "n_positions": 16, "vocab_size": 32})
    assert stage_params(spec, range(1), True, True, 1, 1, 1).matrix_factors == _adafactor_state_elements(gpt2)
    llama = [nn.Linear(h, h, bias=False), nn.Linear(h, 4, bias=False), nn.Linear(h, 4, bias=False),
             nn.Linear(h, h, bias=False), nn.Linear(h, 16, bias=False), nn.Linear(h, 16, bias=False),
             nn.Linear(16, h, bias=False), nn.Embedding(32, h), nn.Linear(h, 32, bias=False)]
    llama += [nn.RMSNorm(h) for _ in range(3)]
    spec = load_model("llama2-7b", {"hidden_size": h, "num_attention_heads": 2, "num_key_value_heads": 1,
                                    "intermediate_size": 16, "num_hidden_layers": 1, "vocab_size": 32})
    assert stage_params(spec, range(1), True, True, 1, 1, 1).matrix_factors == _adafactor_state_elements(llama)


def test_adafactor_factors_of_opt_project_out_on_the_last_stage():
    """opt-350m at pp 2, the last stage: 12 layers (q, k, v, o 1024 x 1024 with bias: rows + cols + bias rows;
    fc1 1024 -> 4096 and fc2 4096 -> 1024 with bias; two LayerNorms of 2 x 1024), the tied lm_head's own copy
    of the 50272 x 512 table (Megatron keeps one on the last stage) and project_out 1024 -> 512 (rows + cols);
    opt-350m has no final norm."""
    from mlsyscalc.calc.parallel.shards import stage_params

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
    from mlsyscalc.calc.counts.layers import layer_linears
    from mlsyscalc.calc.parallel.shards import linear_params_per_rank

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


# ---- layers and flops: parameter counts and the FLOP approximations ----------------------------------


def test_affine_free_layernorm_has_no_parameters_in_the_cli(run_cli):
    """OPT with layer_norm_elementwise_affine false (torch.nn.LayerNorm(elementwise_affine=False) holds no
    tensors): transformers' opt-350m count less its 24 x 2 LayerNorms of weight and bias (2 x 1024 each)."""
    d = run_cli.json("params", "opt-350m", "--set", "layer_norm_elementwise_affine=false")
    assert d["total_params"] == HF["opt-350m"]["total_params"] - HF["opt-350m"]["by_category"]["norms"]
    assert HF["opt-350m"]["by_category"]["norms"] == 24 * 2 * 2 * 1024 and d["breakdown"]["norms"] == 0


def test_bias_free_layernorm_has_one_parameter_per_element():
    """gpt2 with LayerNorm(bias=False) (torch >= 2.1): each of its 2 x 12 + 1 LayerNorms keeps only the
    768-wide weight, so transformers' 124,439,808 parameters lose 25 x 768 biases."""
    from mlsyscalc.calc.counts.params import count_params

    gpt2 = load_model("gpt2")
    assert count_params(replace(gpt2, norm_bias=False)).total == HF["gpt2"]["total_params"] - 25 * 768
    assert HF["gpt2"]["by_category"]["norms"] == 25 * 2 * 768


def test_active_params_of_two_experts_top_one_in_the_cli(run_cli):
    """mixtral cut to 2 experts, one routed a token: every parameter is active except one expert's gate, up
    and down (3 x 4096 x 14336) in each of 32 layers."""
    d = run_cli.json("params", "mixtral-8x7b", "--set", "num_local_experts=2", "--set", "num_experts_per_tok=1")
    total = 2 * 32000 * 4096 + 32 * (MIX_ATTN + 4096 * 2 + 2 * MIX_EXPERT + 2 * 4096) + 4096
    assert d["total_params"] == total
    assert d["active_params"] == total - 32 * MIX_EXPERT


def test_uncompressed_mla_attention_parameters_in_the_cli(run_cli):
    """DeepSeek-V3 with q_lora_rank null (config.json otherwise: hidden 7168, 128 heads, qk_nope 128 + rope 64,
    v 128, kv_lora_rank 512), per layer: q_proj 7168 -> 128 x 192 (no bias, transformers
    DeepseekV3Attention), kv_a_proj_with_mqa 7168 -> 512 + 64, kv_b_proj 512 -> 128 x (128 + 128), o_proj
    128 x 128 -> 7168; 61 layers."""
    d = run_cli.json("params", "deepseek-v3", "--set", "q_lora_rank=null")
    per_layer = 7168 * 128 * 192 + 7168 * (512 + 64) + 512 * 128 * 256 + 128 * 128 * 7168
    assert d["breakdown"]["attention"] == 61 * per_layer


def test_palm_model_flops_approximation_through_the_cli(run_cli):
    """PaLM (Chowdhery et al. 2022, appendix B): training FLOPs per token 6N + 12 L H Q T, N the matmul
    parameters. gpt2, 1024 tokens: N = 12 x (4 x 768^2 + 2 x 768 x 3072) + the tied head's 50257 x 768;
    L = 12, H = 12, Q = 64, T = 1024. Without the attention term: 6N per token."""
    d = run_cli.json("flops", "gpt2", "--seq", "1024")
    n = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 50257 * 768
    assert d["approx_6n_flops"] == 6 * n * 1024
    assert d["approx_6n_attn_flops"] == (6 * n + 12 * 12 * 12 * 64 * 1024) * 1024


# ---- activations: saved tensors of a layer ------------------------------------------------------------


def test_moe_mlp_saved_defaults_to_dropless_routing():
    """mlp_saved without a capacity factor is dropless (1.0): mixtral's top-2 routing keeps 2 copies of each
    token's 4096-wide input and 2 x 4 x 14336 intermediates, as layer_saved (what memory train uses) lists."""
    from mlsyscalc.calc.counts.activations import layer_saved, mlp_saved

    spec = load_model("mixtral-8x7b")
    got = {i.name: i.per_token for i in mlp_saved(spec, 0, dropout=False)}
    assert got["dispatched expert inputs (k copies)"] == 2 * 4096
    assert got["expert intermediates (k x 4I)"] == 2 * 4 * 14336
    tail = layer_saved(spec, 0, True, False)[-len(got):]
    assert {i.name: i.per_token for i in tail} == got


def test_qk_norm_inputs_of_a_gqa_model():
    """llama3-8b with q/k norms (as Qwen3 and OLMo-2 have): the norms read q (32 heads x 128) and k (8 KV
    heads x 128), bf16, 2048 tokens a layer."""
    from mlsyscalc.calc.memory.training import train_memory

    items = dict(train_memory(replace(load_model("llama3-8b"), qk_norm=True)).activation_items)
    assert items["q/k norm inputs"] == 2048 * (4096 + 1024) * 2


def test_mla_saves_values_of_v_head_dim_in_the_cli(run_cli):
    """DeepSeek-V3 (config.json: 128 heads, v_head_dim 128, qk head 128 + 64 = 192): MLA expands V to every
    head at v_head_dim, K at 192; 2048 tokens, bf16, tp 1."""
    d = run_cli.json("memory", "train", "deepseek-v3", "--set", "num_hidden_layers=4")["activation_bytes_per_layer"]
    assert d["V"] == 2048 * 128 * 128 * 2
    assert d["K (after rotary)"] == 2048 * 128 * 192 * 2


# ---- comm_step: rows of one training step --------------------------------------------------------------

NVL_BW, NVL_LAT = 370e9, 3.4e-6  # hgx-h100 NVLink (model_specs/clusters/hgx-h100.json)


def test_every_dimension_may_overlap_in_the_cli(run_cli):
    """--overlap may name all five dimensions: every row then hides behind compute, nothing is exposed."""
    d = run_cli.json("comm", "step", "llama3-8b", "--dp", "2", "--tp", "2", "--pp", "2", "--seq", "1024",
                     "--overlap", "dp,tp,pp,ep,cp")
    assert {r["dim"] for r in d["rows"]} == {"dp", "tp", "pp"} and all(r["overlapped"] for r in d["rows"])
    assert d["exposed_time_s"] == 0 and d["total_time_s"] > 0


def test_one_byte_p2p_in_the_alpha_beta_model(run_cli):
    """gpt2 cut to width 1 (one head), one fp8 token, pp 2: the boundary activation is 1 B, sent forward and
    its gradient back (2 calls), each alpha + n / beta = 3.4 us + 1 B / 370 GB/s (Hockney's model)."""
    d = run_cli.json("comm", "step", "gpt2", "--set", "n_embd=1", "--set", "n_head=1", "--pp", "2", "--seq", "1",
                     "--dtype", "fp8")
    (row,) = d["rows"]
    assert (row["dim"], row["message_bytes"], row["calls"], row["bytes_per_gpu"]) == ("pp", 1, 2, 2.0)
    assert row["time_s"] == pytest.approx(2 * (NVL_LAT + 1 / NVL_BW), rel=1e-12)


def test_two_expert_gradients_reduce_over_the_expert_replicas(run_cli):
    """mixtral cut to 2 experts, dp 4, ep 2: each GPU keeps one expert a layer, whose bf16 gradients
    (32 x 3 x 4096 x 14336 x 2 B) all-reduce over the dp / ep = 2 ranks holding the same expert."""
    d = run_cli.json("comm", "step", "mixtral-8x7b", "--set", "num_local_experts=2", "--dp", "4", "--ep", "2")
    (row,) = [r for r in d["rows"] if r["dim"] == "dp" and "routed experts" in r["rule"]]
    assert row["group_size"] == 2 and row["message_bytes"] == 2 * 32 * MIX_EXPERT


def test_a_group_of_ranks_is_nodes_times_gpus_per_node():
    """placement's two numbers multiply to the group's size, down to a group of one rank (one GPU, one node)."""
    from mlsyscalc.calc.comm.step import placement

    for size, stride in ((1, 1), (1, 8), (2, 1), (4, 2), (16, 1), (2, 8), (8, 4)):
        nodes, per_node = placement(size, stride, 8)
        assert nodes * per_node == size, (size, stride)


def test_cp_kv_message_with_replicated_kv_heads(run_cli):
    """falcon-40b (128 heads, 8 KV heads of 64) at tp 16: the 8 KV heads are replicated, one a rank, so each
    cp all-gather moves 2048 tokens x 1 head x (64 + 64) x 2 B, as at tp 8 (8 / 8 = 1 head a rank)."""
    rows = [[r for r in run_cli.json("comm", "step", "falcon-40b", "--tp", tp, "--cp", "2")["rows"]
             if r["dim"] == "cp"] for tp in ("8", "16")]
    for cp_rows in rows:
        assert {r["message_bytes"] for r in cp_rows} == {2048 * 1 * 128 * 2}


def test_experts_split_over_ep_not_over_tp(run_cli):
    """mixtral cut to 6 experts at tp 4, dp 2, ep 2: 6 experts split over 2 expert ranks (though not over 4 TP
    ranks); each MoE layer's dispatch and combine, forward and backward, move 2048 tokens x top-2 x 4096 x 2 B."""
    d = run_cli.json("comm", "step", "mixtral-8x7b", "--set", "num_local_experts=6", "--tp", "4", "--dp", "2",
                     "--ep", "2")
    (row,) = [r for r in d["rows"] if r["dim"] == "ep"]
    assert row["message_bytes"] == 2048 * 2 * 4096 * 2 and row["calls"] == 4 * 32


# ---- train: the optimizer step, the breakdown's defaults, host calibration, attention -----------------


def test_optimizer_time_of_the_fullest_sharded_stage_in_the_cli(run_cli):
    """`mlsys train mixtral-8x7b` at pp 2, dp 2, ep 2, ZeRO-1: AdamW (roofline_train.adamw_op) runs over the
    parameters one GPU updates on the fuller stage. Stage 1 (16 layers' attention 4096 x 4096 x 2 +
    4096 x 1024 x 2, router 4096 x 8, 2 norms; the final norm and the 32000 x 4096 head) has 4096 more dense
    parameters than stage 0 (embedding instead of head); ZeRO-1 shards them over dp = 2, and each GPU's 4 of
    the 8 experts (16 x 4 x 3 x 4096 x 14336) over dp / ep = 1 rank."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.training import adamw_op

    d = run_cli.json("train", "mixtral-8x7b", "--gpus", "4", "--gpu", "H100-SXM", "--pp", "2", "--dp", "2",
                     "--ep", "2", "--zero", "1", "--global-batch", "8", "--micro-batch", "1", "--no-clip-grad")
    dense = 16 * (MIX_ATTN + 4096 * 8 + 2 * 4096) + 4096 + 32000 * 4096
    experts = 16 * 4 * MIX_EXPERT
    most = dense // 2 + experts
    expected = adamw_op(most, "bf16", load_ceilings("H100-SXM")).step_s  # with the stream's gap before it
    assert d["breakdown"]["optimizer_s"] == pytest.approx(expected, rel=1e-12)


def test_step_breakdown_parts_add_up_with_the_defaults():
    """step_breakdown with only the required arguments (pp 4, vp 2, 8 micro-batches of 0.01 s forward and
    0.03 s backward, 0.05 s of dp gradient traffic overlapped, 0.5 s optimizer): its parts sum to compute
    8 x 0.04 + bubble (pp - 1) / vp x 0.04 (Narayanan et al. 2021, section 2.2) + the traffic left after
    the 0.03 s backward + the optimizer; no SM contention, no interleaving slowdown, no host time."""
    from mlsyscalc.calc.train.step import step_breakdown
    from mlsyscalc.calc.comm.exposed import Windows

    breakdown, total = step_breakdown(pp=4, vp=2, windows=Windows(0.01, 0.03, 0.004, 8),
                                      seconds={("dp", "grad"): 0.05}, zero=0, recompute="none", overlap=("dp",),
                                      optimizer=0.5)
    hand = 8 * 0.04 + 3 / 2 * 0.04 + (0.05 - 0.03) + 0.5
    assert sum(float(v) for v in breakdown.values()) == pytest.approx(hand, rel=1e-12)
    assert float(breakdown["dp_comm_s"]) == pytest.approx(0.02, rel=1e-12) and float(total["dp"]) == 0.05


@pytest.mark.parametrize("framework,override", [("torch", True), ("torch", False), ("megatron", True),
                                                ("megatron", False)])
def test_framework_source_names_an_override_exactly_when_the_costs_differ(run_cli, tmp_path, framework, override):
    """`mlsys train --calibration FILE`: the JSON's framework_source says the calibration's torch_host
    replaced the costs exactly when host_costs differ from the framework's built-in costs (megatron has no
    host term and ignores the file's torch_host)."""
    import json
    from dataclasses import asdict

    from mlsyscalc.calc.roofline.calibration import read_calibration
    from mlsyscalc.calc.train.host import FRAMEWORKS

    record = read_calibration("model_specs/calibrations/h200-fused.json")
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**record, "torch_host": {"op_s": 2e-5}} if override else record))
    d = run_cli.json("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--tp", "2", "--global-batch", "4",
                     "--micro-batch", "1", "--calibration", str(path), "--framework", framework)
    differs = d["host_costs"] != asdict(FRAMEWORKS[framework])
    assert differs == (framework == "torch" and override)
    assert ("overridden by the calibration file's torch_host" in d["framework_source"]) == differs


def test_unfused_attention_is_slower_than_flash_at_4096_tokens(run_cli):
    """llama2-7b, one GPU, 4096 tokens: unfused attention writes and reads the 32 x 4096 x 4096 scores of
    each layer in HBM (and saves the softmax output), so its step is slower than flash attention's and
    holds more memory (Dao et al. 2022, section 3)."""
    args = ("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--seq", "4096", "--global-batch", "1",
            "--micro-batch", "1")
    flash = run_cli.json(*args, "--attention", "flash")
    unfused = run_cli.json(*args, "--attention", "unfused")
    assert unfused["step_time_s"] > flash["step_time_s"]
    assert unfused["memory_bytes_per_gpu"] > flash["memory_bytes_per_gpu"]
    assert flash["model_flops"] == unfused["model_flops"]


def test_mla_cp_exchange_uses_key_and_value_head_widths(run_cli):
    """deepseek-v3 (config.json: 128 heads, 128 KV heads, qk_nope 128 + qk_rope 64 = 192-wide keys, 128-wide
    values) at tp 8, cp 2: each cp all-gather and reduce-scatter moves 2048 tokens x 128 / 8 heads x
    (192 + 128) x 2 B of K and V (the first test uses a hypothetical narrow-value GQA model through the API)."""
    rows = [r for r in run_cli.json("comm", "step", "deepseek-v3", "--tp", "8", "--cp", "2")["rows"] if r["dim"] == "cp"]
    assert sorted(r["collective"] for r in rows) == ["all-gather", "reduce-scatter"]
    assert {r["message_bytes"] for r in rows} == {2048 * 16 * (192 + 128) * 2}


def test_bytes_override_without_a_value_is_refused_by_the_cli(run_cli):
    """`mlsys memory infer gpt2 --bytes weight` (no `=`): exit 2 and a message naming the item (the first test
    calls the parser directly)."""
    code, out, err = run_cli("memory", "infer", "gpt2", "--bytes", "weight")
    assert code == 2 and "--bytes expects KEY=VALUE, got 'weight'" in err + out


def test_no_flash_prefill_workspace_of_a_gqa_model_through_the_cli(run_cli):
    """mistral-7b (config.json: hidden 4096, 32 heads, 8 KV heads of 128, intermediate 14336), `mlsys memory
    infer --no-flash` at its defaults (batch 1, context 4096, prefill chunk 2048): the attention phase holds
    q 4096, k and v 2 x 1024 (KV heads, not query heads), the output 4096 and 32 heads x 4096 keys of scores per
    token, wider than the MLP's 3 x 14336; plus the residual and the norm output, 2 bytes each."""
    d = run_cli.json("memory", "infer", "mistral-7b", "--no-flash")
    assert (d["batch"], d["context"], d["prefill_chunk"]) == (1, 4096, 2048)
    attn = 4096 + 2 * 1024 + 4096 + 32 * 4096
    assert attn > 3 * 14336
    assert d["detail"]["activations_workspace_bytes"] == 2048 * (2 * 4096 + attn) * 2


def test_expert_replica_group_spans_the_nodes_of_its_ranks(run_cli):
    """mixtral-8x7b (config.json: 8 experts of 3 x 4096 x 14336, 32 layers), dp 16, ep 2 on 8-GPU nodes: one
    expert shard's replicas are every 2nd dp rank, 8 ranks, 4 on each of 2 nodes; at dp 8 they sit on one node.
    The all-reduce moves 4 experts x 32 layers of bf16 gradients."""
    for dp, nodes in (("16", 2), ("8", 1)):
        rows = run_cli.json("comm", "step", "mixtral-8x7b", "--dp", dp, "--ep", "2")["rows"]
        (row,) = [r for r in rows if r["rule"].endswith("(routed experts)")]
        assert (row["group_size"], row["nodes"]) == (int(dp) // 2, nodes)
        assert row["message_bytes"] == 4 * 3 * 4096 * 14336 * 32 * 2
