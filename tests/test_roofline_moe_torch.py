"""The plain-torch MoE layer as `mlsys roofline --impl torch` prices it: the routing, dispatch and
combine kernels the bench's MoE runs (counted from bench._torch_layers.MoE by hand), and the grouped
GEMM's streaming class. Expected values are written out, not taken from the code under test."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.calibration import datasheet_ceilings
from mlsyscalc.calc.roofline_model import RooflineOptions, _Pass
from mlsyscalc.calc.roofline_ops import predict_grouped_matmul
from mlsyscalc.calc.roofline_torch import moe_dispatch_kernels
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
