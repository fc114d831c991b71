"""Flash attention kernels against plain-torch references.

Without a GPU the kernels run through Triton's interpreter (TRITON_INTERPRET=1, numpy underneath)
at small shapes in fp32/fp16 (bf16 stores are wrong in the interpreter); with a GPU, the
`gpu`-marked tests run bf16 at real sizes.
"""

from __future__ import annotations

import importlib
import math
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton and the kernels are imported (conftest too)
pytest.importorskip("triton")


def _load():
    from mlsyscalc.kernels import attention_bwd, attention_decode, attention_fwd

    mods = (attention_fwd, attention_bwd, attention_decode)
    if not torch.cuda.is_available() and type(attention_fwd.attention_fwd_kernel).__name__ != "InterpretedFunction":
        mods = tuple(importlib.reload(m) for m in mods)  # imported earlier without the interpreter
    from mlsyscalc.kernels import attention

    return importlib.reload(attention) if mods[0] is not attention_fwd else attention


A = _load()
DEV = "cuda" if torch.cuda.is_available() else "cpu"
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all()
    return ((out - ref).norm() / ref.norm()).item()


def qkv(b, h, h_kv, s_q, s_kv, d, dtype, grad=False):
    g = torch.Generator(device=DEV).manual_seed(b * 1000 + s_q * 10 + s_kv + d)
    make = lambda *shape: torch.randn(*shape, generator=g, device=DEV, dtype=dtype).requires_grad_(grad)  # noqa: E731
    return make(b, h, s_q, d), make(b, h_kv, s_kv, d), make(b, h_kv, s_kv, d)


TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}

# (B, H, H_kv, S_q, S_kv, D): MHA, GQA, MQA; lengths off the tile grid; S_q != S_kv both ways.
FWD_SHAPES = [(2, 4, 4, 48, 48, 16), (1, 4, 2, 37, 37, 32), (1, 4, 1, 50, 70, 16), (1, 2, 2, 70, 33, 16)]


@pytest.mark.parametrize("shape", FWD_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_forward_matches_reference(shape, causal, dtype):
    q, k, v = qkv(*shape, dtype)
    o, lse = A.attention_forward(q, k, v, causal=causal)
    ref_o, ref_lse = A.attention_ref(q, k, v, causal=causal)
    assert rel_err(o, ref_o) < TOL[dtype]
    assert torch.allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)  # LSE is fp32 in both


@pytest.mark.parametrize("use_desc", [True, "host"])
@pytest.mark.parametrize("causal", [False, True])
def test_descriptor_and_pointer_paths_agree(causal, use_desc):
    """The TMA-descriptor paths (device- or host-built; zero-filled out-of-range rows) equal the masked-pointer path."""
    if DEV == "cpu":
        import triton

        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
    q, k, v = qkv(1, 4, 2, 45, 45, 16, torch.float16)
    o_ptr, lse_ptr = A.attention_forward(q, k, v, causal=causal, use_desc=False)
    o_desc, lse_desc = A.attention_forward(q, k, v, causal=causal, use_desc=use_desc)
    assert rel_err(o_desc, o_ptr) < 1e-3
    assert torch.allclose(lse_desc, lse_ptr, atol=1e-5)


def test_unknown_descriptor_mode_is_refused():
    q, k, v = qkv(1, 2, 2, 16, 16, 16, torch.float32)
    with pytest.raises(ValueError, match="use_desc"):
        A.attention_forward(q, k, v, use_desc="device")


def test_causal_changes_the_answer_and_skips_future_keys():
    """Causal row 0 sees key 0 only: its output is v[0] exactly."""
    q, k, v = qkv(1, 2, 2, 33, 33, 16, torch.float32)
    o, _ = A.attention_forward(q, k, v, causal=True)
    assert torch.allclose(o[:, :, 0], v[:, :, 0], atol=1e-6)
    o_full, _ = A.attention_forward(q, k, v, causal=False)
    assert rel_err(o_full[:, :, 0], v[:, :, 0]) > 0.1


@pytest.mark.parametrize("shape,causal", [((1, 4, 2, 37, 37, 16), True), ((1, 2, 1, 40, 55, 32), False),
                                          ((2, 2, 2, 33, 20, 16), True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_backward_matches_autograd_reference(shape, causal, dtype):
    q, k, v = qkv(*shape, dtype, grad=True)
    do = torch.randn_like(q)
    A.attention(q, k, v, causal=causal).backward(do)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    A.attention_ref(q64, k64, v64, causal=causal)[0].backward(do.double())
    for mine, ref in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert mine.shape == ref.shape
        assert rel_err(mine, ref) < 5 * TOL[dtype]


def _paged_cache(b, h_kv, d, page, max_len, dtype, spare=3):
    """A paged cache with a shuffled block table (blocks of one sequence are scattered)."""
    g = torch.Generator(device=DEV).manual_seed(page + max_len)
    per_seq = math.ceil(max_len / page)
    n_blocks = b * per_seq + spare
    k = torch.randn(n_blocks, page, h_kv, d, generator=g, device=DEV, dtype=dtype)
    v = torch.randn(n_blocks, page, h_kv, d, generator=g, device=DEV, dtype=dtype)
    table = torch.randperm(n_blocks, generator=g, device=DEV)[: b * per_seq].reshape(b, per_seq).int()
    return k, v, table


@pytest.mark.parametrize("page,h,h_kv,n_q,splits", [(16, 4, 2, 1, None), (32, 8, 2, 2, 3), (16, 4, 4, 1, 4)])
def test_paged_decode_matches_reference(page, h, h_kv, n_q, splits):
    b, d, max_len = 3, 32, 150
    k, v, table = _paged_cache(b, h_kv, d, page, max_len, torch.float16)
    q = torch.randn(b, h, n_q, d, device=DEV, dtype=torch.float16)
    lens = torch.tensor([max_len, 17, 96], dtype=torch.int32, device=DEV)  # ragged; some splits empty
    o = A.decode_attention(q, k, v, lens, table, num_splits=splits)
    ref = A.decode_ref(q, k, v, lens, table)
    assert rel_err(o, ref) < TOL[torch.float16]


def test_paged_equals_contiguous_on_the_same_tokens():
    """Gathering the paged cache into a contiguous one gives the same decode output."""
    b, h, h_kv, d, page, n = 2, 4, 2, 16, 16, 90
    k, v, table = _paged_cache(b, h_kv, d, page, n, torch.float32)
    q = torch.randn(b, h, 1, d, device=DEV)
    kc, vc = A.gather_paged(k, table, n), A.gather_paged(v, table, n)
    lens = torch.full((b,), n, dtype=torch.int32, device=DEV)  # the table covers 96 slots
    full = A.decode_attention(q, kc, vc, lens, num_splits=2)
    paged = A.decode_attention(q, k, v, lens, table, num_splits=2)
    assert rel_err(paged, full) < 1e-5


@pytest.mark.parametrize("splits", [1, 3])
def test_contiguous_decode_strided_cache_gqa(splits):
    """A (B, S, H_kv, D) buffer viewed as (B, H_kv, S, D): strides, not copies."""
    b, h, h_kv, d, s = 2, 8, 2, 32, 200
    k = torch.randn(b, s, h_kv, d, device=DEV, dtype=torch.float16).transpose(1, 2)
    v = torch.randn(b, s, h_kv, d, device=DEV, dtype=torch.float16).transpose(1, 2)
    q = torch.randn(b, h, 3, d, device=DEV, dtype=torch.float16)
    lens = torch.tensor([200, 130], dtype=torch.int32, device=DEV)
    o = A.decode_attention(q, k, v, lens, num_splits=splits)
    assert rel_err(o, A.decode_ref(q, k, v, lens)) < TOL[torch.float16]
    # no lengths: every sequence fills the cache (no length tensor is read or made)
    full = A.decode_attention(q, k, v, num_splits=splits)
    assert rel_err(full, A.decode_ref(q, k, v)) < TOL[torch.float16]
    assert rel_err(full, A.decode_attention(q, k, v, torch.full((b,), s, dtype=torch.int32, device=DEV),
                                            num_splits=splits)) < 1e-6


def test_decode_ref_agrees_with_prefill_reference():
    """n_q = S with the bottom-right mask is ordinary causal attention (a cross-check of the refs)."""
    q, k, v = qkv(1, 4, 2, 24, 24, 16, torch.float32)
    assert rel_err(A.decode_ref(q, k, v), A.attention_ref(q, k, v, causal=True)[0]) < 1e-6


def test_choose_splits_fills_the_card():
    # 1 x 8 programs need 66 splits for 4 per SM; 512-token minimum caps it at 64
    assert A.choose_splits(batch=1, kv_heads=8, max_len=32768, sm_count=132) == (64, 512)
    assert A.choose_splits(batch=4, kv_heads=8, max_len=10_000, sm_count=132) == (14, 768)
    assert A.choose_splits(batch=64, kv_heads=32, max_len=1024, sm_count=132) == (1, 1024)
    assert A.choose_splits(batch=64, kv_heads=8, max_len=1024, sm_count=132) == (1, 1024)   # 512 programs


def test_stream_read_sums_every_element():
    x = torch.randn(70_001, device=DEV)
    assert math.isclose(A.stream_read(x, block=1024, iters=4).sum().item(), x.sum().item(), rel_tol=1e-4, abs_tol=1e-2)


def test_bad_shapes_are_rejected():
    q, k, v = qkv(1, 3, 2, 8, 8, 16, torch.float32)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        A.attention_forward(q, k, v)
    q, k, v = qkv(1, 2, 2, 8, 8, 24, torch.float32)
    with pytest.raises(ValueError, match="head_dim"):
        A.attention_forward(q, k, v)


# --- GPU: bf16 at real sizes ------------------------------------------------------------------


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_bf16_forward_backward(d, causal):
    q, k, v = qkv(2, 8, 2, 1000, 1000, d, torch.bfloat16, grad=True)
    do = torch.randn_like(q)
    o = A.attention(q, k, v, causal=causal)
    o.backward(do)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref = A.attention_ref(qf, kf, vf, causal=causal)[0]
    ref.backward(do.float())
    assert rel_err(o, ref) < TOL[torch.bfloat16]
    for mine, r in ((q.grad, qf.grad), (k.grad, kf.grad), (v.grad, vf.grad)):
        assert rel_err(mine, r) < 2 * TOL[torch.bfloat16]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("use_desc", ["host", None])
def test_gpu_forward_tunes_each_dtype_apart(use_desc):
    # host descriptors hide the dtype from the autotuner: ELEM_BYTES keys it, so an fp32 call of a shape
    # first tuned in bf16 gets its own (smaller) tiles instead of the bf16 ones, which would not fit
    for dtype in (torch.bfloat16, torch.float32):
        q, k, v = qkv(1, 4, 4, 512, 512, 128, dtype)
        o, _ = A.attention_forward(q, k, v, use_desc=use_desc)
        assert rel_err(o, A.attention_ref(q.float(), k.float(), v.float())[0]) < TOL[torch.bfloat16]


@gpu
@pytest.mark.gpu
def test_gpu_forward_empty_query_takes_the_pointer_path():
    q, k, v = qkv(1, 2, 2, 0, 16, 64, torch.bfloat16)
    assert not A.can_use_descriptors(q, k, v)
    o, lse = A.attention_forward(q, k, v)
    assert o.shape == q.shape and lse.shape == (1, 2, 0)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("page", [16, 64, 256])
def test_gpu_bf16_paged_decode(page):
    k, v, table = _paged_cache(4, 8, 128, page, 3000, torch.bfloat16)
    q = torch.randn(4, 32, 1, 128, device=DEV, dtype=torch.bfloat16)
    lens = torch.tensor([3000, 1, 2048, 777], dtype=torch.int32, device=DEV)
    o = A.decode_attention(q, k, v, lens, table)
    assert rel_err(o, A.decode_ref(q, k, v, lens, table)) < TOL[torch.bfloat16]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 16])
def test_gpu_decode_repeated_calls_read_their_own_inputs(page):
    # the second call of a signature takes the remembered launches (_FAST): it must read the new tensors
    b, h, h_kv, d, s = 4, 8, 2, 128, 1000
    for _ in range(3):
        q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
        if page is None:
            k = torch.randn(b, h_kv, s, d, device="cuda", dtype=torch.bfloat16)
            v, table = torch.randn_like(k), None
        else:
            nb = -(-s // page)
            k = torch.randn(b * nb, page, h_kv, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            table = torch.randperm(b * nb, device="cuda").reshape(b, nb).int()
        o = A.decode_attention(q, k, v, None, table)
        assert rel_err(o, A.decode_ref(q, k, v, None, table)) < TOL[torch.bfloat16]


@gpu
@pytest.mark.gpu
def test_decode_batches_of_one_layout_in_sequence():
    # the launch cache keys on the grid: a batch of 64 after a batch of 16 with the same cache layout (same
    # strides and integer arguments; the batch is only the grid's last dimension) computes all 64 rows.
    # On one H200 before the fix, B64 then B48 after B16 returned uninitialised rows (error inf/nan).
    for b in (16, 64, 48, 64):
        k, v, table = _paged_cache(b, 32, 128, 16, 2048, torch.bfloat16)
        q = torch.randn(b, 32, 1, 128, device=DEV, dtype=torch.bfloat16)
        lens = torch.full((b,), 2048, dtype=torch.int32, device=DEV)
        for _ in range(2):
            o = A.decode_attention(q, k, v, lens, table)
            assert rel_err(o, A.decode_ref(q, k, v, lens, table)) < TOL[torch.bfloat16], b
