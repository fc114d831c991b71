"""fp8 (e4m3) numerics of the kernels, emulated in fp32/fp64 on the CPU.

The oracle is the e4m3 format itself, written out here from its definition, not torch's cast:
1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits, subnormals below 2**-6 in steps of
2**-9, largest finite value 448, no infinities, S.1111.111 is NaN, round to nearest even
(OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, 2023, section 5.3 and table 2;
Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433, table 1).
The tests check torch's float8_e4m3fn cast against that oracle, then check what the quantize
and matmul kernels compute (their fp32 arithmetic replayed in float64 with the oracle's rounding)
against the kernels themselves: under TRITON_INTERPRET=1 on a CPU, or compiled on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from mlsyscalc.kernels import matmul as mm
from mlsyscalc.kernels import quant as Q

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
E4M3 = torch.float8_e4m3fn


def e4m3_value(byte: int) -> float:
    """The real number an e4m3 bit pattern stands for (NaN for S.1111.111)."""
    sign = -1.0 if byte >> 7 else 1.0
    exponent, mantissa = (byte >> 3) & 0b1111, byte & 0b111
    if exponent == 0b1111 and mantissa == 0b111:
        return float("nan")
    if exponent == 0:  # subnormal: 0.mmm * 2**(1 - 7)
        return sign * mantissa / 8 * 2.0 ** -6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def e4m3_round(v: torch.Tensor) -> torch.Tensor:
    """v (|v| <= 448) rounded to the nearest e4m3 value, ties to even, in float64.

    In the binade [2**e, 2**(e+1)) the 3 mantissa bits space values 2**(e-3) apart; below the
    smallest normal 2**-6 the spacing stays 2**-9. torch.round rounds halves to even, which on
    the grid index is the even mantissa."""
    v = v.double()
    _, exp = torch.frexp(v.abs())  # |v| = m * 2**exp with m in [0.5, 1): binade e = exp - 1
    step = torch.pow(2.0, ((exp - 1).clamp(min=-6) - 3).double())
    return torch.sign(v) * torch.round(v.abs() / step) * step


def _finite_values() -> torch.Tensor:
    values = {e4m3_value(b) for b in range(256)}
    return torch.tensor(sorted(v for v in values if v == v), dtype=torch.float64)  # v == v: not NaN


def test_e4m3_bytes_decode_as_the_format_defines():
    torch_values = torch.arange(256, dtype=torch.uint8).view(E4M3).double()
    ours = torch.tensor([e4m3_value(b) for b in range(256)], dtype=torch.float64)
    assert torch.equal(torch_values.isnan(), ours.isnan()) and int(ours.isnan().sum()) == 2  # +-NaN
    assert torch.equal(torch_values[~ours.isnan()], ours[~ours.isnan()])
    finite = _finite_values()
    # published landmarks: max 448 = 1.75 * 2**8, min normal 2**-6, min subnormal 2**-9
    assert finite.max() == 448 and finite[finite > 0].min() == 2.0 ** -9
    assert len(finite) == 253  # 256 patterns - 2 NaN - the duplicate zero (-0 == +0)


def test_torch_cast_rounds_to_nearest_even_everywhere():
    grid = _finite_values()
    mids = (grid[1:] + grid[:-1]) / 2  # exact ties: the even neighbour must win
    near = torch.cat([mids * (1 + 2.0 ** -20), mids * (1 - 2.0 ** -20)])
    rand = (torch.rand(20000, dtype=torch.float64) * 2 - 1) * torch.pow(2.0, torch.randint(-12, 9, (20000,)).double())
    rand = rand.clamp(-448, 448)
    for v in (grid, mids, near, rand):
        v32 = v.float()  # what a kernel holds before the cast
        assert torch.equal(v32.to(E4M3).double(), e4m3_round(v32)), v32[v32.to(E4M3).double() != e4m3_round(v32)][:5]
    # ties by hand: 1 + 1/16 lies between 1 (mantissa 000) and 1.125 (001): even -> 1;
    # 1 + 3/16 between 1.125 (001) and 1.25 (010) -> 1.25
    assert e4m3_round(torch.tensor([1 + 1 / 16, 1 + 3 / 16, -(1 + 1 / 16)])).tolist() == [1.0, 1.25, -1.0]


def _quantize_emulated(x: torch.Tensor, group: int, scale_dtype: torch.dtype, stored=None):
    """What _quantize_kernel's MODE == 2 computes: scale = max(amax, 1e-12) / 448 rounded to its
    stored dtype, q = e4m3(clamp(x * (1 / stored scale), -448, 448)); `stored` replaces the scale
    the q's are computed from (the kernel divides by the scale it stored)."""
    n, k = x.shape
    xg = x.float().reshape(n, k // group, group)
    scale = (xg.abs().amax(dim=2).clamp(min=1e-12) / 448.0).to(scale_dtype)
    inv = 1.0 / (scale if stored is None else stored).float()
    v = (xg * inv[..., None]).clamp(-448, 448).reshape(n, k)
    return e4m3_round(v), v, scale


@pytest.mark.parametrize("group,scale_dtype", [(None, torch.float32), (64, torch.float32), (32, torch.bfloat16)])
def test_quantize_fp8_kernel_computes_the_emulation(group, scale_dtype):
    torch.manual_seed(0)
    x = torch.randn(37, 256, device=DEV) * torch.logspace(-1, 1, 256, device=DEV)  # several binades per group
    q, s = Q.quantize(x, "fp8", group, scale_dtype)
    x, s, got = x.cpu(), s.cpu(), q.cpu().double()
    _, _, want_s = _quantize_emulated(x, group or 256, scale_dtype)
    want_q, v, _ = _quantize_emulated(x, group or 256, scale_dtype, stored=s)  # q follows the stored scale
    assert q.dtype == E4M3 and s.dtype == scale_dtype
    if GPU:  # hardware casts round to nearest even; fp32 division on the GPU may be an ulp off
        assert torch.allclose(s.float(), want_s.float(), rtol=2.0 ** -7 if scale_dtype == torch.bfloat16 else 1e-6)
        assert (got != want_q).float().mean() < 1e-3  # a tie flipped by an ulp of 1/scale
        return
    if scale_dtype == torch.bfloat16:  # the interpreter rounds fp32 -> bf16 toward zero
        unrounded = (x.reshape(37, -1, group or 256).abs().amax(dim=2) / 448.0).contiguous()
        assert torch.equal(s.float(), (unrounded.view(torch.int32) & ~0xFFFF).view(torch.float32))
    else:
        assert torch.equal(s, want_s)
    # triton 3.6's interpreter casts fp32 -> e4m3 right for normal numbers except where rounding
    # up carries into the next binade, and there, in every other binade, it returns exactly half
    # the value (124.3 -> 64, not 128); its subnormals (below 2**-6) are off too and go unchecked.
    # Every other element must match the emulation bit for bit.
    carried = torch.frexp(want_q.abs())[1] != torch.frexp(v.double().abs())[1]
    subnormal = v.abs() < 2.0 ** -6
    wrong = got != want_q
    assert not (wrong & ~carried & ~subnormal).any()
    assert torch.equal(got[wrong & ~subnormal] * 2, want_q[wrong & ~subnormal])
    assert subnormal.float().mean() < 0.05 and (~wrong).float().mean() > 0.9


@pytest.mark.parametrize("group", [None, 64])
def test_quantize_ref_and_dequantize_follow_the_emulation(group):
    torch.manual_seed(1)
    x = torch.randn(19, 128) * 3
    q, s = Q.quantize_ref(x, "fp8", group)
    want_q, _, want_s = _quantize_emulated(x, group or 128, torch.float32)
    assert torch.equal(s, want_s)
    # quantize_ref divides by the scale where the kernel multiplies by its inverse: the two
    # differ by one e4m3 step only where x/s and x*(1/s) straddle a rounding tie
    assert (q.double() != want_q).float().mean() < 2e-3
    # dequantisation is q * scale, and the rounding error is at most half a step:
    # 2**-4 of the value for normal numbers (3 mantissa bits), 2**-10 * scale below them
    deq = Q.dequantize_ref(q, s, "fp8", group)
    g = group or 128
    scale_per_col = s.repeat_interleave(g, dim=1)
    exact = q.double() * scale_per_col.double()  # fp32 rounds the 4-bit x 24-bit product once
    assert ((deq.double() - exact).abs() <= exact.abs() * 2.0 ** -24).all()
    bound = torch.maximum(x.abs() * 2.0 ** -4, scale_per_col * 2.0 ** -10)
    assert ((deq - x).abs() <= bound * (1 + 1e-6)).all()


@pytest.mark.parametrize("rowwise", [False, True])
def test_quantize_fp8_for_the_matmul_follows_the_emulation(rowwise):
    torch.manual_seed(2)
    x = torch.randn(24, 40) * 5
    q, scale = mm.quantize_fp8(x, rowwise)
    amax = x.abs().amax(dim=1, keepdim=True) if rowwise else x.abs().amax()
    want_scale = (amax / 448.0).clamp(min=1e-12)
    assert torch.equal(scale.reshape(want_scale.shape), want_scale)
    assert torch.equal(q.double(), e4m3_round((x / want_scale).clamp(-448, 448)))
    # the absmax element lands on 448 exactly (per row or per tensor)
    top = q.double().abs().amax(dim=1) if rowwise else q.double().abs().amax()
    assert (top == 448).all()


@pytest.mark.parametrize("rowwise,bias,activation", [(False, False, "none"), (True, True, "relu"),
                                                     (True, False, "silu")])
def test_fp8_matmul_is_fp32_math_on_the_decoded_bytes(rowwise, bias, activation):
    """C = act(sa * sb * (A @ B) + bias) in bf16 on fp8 A and B: the kernel's dot accumulates the
    decoded e4m3 values in fp32; replayed here in float64 from the bytes with e4m3_value."""
    torch.manual_seed(3)
    M, N, K = 33, 40, 64
    a8, sa = mm.quantize_fp8(torch.randn(M, K), rowwise)
    w8, sb = mm.quantize_fp8(torch.randn(N, K), rowwise)
    b8 = w8.T  # (K, N) column-major, as the benchmark passes the weight
    b = torch.randn(N, dtype=torch.bfloat16) if bias else None
    out = mm.matmul(a8.to(DEV), b8.to(DEV), a_scale=sa.to(DEV), b_scale=sb.to(DEV),
                    bias=None if b is None else b.to(DEV), activation=activation).cpu()
    table = torch.tensor([e4m3_value(i) for i in range(256)], dtype=torch.float64)
    A, B = table[a8.view(torch.uint8).long()], table[b8.contiguous().view(torch.uint8).long()]
    ref = (A @ B) * (sa.double().reshape(-1, 1) if rowwise else sa.double())
    ref = ref * (sb.double().reshape(1, -1) if rowwise else sb.double())
    if b is not None:
        ref = ref + b.double()
    ref = {"none": ref, "relu": torch.relu(ref), "silu": torch.nn.functional.silu(ref)}[activation]
    assert out.dtype == torch.bfloat16 and out.shape == (M, N)
    # one rounding to bf16: to nearest on a GPU (2**-8 relative), toward zero in the interpreter
    # (2**-7). Accumulation: the interpreter's fp32 over K = 64 decoded values adds ~1e-6 relative at
    # most; Hopper's fp8 tensor cores keep fewer accumulator bits than fp32 (DeepSeek-V3 technical
    # report, arXiv 2412.19437, sec. 3.3.2: about 14 bits), so on a GPU the accumulation error is
    # bounded by 2**-13 of the sum of |products| instead
    step = 2.0 ** (-8 if GPU else -7)
    scale = (sa.double().reshape(-1, 1) if rowwise else sa.double()) * (sb.double().reshape(1, -1) if rowwise
                                                                         else sb.double())
    magnitude = (A.abs() @ B.abs()) * scale
    accumulation = 2.0 ** -13 * magnitude if GPU else 1e-6 * ref.abs().max()
    err = (out.double() - ref).abs()
    assert (err <= ref.abs() * step * (1 + 1e-5) + accumulation).all(), (err - ref.abs() * step).max()
    if not GPU and b is None and activation == "none":  # exactly the truncated fp32 value
        exact = ref.float().contiguous()
        assert torch.equal(out.float(), (exact.view(torch.int32) & ~0xFFFF).view(torch.float32))
