"""Fused memory-bound kernels (norm, glu, rotary, dropout_add, cross_entropy) against plain-torch references.

Without a GPU the kernels run through Triton's interpreter (TRITON_INTERPRET=1, numpy underneath) at
small shapes in fp32/fp16 (bf16 stores are wrong in the interpreter); widths are not powers of two,
single rows are included, and every output buffer the launchers allocate is poisoned with NaN, so an
element a kernel leaves unwritten fails the comparison. With a GPU, the `gpu`-marked tests run bf16 at
training sizes.
"""

from __future__ import annotations

import importlib
import json
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton and the kernels are imported (conftest too)
pytest.importorskip("triton")

from .sm90 import needs_ptxas, run_uninterpreted  # noqa: E402


def _load():
    from mlsyscalc.kernels import cross_entropy, dropout_add, glu, norm, rotary, rowwise

    mods = (rowwise, norm, glu, rotary, dropout_add, cross_entropy)
    if not torch.cuda.is_available() and type(norm.norm_fwd_kernel).__name__ != "InterpretedFunction":
        mods = tuple(importlib.reload(m) for m in mods)  # imported earlier without the interpreter
    return mods


RW, N, G, R, D, CE = _load()
DEV = "cuda" if torch.cuda.is_available() else "cpu"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
interpret = pytest.mark.interpret
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    assert out.shape == ref.shape
    assert torch.isfinite(out).all(), "unwritten (poisoned) or overflowed elements"
    return ((out - ref).norm() / ref.norm()).item()


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, device=DEV, dtype=dtype)


@pytest.fixture
def poisoned(monkeypatch):
    """torch.empty / empty_like fill float buffers with NaN: what a kernel does not write stays NaN."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(empty_like(*a, **k)))


def grads64(fn, *inputs, dy):
    """Autograd of fn in float64 at the inputs: the gradients a backward kernel must give."""
    leaves = [x.detach().double().requires_grad_() if x is not None else None for x in inputs]
    fn(*leaves).backward(dy.double())
    return [x.grad if x is not None else None for x in leaves]


SHAPES = [(1, 40), (37, 96), (9, 300)]   # rows x width: one row, stacked narrow rows, a width off the tiles
DTYPES = [torch.float32, torch.float16]


# --- norms ----------------------------------------------------------------------------------------

@interpret
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_forward_backward(shape, dtype, poisoned):
    x, w, dy = randn(*shape, dtype=dtype), randn(shape[1], dtype=dtype, seed=1), randn(*shape, dtype=dtype, seed=2)
    y, rstd = N.rms_norm_forward(x, w)
    assert rel_err(y, N.rms_norm_ref(x, w)) < TOL[dtype]
    assert rel_err(rstd, torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)) < 1e-5
    dx, dw = N.rms_norm_backward(dy, x, w, rstd, programs=3)   # 3 programs: each sums several row blocks
    ref_dx, ref_dw = grads64(N.rms_norm_ref, x, w, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[dtype] and rel_err(dw, ref_dw) < TOL[dtype]


@interpret
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("has_bias", [True, False])
def test_layer_norm_forward_backward(shape, dtype, has_bias, poisoned):
    x, w, dy = randn(*shape, dtype=dtype), randn(shape[1], dtype=dtype, seed=1), randn(*shape, dtype=dtype, seed=2)
    b = randn(shape[1], dtype=dtype, seed=3) if has_bias else None
    y, mean, rstd = N.layer_norm_forward(x, w, b)
    assert rel_err(y, N.layer_norm_ref(x, w, b)) < TOL[dtype]
    assert torch.allclose(mean.double(), x.double().mean(-1), atol=1e-5)
    assert rel_err(rstd, torch.rsqrt(x.double().var(-1, unbiased=False) + 1e-5)) < 1e-5
    dx, dw, db = N.layer_norm_backward(dy, x, w, mean, rstd, has_bias=has_bias, programs=2)
    ref_dx, ref_dw, ref_db = grads64(N.layer_norm_ref, x, w, b, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[dtype] and rel_err(dw, ref_dw) < TOL[dtype]
    assert (db is None) if not has_bias else rel_err(db, ref_db) < TOL[dtype]


@interpret
def test_norm_takes_strided_rows_and_fp32_weights():
    """x as every other row of a buffer (row stride 2 x width); fp32 weight, its gradient in fp32."""
    big = randn(20, 72, dtype=torch.float16)
    x, w, dy = big[::2], randn(72, seed=1), randn(10, 72, dtype=torch.float16, seed=2)
    y, rstd = N.rms_norm_forward(x, w)
    assert rel_err(y, N.rms_norm_ref(x, w)) < TOL[torch.float16]
    dx, dw = N.rms_norm_backward(dy, x, w, rstd)
    assert dw.dtype == torch.float32
    ref_dx, ref_dw = grads64(N.rms_norm_ref, x, w, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[torch.float16] and rel_err(dw, ref_dw) < TOL[torch.float16]


@interpret
def test_backward_programs_sum_at_least_16_rows_fill_the_sms_and_fit_the_card():
    assert RW.programs_for(1000, 1, torch.device("cpu"), 8) == min(RW.INTERPRETER_SMS * 4, 63)
    assert RW.programs_for(80, 1, torch.device("cpu"), 8) == 5       # ceil(80 / 16): more than the 4 SMs
    assert RW.programs_for(40, 1, torch.device("cpu"), 8) == 4       # ceil(40 / 16) = 3, but one a SM
    assert RW.programs_for(2, 8, torch.device("cpu"), 8) == 2        # one a SM while there are row blocks
    assert RW.programs_for(5, 4, torch.device("cpu"), 8, programs=9) == 5   # never more than the row blocks
    part = randn(37, 300)
    assert rel_err(RW.sum_partials(part, torch.float32), part.double().sum(0)) < 1e-6
    part = randn(300, 45)   # more partial rows than one step's SUM_ROWS, a column tile cut short
    assert rel_err(RW.sum_partials(part, torch.float32), part.double().sum(0)) < 1e-6
    a = randn(131, 70, dtype=torch.float16)   # column sums of a 16-bit tensor, in fp32, in a small tile
    assert rel_err(RW.column_sums(a, torch.float32, tile=(16, 8, 3)), a.double().sum(0)) < 1e-6


@interpret
@pytest.mark.parametrize("has_bias", [True, False])
def test_layer_norm_of_wide_rows_in_chunks_and_a_split_backward(has_bias, poisoned, monkeypatch):
    """Rows wider than CHUNKED_WIDTH (lowered here so the interpreter stays quick): the forward in column chunks
    that do not divide the row, the backward as dx alone and then dw, db in column blocks cut short."""
    monkeypatch.setattr(N, "CHUNKED_WIDTH", 64)
    monkeypatch.setattr(N, "CHUNKED_FWD_TILE", (2, 32, 4))
    monkeypatch.setattr(N, "DWDB_TILE", (4, 32, 2, 4))
    x, w, dy = randn(7, 100, dtype=torch.float16), randn(100, seed=1), randn(7, 100, dtype=torch.float16, seed=2)
    x = x + 3   # an offset mean: the centred variance must not lose it
    b = randn(100, seed=3) if has_bias else None
    y, mean, rstd = N.layer_norm_forward(x, w, b)
    assert rel_err(y, N.layer_norm_ref(x, w, b)) < TOL[torch.float16]
    assert torch.allclose(mean.double(), x.double().mean(-1), atol=1e-4)
    assert rel_err(rstd, torch.rsqrt(x.double().var(-1, unbiased=False) + 1e-5)) < 1e-5
    dx, dw, db = N.layer_norm_backward(dy, x, w, mean, rstd, has_bias=has_bias, programs=3)
    ref_dx, ref_dw, ref_db = grads64(N.layer_norm_ref, x, w, b, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[torch.float16] and rel_err(dw, ref_dw) < TOL[torch.float16]
    assert (db is None) if not has_bias else rel_err(db, ref_db) < TOL[torch.float16]


@interpret
@pytest.mark.parametrize("chunked", [False, True])
def test_layer_norm_statistics_survive_a_large_mean_and_an_outlier(chunked, monkeypatch):
    """The forward's one-pass moments (shifted by each row's first element) against float64: rows far from zero
    (mean 1e4, deviation 1), a row whose first element is the outlier (the shift at its worst, sqrt(N - 1)
    deviations off), and a constant row (variance 0, not a negative one)."""
    if chunked:
        monkeypatch.setattr(N, "CHUNKED_WIDTH", 64)
        monkeypatch.setattr(N, "CHUNKED_FWD_TILE", (2, 32, 4))
    x = randn(6, 300) + 1e4
    x[1] = randn(300, seed=5)
    x[1, 0] = 1e4       # one massive activation, in the shift's place
    x[2, 7] = -3e3      # and one elsewhere
    x[3] = 7.0          # constant
    w, b = randn(300, seed=1), randn(300, seed=3)
    y, mean, rstd = N.layer_norm_forward(x, w, b)
    x64 = x.double()
    ref_rstd = torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5)
    scale = x64.abs().amax(-1)   # fp32 sums of elements this large: the mean within ~2^-22 of them
    assert ((mean.double() - x64.mean(-1)).abs() <= 3e-7 * scale).all()
    assert ((rstd.double() - ref_rstd).abs() / ref_rstd).max().item() < 1e-3
    assert rel_err(y, N.layer_norm_ref(x64, w.double(), b.double())) < 1e-3


# --- gated linear units ---------------------------------------------------------------------------

@interpret
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_glu_forward_backward_on_halves(shape, dtype, activation, poisoned):
    m, n = shape
    fused = randn(m, 2 * n, dtype=dtype)   # the projection's output: gate | up
    gate, up, dy = fused[:, :n], fused[:, n:], randn(m, n, dtype=dtype, seed=4)
    y = G.glu_forward(gate, up, activation)
    assert rel_err(y, G.glu_ref(gate, up, activation)) < TOL[dtype]
    dgate, dup = G.glu_backward(dy, gate, up, activation)
    ref_dg, ref_du = grads64(lambda g, u: G.glu_ref(g, u, activation), gate, up, dy=dy)
    assert rel_err(dgate, ref_dg) < TOL[dtype] and rel_err(dup, ref_du) < TOL[dtype]
    assert dgate.data_ptr() + n * dgate.element_size() == dup.data_ptr()   # halves of one (m, 2n) buffer


@interpret
def test_gelu_tanh_saturates_without_nan():
    gate = torch.tensor([[-200.0, -30.0, -1e-4, 0.0, 1e-4, 30.0, 200.0, 5.0]], device=DEV)
    up = torch.ones_like(gate)
    y = G.geglu_forward(gate, up)
    assert torch.allclose(y, G.glu_ref(gate, up, "gelu_tanh"), atol=1e-6, rtol=1e-6)
    dgate, _ = G.geglu_backward(torch.ones_like(gate), gate, up)
    assert torch.isfinite(dgate).all() and dgate[0, 0] == 0 and abs(dgate[0, -2].item() - 1.0) < 1e-6


# --- rotary ---------------------------------------------------------------------------------------

@interpret
@pytest.mark.parametrize("tokens,heads,head_dim", [(1, 1, 16), (5, 3, 16), (6, 7, 24)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_forward_backward(tokens, heads, head_dim, dtype, poisoned):
    qkv = randn(tokens, heads + 2, head_dim, dtype=dtype)   # x viewed out of a wider buffer: strided heads
    x, dy = qkv[:, 1:heads + 1], randn(tokens, heads, head_dim, dtype=dtype, seed=5)
    cos, sin = R.rotary_tables(50, head_dim, device=DEV)
    pos = torch.randint(0, 50, (tokens,), generator=torch.Generator(DEV).manual_seed(tokens), device=DEV)
    y = R.rotary_forward(x, cos, sin, pos)
    assert rel_err(y, R.rotary_ref(x, cos, sin, pos)) < TOL[dtype]
    (ref_dx,) = grads64(lambda v: R.rotary_ref(v, cos, sin, pos), x, dy=dy)
    assert rel_err(R.rotary_backward(dy, cos, sin, pos.int()), ref_dx) < TOL[dtype]


@interpret
def test_rotary_backward_undoes_the_forward_and_position_zero_is_identity():
    x = randn(4, 2, 32)
    cos, sin = R.rotary_tables(8, 32, device=DEV)
    pos = torch.tensor([0, 3, 7, 7], device=DEV)
    y = R.rotary_forward(x, cos, sin, pos)
    assert torch.equal(y[0], x[0])
    assert rel_err(R.rotary_backward(y, cos, sin, pos), x) < 1e-6   # a rotation's transpose is its inverse


# --- bias-dropout-residual-add --------------------------------------------------------------------

@interpret
@pytest.mark.parametrize("shape", [(1, 40), (6, 96), (3, 300)])   # fewer rows: Philox runs slowly in numpy
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("has_bias", [True, False])
def test_bias_dropout_add_forward_backward(shape, dtype, has_bias, poisoned):
    x, res, dy = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=6), randn(*shape, dtype=dtype, seed=7)
    bias = randn(shape[1], dtype=dtype, seed=8) if has_bias else None
    p, seed = 0.3, 2**33 + 17   # a seed wider than 32 bits: both Philox key words
    out = D.bias_dropout_add_forward(x, bias, res, p, seed)
    assert rel_err(out, D.bias_dropout_add_ref(x, bias, res, p, seed)) < TOL[dtype]
    dx, dbias, dres = D.bias_dropout_add_backward(dy, p, seed, has_bias=has_bias, programs=2)
    assert dres is dy
    ref_dx, ref_db = grads64(lambda v, b: D.bias_dropout_add_ref(v, b, res.double(), p, seed), x, bias, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[dtype]
    assert (dbias is None) if not has_bias else rel_err(dbias, ref_db) < TOL[dtype]


def test_norm_forward_warps():
    """LayerNorm's whole-row forward takes half of warps_for's warps (at least 4) from rows padded to 4096;
    RMSNorm's and narrower LayerNorm rows keep warps_for's."""
    assert N.forward_warps(1, 4096, True) == 4 and N.forward_warps(1, 8192, True) == 8
    assert N.forward_warps(2, 2048, True) == RW.warps_for(4096) == 8
    assert N.forward_warps(1, 8192, False) == RW.warps_for(8192) == 16


def test_norm_backward_tile_by_width():
    """The backward's tile table: RMSNorm's rows up to 8192 wide take their own tiles, LayerNorm's up to 1024;
    wider rows the forward's (one 16384-wide row at 32 warps)."""
    assert N.backward_tile(1024, False) == (2, 1024, 4)
    assert N.backward_tile(3000, False) == (1, 4096, 8)
    assert N.backward_tile(8192, False) == (1, 8192, 8)
    assert N.backward_tile(1024, True) == (2, 1024, 4)
    assert N.backward_tile(2048, True) == (2, 2048, RW.warps_for(4096)) == (2, 2048, 8)
    assert N.backward_tile(16384, True) == N.backward_tile(16384, False) == (1, 16384, 32)
    # row blocks in flight: 3 everywhere
    assert [N.backward_stages(w, False) for w in (1024, 4096, 8192, 16384)] == [3, 3, 3, 3]
    assert [N.backward_stages(w, True) for w in (1024, 8192, 16384)] == [3, 3, 3]


def test_the_calculator_prices_the_wide_layernorm_split():
    """calc/roofline/fused_ops.py keeps its own copy of the width above which the kernel reads x and dy twice."""
    from mlsyscalc.calc.roofline.fused_ops import LAYERNORM_CHUNKED_WIDTH, launches, predict_fused
    assert LAYERNORM_CHUNKED_WIDTH == N.CHUNKED_WIDTH
    assert launches("layernorm_bwd", 4096, N.CHUNKED_WIDTH + 16) == launches("layernorm_bwd", 4096, 1024) == 2
    at, above = (predict_fused("layernorm_bwd", 4096, w, "bf16", "H200") for w in (N.CHUNKED_WIDTH, N.CHUNKED_WIDTH + 1024))
    assert above.read_bytes / above.write_bytes > at.read_bytes / at.write_bytes   # x and dy read again


@interpret
def test_dropout_add_backward_steps_over_row_blocks(monkeypatch):
    """A small backward tile (2 rows of 40 columns a step): 37 rows are 19 row blocks, the last one half
    full, over programs that loop; dx and dbias as the reference."""
    assert D.backward_tile(1024, rows=2048, sms=132)[0] == 2   # 2048 // (4 x 132) = 3 -> 2 rows a step
    assert D.backward_tile(1024, rows=65536, sms=132)[0] == 16  # the tile's 16384 values bind
    monkeypatch.setattr(D, "BWD_TILE_ELEMENTS", 128)
    assert D.backward_tile(40)[:2] == (2, 8)
    assert D.backward_tile(40, rows=37, sms=RW.num_sms(torch.device("cpu")))[0] == 2   # 37 // (4 x 4 "SMs") = 2
    assert D.backward_tile(40, rows=1)[:2] == (1, 8)       # never more rows a step than the tensor's
    assert D.backward_tile(40, rows=5)[:2] == (2, 8)       # 4 (a power of two <= 5), capped by the tile's 2
    dy = randn(37, 40, dtype=torch.float32, seed=7)
    p, seed = 0.3, 99
    x, res, bias = randn(37, 40, dtype=torch.float32), randn(37, 40, seed=6), randn(40, seed=8)
    for programs in (1, 2, 3):
        dx, dbias, _ = D.bias_dropout_add_backward(dy, p, seed, has_bias=True, programs=programs)
        ref_dx, ref_db = grads64(lambda v, b: D.bias_dropout_add_ref(v, b, res.double(), p, seed), x, bias, dy=dy)
        assert rel_err(dx, ref_dx) < 1e-6 and rel_err(dbias, ref_db) < 1e-6
    dx, dbias, _ = D.bias_dropout_add_backward(dy, p, seed, has_bias=False)
    assert dbias is None and rel_err(dx, ref_dx) < 1e-6


@interpret
def test_dropout_keeps_one_minus_p_and_seeds_differ():
    rows, cols, p = 32, 264, 0.25
    x, res = torch.ones(rows, cols, device=DEV), torch.zeros(rows, cols, device=DEV)
    out = D.bias_dropout_add_forward(x, None, res, p, seed=3)
    kept = out != 0
    sigma = (p * (1 - p) / kept.numel()) ** 0.5
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * sigma
    other = D.bias_dropout_add_forward(x, None, res, p, seed=4) != 0
    assert (kept != other).float().mean() > 0.2                      # independent masks differ in ~37.5%
    assert torch.equal(kept, D.dropout_keep_ref(3, rows, cols, p, DEV))
    assert torch.allclose(out[kept], torch.full((), D.dropout_threshold(p)[1]))
    assert torch.equal(D.bias_dropout_add_forward(x, None, res, 0.0, seed=3), x)   # p = 0 keeps everything


# --- cross-entropy --------------------------------------------------------------------------------

@interpret
@pytest.mark.parametrize("rows,vocab", [(1, 50), (6, 300), (3, 9000)])   # 9000: three 4096-wide chunks
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_loss_and_gradient_in_place(rows, vocab, dtype, poisoned):
    logits = randn(rows, vocab, dtype=dtype) * 4
    target = torch.randint(0, vocab, (rows,), generator=torch.Generator(DEV).manual_seed(vocab), device=DEV)
    if rows > 1:
        target[1] = -100   # ignored: loss 0, gradient row 0
    if rows > 2:
        target[2] = vocab - 1
    ref = logits.double().requires_grad_()
    ref_loss = CE.cross_entropy_ref(ref, target)
    ref_loss.backward()
    loss, grad = CE.cross_entropy(logits, target)
    assert grad.data_ptr() == logits.data_ptr() and grad.dtype == dtype
    assert abs(loss.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item())
    assert rel_err(grad, ref.grad) < TOL[dtype]
    if rows > 1:
        assert torch.count_nonzero(grad[1]) == 0


@interpret
def test_cross_entropy_every_row_ignored_gives_nan_like_torch():
    logits, target = randn(3, 70), torch.full((3,), 7, device=DEV)
    loss, grad = CE.cross_entropy(logits, target, ignore_index=7)
    assert torch.isnan(loss) and torch.count_nonzero(grad) == 0


# --- bad input ------------------------------------------------------------------------------------

@interpret
def test_launchers_refuse_bad_input():
    x = randn(4, 16)
    with pytest.raises(ValueError, match="weight"):
        N.rms_norm_forward(x, randn(15))
    with pytest.raises(ValueError, match="unit last stride"):
        N.rms_norm_forward(x.t(), randn(4))
    with pytest.raises(ValueError, match="activation"):
        G.glu_forward(x, x, "relu")
    with pytest.raises(ValueError, match="share shape"):
        G.glu_forward(x, randn(4, 8))
    with pytest.raises(ValueError, match="dropout probability"):
        D.bias_dropout_add_forward(x, None, x, 1.0, 0)
    with pytest.raises(ValueError, match="head_dim must be even"):
        R.rotary_forward(randn(2, 2, 5), *R.rotary_tables(4, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="target"):
        CE.cross_entropy(x, torch.zeros(3, dtype=torch.long))


# --- the GPU build, checked on the CPU ------------------------------------------------------------

@needs_ptxas
def test_fused_kernels_compile_for_sm90_with_vector_loads():
    # The interpreter runs neither bf16 nor the GPU compiler: build one bf16 specialisation of each kernel for
    # sm_90 with triton's own compiler and ptxas (no GPU), at the swept widths; each reads 16-byte vectors.
    results = [json.loads(line) for line in run_uninterpreted("-m", "mlsyscalc.kernels.fused_compile").splitlines()]
    assert len(results) == 14
    assert all(r["v4_loads"] > 0 for r in results), [r["kernel"] for r in results if not r["v4_loads"]]


# --- GPU: bf16 at training sizes ------------------------------------------------------------------

@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("rows,width", [(4096, 4096), (1024, 16384), (3000, 2816), (1, 8192), (77, 12300)])
def test_gpu_bf16_norms(rows, width):
    bf = torch.bfloat16
    x, w, b, dy = randn(rows, width, dtype=bf), randn(width, dtype=bf, seed=1), randn(width, dtype=bf, seed=3), \
        randn(rows, width, dtype=bf, seed=2)
    y, rstd = N.rms_norm_forward(x, w)
    assert rel_err(y, N.rms_norm_ref(x, w)) < TOL[bf]
    dx, dw = N.rms_norm_backward(dy, x, w, rstd)
    ref_dx, ref_dw = grads64(N.rms_norm_ref, x, w, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[bf] and rel_err(dw, ref_dw) < TOL[bf]
    y, mean, rstd = N.layer_norm_forward(x, w, b)
    assert rel_err(y, N.layer_norm_ref(x, w, b)) < TOL[bf]
    dx, dw, db = N.layer_norm_backward(dy, x, w, mean, rstd)
    refs = grads64(N.layer_norm_ref, x, w, b, dy=dy)
    assert all(rel_err(mine, ref) < TOL[bf] for mine, ref in zip((dx, dw, db), refs))


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_gpu_bf16_glu(activation):
    fused = randn(2048, 2 * 11008, dtype=torch.bfloat16)
    gate, up, dy = fused[:, :11008], fused[:, 11008:], randn(2048, 11008, dtype=torch.bfloat16, seed=4)
    assert rel_err(G.glu_forward(gate, up, activation), G.glu_ref(gate, up, activation)) < TOL[torch.bfloat16]
    mine = G.glu_backward(dy, gate, up, activation)
    refs = grads64(lambda g, u: G.glu_ref(g, u, activation), gate, up, dy=dy)
    assert all(rel_err(a, r) < TOL[torch.bfloat16] for a, r in zip(mine, refs))


@gpu
@pytest.mark.gpu
def test_gpu_bf16_rotary_dropout_and_cross_entropy():
    bf = torch.bfloat16
    x, dy = randn(4096, 32, 128, dtype=bf), randn(4096, 32, 128, dtype=bf, seed=5)
    cos, sin = R.rotary_tables(8192, 128, device=DEV)
    pos = torch.randperm(8192, device=DEV)[:4096]
    assert rel_err(R.rotary_forward(x, cos, sin, pos), R.rotary_ref(x, cos, sin, pos)) < TOL[bf]
    (ref_dx,) = grads64(lambda v: R.rotary_ref(v, cos, sin, pos), x, dy=dy)
    assert rel_err(R.rotary_backward(dy, cos, sin, pos), ref_dx) < TOL[bf]

    x, res, bias, dy = randn(8192, 4096, dtype=bf), randn(8192, 4096, dtype=bf, seed=6), \
        randn(4096, dtype=bf, seed=8), randn(8192, 4096, dtype=bf, seed=7)
    out = D.bias_dropout_add_forward(x, bias, res, 0.1, 12345)
    assert rel_err(out, D.bias_dropout_add_ref(x, bias, res, 0.1, 12345)) < TOL[bf]
    dx, dbias, _ = D.bias_dropout_add_backward(dy, 0.1, 12345)
    ref_dx, ref_db = grads64(lambda v, b: D.bias_dropout_add_ref(v, b, res.double(), 0.1, 12345), x, bias, dy=dy)
    assert rel_err(dx, ref_dx) < TOL[bf] and rel_err(dbias, ref_db) < TOL[bf]

    logits = randn(1024, 128256, dtype=bf) * 4
    target = torch.randint(0, 128256, (1024,), device=DEV)
    target[::7] = -100
    ref = logits.float().requires_grad_()
    ref_loss = CE.cross_entropy_ref(ref, target)
    ref_loss.backward()
    loss, grad = CE.cross_entropy(logits, target)
    assert abs(loss.item() - ref_loss.item()) <= 1e-4 * abs(ref_loss.item())
    assert rel_err(grad, ref.grad) < TOL[bf]
