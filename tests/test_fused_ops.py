"""calc/roofline/fused_ops.py: the fewest bytes of each fused op and pass, checked against the tensors the kernels
really take and give, plus the options, the errors and the roofline time."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings

from mlsyscalc.calc.roofline.fused_ops import FUSED_OPS, fused_bytes, fused_count, predict_fused
from mlsyscalc.calc.roofline.ops import predict_memory_op
from mlsyscalc.errors import MlsysError

T, W = 37, 96   # tokens, width


def test_every_op_has_a_fwd_and_bwd_or_one_fused_pass():
    ops = {name.rsplit("_", 1)[0] for name in FUSED_OPS}
    assert ops == {"rmsnorm", "layernorm", "swiglu", "geglu", "rotary", "dropout_add", "cross_entropy"}
    for op in ops - {"cross_entropy"}:
        assert {f"{op}_fwd", f"{op}_bwd"} <= set(FUSED_OPS)
    assert "cross_entropy_fwdbwd" in FUSED_OPS


def test_rmsnorm_counts_by_hand():
    # forward: x (T, W) and the weight in bf16 read; y written, rstd in fp32
    assert fused_bytes("rmsnorm_fwd", T, W, "bf16") == (2 * T * W + 2 * W, 2 * T * W + 4 * T)
    # backward: dy, x, weight, rstd read; dx and dweight written; partials only when asked (4 P W each way)
    assert fused_bytes("rmsnorm_bwd", T, W, "bf16") == (4 * T * W + 2 * W + 4 * T, 2 * T * W + 2 * W)
    read, write = fused_bytes("rmsnorm_bwd", T, W, "bf16", partials=5)
    assert (read, write) == (4 * T * W + 2 * W + 4 * T + 4 * 5 * W, 2 * T * W + 2 * W + 4 * 5 * W)


def test_options_add_only_their_tensors():
    base = fused_bytes("layernorm_bwd", T, W, "fp16", partials=3)
    no_bias = fused_bytes("layernorm_bwd", T, W, "fp16", partials=3, bias=False)
    assert base[0] - no_bias[0] == 4 * 3 * W and base[1] - no_bias[1] == 2 * W + 4 * 3 * W
    fwd, fwd_mask = fused_bytes("dropout_add_fwd", T, W), fused_bytes("dropout_add_fwd", T, W, mask=True)
    assert fwd_mask[0] == fwd[0] and fwd_mask[1] - fwd[1] == T * W   # a byte mask written
    bwd, bwd_mask = fused_bytes("dropout_add_bwd", T, W), fused_bytes("dropout_add_bwd", T, W, mask=True)
    assert bwd_mask[0] - bwd[0] == T * W and bwd_mask[1] == bwd[1]
    assert fused_bytes("swiglu_fwd", T, W, "fp32") == (2 * 4 * T * W, 4 * T * W)
    assert fused_bytes("rotary_fwd", T, W, head_dim=32, index_bytes=4, table_dtype="bf16") == \
        (2 * T * W + 4 * T + 2 * 2 * T * 16, 2 * T * W)


def test_parts_add_up_and_flops_scale_with_elements():
    for op in FUSED_OPS:
        c = fused_count(op, T, W, head_dim=32, partials=2)
        assert sum(b for _, way, b in c.parts if way == "read") == c.read_bytes
        assert sum(b for _, way, b in c.parts if way == "write") == c.write_bytes
        assert fused_count(op, 2 * T, W, head_dim=32).flops == 2 * c.flops > 0


def test_bad_input_is_a_clear_error():
    with pytest.raises(MlsysError, match="unknown fused op"):
        fused_bytes("rmsnorm", T, W)
    with pytest.raises(MlsysError, match="unknown option"):
        fused_bytes("rmsnorm_fwd", T, W, heads=3)
    with pytest.raises(MlsysError, match="head_dim is needed"):
        fused_bytes("rotary_fwd", T, W)
    with pytest.raises(MlsysError, match="divide the width"):
        fused_bytes("rotary_fwd", T, W, head_dim=36)
    with pytest.raises(MlsysError, match="tokens"):
        fused_bytes("swiglu_fwd", 0, W)
    with pytest.raises(MlsysError, match="dtype"):
        fused_bytes("swiglu_fwd", T, W, "fp13")


def test_prediction_is_the_memory_roofline_of_these_bytes_plus_the_isolated_call():
    """Each op's bytes at its class's share of the datasheet bandwidth (memory_fused; the norms' backward
    memory_fused_norm_bwd), without the per-SM cap of PyTorch's own kernels, plus 5.73 us an isolated call
    pays for its first kernel and 3.84 us for the partial-sum launch of the backwards that sum partials (both
    norms, dropout_add with a bias)."""
    h200 = load_ceilings("H200")
    two = {"rmsnorm_bwd", "layernorm_bwd", "dropout_add_bwd"}
    for op in FUSED_OPS:
        pred = predict_fused(op, 4096, 4096, "bf16", "H200", head_dim=128)
        read, write = fused_bytes(op, 4096, 4096, "bf16", head_dim=128)
        same = predict_memory_op(op, read, write, pred.flops, "bf16", "H200", cls=FUSED_OPS[op].cls)
        assert pred.memory_s == same.memory_s and pred.memory_s > pred.compute_s   # memory-bound
        share = getattr(h200.efficiency, FUSED_OPS[op].cls)
        assert pred.memory_s == pytest.approx((read + write) / (share * 4.8e12))
        assert pred.overhead_s == pytest.approx(5.73e-6 + (3.84e-6 if op in two else 0.0))
        assert pred.predicted_s == pytest.approx(pred.memory_s + pred.overhead_s)
    no_bias = predict_fused("dropout_add_bwd", 4096, 4096, "bf16", "H200", bias=False)
    assert no_bias.overhead_s == pytest.approx(5.73e-6)   # no partials without a bias: one launch
    # LayerNorm rows wider than LAYERNORM_CHUNKED_WIDTH: dx, then dw and db in a second launch that reads x, dy again
    wide = predict_fused("layernorm_bwd", 4096, 16384, "bf16", "H200")
    read, write = fused_bytes("layernorm_bwd", 4096, 16384, "bf16")
    assert wide.overhead_s == pytest.approx(5.73e-6 + 3.84e-6)
    assert wide.memory_s == pytest.approx((read + 2 * 4096 * 16384 * 2 + write)
                                          / (h200.efficiency.memory_fused_norm_bwd * 4.8e12))
    assert {o.cls for o in FUSED_OPS.values()} == {"memory_fused", "memory_fused_norm_bwd"}


# --- against the kernels' own tensors (CPU interpreter) --------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def kernels():
    pytest.importorskip("triton")   # conftest has set TRITON_INTERPRET=1 where there is no GPU
    from mlsyscalc.kernels import cross_entropy, dropout_add, glu, norm, rotary

    return norm, glu, rotary, dropout_add, cross_entropy


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


@pytest.mark.interpret
def test_bytes_are_the_tensors_the_launchers_take_and_give(kernels):
    norm, glu, rotary, dropout_add, ce = kernels
    h = torch.float16
    x, w, b, dy = torch.randn(T, W, dtype=h), torch.randn(W, dtype=h), torch.randn(W, dtype=h), torch.randn(T, W, dtype=h)
    y, rstd = norm.rms_norm_forward(x, w)
    assert fused_bytes("rmsnorm_fwd", T, W, "fp16") == (_nbytes(x, w), _nbytes(y, rstd))
    assert fused_bytes("rmsnorm_bwd", T, W, "fp16") == (_nbytes(dy, x, w, rstd), _nbytes(*norm.rms_norm_backward(dy, x, w, rstd)))
    y, mean, rstd = norm.layer_norm_forward(x, w, b)
    assert fused_bytes("layernorm_fwd", T, W, "fp16") == (_nbytes(x, w, b), _nbytes(y, mean, rstd))
    grads = norm.layer_norm_backward(dy, x, w, mean, rstd)
    assert fused_bytes("layernorm_bwd", T, W, "fp16") == (_nbytes(dy, x, w, mean, rstd), _nbytes(*grads))
    gate, up = torch.randn(T, W, dtype=h), torch.randn(T, W, dtype=h)
    assert fused_bytes("geglu_fwd", T, W, "fp16") == (_nbytes(gate, up), _nbytes(glu.geglu_forward(gate, up)))
    assert fused_bytes("geglu_bwd", T, W, "fp16") == (_nbytes(dy, gate, up), _nbytes(*glu.geglu_backward(dy, gate, up)))
    xr, cos, sin = torch.randn(T, 3, 32, dtype=h), *rotary.rotary_tables(T, 32)
    pos = torch.arange(T)
    read = _nbytes(xr, pos, cos, sin)   # T positions: every table row is read once
    assert fused_bytes("rotary_bwd", T, 96, "fp16", head_dim=32) == (read, _nbytes(rotary.rotary_backward(xr, cos, sin, pos)))
    out = dropout_add.bias_dropout_add_forward(x, b, dy, 0.1, 5)
    assert fused_bytes("dropout_add_fwd", T, W, "fp16") == (_nbytes(x, b, dy), _nbytes(out))
    dx, dbias, _ = dropout_add.bias_dropout_add_backward(dy, 0.1, 5)
    assert fused_bytes("dropout_add_bwd", T, W, "fp16") == (_nbytes(dy), _nbytes(dx, dbias))
    logits, target = torch.randn(T, W, dtype=h), torch.randint(0, W, (T,))
    loss, grad = ce.cross_entropy(logits, target)
    loss_rows = torch.empty(T)   # the kernel's per-row losses (fp32) before the mean
    # the logits are read twice (the online max and sum, then the gradient): a chunked kernel's two passes
    assert fused_bytes("cross_entropy_fwdbwd", T, W, "fp16") == (_nbytes(logits, logits, target),
                                                                 _nbytes(grad, loss_rows))
