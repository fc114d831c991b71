"""Value tests for the survivors of the check sample (docs/mutation.md, seed 7919), written after
that sample was scored. Expected numbers are hand arithmetic from the model's config.json
(model_specs/) written out here, never the code under test.
"""

from __future__ import annotations

import pytest

# llama2-7b: 32 layers of q, k, v, o (4096 x 4096) and gate, up, down (4096 x 11008)
LLAMA2_PROJ = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)


@pytest.mark.parametrize("model,weights,tensors", [
    ("llama2-7b", LLAMA2_PROJ, 32 * 7),
    # mixtral-8x7b: per layer q, o 4096^2; k, v 4096 x 1024; 8 experts x 3 of 4096 x 14336; the
    # router 4096 x 8; one scale per tensor and per expert copy: 4 + 24 + 1 = 29 a layer
    ("mixtral-8x7b", 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 24 * 4096 * 14336 + 4096 * 8), 32 * 29),
])
def test_fp8_weights_have_one_fp32_scale_per_tensor(run_cli, model, weights, tensors):
    # fp8 weights: 1 byte an element and one fp32 scale per tensor (per-tensor scaling, the
    # default of transformer-engine and vLLM's fp8 checkpoints)
    d = run_cli.json("memory", "infer", model, "--dtype", "fp8")
    assert d["detail"]["weights_quantised_bytes"] == weights
    assert d["detail"]["weights_scales_bytes"] == 4 * tensors


def test_adafactor_states_of_llama2_7b_by_hand(run_cli):
    # Adafactor (Shazeer & Stern 2018): a row and a column accumulator per matrix, vectors whole,
    # in fp32 (4 B). llama2-7b per layer: q, k, v, o 4 x (4096 + 4096); gate, up, down
    # 3 x (11008 + 4096); two RMSNorm vectors 2 x 4096. Outside the layers: the embedding
    # (32000 + 4096), the untied lm_head (32000 + 4096) and the final norm (4096).
    layer = 4 * (4096 + 4096) + 3 * (11008 + 4096) + 2 * 4096
    factors = 32 * layer + 2 * (32000 + 4096) + 4096
    assert factors == 2_836_992
    d = run_cli.json("memory", "train", "llama2-7b", "--optimizer", "adafactor")
    assert d["detail"]["optimizer_states_bytes"] == 4 * factors


def test_group_size_bound_reads_the_last_layer_kind(run_cli):
    # deepseek-v3 cut to 4 layers, the first 3 dense, the last MoE: under --tp 8 the MoE layer's
    # expert down_proj (2048 inputs, row-parallel) gives 256 columns a rank; the dense layers'
    # narrowest would be kv_b_proj's 512 (column-parallel, whole)
    code, _, err = run_cli("memory", "infer", "deepseek-v3", "--set", "num_hidden_layers=4",
                           "--set", "first_k_dense_replace=3", "--dtype", "int4", "--group-size", "512", "--tp", "8")
    assert code == 2 and "(256 columns per rank)" in err


def test_dense_gated_mlp_activation_reads_gate_and_up(run_cli):
    # llama3-8b (SwiGLU, I = 14336), 1024-token prefill, bf16: SiLU(gate) * up reads both
    # 1024 x 14336 inputs and writes one
    d = run_cli.json("roofline", "model", "llama3-8b", "--seq", "1024", "--no-fit-check")
    (act,) = [o for o in d["ops"] if o["name"].startswith("mlp_act")]
    assert act["name"] == "mlp_act*up"
    assert (act["read_bytes"], act["write_bytes"]) == (2 * 1024 * 14336 * 2, 1024 * 14336 * 2)


def test_gpt_neox_defaults_to_a_parallel_residual():
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    # transformers' GPTNeoXConfig: use_parallel_residual defaults to True (attention and MLP
    # read the same input, as pythia was trained)
    raw = {k: v for k, v in builtin_configs()["pythia-1.4b"].items() if k != "use_parallel_residual"}
    assert from_hf_config(raw, name="neox-default", source="test").parallel_attention is True
    raw["use_parallel_residual"] = False
    assert from_hf_config(raw, name="neox-serial", source="test").parallel_attention is False


def test_layer_types_count_the_sliding_layers():
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    # a llama config with a 4096-token window on 24 of its 32 layers, listed per layer
    raw = dict(builtin_configs()["llama3-8b"], sliding_window=4096,
               layer_types=["sliding_attention"] * 3 * 8 + ["full_attention"] * 8)
    spec = from_hf_config(raw, name="llama-sliding", source="test")
    assert (spec.sliding_window, spec.sliding_window_layers) == (4096, 24)


def test_builtin_gpus_are_datasheet_figures_not_calibrated():
    from mlsyscalc.specs.gpu import builtin_gpus

    assert builtin_gpus() and not any(spec.calibrated for spec in builtin_gpus().values())


def test_plan_shows_five_layouts_unless_told(run_cli):
    # `mlsys plan` lists the 5 fastest fitting layouts by default (--top 5), fewer only when fewer fit
    d = run_cli.json("plan", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--global-batch", "8")
    assert d["feasible"] >= 5 and len(d["candidates"]) == 5
    d = run_cli.json("plan", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--global-batch", "8", "--top", "2")
    assert len(d["candidates"]) == 2


def test_kv_cache_write_casts_without_arithmetic():
    from mlsyscalc.calc.roofline.memory_bound import copy_cast_op

    # new K/V of 1000 elements: read in bf16 (2 B), written into an fp8 cache (1 B), no FLOPs
    op = copy_cast_op(1000, "bf16", "fp8")
    assert (op.read_bytes, op.write_bytes, op.flops) == (2000, 1000, 0)


# --- scaling-law fits --------------------------------------------------------------------------------

def test_fit_starts_from_the_published_grid():
    from mlsyscalc.calc.scaling.fit import PAPER_GRID

    # Hoffmann et al. 2022, appendix D.2: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1},
    # a, b in {0, 5, ..., 25}
    assert PAPER_GRID == {"alpha": (0.0, 0.5, 1.0, 1.5, 2.0), "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
                          "e": (-1.0, -0.5, 0.0, 0.5, 1.0), "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
                          "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)}


def test_fit_reports_its_huber_objective_and_rms_residual():
    import math
    import random

    from mlsyscalc.calc.scaling.fit import FitOptions, Runs, fit_runs

    # 5 x 5 runs from L = 1.8 + 450 / N^0.34 + 1800 / D^0.37 with 2% multiplicative noise
    rng = random.Random(3)
    n = [p for p in (1e7, 3e7, 1e8, 3e8, 1e9) for _ in range(5)]
    d = [t for _ in range(5) for t in (1e9, 3e9, 1e10, 3e10, 1e11)]
    loss = [(1.8 + 450 / p**0.34 + 1800 / t**0.37) * math.exp(rng.gauss(0, 0.02)) for p, t in zip(n, d)]
    result = fit_runs(Runs(tuple(n), tuple(d), tuple(loss)), FitOptions(starts=40, bootstrap=0))
    # residuals of the fitted law in log space; Huber with delta = 1e-3 (quadratic inside,
    # linear outside), summed unscaled; the rms of the same residuals
    r = [math.log(result.fit.loss(p, t)) - math.log(v) for p, t, v in zip(n, d, loss)]
    huber = sum(0.5 * x * x if abs(x) <= 1e-3 else 1e-3 * (abs(x) - 0.5e-3) for x in r)
    assert result.objective == pytest.approx(huber, rel=1e-6, abs=0)
    assert result.rms_log_residual == pytest.approx(math.sqrt(sum(x * x for x in r) / len(r)), rel=1e-9, abs=0)


def test_roofline_accepts_zero_stages_0_to_3_only(run_cli):
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.errors import MlsysError
    from mlsyscalc.specs.lookup import load_model

    assert run_cli.json("roofline", "model", "gpt2", "--phase", "train", "--dp", "2", "--zero", "3",
                        "--seq", "1024")["zero"] == 3
    with pytest.raises(MlsysError, match="zero stage must be 0, 1, 2 or 3, got 4"):
        RooflineOptions(phase="train", seq=1024, dp=2, zero=4).validate(load_model("gpt2"))


# --- serving ---------------------------------------------------------------------------------------------

def test_disaggregated_layout_counts_every_instance_gpu():
    from mlsyscalc.calc.serve.disagg import Layout

    # 2 prefill instances of tp 2 and 1 decode instance of tp 4: 2 x 2 + 1 x 4 = 8 GPUs
    assert Layout(prefill=2, decode=1, tp_prefill=2, tp_decode=4).gpus == 8


def test_identical_isolated_requests_take_identical_times(run_cli, tmp_path):
    # three equal requests 1000 s apart never share an iteration: the engine must leave no trace
    # of the earlier ones (KV blocks, decode keys), so every latency is the same for all three
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,300,50\n1000,300,50\n2000,300,50\n")
    d = run_cli.json("serve", "llama3-8b", "--trace", str(trace))
    for metric in ("e2e", "ttft", "tpot"):
        assert d[f"{metric}_p99_s"] == pytest.approx(d[f"{metric}_p50_s"], rel=1e-9, abs=0), metric


def test_chunked_prefill_packs_the_token_budget(run_cli, tmp_path):
    # sarathi with 256-token iterations, four 1000-token prompts at t = 0, 2 output tokens each:
    # 4000 prompt tokens and the 3 decodes of A, B, C fill ceil(4003 / 256) = 16 iterations;
    # D's decode needs its prefill done first: a 17th
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n" + "0,1000,2\n" * 4)
    d = run_cli.json("serve", "llama3-8b", "--trace", str(trace), "--scheduler", "sarathi", "--chunk", "256")
    assert d["iterations"] == 17


def test_serving_reads_the_decode_attention_rate_at_64_sequences():
    # decode attention rows take their seconds per FLOP from 64 sequences of one token over a
    # 4096-token context (the prefill rate's length)
    from mlsyscalc.calc.roofline.model import predict_model
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.calc.serve.iteration import IterationCost
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("llama3-8b"), resolve_ceilings("H100-SXM")
    cost = IterationCost(spec, ceil, RooflineOptions())
    run = predict_model(spec, ceil, RooflineOptions(phase="decode", batch=64, seq=1, context=4096,
                                                    check_fit=False, window="full"))
    (attn,) = [r.pred for r in run.rows if r.pred.kind == "attention"]
    (row,) = cost.decode_rows
    assert row.seconds_per_flop == pytest.approx(attn.compute_s / attn.flops, rel=1e-9, abs=0)


def test_a_request_larger_than_the_kv_cache_names_its_blocks(run_cli):
    # 500 prompt + 100 output tokens = 600 tokens = ceil(600 / 16) = 38 blocks of 16
    code, _, err = run_cli("serve", "llama3-8b", "--rate", "1", "--requests", "2", "--prompt-len", "500",
                           "--output-len", "100", "--kv-blocks", "30")
    assert code == 2 and "a request of 500 + 100 tokens needs 38 KV blocks; the GPU holds 30" in err


def test_swapping_keeps_the_kv_block_count_between_empty_and_full(run_cli):
    # 100 blocks of 16 tokens for 60 requests of 256 + 256 tokens (32 blocks each) arriving at
    # 50/s: sequences are swapped out and back in; the blocks in use stay within [0, 100]
    d = run_cli.json("serve", "llama3-8b", "--kv-blocks", "100", "--preemption", "swap", "--rate", "50",
                     "--requests", "60", "--prompt-len", "256", "--output-len", "256")
    assert d["preemptions"] > 0 and d["kv_utilization_max"] == 1.0
    assert all(0.0 <= s["kv_utilization"] <= 1.0 for s in d["series"])
    assert 0.0 < d["kv_utilization_mean"] <= 1.0


def test_speculation_verdict_prices_the_plain_step_at_context_plus_one_keys():
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, speculation
    from mlsyscalc.specs.lookup import load_model

    # a decode step of 4 sequences at context 1000 attends over 1000 cached keys + its own token:
    # 4 x 1001 keys; the draft's k = 4 passes add 4 keys per pass, and verification covers k + 1
    sd = speculation(load_model("llama3-70b"), load_model("llama3-8b"), resolve_ceilings("H100-SXM"),
                     ServeOptions(tp=4, spec_k=4, accept=0.8))
    v = sd.verdict(4, 1000)
    assert v["plain_step_s"] == sd.target.decode_s(4, 4 * 1001)
    assert v["draft_s"] == sum(sd.draft.decode_s(4, 4 * 1001 + 4 * i) for i in range(4))
    # verification is a prefill of k + 1 = 5 new tokens on each of the 4 sequences over their 1000
    # cached ones, every token sampled: causal pairs 4 x (5 x 1000 + 5^2 / 2)
    from mlsyscalc.calc.serve.iteration import Batch

    batch = Batch.of(chunks=((5, 1000),) * 4, samples=20)
    assert batch.prefill_pairs == 4 * (5 * 1000 + 25 / 2)
    assert v["verify_s"] == pytest.approx(sd.target.time_s(batch), rel=1e-12, abs=0)


@pytest.mark.parametrize("scheduler", ["static", "vllm", "vllm-v1"])
def test_a_lone_request_waits_one_prefill_for_its_first_token(run_cli, tmp_path, scheduler):
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost
    from mlsyscalc.calc.serve.iteration import Batch
    from mlsyscalc.specs.lookup import load_model

    # one 4000-token prompt arriving at t = 0 on an idle H100: its first token comes after one
    # prefill iteration of 4000 new tokens (causal pairs 4000^2 / 2; at this length attention is
    # compute-bound, so the pair count shows in the time), whatever the scheduler (vllm-v1's 8192-token
    # budget on an H100 takes it in one chunk); the iteration's cost is the simulator's, host time included
    trace = tmp_path / "one.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,4000,1\n")
    d = run_cli.json("serve", "llama3-8b", "--trace", str(trace), "--scheduler", scheduler)
    cost = iteration_cost(load_model("llama3-8b"), resolve_ceilings("H100-SXM"), ServeOptions())
    batch = Batch.of(chunks=((4000, 0),))
    assert batch.prefill_pairs == 4000 * 4000 / 2
    assert d["ttft_p50_s"] == pytest.approx(cost.time_s(batch), rel=1e-12, abs=0)


# --- train -------------------------------------------------------------------------------------------

def test_no_recomputation_adds_no_flops(run_cli):
    # without recomputation the hardware FLOPs are the model FLOPs: recompute_flops 0, HFU = MFU
    d = run_cli.json("train", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--tp", "8")
    # (equal to rounding: the two ratios divide the same FLOPs by the step along different paths)
    assert d["recompute_flops"] == 0 and d["hfu"] == pytest.approx(d["mfu"], rel=1e-12, abs=0)


def test_context_parallel_needs_two_chunks_per_rank(run_cli):
    # load-balanced CP cuts each sequence into 2 x cp chunks: 2050 tokens do not split into 4
    code, _, err = run_cli("train", "llama3-8b", "--gpus", "16", "--gpu", "H100-SXM", "--tp", "8", "--cp", "2",
                           "--seq", "2050")
    assert code == 2 and "seq % (2*cp) == 0" in err and "2050 is not divisible by 4" in err


def test_adafactor_first_pipeline_stage_by_hand(run_cli):
    # llama2-7b --pp 2: stage 0 holds 16 layers and the embedding. Its optimizer bytes are the
    # fp32 master copy (4 B x its parameters) plus Adafactor's fp32 accumulators: per layer
    # 4 x (4096 + 4096) + 3 x (11008 + 4096) + 2 x 4096, the embedding 32000 + 4096
    layer_params = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    layer_factors = 4 * (4096 + 4096) + 3 * (11008 + 4096) + 2 * 4096
    master = 4 * (16 * layer_params + 32000 * 4096)
    states = 4 * (16 * layer_factors + 32000 + 4096)
    stages = run_cli.json("memory", "train", "llama2-7b", "--optimizer", "adafactor", "--pp", "2")["stages"]
    assert stages[0]["breakdown"]["optimizer_bytes"] == master + states == 13_482_488_832


def test_group_size_bound_of_a_last_moe_layer_through_the_api():
    from mlsyscalc.calc.memory.inference import InferOptions
    from mlsyscalc.errors import MlsysError
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    # deepseek-v3 with 6 layers, 5 dense then 1 MoE, under tp 16: the MoE layer's experts'
    # down_proj (2048 inputs, row-parallel) keep 128 columns a rank; every dense input is wider
    raw = dict(builtin_configs()["deepseek-v3"], num_hidden_layers=6, first_k_dense_replace=5)
    spec = from_hf_config(raw, name="deepseek-6", source="test")
    InferOptions(dtype="int4", group_size=128, tp=16).validate(spec)
    with pytest.raises(MlsysError, match=r"\(128 columns per rank\)"):
        InferOptions(dtype="int4", group_size=256, tp=16).validate(spec)


def test_recomputed_flops_per_mode_by_hand():
    from mlsyscalc.calc.counts.flops import FlopOptions, count_flops
    from mlsyscalc.calc.train.step import model_flops
    from mlsyscalc.calc.train.options import TrainStepOptions
    from mlsyscalc.specs.lookup import load_model

    # llama3-8b, one 2048-token sequence: selective recomputation re-runs the causal attention
    # core (QK^T and PV: 2 matmuls x 2 FLOPs x 2048^2 x 4096, halved by the mask, 32 layers);
    # full re-runs the whole forward except the lm_head (2 x 2048 x 4096 x 128256); none adds 0
    spec = load_model("llama3-8b")
    core = 32 * 2 * 2 * 2048**2 * 4096 // 2
    head = 2 * 2048 * 4096 * 128256
    forward = count_flops(spec, FlopOptions(batch=1, seq=2048, causal=True)).forward
    extra = {mode: model_flops(spec, TrainStepOptions(recompute=mode))[1] for mode in ("none", "selective", "full")}
    assert extra == {"none": 0, "selective": core, "full": forward - head}


@pytest.mark.parametrize("tp,weights", [(1, 357_826_560), (2, 357_826_560 // 2)])
def test_fp8_qwen_weights_and_per_tensor_scales_through_the_api(tp, weights):
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
    from mlsyscalc.specs.lookup import load_model

    # qwen2.5-0.5b: 24 layers of q, o (896 x 896), k, v (896 x 2 KV heads x 64) and gate, up,
    # down (896 x 4864): 24 x (2 x 896^2 + 2 x 896 x 128 + 3 x 896 x 4864) = 357,826,560 fp8
    # bytes, split by tp; one fp32 scale per tensor, each rank keeping one for its shard: 24 x 7 x 4
    assert 24 * (2 * 896**2 + 2 * 896 * 128 + 3 * 896 * 4864) == 357_826_560
    detail = infer_memory(load_model("qwen2.5-0.5b"), InferOptions(dtype="fp8", tp=tp)).detail
    assert detail["weights_quantised"] == weights and detail["weights_scales"] == 24 * 7 * 4


def test_plan_explains_the_win_by_the_part_that_shrank_most():
    from types import SimpleNamespace

    from mlsyscalc.calc.parallel.pipeline_split import EVEN
    from mlsyscalc.calc.plan.search import why

    # the best layout (tp 2) against the fastest rival with other choices (tp 4): compute equal,
    # TP communication 0.9 s -> 0.5 s, bubble 0.3 s -> 0.2 s: 0.5 s less in all, mostly TP comm
    def step(tp, compute, comm, bubble):
        return SimpleNamespace(options=SimpleNamespace(layout=lambda: {"tp": tp, "pp": 1}, pipeline_split=EVEN),
                               breakdown={"compute_s": compute, "tp_comm_s": comm, "bubble_s": bubble},
                               step_time_s=compute + comm + bubble)

    line = why(step(2, 1.0, 0.5, 0.2), step(4, 1.0, 0.9, 0.3))
    assert line == ("1.7 s per step, 0.5 s less than the best layout with other tp/pp/ZeRO/recompute "
                    "choices (tp 4->2), mostly tp_comm_s (0.4 s less)")
