"""Value tests written after the held-out mutation sample was scored (docs/mutation.md): each pins an
output the real held-out survivors showed no test reading, or gives a core quantity whose held-out kill
rested on one test a second, independent check. Oracles: hand arithmetic from config.json, transformers'
config defaults, the documented option ranges, scipy.special.huber, Nelder-Mead as Lagarias et al. (1998)
state it, hand-worked serving schedules."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.counts.flops import FlopOptions, count_flops
from mlsyscalc.calc.parallel.shards import reserve_bytes
from mlsyscalc.specs.hf import from_hf_config
from mlsyscalc.specs.lookup import builtin_configs, load_model


def test_approx_6n_counts_every_matmul_weight_times_tokens():
    """llama2-7b (config.json: hidden 4096, MLP 11008, 32 layers, vocab 32000): per layer q, k, v, o
    4 x 4096^2 = 67,108,864 and gate, up, down 3 x 4096 x 11008 = 135,266,304; 32 layers; lm_head
    4096 x 32000 = 131,072,000. N = 6,607,077,376; 6 N x tokens at batch 2 x 512 tokens."""
    n = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4096 * 32000
    assert n == 6_607_077_376
    got = count_flops(load_model("llama2-7b"), FlopOptions(batch=2, seq=512))
    assert got.tokens == 1024
    assert got.approx_6n == 6 * n * 1024


def test_reserve_of_zero_percent_is_allowed_and_keeps_nothing_back():
    """--reserve takes a percentage in [0, 100) (docs/memory.md): 0% is the card's whole memory."""
    assert reserve_bytes(80 * 2**30, "0%") == 0
    assert reserve_bytes(80 * 2**30, "12.5%") == 10 * 2**30


def test_falcon_without_parallel_attn_is_parallel():
    """transformers' FalconConfig defaults parallel_attn to True: a falcon config.json without the key
    runs attention and MLP side by side."""
    raw = {k: v for k, v in builtin_configs()["falcon-7b"].items() if k != "parallel_attn"}
    assert from_hf_config(raw, name="falcon-test", source="test").parallel_attention is True


def _mixtral(experts: int):
    """Mixtral-8x7B's config.json with `experts` routed experts per layer (top-2 routing kept)."""
    raw = dict(builtin_configs()["mixtral-8x7b"], num_local_experts=experts)
    return from_hf_config(raw, name=f"mixtral-{experts}e", source="test")


# Mixtral-8x7B config.json: hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, MLP 14336, vocab 32000,
# untied head, RMSNorm. Per layer outside the experts: q, o 2 x 4096^2, k, v 2 x 4096 x 1024, router
# 4096 x experts, 2 norms of 4096.
def _mixtral_dense(experts: int) -> int:
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 4096 * experts + 2 * 4096
    return 32 * per_layer + 2 * 32000 * 4096 + 4096


def _mixtral_expert(experts: int) -> int:
    return 32 * experts * 3 * 4096 * 14336


def test_dp_gradient_messages_are_the_params_of_one_model_shard():
    """Data-parallel gradients (bf16, ZeRO 0) all-reduce what one GPU holds: the whole model over tp x pp
    for dense weights, and over tp x pp x ep for routed experts. llama2-7b: 6,738,415,616 params
    (32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 2 x 32000 x 4096 + 4096)."""
    from mlsyscalc.calc.comm.step import StepOptions, step_comm

    llama = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert llama == 6_738_415_616
    for tp, pp in ((2, 2), (1, 4), (4, 1), (1, 1)):
        rows = step_comm(load_model("llama2-7b"), StepOptions(dp=2, tp=tp, pp=pp)).rows
        assert [r.message_bytes for r in rows if r.dim == "dp"] == [llama // (tp * pp) * 2]
    rows = step_comm(_mixtral(8), StepOptions(dp=4, tp=2, ep=2)).rows
    dp = {r.rule: r.message_bytes for r in rows if r.dim == "dp"}
    assert dp == {"gradient all-reduce once per step": _mixtral_dense(8) // 2 * 2,
                  "gradient all-reduce once per step (routed experts)": _mixtral_expert(8) // (2 * 2) * 2}


@pytest.mark.parametrize("experts", [2, 3, 8])
def test_every_routed_expert_count_is_split_over_ep(experts):
    """Each routed expert's weights (however few experts there are, two included) are expert
    parameters: split over --ep and sharded by ZeRO over dp/ep; Adafactor's factors hold rows + cols
    per local expert matrix (gate, up 14336 + 4096, down 4096 + 14336)."""
    from mlsyscalc.calc.parallel.shards import stage_params

    spec = _mixtral(experts)
    for ep in (1, experts) if experts != 3 else (1, 3):
        got = stage_params(spec, range(32), True, True, 1, ep, 1)
        assert got.expert == _mixtral_expert(experts) // ep
        assert got.dense == _mixtral_dense(experts)
        local_expert_factors = 32 * (experts // ep) * 3 * (4096 + 14336)
        dense_factors = got.matrix_factors - local_expert_factors
        # q, k, v, o, router: rows + cols each; 2 norms per layer; embedding, head, final norm
        per_layer = (4096 + 4096) * 2 + (1024 + 4096) * 2 + (experts + 4096) + 2 * 4096
        assert dense_factors == 32 * per_layer + 2 * (32000 + 4096) + 4096


@pytest.mark.parametrize("model, rot", [("pythia-1.4b", 32), ("phi-2", 32)])
def test_partial_rotary_moves_only_the_rotated_dims(model, rot):
    """Partial rotary (pythia-1.4b: rotary_pct 0.25 of head_dim 128; phi-2: partial_rotary_factor 0.4
    of 80; both 32 dims) on q and k heads: read and write tokens x heads x 32 bf16 elements, plus the
    cos and sin tables of the 256 positions (2 x 256 x 32), shared by the batch of 2."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model

    spec = load_model(model)
    heads = spec.num_heads + spec.num_kv_heads
    roof = predict_model(spec, load_ceilings("H100-SXM"), RooflineOptions(batch=2, seq=256))
    (row,) = [r for r in roof.rows if r.pred.name == "rotary"]
    elements = 512 * heads * rot
    assert row.count == spec.num_layers
    assert row.pred.write_bytes == elements * 2
    assert row.pred.read_bytes == elements * 2 + 2 * 256 * rot * 2


def test_batch_search_gives_up_at_the_documented_65536(monkeypatch):
    """docs/roofline.md: the compute-bound batch is found by doubling then bisection up to 65536, else
    null. A step that turns compute-bound at exactly 65536 is found; one past it is not, and the search
    never prices a batch above 65536."""
    from types import SimpleNamespace

    from mlsyscalc.calc.roofline import sweep as roofline_sweep

    for crossing, want in ((65536, 65536), (65537, None), (40000, 40000), (10**9, None)):
        seen: list[int] = []

        def at(spec, ceilings, opts, batch, crossing=crossing, seen=seen):
            seen.append(batch)
            return SimpleNamespace(bound="compute" if batch >= crossing else "memory")

        monkeypatch.setattr(roofline_sweep, "_at", at)
        assert roofline_sweep.compute_bound_batch(None, None, None) == want
        assert max(seen) == 65536


def test_qk_norm_kernels_cover_every_query_and_key_head():
    """phi-2 with qk_layernorm and 8 KV heads (--impl torch training, batch 1 x 512 tokens): per layer
    a LayerNorm over 512 x 32 query heads and one over 512 x 8 key heads of 80 dims. Forward reads x and
    the weight, writes y; backward's input gradient reads x and dy, writes dx (bf16)."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model

    raw = dict(builtin_configs()["phi-2"], qk_layernorm=True, num_key_value_heads=8)
    spec = from_hf_config(raw, name="phi-qk", source="test")
    roof = predict_model(spec, load_ceilings("H100-SXM"),
                         RooflineOptions(phase="train", impl="torch", batch=1, seq=512, master_weights=False))
    fwd = sorted((r.pred.read_bytes, r.pred.write_bytes, r.count) for r in roof.rows if r.pred.name == "qk_norm")
    q, k = 512 * 32 * 80 * 2, 512 * 8 * 80 * 2
    assert fwd == sorted([(q + 80 * 2, q, 32), (k + 80 * 2, k, 32)])
    bwd = sorted((r.pred.read_bytes, r.pred.write_bytes) for r in roof.rows if r.pred.name == "norm.bwd_input"
                 for _ in range(r.count))
    x = 512 * 2560 * 2  # phi-2: one LayerNorm per layer over hidden 2560
    assert bwd == sorted([(2 * x, x)] * 32 + [(2 * q, q)] * 32 + [(2 * k, k)] * 32)


class _Recorder:
    """Stands in for the target's iteration cost: records the sums the verify pass is priced at."""

    def __init__(self):
        self.calls = []

    def mixed_s(self, *args):
        self.calls.append(args)
        return 1.0

    def decode_s(self, d, keys):
        self.calls.append((d, keys))
        return 1.0


def test_verify_pass_attends_each_chunk_causally_at_its_context():
    """Speculative verify of k = 3 drafts for 2 sequences at context 100: 2 x 4 tokens; each sequence's
    4 queries see its 100 cached keys (4 x 100) and causally each other (4 x 4 / 2): pairs
    2 x (400 + 8) = 816; prefill keys 2 x 100 + 8. Draft steps at keys 202, 204, 206."""
    from mlsyscalc.calc.serve.spec import SpecDecode

    target, draft = _Recorder(), _Recorder()
    sd = SpecDecode(target, draft, k=3, accept=0.5)
    sd.step_s(2, 2 * (100 + 1))
    assert target.calls == [(8, 8, 8, 2 * (4 * 100 + 4 * 4 / 2), 2 * 100 + 8, 0, 0)]
    assert draft.calls == [(2, 202), (2, 204), (2, 206)]


def test_batched_huber_objective_is_scipys_huber_over_delta():
    """The batched fit minimises sum Huber_delta(r) / delta over log-residuals r = LSE(a - alpha log N,
    b - beta log D, e) - log L; scipy.special.huber(delta, r) is r^2/2 inside delta and
    delta (|r| - delta/2) outside. Residuals both inside and outside delta = 1e-3, of both signs."""
    import numpy as np
    from scipy.special import huber

    from mlsyscalc.calc.scaling.fit_batch import huber_sum

    thetas = np.array([[6.0, 7.0, 0.5, 0.34, 0.28], [5.0, 6.5, 0.6, 0.3, 0.3]])
    x, y = np.log([1e8, 1e9, 1e10, 3e10]), np.log([2e9, 2e10, 2e11, 5e11])
    lse = np.logaddexp(np.logaddexp(thetas[:, :1] - thetas[:, 3:4] * x, thetas[:, 1:2] - thetas[:, 4:5] * y),
                       thetas[:, 2:3])
    r = np.array([[0.0004, -0.0002, 0.003, -0.02], [-0.0009, 0.0001, -0.004, 0.5]])
    log_l = lse - r
    delta = 1e-3
    want = huber(delta, r).sum(axis=1) / delta
    assert np.allclose(huber_sum(thetas, x, y, log_l, delta), want, rtol=1e-9, atol=0)
    assert np.all(np.abs(r) != delta)


def test_finished_sequence_is_not_preempted_again():
    """(Pins the preemption choice; the held-out mutant of its `finish_s` test is equivalent.) vllm, 3 KV blocks of 4, iterations of 0.125 s: A, C (3-token prompts, 8 outputs) and B (3 + 2),
    admitted A, C, B. it1 prefills all three (3 blocks); it2 decodes them and B ends (0.25 s), freeing
    its block. it3: A and C each need a 2nd block, one is free: the latest admitted sequence still
    running, C (B is done), is preempted with 2 tokens; A decodes alone to its 8th token at it8 (1.0 s);
    C's 3 + 2 tokens are prefilled again at it9, then 5 decodes to token 8 at it14 (1.75 s)."""
    from tests.test_values_serve import _engine

    calls, t = _engine([(0.0, 3, 8), (0.0, 3, 8), (0.0, 3, 2)], blocks=3, step_s=0.125)
    assert t.preempt_s == [0.25]
    assert t.finish_s == [1.0, 1.75, 0.25]
    assert calls[8] == ("mixed", 5, 1, 5, 12.5, 5, 0, 0)
    assert t.iter_batch_tokens == [9, 3] + [1] * 6 + [5] + [1] * 5


def test_nelder_mead_reflects_only_strictly_below_the_second_worst():
    """Nelder-Mead (Lagarias et al. 1998, SIAM J. Optim. 9(1), section 2): expand only if f_r < f_1,
    accept the reflection only if f_1 <= f_r < f_n; a tie with f_n contracts. In 1-D from x0 = 0
    (simplex 0, 0.3; f = 1, 2) the reflection -0.3 ties the best (f = 1) and the inside contraction
    0.15 (f = 0) is taken: one iteration ends at 0.15."""
    from mlsyscalc.calc.roofline.calibration_fit import _nelder_mead

    table = {0.0: 1.0, 0.3: 2.0, -0.3: 1.0, 0.15: 0.0}
    got = _nelder_mead(lambda x: table.get(round(x[0], 9), 5.0), [0.0], step=0.3, iters=1, restarts=1)
    assert got == [0.15]


def test_phi2_last_stage_keeps_the_biased_head():
    """phi-2 (config.json: vocab 51200, hidden 2560, LayerNorm with bias, untied lm_head with a bias,
    transformers' PhiForCausalLM) at tp 2, pp 2: the last stage's rank holds outside its layers the
    final LayerNorm (2 x 2560) and half the vocabulary's head rows with their biases
    (25600 x 2560 + 25600); the first stage holds half the embedding rows (25600 x 2560)."""
    from mlsyscalc.calc.parallel.shards import stage_params

    spec = load_model("phi-2")
    last = stage_params(spec, range(16, 32), False, True, 2, 1, 2)
    assert last.root == 2 * 2560 + 25600 * 2560 + 25600
    first = stage_params(spec, range(16), True, False, 2, 1, 2)
    assert first.root == 25600 * 2560


def test_inference_weights_count_a_tied_table_once():
    """gpt2 (tied lm_head): 124,439,808 parameters (wte 50257 x 768, wpe 1024 x 768, 12 layers of
    7,087,872, ln_f 2 x 768), 2 bytes each in bf16; mixtral-8x7b (untied) 46,702,792,704."""
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory

    layer = 2 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 2 * 768 + 768 * 3072 + 3072 + 3072 * 768 + 768
    assert layer == 7_087_872
    gpt2 = 50257 * 768 + 1024 * 768 + 12 * layer + 2 * 768
    assert gpt2 == 124_439_808
    assert infer_memory(load_model("gpt2"), InferOptions(batch=1)).breakdown["weights"] == 2 * gpt2
    mixtral = _mixtral_dense(8) + _mixtral_expert(8)
    assert mixtral == 46_702_792_704
    assert infer_memory(load_model("mixtral-8x7b"), InferOptions(batch=1)).breakdown["weights"] == 2 * mixtral


@pytest.mark.parametrize("model, experts, top_k", [("deepseek-v3", 256, 8), ("mixtral-2e", 2, 2)])
def test_capacity_factor_bound_is_experts_over_top_k(model, experts, top_k):
    """Beyond experts / top-k (deepseek-v3 config.json: 256 routed experts, 8 per token: 32; two experts,
    top-2: 1) every expert already has a slot for every token: larger factors are refused by name."""
    from mlsyscalc.calc.memory.training import TrainOptions
    from mlsyscalc.errors import MlsysError

    spec = _mixtral(2) if model == "mixtral-2e" else load_model(model)
    bound = experts / top_k
    TrainOptions(capacity_factor=bound).validate(spec)
    with pytest.raises(MlsysError, match=f"at most experts / top-k = {bound:g} "):
        TrainOptions(capacity_factor=bound + 0.5).validate(spec)


def test_batched_fit_stops_a_start_after_400_iterations():
    """docs/scaling.md: each start runs at most 400 Levenberg-Marquardt iterations. Losses near e^-30
    (fitted only as A, B and E tend to 0) keep every step improving: after the cap the start
    is not converged, and the default run is the 400-iteration one (one more iteration moves it)."""
    import numpy as np

    from mlsyscalc.calc.scaling.fit_batch import minimise_many

    rng = np.random.default_rng(0)
    x, y = np.log(rng.uniform(1e8, 1e10, 20)), np.log(rng.uniform(1e9, 1e11, 20))
    log_l = np.full(20, -30.0) + 0.01 * rng.standard_normal(20)
    start = np.array([[6.0, 7.0, 0.5, 0.3, 0.3]])
    default = minimise_many(start, x, y, log_l, 1e-3)
    at_cap = minimise_many(start, x, y, log_l, 1e-3, max_iterations=400)
    past = minimise_many(start, x, y, log_l, 1e-3, max_iterations=401)
    assert not default[2][0]
    assert np.array_equal(default[0], at_cap[0]) and np.array_equal(default[1], at_cap[1])
    assert not np.array_equal(default[0], past[0])
