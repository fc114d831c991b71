"""Value tests for the survivors of the second discovery run (docs/mutation.md) in the roofline,
calibration, scaling and serving modules. Expected numbers are hand arithmetic written out here
from a model's config.json (model_specs/), the formulas docs/roofline.md documents (kernel byte
counts of `--impl torch`, tile padding, the sliding-window area), torch's own kernels (ATen's
multi_tensor_apply constants), another module computing the same quantity (calc.counts.params), or a
property that must hold (a limit case, a ratio); never the function under test.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from mlsyscalc import MlsysError, load_model
from mlsyscalc.calc.roofline.calibration import CALIBRATED_EFFICIENCY, Efficiency, load_ceilings
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.ops import (padded_head_dim, predict_attention, predict_grouped_matmul,
                                         predict_matmul, predict_memory_op, unaligned, window_fraction)

H100 = load_ceilings("H100-SXM")
SMS = 132  # H100-SXM datasheet: 132 SMs


def _roof(model, **opts):
    spec = load_model(model) if isinstance(model, str) else model
    return predict_model(spec, H100, RooflineOptions(**opts))


def _named(r, name, layers=None):
    rows = [row for row in r.rows if row.pred.name == name and (layers is None or row.layers == layers)]
    assert rows, name
    return rows


# --- calc.roofline.ops ----------------------------------------------------------------------------

@pytest.mark.parametrize("seq_q,seq_kv,window,area", [
    # W >= Skv: the plain causal area, the integral of p over [Skv - Sq, Skv] = (Skv^2 - (Skv-Sq)^2) / 2
    (2, 4, 8, (16 - 4) / 2),
    (4, 4, 4, 16 / 2),
    # W <= Skv - Sq: every query sees W keys: W x Sq
    (2, 10, 4, 4 * 2),
    # in between (Sq = Skv = S > W): S x W - W^2 / 2 (the docstring's closed form)
    (4, 4, 2, 4 * 2 - 2 * 2 / 2),
    (6, 8, 4, (16 - 4) / 2 + 4 * (8 - 4)),
])
def test_window_fraction_by_hand(seq_q, seq_kv, window, area):
    assert window_fraction(seq_q, seq_kv, window) == pytest.approx(area / (seq_q * seq_kv), abs=0)


def test_window_fraction_limits():
    # one query at the end of a long KV sees min(Skv, W) keys
    assert window_fraction(1, 100, 30) == pytest.approx(30 / 100, abs=0)
    # a window at least the KV length is the causal fraction: decode of 1 after 99 sees all 100
    assert window_fraction(1, 100, 100) == pytest.approx((100**2 - 99**2) / 2 / 100, abs=0)


@pytest.mark.parametrize("d,padded", [
    (1, 64), (64, 64), (65, 128), (80, 128), (96, 128), (128, 128), (129, 256), (192, 256), (256, 256),
    (257, 512), (300, 512), (512, 512), (513, 768),
])
def test_padded_head_dim_follows_cudnn_tiles(d, padded):
    # docs/roofline.md: head dims pad up to 64, 128 or 256 (cuDNN's tiles); past 256, multiples of 256
    assert padded_head_dim(d) == padded


def test_unaligned_only_for_plain_weights():
    # bf16: 16 bytes are 8 elements; a leading dimension not a multiple of 8 is unaligned ...
    assert unaligned((4095, 4096), "bf16", "bf16") is True
    assert unaligned((4096, 4096), "bf16", "bf16") is False
    assert unaligned((4096, 4100), "bf16", "bf16") is True
    # ... fp32: 4 elements; fp8: 16 elements
    assert (unaligned((4100,), "fp32", "fp32"), unaligned((4100,), "fp8", "fp8")) == (False, True)
    # quantised weights (4-bit, fp8 on bf16) take their own kernels: never the unaligned class
    assert unaligned((4095,), "bf16", "int4") is False
    assert unaligned((4095,), "bf16", "fp8") is False


def test_unaligned_class_prices_the_gemm():
    # N = 4095 bf16 GEMM: matmul_unaligned; the same shape with 4-bit weights: matmul
    plain = predict_matmul(512, 4095, 4096)
    quant = predict_matmul(512, 4095, 4096, weight_dtype="int4")
    assert (plain.compute_class, quant.compute_class) == ("matmul_unaligned", "matmul")
    assert predict_matmul(512, 4096, 4096).compute_class == "matmul"
    # lead_dims override: a weight gradient's leading dims are M and N
    assert predict_matmul(512, 4096, 4095, lead_dims=(512, 4096)).compute_class == "matmul"


def test_attention_and_memory_ops_stream_at_the_memory_efficiency():
    # only GEMMs stream at matmul_skinny; attention and elementwise kernels at efficiency.memory
    att = predict_attention(1, 32, 32, 1, 4096, 128)
    assert att.memory_class == "memory"
    by_hand = (att.read_bytes / H100.read_Bps + att.write_bytes / H100.write_Bps) / H100.efficiency.memory
    assert att.memory_s == pytest.approx(by_hand, rel=1e-12)
    gemm = predict_matmul(1, 4096, 4096)
    assert gemm.memory_class == "matmul_skinny"


def test_memory_op_defaults_to_no_flops():
    # a copy: no arithmetic, so no compute time; its FLOPs default to zero
    op = predict_memory_op("copy", 1000.0, 1000.0)
    assert (op.flops, op.compute_s, op.memory_class, op.kind) == (0.0, 0.0, "memory", "memory")
    assert op.memory_s == pytest.approx((1000 / H100.read_Bps + 1000 / H100.write_Bps) / H100.efficiency.memory,
                                        rel=1e-12)
    with pytest.raises(MlsysError, match="copy: no bytes moved"):
        predict_memory_op("copy", 0.0, 0.0)


# --- calc.roofline.calibration ---------------------------------------------------------------------------

@pytest.mark.parametrize("cls,kind,scale", [
    # calibration.py's comment: the classes keep their ratio to their kind's default
    # (0.32 / 0.89 of the copy bandwidth, 0.12 / 0.74 of the matmul peak, 0.8 x 0.82 attention)
    ("memory_broadcast", "memory", None), ("matmul_unaligned", "matmul", None),
    ("attention_small_head", "attention", None),
])
def test_calibrated_classes_keep_their_ratio_to_the_kind(cls, kind, scale):
    default = Efficiency()
    ratio = getattr(default, cls) / getattr(default, kind)
    assert getattr(CALIBRATED_EFFICIENCY, cls) == pytest.approx(ratio * getattr(CALIBRATED_EFFICIENCY, kind),
                                                                 abs=0.005)


# --- calc.roofline.torch_kernels (--impl torch, docs/roofline.md "Kernels per op") ----------------------

def test_partial_rotary_backward_of_phi_2():
    # phi-2: 32 heads of 80 dims, 32 rotated (0.4); 128-token train step. slice_backward of the
    # two parts: zeros of the whole head, the copies in, and their sum (reads two whole heads)
    r = _roof("phi-2", impl="torch", phase="train", seq=128)
    full, x = 128 * 32 * 80 * 2, 128 * 32 * 32 * 2
    def parts(name):
        rows = _named(r, name)
        return {(row.pred.read_bytes, row.pred.write_bytes) for row in rows}, sum(row.count for row in rows)

    assert parts("rotary.bwd_slice_add") == ({(2 * full, full)}, 2 * 32)
    assert parts("rotary.bwd_slice_fill") == ({(0, full)}, 2 * 2 * 32)
    assert parts("rotary.bwd_mul_cos") == ({(x + 128 * 32 * 2, x)}, 2 * 32)
    assert parts("rotary.bwd_pass_copy") == ({(full - x, full - x)}, 2 * 32)
    assert full - x == 128 * 32 * 48 * 2


def test_bias_gradients_of_phi_2():
    # phi-2 (config.json): q, k, v, dense of 2560 and fc1 of 10240, fc2 of 2560 have biases; the
    # lm_head too (51200). A bias gradient reads dY (tokens x width) and writes the width, bf16.
    r = _roof("phi-2", impl="torch", phase="train", seq=128)
    layer = _named(r, "bias.bwd_sum", "layers")
    assert sum(row.count for row in layer) == 6 * 32
    assert sum(row.count * row.pred.read_bytes for row in layer) == 32 * 128 * (5 * 2560 + 10240) * 2
    assert sum(row.count * row.pred.write_bytes for row in layer) == 32 * (5 * 2560 + 10240) * 2
    (head,) = _named(r, "bias.bwd_sum", "head")
    assert (head.count, head.pred.read_bytes, head.pred.write_bytes) == (1, 128 * 51200 * 2, 51200 * 2)
    # llama has no biases: no bias kernels
    assert not [row for row in _roof("llama3-8b", impl="torch", phase="train", seq=128).rows
                if row.pred.name == "bias.bwd_sum"]


def test_reduce_head_only_for_grouped_queries():
    # llama3-8b: 32 query heads on 8 KV heads of 128, 32 layers: dK and dV summed over the 4 query
    # heads of each KV head: read T x 32 x 128, write T x 8 x 128 (bf16)
    r = _roof("llama3-8b", impl="torch", phase="train", seq=128)
    for x in ("k", "v"):
        (row,) = _named(r, f"attention.bwd_reduce_head.{x}")
        assert (row.pred.read_bytes, row.pred.write_bytes, row.count) == (128 * 32 * 128 * 2, 128 * 8 * 128 * 2, 32)
    # MHA (phi-2: 32 on 32): no reduction
    assert not [row for row in _roof("phi-2", impl="torch", phase="train", seq=128).rows
                if row.pred.name.startswith("attention.bwd_reduce_head")]


def test_zero_grad_launches_follow_multi_tensor_apply():
    # torch._foreach_zero_: 320 chunks of 65,536 elements a launch (ATen MultiTensorApply.cuh);
    # phi-2's 2,779,683,840 parameters (calc.counts.params) -> ceil(P / 20,971,520) launches
    from mlsyscalc.calc.counts.params import count_params

    spec = load_model("phi-2")
    total = count_params(spec).total
    r = _roof(spec, impl="torch", phase="train", seq=128)
    (zero,) = _named(r, "grad.zero")
    assert zero.count == math.ceil(total / (320 * 65536)) == 133
    assert zero.pred.write_bytes * zero.count == pytest.approx(total * 2, rel=1e-12)


def test_kv_cache_cat_of_mla_does_no_arithmetic():
    # deepseek-v3 decode: the latent (512) and rope key (64) joined: a copy, 0 FLOPs
    spec = replace(load_model("deepseek-v3"), num_layers=4)
    r = _roof(spec, impl="torch", phase="decode", context=128, check_fit=False)
    for row in _named(r, "kv_cache_cat"):
        assert (row.pred.flops, row.pred.compute_s) == (0.0, 0.0)
        assert row.pred.read_bytes == row.pred.write_bytes == 576 * 2


def test_flash_decoding_combine_with_several_new_tokens():
    # llama2-7b chunked prefill of 4 tokens after 8,192: output B x H x 4 x d_v = 32 x 4 x 128; the
    # combine reads split fp32 partials plus a max and a sum per row (2 / d_v), writes bf16
    r = _roof("llama2-7b", impl="torch", phase="prefill", seq=4, context=8192)
    (att,) = _named(r, "attention")
    split = att.pred.tiling.split
    assert split > 1
    (comb,) = _named(r, "attention.combine")
    out = 1 * 32 * 4 * 128
    assert comb.pred.read_bytes == pytest.approx(split * out * 4 * (1 + 2 / 128), rel=1e-12)
    assert comb.pred.write_bytes == out * 2


def test_cublas_split_rule_counts_rows_per_group():
    from mlsyscalc.calc.roofline.torch_kernels import cublas_splits

    # 64 tokens over 8 experts: 8 rows each -> one 32-row tile x 64 column tiles = 64 < 66: reduced
    g = predict_grouped_matmul(64, 8, 4096, 4096)
    assert g.tiling.split > 1 and cublas_splits(g, SMS) is True
    # the same 64 rows in one GEMM: 2 x 64 = 128 tiles >= 66 and K < 2 N: not reduced
    one = predict_matmul(64, 4096, 4096)
    assert one.tiling.split > 1 and cublas_splits(one, SMS) is False


# --- calc.roofline.options, calc.roofline.training -------------------------------------------------

@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_every_zero_stage_is_accepted(zero):
    spec = load_model("llama2-7b")
    RooflineOptions(phase="train", dp=2, zero=zero).validate(spec)


@pytest.mark.parametrize("zero", [-1, 4])
def test_unknown_zero_stage_is_refused(zero):
    with pytest.raises(MlsysError, match=f"zero stage must be 0, 1, 2 or 3, got {zero}"):
        RooflineOptions(phase="train", dp=2, zero=zero).validate(load_model("llama2-7b"))


def test_adamw_state_bytes_by_hand():
    from mlsyscalc.calc.roofline.training import state_bytes

    # master weights: read fp32 weight, grad, m, v (16 B); write fp32 weight, m, v and the bf16 copy
    assert state_bytes("bf16") == (16, 12 + 2)
    # without: weight, grad, m, v read in bf16 (4 x 2 B), weight, m, v written (3 x 2 B)
    assert state_bytes("bf16", False) == (8, 6)
    assert state_bytes("fp32", False) == (16, 12)


def test_moe_weight_gradient_reduces_over_tokens_per_expert():
    # a routed GEMM (T tokens over G experts, N x K weights): the weight gradient is G GEMMs of
    # (K x T/G) @ (T/G x N): K x N outputs per expert, its reduction dim the tokens per expert
    spec = replace(load_model("mixtral-8x7b"), num_layers=1)
    r = _roof(spec, phase="train", seq=256, check_fit=False)
    fwd = [row for row in r.rows if row.pass_name == "forward" and row.pred.kind == "matmul"
           and row.pred.dims[1] > 1]
    assert fwd
    for row in fwd:
        tokens, groups, n, k = row.pred.dims
        (w,) = _named(r, row.pred.name + ".wgrad")
        per = math.ceil(tokens / groups)
        assert w.pred.dims == (k * math.ceil(groups), math.ceil(groups), n, per)
        assert w.pred.flops == 2.0 * k * math.ceil(groups) * n * per


# --- calc.scaling.calculators, calc.scaling.laws, calc.scaling.fit --------------------------------------------

def test_table_row_params_ratio_is_ours_over_the_papers():
    from mlsyscalc.calc.scaling.calculators import TableRow

    row = TableRow("chinchilla", "Table 3", 1e21, paper_params=4e9, paper_tokens=8e10, params=3e9, tokens=1e11)
    assert row.params_ratio == pytest.approx(0.75, abs=0)


def test_fit_power_law_recovers_an_exact_law():
    from mlsyscalc.calc.scaling.laws import fit_power_law

    # N = 3 C^0.5 at C = 1e18, 1e20, 1e22: slope 0.5 and coefficient 3 (D is not used)
    rows = tuple((3.0 * c**0.5, c, 0.0) for c in (1e18, 1e20, 1e22))
    a, k = fit_power_law(rows)
    assert a == pytest.approx(0.5, rel=1e-12)
    assert k == pytest.approx(3.0, rel=1e-9)


def _isoflop(law, outlier: float = 1.0):
    """Hoffmann et al. approach-2 design: 4 budgets x 5 sizes around each optimum, exact losses
    (the middle run of the second budget multiplied by `outlier`)."""
    from mlsyscalc.calc.scaling.fit import Runs

    params, tokens, loss = [], [], []
    for i, c in enumerate((1e18, 1e19, 1e20, 1e21)):
        for j, f in enumerate((0.25, 0.5, 1.0, 2.0, 4.0)):
            n = law.k * c**law.a * f
            params.append(n)
            tokens.append(c / (6 * n))
            loss.append(law.loss(n, c / (6 * n)) * (outlier if (i, j) == (1, 2) else 1.0))
    return Runs(tuple(params), tuple(tokens), tuple(loss))


def test_one_start_is_enough_and_converges():
    from mlsyscalc.calc.scaling.fit import FitOptions, fit_runs
    from mlsyscalc.calc.scaling.laws import Parametric

    true = Parametric(E=1.8, A=450.0, B=1800.0, alpha=0.34, beta=0.37)
    result = fit_runs(_isoflop(true), FitOptions(starts=1, bootstrap=0))
    assert (result.starts, result.converged) == (1, 1)
    with pytest.raises(MlsysError, match="need at least one start"):
        fit_runs(_isoflop(true), FitOptions(starts=0, bootstrap=0))


def test_huber_fit_shrugs_off_one_outlier():
    # Huber loss with delta 1e-3 (Hoffmann et al. App. D.2) is nearly an absolute loss: one run of
    # 20 off by 30% barely moves the fit, which still passes through the 19 exact runs
    from mlsyscalc.calc.scaling.fit import FitOptions, fit_runs
    from mlsyscalc.calc.scaling.laws import Parametric

    true = Parametric(E=1.8, A=450.0, B=1800.0, alpha=0.34, beta=0.37)
    result = fit_runs(_isoflop(true, outlier=1.3), FitOptions(starts=20, bootstrap=0))
    runs = result.runs
    clean = [i for i in range(20) if i != 7]
    worst = max(abs(math.log(result.fit.loss(runs.params[i], runs.tokens[i]) / runs.loss[i])) for i in clean)
    assert worst < 1e-3


@pytest.mark.parametrize("wobble", [0.0, 0.01])
def test_every_start_of_a_well_posed_fit_converges(wobble):
    # exact runs, or runs with a deterministic 1% wobble: from every start the Levenberg-Marquardt
    # steps stop where none lowers the objective by more than the tolerance: all count as converged
    from mlsyscalc.calc.scaling.fit import FitOptions, Runs, fit_runs
    from mlsyscalc.calc.scaling.laws import Parametric

    exact = _isoflop(Parametric(E=1.8, A=450.0, B=1800.0, alpha=0.34, beta=0.37))
    runs = Runs(exact.params, exact.tokens, tuple(x * (1 + wobble * math.sin(7 * i)) for i, x in enumerate(exact.loss)))
    result = fit_runs(runs, FitOptions(starts=20, bootstrap=0))
    assert (result.starts, result.converged) == (20, 20)


# --- calc.serve.engine: speculative decoding reserves KV on admission ------------------------------

class _Cost:
    """A serving iteration of 1 s whatever it holds (decode-only steps are speculative here)."""

    def mixed_s(self, *args):
        return 1.0

    def decode_s(self, *args):
        return 1.0


class _Spec:
    """A speculative step of 0.25 s emitting 2 tokens a sequence."""

    tokens_per_step = 2.0

    def step_s(self, d, keys):
        return 0.25


@pytest.mark.parametrize("blocks,sched,finish,used", [
    # 4 blocks: A reserves ceil((4 + 8) / 4) = 3 on admission, B's 3 do not fit until A is done.
    # A: prefill 1 s (token 1), then ceil(7 / 2) = 4 speculative steps of 0.25 s: done at 2.0;
    # B then the same from 2.0: done at 4.0. Held blocks stay 3 (reserved, never grown).
    (4, [0.0, 2.0], [2.0, 4.0], [3] * 10),
    # 6 blocks: both reservations fit at once: one prefill of both, 4 steps
    (6, [0.0, 0.0], [2.0, 2.0], [6] * 5),
])
def test_speculative_engine_reserves_prompt_plus_output(blocks, sched, finish, used):
    from mlsyscalc.calc.serve.engine import Engine, EngineLimits

    lim = EngineLimits("vllm", 1000, 8, 16, 4, blocks, "recompute", 0.5, 0)
    t = Engine([(0.0, 4, 8), (0.0, 4, 8)], _Cost(), lim, spec=_Spec()).run()
    assert (t.sched_s, t.finish_s, t.preempt_s) == (sched, finish, [])
    assert t.iter_used_blocks == used


# --- more of calc.roofline.ops / roofline_train: documented outputs ---------------------------------

def test_naive_roofline_time_by_hand():
    # roofline_s: the datasheet roof, max(FLOPs / peak, bytes / bandwidth), no efficiencies.
    # H100-SXM datasheet: 989.5 TFLOP/s dense bf16, 3.35 TB/s
    peak, bw = H100.datasheet_flops("bf16"), H100.datasheet_Bps
    assert (peak, bw) == (989.5e12, 3.35e12)
    op = predict_memory_op("copy", 1000.0, 3000.0)
    assert op.roofline_s == pytest.approx(4000.0 / bw, rel=1e-12)
    gemm = predict_matmul(4096, 4096, 4096)
    assert gemm.roofline_s == pytest.approx(2 * 4096**3 / peak, rel=1e-12)
    # a decode GEMM is bandwidth-bound: 1 x 4096 x 4096 bf16 moves 2 x (4096 + 4096^2 + 4096) bytes
    skinny = predict_matmul(1, 4096, 4096)
    assert skinny.roofline_s == pytest.approx(2 * (4096 + 4096**2 + 4096) / bw, rel=1e-12)


def test_bound_and_efficiency_class_agree_at_a_tie():
    # equal compute and memory times: compute-bound, priced by the compute class (both properties)
    op = replace(predict_matmul(1, 4096, 4096), compute_s=1e-3, memory_s=1e-3, overhead_s=1e-3)
    assert (op.bound, op.efficiency_class) == ("compute", op.compute_class)
    mem = replace(op, compute_s=0.9e-3)
    assert (mem.bound, mem.efficiency_class) == ("memory", "matmul_skinny")
    assert replace(op, overhead_s=1.1e-3).bound == "overhead"


def test_fused_adamw_is_one_kernel_torch_launches_per_multi_tensor_apply():
    # impl fused: one AdamW kernel over all parameters; impl torch: ceil(P / (320 x 65536)) launches
    # (ATen multi_tensor_apply; phi-2's P from calc.counts.params: the chunk count binds, not the 36 tensors)
    from mlsyscalc.calc.counts.params import count_params

    spec = load_model("phi-2")
    total = count_params(spec).total
    (fused,) = _named(_roof(spec, phase="train", seq=128), "adamw")
    assert fused.count == 1 and fused.pred.flops == 12 * total
    (torch_row,) = _named(_roof(spec, impl="torch", phase="train", seq=128), "adamw")
    assert torch_row.count == math.ceil(total / (320 * 65536))
