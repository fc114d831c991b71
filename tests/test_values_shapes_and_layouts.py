"""Value tests for the fresh-family mutants of the train half that survived
(reports/mutation/fresh_train_half_seed5501.jsonl; docs/mutation.md, "Fresh family, train and holdout halves").

Classes, not single sites: every `require` of the calculators that no other test triggered, each with the
message that names the problem (a swapped `require(message, condition)` never raises); look-alike fields on
models where they differ (value heads narrower than query/key heads, tensor vs pipeline ranks); dropped terms
where the dropped term is not zero.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mlsyscalc.calc.counts.attention import AttentionShape
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.calibration_fit import Observation, fit
from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.calc.parallel.shards import reserve_bytes
from mlsyscalc.calc.memory.training import TrainOptions
from mlsyscalc.calc.plan.space import PlanOptions, parse_fix
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.ops import predict_attention
from mlsyscalc.calc.roofline.sweep import sweep_batch
from mlsyscalc.calc.scaling.calculators import BudgetOptions, budget, optimal
from mlsyscalc.calc.scaling.fit import FitOptions, Runs, check_runs, fit_runs
from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, speculation, sweep_rates
from mlsyscalc.calc.serve.disagg import Layout, simulate_disagg
from mlsyscalc.calc.serve.workload import parse_length
from mlsyscalc.calc.train.host import framework_costs, host_overrides
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.gpu import load_gpu
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("H100-SXM")
HGX = load_cluster("hgx-h100")
LLAMA, GPT2, MIXTRAL = load_model("llama3-8b"), load_model("gpt2"), load_model("mixtral-8x7b")


def _roofline(**kw):
    return predict_model(GPT2, H100, RooflineOptions(**{"phase": "prefill", "seq": 16, **kw}))


def _memory(**kw):
    return TrainOptions(**kw).validate(GPT2)


def _train(**kw):
    return TrainStepOptions(**{"gpus": 1, "seq": 1024, **kw}).validate(GPT2, HGX)


def _work():
    return WorkloadSpec(parse_length("100", "p"), parse_length("4", "o"), 1.0, 2, 5).build()


_OBS = Observation("step", 0.0, (), (1.0, 1.0, 1.0, 1.0))
_N, _D = (1e8, 4e8, 1.6e9), (1e9, 4e9, 1.6e10)  # a 3 x 3 grid: log N and log D uncorrelated
_RUNS = Runs(tuple(n for n in _N for _ in _D), tuple(d for _ in _N for d in _D), tuple(2.0 + 0.1 * i for i in range(9)))

# (call, the message it must raise): one row per check that no other test reached
REFUSED = [
    (lambda: AttentionShape(0, 8, 8, 16, 16, 64), "attention sizes must be positive"),
    (lambda: AttentionShape(1, 8, 3, 16, 16, 64), "heads 8 not divisible by kv_heads 3"),
    (lambda: fit([], {}), "calibrate: no measured rows to fit"),
    (lambda: fit([_OBS], {}), "calibrate: measured times must be positive"),
    (lambda: step_comm(LLAMA, StepOptions(dp=2, overlap=("xp",))), "overlap: unknown dimension in ('xp',)"),
    (lambda: reserve_bytes(80 * 10**9, "100%"), "--reserve: percentage must be in [0, 100), got 100%"),
    (lambda: _memory(offload="disk"), "--offload must be one of none, optimizer"),
    (lambda: _memory(schedule="zb"), "--schedule must be one of 1f1b, gpipe, zb1p, dualpipe, got 'zb'"),
    (lambda: _memory(framework="jax"), "--framework must be one of megatron, torch, got 'jax'"),
    (lambda: _memory(recompute="half"), "--recompute must be one of none, selective, full"),
    (lambda: _memory(vp=2), "rule vp needs pp > 1: the interleaved schedule splits a pipeline"),
    (lambda: _memory(offload="optimizer"), "--offload optimizer needs --zero 1, 2 or 3 (ZeRO-Offload)"),
    (lambda: _memory(dp=2, tp=2, world_size=8), "rule tp*pp*dp*cp == gpus: 2*1*2*1 = 4, not --world-size 8"),
    (lambda: step_comm(MIXTRAL, StepOptions(dp=12, pp=2, ep=2, seq=3072)),
     "rule whole groups per node: the group of 12 ranks (stride 1) puts an uneven share on each 8-GPU node"),
    (lambda: PlanOptions(gpus=8, framework="torch", fix=(("ep", 2),)).validate(),
     "--fix ep=2 with --framework torch: torch.distributed has no expert parallelism"),
    (lambda: parse_fix(("tq=2",)), "--fix 'tq=2': expected AXIS=VALUE with AXIS one of"),
    (lambda: parse_fix(("sp=maybe",)), "--fix 'sp=maybe': sp is on or off"),
    (lambda: parse_fix(("recompute=most",)), "--fix 'recompute=most': recompute is one of none, "),
    (lambda: parse_fix(("tp=two",)), "--fix 'tp=two': not a valid count"),
    (lambda: predict_attention(1, 8, 8, 16, 16, 64, window=8), "attention: a window needs a causal mask and W >= 1"),
    (lambda: _roofline(phase="serve"), "phase must be one of prefill, decode, train, got 'serve'"),
    (lambda: _roofline(tp=0), "tp must be a positive integer, got 0"),
    (lambda: _roofline(logits="first"), "logits must be one of all, last, got 'first'"),
    (lambda: _roofline(phase="train", launch="lazy"), "launch must be one of graph, eager"),
    (lambda: _roofline(phase="train", logits="last"), "--logits last is an inference convention"),
    (lambda: _roofline(window="half"), "window must be one of "),
    (lambda: _roofline(recompute="full"), "--recompute, --dp, --zero and --dp-overlap apply to --phase train only"),
    (lambda: _roofline(phase="train", recompute="half"), "recompute must be one of none, selective, full, got 'half'"),
    (lambda: RooflineOptions(dp=0)._validate_train(), "dp must be a positive integer, got 0"),  # validate() checks tp x dp first
    (lambda: _roofline(phase="train", zero=1), "--zero and --dp-overlap need --dp N > 1"),
    (lambda: sweep_batch(GPT2, H100, RooflineOptions(phase="prefill", seq=16), []),
     "--sweep batch=... needs at least one value"),
    (lambda: sweep_batch(GPT2, H100, RooflineOptions(phase="prefill", seq=16), [4, 0]),
     "--sweep batch values must be positive integers"),
    (lambda: optimal(tokens=1e300), "tokens 1e+300 is out of range for "),
    (lambda: budget(1e15, compute_flops=1e20, options=BudgetOptions(mfu=1.5)), "MFU must be in (0, 1], got 1.5"),
    (lambda: budget(1e15, compute_flops=1e20, options=BudgetOptions(gpus=0)), "gpus must be at least 1, got 0"),
    (lambda: budget(1e15), "give exactly one of compute, GPU-hours, days or cost"),
    (lambda: budget(1e15, compute_flops=1e20, gpu_hours=10.0), "give exactly one of compute, GPU-hours, days or cost"),
    (lambda: check_runs(replace(_RUNS, loss=(3.0,) * 9)), "every run has the same loss: nothing to fit"),
    (lambda: check_runs(replace(_RUNS, params=tuple(float(i + 1) * 1e8 for i in range(9)), tokens=tuple(float(i + 1) * 2e9 for i in range(9)))),
     "log(params) and log(tokens) move together (correlation 1.0000)"),
    (lambda: fit_runs(_RUNS, FitOptions(ci=1.0)), "confidence level must be in (0, 1), got 1.0"),
    (lambda: speculation(LLAMA, LLAMA, H100, ServeOptions(scheduler="static")),
     "--draft needs an iteration-level scheduler (orca, vllm, sarathi, vllm-v1)"),
    (lambda: speculation(LLAMA, GPT2, H100, ServeOptions()),
     "draft gpt2 has a 50257-token vocabulary, llama3-8b 128256: speculative decoding needs the same tokenizer"),
    (lambda: sweep_rates(LLAMA, H100, WorkloadSpec(parse_length("100", "p"), parse_length("4", "o"), 1.0, 2, 5), ()),
     "--sweep rate=... needs at least one rate"),
    (lambda: simulate_disagg(LLAMA, H100, _work(), ServeOptions(scheduler="static"), Layout(1, 1), HGX),
     "--disagg needs an iteration-level scheduler (orca, vllm, sarathi, vllm-v1)"),
    (lambda: framework_costs("jax"), "--framework must be one of megatron, torch, got 'jax'"),
    (lambda: host_overrides({"torch_host": 3}), "calibration: torch_host must be an object"),
    (lambda: host_overrides({"torch_host": {"launch": 1e-6}}), "calibration: torch_host keys are "),
    (lambda: host_overrides({"torch_host": {"op_s": 2}}), "calibration: torch_host.op_s must be a number in [0, 1)"),
    (lambda: _train(schedule="zb"), "--schedule must be one of 1f1b, gpipe, zb1p, dualpipe, got 'zb'"),
    (lambda: _train(framework="jax"), "--framework must be one of megatron, torch, got 'jax'"),
    (lambda: _train(gpus=2, pp=2, vp=2, schedule="gpipe"), "--vp interleaves the 1F1B schedule: not with --schedule gpipe"),
    (lambda: _train(comm_sms=-1), "--comm-sms must be a non-negative integer, got -1"),
    (lambda: _train(capacity_factor=0.0), "--capacity-factor must be in (0, 100), got 0.0"),
    (lambda: _train(vp=2), "rule vp needs pp > 1: the interleaved schedule splits a pipeline"),
    (lambda: _train(gpus=2, cp=2, attention="unfused"), "--attention unfused has no context parallelism"),
    (lambda: load_gpu("  "), "empty GPU name; `mlsys gpus` lists them"),
]


@pytest.mark.parametrize("call,message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_each_check_refuses_with_a_message_naming_the_problem(call, message):
    """Oracle: the message text of each check (docs of each command list the same rules); the call breaks
    exactly that one rule, so the check must raise MlsysError saying so."""
    with pytest.raises(MlsysError, match=re.escape(message)):
        call()


# --- look-alike fields: value heads narrower than query/key heads -----------------------------------------

# A GQA model whose value heads are narrower than its query/key heads (llama3-8b with v_head_dim 64, a
# hypothetical built with dataclasses.replace; MLA is the built-in case, but its cache is a latent). Every
# formula names K and V widths apart, so reading one for the other moves a number below.
NARROW_V = replace(LLAMA, v_head_dim=64)
DK, DV, KV_HEADS, HEADS, LAYERS = 128, 64, 8, 32, 32


def test_narrow_value_heads_in_the_kv_cache_and_decode_kernels():
    """Hand arithmetic: a token caches kv_heads x (d_k + d_v) = 8 x 192 elements per layer. Decode, batch 2,
    context 1000: the cache at the end holds 2 x 1001 tokens x 32 layers x 1536 x 2 bytes; the append kernel
    writes 2 tokens x 1536 x 2 bytes (fused) or K and V apart (torch: 8 x 128 and 8 x 64 per token); the
    attention kernel reads Q, K (d_k) and V (d_v), writes 32 heads x d_v, and does 2 x 1001 x 32 x (d_k + d_v)
    FLOPs per sequence; v_proj is 4096 -> 8 x 64, o_proj 32 x 64 -> 4096."""
    per_token = KV_HEADS * (DK + DV)
    assert NARROW_V.kv_cache_elements_per_token == per_token
    opts = RooflineOptions(phase="decode", batch=2, context=1000)
    fused = predict_model(NARROW_V, H100, opts)
    assert fused.kv_cache_bytes == 2 * 1001 * LAYERS * per_token * 2
    rows = {r.pred.name: r.pred for r in fused.rows}
    assert rows["kv_cache_write"].write_bytes == 2 * per_token * 2
    att = rows["attention"]
    assert att.flops == 2 * 2 * 1001 * HEADS * (DK + DV)
    assert att.read_bytes == 2 * 2 * (HEADS * DK + 1001 * KV_HEADS * (DK + DV))
    assert att.write_bytes == 2 * HEADS * DV * 2
    assert (rows["v_proj"].shape, rows["o_proj"].shape) == ("2x512x4096", "2x4096x2048")
    torch_rows = {r.pred.name: r.pred for r in predict_model(NARROW_V, H100, replace(opts, impl="torch")).rows}
    assert torch_rows["kv_cache_write.k"].write_bytes == 2 * KV_HEADS * DK * 2
    assert torch_rows["kv_cache_write.v"].write_bytes == 2 * KV_HEADS * DV * 2


def test_narrow_value_heads_in_flops_context_exchange_and_saved_activations():
    """Hand arithmetic: the attention core does 2 B Sq Skv heads (d_k + d_v) per layer (QK^T and PV);
    a context-parallel rank all-gathers K and V of its sequence, B x seq x kv_heads x (d_k + d_v) x 2 bytes;
    a layer saves V at kv_heads x d_v per token."""
    from mlsyscalc.calc.counts.activations import attention_saved
    from mlsyscalc.calc.counts.flops import attention_core_flops

    assert attention_core_flops(NARROW_V, 1, 16, 16, False) == 2 * 16 * 16 * HEADS * (DK + DV) * LAYERS
    cp = [r for r in step_comm(NARROW_V, StepOptions(dp=1, cp=2, seq=2048)).rows if r.dim == "cp"]
    assert {r.message_bytes for r in cp} == {2048 * KV_HEADS * (DK + DV) * 2}
    saved = {s.name: s.per_token for s in attention_saved(NARROW_V, True, False)}
    assert saved["V"] == KV_HEADS * DV and saved["K (after rotary)"] == KV_HEADS * DK


def test_qk_norm_widths_are_the_query_key_head_width_not_the_value_width():
    """phi-2 with qk_layernorm and 8 KV heads, its value heads made 40 wide (head_dim 80): the q and k
    LayerNorms (transformers' PhiAttention: LayerNorm(head_dim)) still normalise 80 dims. Training --impl torch,
    batch 1 x 512: the weight-gradient kernels write 80 fp32 each, the input-gradient kernels read 2 x and
    write x of 512 x 32 x 80 (q) and 512 x 8 x 80 (k), bf16; the layer's gradient accumulation covers its
    parameters, counted by hand (every phi-2 linear has a bias; one LayerNorm with bias per layer)."""
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    raw = dict(builtin_configs()["phi-2"], qk_layernorm=True, num_key_value_heads=8)
    spec = replace(from_hf_config(raw, name="phi-qk", source="test"), v_head_dim=40)
    roof = predict_model(spec, H100, RooflineOptions(phase="train", impl="torch", batch=1, seq=512,
                                                     master_weights=False))
    q, k, x = 512 * 32 * 80 * 2, 512 * 8 * 80 * 2, 512 * 2560 * 2
    bwd = sorted((r.pred.read_bytes, r.pred.write_bytes) for r in roof.rows if r.pred.name == "norm.bwd_input"
                 for _ in range(r.count))
    assert bwd == sorted([(2 * x, x)] * 32 + [(2 * q, q)] * 32 + [(2 * k, k)] * 32)
    weight = sorted(r.pred.write_bytes for r in roof.rows if r.pred.name == "norm.bwd_weight" for _ in range(r.count))
    assert weight == sorted([2560 * 4] * 32 + [80 * 4] * 64)
    h, f, qk, v = 2560, 10240, 2560, 8 * 40
    layer = (h * qk + qk) + (h * 640 + 640) + (h * v + v) + (32 * 40 * h + h) + (h * f + f) + (f * h + h) \
        + 2 * h + 2 * 2 * 80  # q, k, v, dense, fc1, fc2, input LayerNorm, q and k LayerNorms (weight + bias)
    acc = sum(r.count * r.pred.write_bytes for r in roof.rows if r.pred.name == "grad.accumulate" and r.layers == "layers")
    assert acc == pytest.approx(32 * layer * 2, rel=1e-12)


def test_a_world_size_equal_to_the_product_of_the_ranks_is_accepted():
    """Hand arithmetic: dp 2 x tp 2 x pp 3 x cp 1 = 12 ranks (gpt2's 12 layers split over 3 stages); the
    world size check passes exactly at 12, whichever rank count is the larger."""
    for dp, tp, pp in ((2, 2, 3), (3, 1, 2), (1, 4, 1)):
        TrainOptions(dp=dp, tp=tp, pp=pp, world_size=dp * tp * pp).validate(GPT2)


def test_expert_replicas_placed_evenly_over_nodes_are_priced():
    """comm_step's expert-gradient group of one expert shard, the expert data-parallel group of Megatron-Core's
    folding (calc.parallel.expert_grid): mixtral-8x7b, dp 8, cp 2, ep 2, etp = tp = 1 on 8-GPU nodes: the stage's 16 ranks
    hold etp 1 x ep 2 x edp 8, so the replicas are every second rank, {0, 2, ..., 14}, four on each of two nodes:
    accepted, and its all-reduce spans 2 nodes."""
    rows = step_comm(MIXTRAL, StepOptions(dp=8, cp=2, ep=2, seq=4096)).rows
    experts = [r for r in rows if r.dim == "dp" and "routed experts" in r.rule]
    assert experts and {(r.group_size, r.nodes) for r in experts} == {(8, 2)}


@pytest.mark.parametrize("phase,launch,cost", [("train", "eager", "29 us per kernel"),
                                               ("decode", "eager", "0.699 ms per decoder layer")])
def test_host_path_note_names_the_documented_cost(phase, launch, cost):
    """docs/roofline.md, Host path: 29 us per priced kernel (eager one-GPU training), 0.699 ms per decoder
    layer (eager prefill/decode); the roofline's note prints the same number."""
    opts = RooflineOptions(phase=phase, impl="torch", launch=launch, batch=1, seq=64, context=64)
    notes = predict_model(GPT2, H100, opts).notes
    assert any(cost in n for n in notes), notes


def test_optimum_of_a_budget_below_one_token_is_returned():
    """The range check is about floats overflowing, not about sizes below 1: Chinchilla's optimum of a
    1e-3 FLOP budget has N D = C / 6 (hand arithmetic), with N and D far below 1."""
    opt = optimal(compute_flops=1e-3)
    assert opt.params < 1 and opt.tokens < 1
    assert 6 * opt.params * opt.tokens == pytest.approx(1e-3, rel=1e-9)


# --- plan's memo: two layouts that differ in one rank count must not share a cached piece -----------------

@pytest.mark.parametrize("name,overrides,framework,eps", [("mixtral-8x7b", {"num_hidden_layers": 4}, "megatron",
                                                           {1, 2, 4, 8}), ("gpt2", {}, "torch", {1})])
def test_every_layout_of_the_search_is_priced_as_train_step_prices_it(name, overrides, framework, eps):
    """Oracle: train_step, which computes each layout from scratch (no memo). 8 GPUs, micro-batch <= 2,
    cp <= 2: every layout of the search (tp, pp, cp, ep, vp, micro-batch all varying; a 4-layer mixtral for
    ep up to 8, gpt2 under torch for the host work), each at one (ZeRO, recompute) pair taken in turn, has the
    step time and memory train_step gives it, whichever layout filled the memo first. Expert parallelism
    takes every divisor of the 8 routed experts (top-2) that divides dp."""
    from mlsyscalc.calc.plan.search import _Memo, _search
    from mlsyscalc.calc.plan.space import execution_options, structures
    from mlsyscalc.calc.train.step import train_step

    spec = load_model(name, overrides)
    opts = PlanOptions(gpus=8, seq=1024, global_batch=8, max_micro_batch=2, max_cp=2, framework=framework)
    memo = _Memo(spec, H100, HGX, opts)
    layouts, grid = list(structures(spec, HGX, opts)), execution_options(opts)
    step, memory = _search(memo, layouts, grid, None)
    assert len({(c.tp, c.pp, c.cp, c.ep) for c in layouts}) >= 12
    assert {c.ep for c in layouts} == eps  # ep divides mixtral's 8 routed experts and dp (up to 8)
    for i, layout in enumerate(layouts):
        j = i * len(grid) + i % len(grid)
        zero, recompute = grid[j % len(grid)]
        ref = train_step(spec, H100, HGX, replace(layout, zero=zero, recompute=recompute))
        assert step[j] == pytest.approx(ref.step_time_s, rel=1e-9), layout.layout()
        assert memory[j] == pytest.approx(ref.memory_bytes_per_gpu, abs=8), layout.layout()


# --- swapped arguments of helpers: tokens and widths that differ ------------------------------------------

@pytest.mark.parametrize("impl", ["fused", "torch"])
def test_norm_kernels_read_tokens_by_width_plus_the_weight(impl):
    """gpt2 (hidden 768), training on 16 tokens, bf16: each LayerNorm and the final norm read x (16 x 768) and
    the weight (768) and write y (16 x 768): 17 x 768 x 2 and 16 x 768 x 2 bytes, shape 16x768 (tokens first).
    The fused backward reads x, dy and the weight, writes dx and the weight gradient: 33 and 17 x 768 x 2."""
    rows = predict_model(GPT2, H100, RooflineOptions(phase="train", seq=16, batch=1, impl=impl)).rows
    forward = {(r.pred.read_bytes, r.pred.write_bytes, r.pred.shape) for r in rows
               if r.pred.name in ("norm", "final_norm")}
    assert forward == {(17 * 768 * 2, 16 * 768 * 2, "16x768")}
    if impl == "fused":
        backward = {(r.pred.read_bytes, r.pred.write_bytes) for r in rows if r.pred.name in ("norm.bwd", "final_norm.bwd")}
        assert backward == {(33 * 768 * 2, 17 * 768 * 2)}


@pytest.mark.parametrize("ranks", [{"dp": 2**20, "tp": 2}, {"dp": 2**20, "pp": 2}, {"dp": 2**20, "cp": 2},
                                   {"cp": 2**20, "dp": 2}])
def test_every_rank_count_enters_the_gpu_total(ranks):
    """Hand arithmetic: 2^20 x 2 = 2,097,152 GPUs, over the 2^20 limit (validate.MAX_GPUS), whichever of dp,
    tp, pp or cp holds the 2: training memory and the step's traffic both refuse it, naming the product."""
    for call in (lambda: TrainOptions(**ranks).validate(GPT2), lambda: step_comm(GPT2, StepOptions(**ranks))):
        with pytest.raises(MlsysError, match=r"dp x -*tp x -*pp x -*cp GPUs: 2,097,152 is too large \(at most 1,048,576\)"):
            call()


# --- look-alike fields: shared experts wider than a routed expert ------------------------------------------

def test_two_shared_experts_are_twice_a_routed_experts_width():
    """deepseek-v3 with n_shared_experts 2 (DeepSeek-V2's setting; moe_intermediate_size 2048): the shared MLP
    is 2 x 2048 = 4096 wide, a routed expert 2048 (transformers' DeepseekV3MoE: intermediate_size x n_shared).
    Hand arithmetic on 16 prefill tokens: the MoE layer's activation kernel covers 16 x (8 x 2048 + 4096)
    elements, a dense layer's 16 x 18432; training saves 8 x 4 x 2048 routed and 4 x 4096 shared intermediates
    per token; inference's workspace (1024 tokens) is set by attention, 24576 + 2 x 24576 + 16384 = 90112
    wide, above the MLP's 3 x 8 x 2048 = 49152: 1024 x (2 x 7168 + 90112) x 2 bytes."""
    from mlsyscalc.calc.counts.activations import mlp_saved
    from mlsyscalc.calc.counts.layers import layer_linears
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory

    spec = load_model("deepseek-v3", {"n_shared_experts": 2, "num_hidden_layers": 4, "first_k_dense_replace": 1})
    ups = {lin.name: lin.out_features for lin in layer_linears(spec, 2) if lin.name.endswith("up_proj")}
    assert ups == {"experts.up_proj": 2048, "shared_experts.up_proj": 4096}
    roof = predict_model(spec, H100, RooflineOptions(phase="prefill", seq=16, batch=1, check_fit=False))
    act = {r.layers: r.pred.write_bytes for r in roof.rows if r.pred.name == "mlp_act*up"}
    assert act == {"layers": 16 * 18432 * 2, "moe layers": 16 * (8 * 2048 + 4096) * 2}
    saved = {s.name: s.per_token for s in mlp_saved(spec, 2, False)}
    assert saved["expert intermediates (k x 4I)"] == 8 * 4 * 2048
    assert saved["shared expert intermediates (4I)"] == 4 * 4096
    mem = infer_memory(spec, InferOptions(batch=1, context=1024))
    assert mem.detail["activations_workspace"] == 1024 * (2 * 7168 + 90112) * 2


def test_every_training_kernel_names_its_shape_in_argument_order():
    """llama3-8b (config.json: hidden 4096, 8 KV heads x 128 = 1024, intermediate 14336, vocab 128256), a
    training step of 2 x 16 tokens = 32, fused kernels. The op table's shape column, by hand: a forward GEMM
    is tokens x out x in, its input gradient tokens x in x out, its weight gradient in x out x tokens; norms
    and the embedding tokens x hidden; rotary tokens x (32 + 8 heads) x 128; elementwise ops their element
    count (32 x 14336, 32 x 4096); attention batch, heads/KV heads, query x key tokens, head width; the loss
    tokens x vocab; the embedding's backward its sort by tokens, its table's fill and main-gradient add vocab x
    hidden, its scatter tokens x hidden."""
    t, h, kv, f, v = 32, 4096, 1024, 14336, 128256
    gemms = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h), "gate_proj": (f, h),
             "up_proj": (f, h), "down_proj": (h, f), "lm_head": (v, h)}
    want = {"attention": "B2 H32/8 16x16 d128 causal", "attention.bwd": "B2 H32/8 16x16 d128 causal",
            "rotary": f"{t}x40x128", "rotary.bwd": f"{t}x40x128", "mlp_act*up": f"{t * f} 2->1",
            "mlp_act*up.bwd": f"{t * f} 2->1", "residual_add": f"{t * h} 2->1", "residual_add.bwd": f"{t * h} 2->1",
            "adamw": "8030261248 params"}
    want |= {name: f"{t}x{h}" for name in ("norm", "norm.bwd", "final_norm", "final_norm.bwd", "embedding",
                                           "embedding.bwd_scatter")}
    want |= {f"loss.{k}": f"{t}x{v}" for k in ("cast", "max", "subtract_max", "exp", "sum", "softmax", "bwd_scale",
                                               "bwd_cast")}
    want |= {"embedding.bwd_sort": f"{t} tokens", "embedding.bwd_fill": f"{v}x{h}", "embedding.main_grad_add": f"{v}x{h}"}
    for name, (out, inp) in gemms.items():
        want |= {name: f"{t}x{out}x{inp}", f"{name}.dgrad": f"{t}x{inp}x{out}", f"{name}.wgrad": f"{inp}x{out}x{t}"}
    rows = predict_model(LLAMA, H100, RooflineOptions(phase="train", seq=16, batch=2)).rows
    got: dict[str, set[str]] = {}
    for r in rows:
        got.setdefault(r.pred.name, set()).add(r.pred.shape)
    assert got == {name: {shape} for name, shape in want.items()}


def test_every_eager_decode_kernel_names_its_shape_in_argument_order():
    """llama3-8b, one decode step of batch 2 after 100 cached tokens, plain PyTorch kernels (--impl torch).
    By hand from config.json: GEMMs 2 x out x in; rotary on 2 x 32 query and 2 x 8 key rows of 128; the cache
    append 2 x 8 x 128 elements each for K and V; the MLP's activation and product 2 x 14336 elements; the
    fp32 logits 2 x 128256; attention over 101 keys. (Split-K reductions are left out: their split counts are
    the calculator's heuristic, not a hand figure.)"""
    h, kv, f, v = 4096, 1024, 14336, 128256
    want = {"q_proj": f"2x{h}x{h}", "k_proj": f"2x{kv}x{h}", "v_proj": f"2x{kv}x{h}", "o_proj": f"2x{h}x{h}",
            "gate_proj": f"2x{f}x{h}", "up_proj": f"2x{f}x{h}", "down_proj": f"2x{h}x{f}", "lm_head": f"2x{v}x{h}",
            "norm": f"2x{h}", "final_norm": f"2x{h}", "embedding": f"2x{h}", "logits.float": f"2x{v}",
            "kv_cache_write.k": "2048", "kv_cache_write.v": "2048", "mlp_act": f"{2 * f} 1->1",
            "mlp_mul": f"{2 * f} 2->1", "residual_add": f"{2 * h} 2->1", "attention": "B2 H32/8 1x101 d128"}
    want |= {f"rotary.{k}": {"64x128", "16x128"} for k in ("mul_cos", "roll", "addcmul")}
    rows = predict_model(LLAMA, H100, RooflineOptions(phase="decode", batch=2, context=100, impl="torch")).rows
    got: dict[str, set[str]] = {}
    for r in rows:
        if not r.pred.name.endswith("splitk_reduce"):
            got.setdefault(r.pred.name, set()).add(r.pred.shape)
    assert got == {name: shape if isinstance(shape, set) else {shape} for name, shape in want.items()}


def test_bootstrap_interval_of_the_optimal_size_holds_the_point_estimate():
    """Noise-free IsoFLOP runs of a known law (E 1.8, A 450, B 1800, alpha 0.34, beta 0.37; 3 budgets x 5
    sizes around each optimum, Hoffmann et al. approach 2): every resample recovers the same law, so the
    percentile interval of N_opt(1e23) = k C^a (Chinchilla eq. 4) brackets the point estimate within 1%."""
    from mlsyscalc.calc.scaling.laws import Parametric

    law = Parametric(E=1.8, A=450.0, B=1800.0, alpha=0.34, beta=0.37)
    n = [law.k * c**law.a * f for c in (1e18, 1e19, 1e20) for f in (0.1, 0.3, 1.0, 3.0, 10.0)]
    d = [c / (6 * x) for c, x in zip([c for c in (1e18, 1e19, 1e20) for _ in range(5)], n)]
    runs = Runs(tuple(n), tuple(d), tuple(law.loss(a, b) for a, b in zip(n, d)))
    result = fit_runs(runs, FitOptions(starts=20, bootstrap=6, seed=0), compute_flops=1e23)
    assert result.optimal_params == pytest.approx(law.k * 1e23**law.a, rel=1e-2)
    low, high = {name: (lo, hi) for name, lo, hi in result.intervals}["optimal_params"]
    assert 0.99 * result.optimal_params <= high and low <= 1.01 * result.optimal_params


@pytest.mark.parametrize("seq_q,window,pairs,keys", [(16, None, 16 * 64 - 16 * 16 / 2, 64), (16, 32, 32 * 16, 47),
                                                     (16, 8, 8 * 16, 23), (48, 32, (32**2 - 16**2) / 2 + 32 * 32, 64),
                                                     (64, 32, 64 * 32 - 32**2 / 2, 64)])
def test_causal_and_windowed_attention_with_fewer_queries_than_keys(seq_q, window, pairs, keys):
    """Queries end-aligned on 64 keys (a prefill chunk after 64 - Sq cached tokens), 8 heads of 64, bf16.
    Hand arithmetic, continuous convention (docs/roofline.md): query position p sees min(p, W) keys, so the
    score area is the integral over p in [64 - Sq, 64]: Sq x 64 - Sq^2 / 2 without a window, W x Sq when
    W <= 64 - Sq, (W^2 - (64 - Sq)^2) / 2 + W (64 - W) in between; FLOPs 2 x heads x (d_k + d_v) x area.
    A windowed kernel reads only the last Sq + W - 1 keys (at most 64) of K and V."""
    pred = predict_attention(1, 8, 8, seq_q, 64, 64, causal=True, window=window)
    assert pred.flops == pytest.approx(2 * 8 * 128 * pairs, rel=1e-12)
    assert pred.read_bytes == seq_q * 8 * 64 * 2 + keys * 8 * 128 * 2


def test_interleaved_pipeline_with_unequal_tp_pp_and_chunks():
    """gpt2 (12 layers, hidden 768), tp 2, pp 4, 3 model chunks per GPU, 8 micro-batches of 1 x 2048 tokens,
    bf16. Hand arithmetic (Narayanan et al. 2021): each stage holds 12 / 4 = 3 layers, each with 2 TP
    all-reduces forward and 2 backward of 2048 x 768 x 2 bytes: 2 x 2 x 3 x 8 = 96 calls; the pipeline sends
    activations forward and gradients back per micro-batch and chunk, 2 x 8 x 3 = 48 sends of 1 / tp of
    them; the interleaved bubble is (p - 1) / (v m) = 3 / 24 of the ideal time, 3 / 27 of the step."""
    r = step_comm(GPT2, StepOptions(tp=2, pp=4, interleave=3, grad_accum=8))
    act = 2048 * 768 * 2
    assert {(x.dim, x.message_bytes, x.calls) for x in r.rows} == {("tp", act, 96), ("pp", act // 2, 48)}
    assert r.bubble_ratio == pytest.approx(3 / 24) and r.bubble_fraction == pytest.approx(3 / 27)


def test_roofline_training_step_lists_its_dp_gradient_all_reduce(run_cli):
    """Pinned after the holdout score (roofline_comm:136): `mlsys roofline model llama2-7b --phase train --dp 2`
    lists one comm row named by its rule, in the "step" pass, an all-reduce of every bf16 gradient once:
    6,738,415,616 parameters (transformers' count, tests/data/hf_params.json) x 2 bytes, on one 2-GPU node."""
    d = run_cli.json("roofline", "model", "llama2-7b", "--phase", "train", "--dp", "2", "--gpu", "h100")
    (row,) = d["comm"]
    assert (row["name"], row["pass"], row["collective"]) == ("gradient all-reduce once per step", "step", "all-reduce")
    assert row["size_bytes"] == 6_738_415_616 * 2 and row["count"] == 1
    assert row["method"].startswith("comm_step: 2 GPUs, 1 ")


@pytest.mark.parametrize("first,second", [((1, 1), (1, 2)), ((2, 1), (2, 4))])
def test_plan_host_work_does_not_depend_on_which_layout_filled_the_memo(first, second):
    """Pinned after the holdout score (plan:111): the host's issue time of a gpt2 layout under torch is the same
    whether the memo is fresh or another layout with the same tp and a different pp filled it first (the busiest
    stage's work depends on pp, not tp)."""
    from mlsyscalc.calc.plan.search import _Memo
    from mlsyscalc.calc.plan.space import structures

    spec = load_model("gpt2")
    opts = PlanOptions(gpus=8, seq=1024, global_batch=8, max_micro_batch=1, max_cp=1, framework="torch")
    layouts = {(c.tp, c.pp): c for c in structures(spec, HGX, opts) if c.cp == 1 and c.vp == 1}
    shared = _Memo(spec, H100, HGX, opts)
    shared.host(layouts[first], "none", 0)
    assert shared.host(layouts[second], "none", 0) == _Memo(spec, H100, HGX, opts).host(layouts[second], "none", 0)
