"""The plain-torch MoE layer as `mlsys roofline --impl torch` prices it: the routing, dispatch and
combine kernels the bench's MoE runs (counted from bench._torch_layers.MoE by hand), and the grouped
GEMM's streaming class. Expected values are written out, not taken from the code under test."""

from __future__ import annotations

import pytest

from mlsyscalc.bench.cases.model import reduced_spec
from mlsyscalc.calc.roofline.calibration import datasheet_ceilings
from mlsyscalc.calc.roofline.model import RooflineOptions, _Pass, predict_model
from mlsyscalc.calc.roofline.ops import predict_grouped_matmul
from mlsyscalc.calc.roofline.torch_moe import moe_dispatch_backward, moe_dispatch_kernels
from mlsyscalc.specs.lookup import load_model


def _pass(name: str, batch: int = 16):
    spec = load_model(name)
    opts = RooflineOptions(phase="decode", batch=batch, seq=2048, impl="torch")
    return _Pass(spec, datasheet_ceilings("H200"), opts), spec


def test_mixtral_layer_runs_25_dispatch_kernels():
    """router cast, softmax, top-k, sum, divide, cast (6); argsort: key copy, index fill, sort (3);
    copy -> expert (1); count zero, ones, scatter-add (3); gather of the copies (1); cumsum (1); the three
    grouped GEMMs' set-up (3); weights gathered, multiplied onto the outputs (2); inverse argsort (3);
    gather back, sum over k (2): 25. The gather of the copies: T k = 32 rows of 4096 bf16 plus their
    int64 index read, the rows written."""
    p, spec = _pass("mixtral-8x7b")
    ops = [op for op, _ in moe_dispatch_kernels(p, 0)]
    assert len(ops) == 25
    gather = next(op for op in ops if op.name == "moe_gather_routed")
    assert gather.read_bytes == 32 * (4096 * 2 + 8) and gather.write_bytes == 32 * 4096 * 2
    assert next(op for op in ops if op.name == "moe_weight_outputs").memory_class == "memory_broadcast"


def test_shared_expert_adds_one_kernel_and_dense_layers_none():
    p, spec = _pass("deepseek-v3")
    assert len(moe_dispatch_kernels(p, 0)) == 0  # deepseek-v3's first layers are dense
    moe_layer = next(i for i in range(spec.num_layers) if spec.layer_is_moe(i))
    assert len(moe_dispatch_kernels(p, moe_layer)) == 26


def test_experts_stream_at_the_grouped_kernels_rate():
    """Memory-bound expert GEMMs (2 experts, 1 row each, 14336 x 4096) stream at the lower of 0.78 of the
    datasheet and 20.85 GB/s per SM x 132 SMs = 2.752 TB/s: on an H200 (0.78 x 4.8 = 3.744 TB/s) the
    per-SM rate binds, 3.744 / 2.752 = 1.3605 x the dense GEMM's time; on an H100 (0.78 x 3.35 = 2.613
    TB/s) the fraction does, as for a dense GEMM."""
    for gpu, ratio in (("H200", 0.78 * 4.8e12 / (20.85e9 * 132)), ("H100-SXM", 1.0)):
        ceil = datasheet_ceilings(gpu)
        dense = predict_grouped_matmul(2, 2, 14336, 4096, "bf16", ceil)
        experts = predict_grouped_matmul(2, 2, 14336, 4096, "bf16", ceil, experts=True)
        assert experts.memory_class == "matmul_grouped_stream" and dense.memory_class == "matmul_skinny"
        assert experts.memory_s / dense.memory_s == pytest.approx(ratio, rel=1e-3)
    one = predict_grouped_matmul(2, 1, 14336, 4096, "bf16", datasheet_ceilings("H200"), experts=True)
    assert one.memory_class == "matmul_skinny"  # one group is a plain GEMM


def _train_pass(name: str, batch: int, seq: int):
    spec = load_model(name)
    opts = RooflineOptions(phase="train", batch=batch, seq=seq, impl="torch", check_fit=False)
    return _Pass(spec, datasheet_ceilings("H100-SXM"), opts), spec


def test_mixtral_layer_backward_runs_48_dispatch_kernels():
    """mixtral B1 S2048 (T = 2048, k = 2, T k = 4096), written out from the autograd nodes:
    reshape copy of the sum's expanded gradient (1); three IndexBackward0 (combined[inv], w[order],
    flat[token]), each fill, remainder, x stride, / slice, arange, radix sort (histogram, scan, 2
    onesweep passes: 4095 and 2047 need 12 and 11 bits) and the accumulate (10 each, 30); outs * w
    backward (broadcast mul, mul, sum over h: 3); weights' cast (1); division (grad / s, w / s, / s,
    neg, mul, sum over k, the sum's expanded add: 7); top-k (fill, scatter: 2); softmax (1); the
    logits' cast (1); the two gradient sums (routed copies, layer input: 2): 48. The H100 profile
    shows per layer 3 histograms, 6 onesweep passes, 3 remainders, 2 h-wide indexing_backward_kernel."""
    p, _ = _train_pass("mixtral-8x7b", 1, 2048)
    ops = [op for op, _ in moe_dispatch_backward(p, 0)]
    assert len(ops) == 48
    names = [op.name for op in ops]
    assert sum(n.endswith(".sort_histogram") for n in names) == 3
    assert sum(n.endswith(".sort_pass") for n in names) == 6
    assert sum(n.endswith(".index_wrap") for n in names) == 3
    assert sum(n.endswith(".accumulate") for n in names) == 3
    # combined[inv]'s accumulate: 2 x 4096 int64 indices, 4096 gradient rows and 4096 destination rows
    # of 4096 bf16 read, the destination rows written
    acc = next(op for op in ops if op.name == "moe_bwd_gather_back.accumulate")
    assert acc.read_bytes == 2 * 4096 * 8 + 2 * 4096 * 4096 * 2 and acc.write_bytes == 4096 * 4096 * 2
    # flat[token]: 4096 indices into 2048 rows, each row accumulated twice, read and written once
    acc = next(op for op in ops if op.name == "moe_bwd_gather_routed.accumulate")
    assert acc.read_bytes == 2 * 4096 * 8 + 4096 * 4096 * 2 + 2048 * 4096 * 2 and acc.write_bytes == 2048 * 4096 * 2
    assert len(moe_dispatch_backward(_train_pass("deepseek-v3", 1, 512)[0], 0)) == 0  # a dense layer


def test_backward_rows_carry_the_dispatch_kernels_per_moe_layer():
    p, spec = _train_pass("mixtral-8x7b", 1, 2048)
    roof = predict_model(reduced_spec(spec, 2), datasheet_ceilings("H100-SXM"), p.opts)
    rows = [r for r in roof.rows if r.pred.name.startswith("moe_bwd") and r.pass_name == "backward"]
    assert sum(r.count for r in rows) == 2 * 48


def test_autograd_runs_the_listed_nodes():
    """The oracle is torch's autograd graph of the bench's MoE layer (CPU, a 64-wide mixtral): the
    dispatch path's backward nodes are those the list prices, one kernel group each (bf16, as the bench runs)."""
    torch = pytest.importorskip("torch")
    from mlsyscalc.bench._torch_layers import MoE

    spec = load_model("mixtral-8x7b", {"hidden_size": 64, "intermediate_size": 96, "num_local_experts": 4,
                                       "num_hidden_layers": 2, "num_attention_heads": 4,
                                       "num_key_value_heads": 2, "vocab_size": 97})
    x = torch.randn(1, 8, 64, dtype=torch.bfloat16, requires_grad=True)  # bf16 as the bench runs it
    y = MoE(spec).to(torch.bfloat16)(x)
    seen, stack = [], [y.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or any(fn is s for s in seen):
            continue
        seen.append(fn)
        stack += [nxt for nxt, _ in fn.next_functions]
    names = [type(fn).__name__ for fn in seen]
    assert names.count("IndexBackward0") == 3  # gather back, weights in expert order, routed copies
    assert names.count("ToCopyBackward0") == 2  # weights to bf16, logits to fp32
    assert {"TopkBackward0", "SoftmaxBackward0", "DivBackward0", "SumBackward1"} <= set(names)
    ops = [op.name for op, _ in moe_dispatch_backward(_train_pass("mixtral-8x7b", 1, 2048)[0], 0)]
    assert sum(n.endswith(".accumulate") for n in ops) == 3
    assert {"moe_bwd_weights_cast", "moe_bwd_router_cast", "moe_bwd_topk_scatter", "moe_bwd_softmax",
            "moe_bwd_div", "moe_bwd_sum_add"} <= set(ops)


def test_a_long_argsort_is_cubs_radix_sort_over_64_bits():
    """Up to 4096 keys torch sorts in place (1 kernel after the key copy and index fill); beyond, cub's
    radix sort over the 64 bits of int64 keys: histogram, scan and 64 / 8 = 8 onesweep passes, each
    reading and writing n keys and n indices (16 n bytes each way). Mixtral prefill B4 S2048: T k =
    16384 picks, so each of the forward's two argsorts is 2 + 10 kernels: 25 - 2 + 2 x 10 = 43."""
    spec = load_model("mixtral-8x7b")
    opts = RooflineOptions(phase="prefill", batch=4, seq=2048, impl="torch", check_fit=False)
    ops = [op for op, _ in moe_dispatch_kernels(_Pass(spec, datasheet_ceilings("H100-SXM"), opts), 0)]
    assert len(ops) == 43
    passes = [op for op in ops if op.name == "moe_order.sort_pass"]
    assert len(passes) == 8 and passes[0].read_bytes == passes[0].write_bytes == 16 * 16384
    assert len(moe_dispatch_kernels(_pass("mixtral-8x7b", batch=64)[0], 0)) == 25  # 128 picks: in place
