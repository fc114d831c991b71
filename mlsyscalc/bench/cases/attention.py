"""Attention sweeps: Triton flash attention (forward, backward, decode) against SDPA's backends.

FLOPs and bytes come from mlsyscalc.calc.counts.attention, the counts the roofline uses: forward
4 * B * H * S_q * S_kv * D times the causal share (queries end-aligned, 1/2 when S_q = S_kv),
backward 2.5x forward (FlashAttention-2's 5 matmuls), bytes the IO-aware minimum (Q, K, V read
once, O written once; backward also O, dO read and dQ, dK, dV written); decode reads the whole KV
cache once plus q and o.

Every case is gated against an fp32 reference on fresh random inputs before it is timed
(mlsyscalc.bench.sweep.run_case); SDPA backends are rows of their own, gated the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from ...calc.counts.attention import AttentionShape, attention_bytes, attention_flops
from .. import harness
from ..sweep import Bench, Case

SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")


@dataclass(frozen=True)
class Shape:
    """One attention problem; prefill when n_q is None, decode otherwise."""

    b: int
    h: int
    h_kv: int
    s_kv: int
    d: int
    s_q: int | None = None      # prefill: defaults to s_kv
    causal: bool = False
    n_q: int | None = None      # decode: query tokens per sequence

    @property
    def q_len(self) -> int:
        return self.n_q if self.n_q is not None else (self.s_q or self.s_kv)

    def label(self) -> str:
        q = f"n_q{self.n_q}" if self.n_q is not None else f"S{self.q_len}"
        kv = f"x{self.s_kv}" if self.n_q is not None or self.q_len != self.s_kv else ""
        return f"B{self.b}xH{self.h}xKV{self.h_kv}x{q}{kv}xD{self.d}"


def counted(s: Shape) -> AttentionShape:
    return AttentionShape(s.b, s.h, s.h_kv, s.q_len, s.s_kv, s.d, causal=s.causal)


def forward_flops(s: Shape) -> float:
    return attention_flops(counted(s))


def backward_flops(s: Shape) -> float:
    return attention_flops(counted(s), backward=True)


def forward_bytes(s: Shape, itemsize: int = 2) -> float:
    return float(sum(attention_bytes(counted(s), itemsize)))


def backward_bytes(s: Shape, itemsize: int = 2) -> float:
    return float(sum(attention_bytes(counted(s), itemsize, backward=True)))


# --- sweeps --------------------------------------------------------------------------------------

def prefill_shapes(sweep: str) -> list[Shape]:
    """goals: the issue's table (bf16, d=128, H=32, B*S = 16k); extra: d=64/256 and GQA."""
    if sweep == "interpret":
        return [Shape(1, 2, 1, 40, 16, causal=c) for c in (False, True)]
    if sweep == "smoke":
        return [Shape(4, 32, 32, 4096, 128, causal=c) for c in (False, True)]
    if sweep == "goals":
        return [Shape(16384 // s, 32, 32, s, 128, causal=c) for c in (False, True)
                for s in (1024, 2048, 4096, 8192, 16384)]
    if sweep == "serving":
        return []  # the serving sweep is decode-only
    if sweep == "extra":
        return [Shape(4, 32, kv, 4096, d, causal=c) for c in (False, True)
                for d, kv in ((64, 32), (256, 32), (128, 8))] + [Shape(2, 32, 32, 16384, 128, causal=True)]
    raise ValueError(f"unknown prefill sweep {sweep!r} (interpret, smoke, goals, extra)")


def decode_shapes(sweep: str) -> list[Shape]:
    """goals: B = 64, H = 32, kv heads 8 and 32, KV length 1k..32k, one query token."""
    if sweep == "interpret":
        return [Shape(2, 4, 2, 100, 16, n_q=1)]
    if sweep == "smoke":
        return [Shape(64, 32, kv, 4096, 128, n_q=1) for kv in (8, 32)]
    if sweep == "goals":
        return [Shape(64, 32, kv, n, 128, n_q=1) for kv in (8, 32) for n in (1024, 2048, 4096, 8192, 16384, 32768)]
    if sweep == "extra":
        return [Shape(16, 32, 8, 8192, 128, n_q=4)]
    if sweep == "serving":  # few CTAs: the batches <= 16 where the flash-decoding split decides (calc.roofline.paged)
        return [Shape(b, 32, 8, n, 128, n_q=1) for b in (1, 4, 8, 16) for n in (1024, 4096)] + [
            Shape(4, 32, 8, 4096, 128, n_q=16)]
    raise ValueError(f"unknown decode sweep {sweep!r} (interpret, smoke, goals, extra, serving)")


# --- inputs and references ------------------------------------------------------------------------

def _torch_dtype(dtype: str):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]


def _qkv(s: Shape, dtype: str, grad: bool = False):
    import torch

    dev, dt = harness.device(), _torch_dtype(dtype)
    q = torch.randn(s.b, s.h, s.q_len, s.d, device=dev, dtype=dt)
    k = torch.randn(s.b, s.h_kv, s.s_kv, s.d, device=dev, dtype=dt)
    v = torch.randn(s.b, s.h_kv, s.s_kv, s.d, device=dev, dtype=dt)
    return tuple(x.requires_grad_(grad) for x in (q, k, v))


def reference_attention(q, k, v, causal: bool):
    """fp32 attention in O(S) memory: SDPA's memory-efficient backend on GPU, plain torch on CPU."""
    import torch
    import torch.nn.functional as F

    from mlsyscalc.kernels.attention import attention_ref

    if not q.is_cuda:
        return attention_ref(q.float(), k.float(), v.float(), causal=causal)[0]
    group = q.shape[1] // k.shape[1]
    kf, vf = (x.float().repeat_interleave(group, dim=1) for x in (k, v))
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]):
        return F.scaled_dot_product_attention(q.float(), kf, vf, is_causal=causal)


def sdpa(backend: str | None):
    """f(q, k, v, causal) through one SDPA backend (None: torch's own choice)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    by_name: dict[str | None, SDPBackend] = {
        "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    chosen = by_name.get(backend)

    def run(q, k, v, causal):
        gqa = q.shape[1] != k.shape[1]
        if chosen is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    del torch
    return run


def _cat_grads(grads):
    import torch

    return torch.cat([g.reshape(-1) for g in grads])


# --- cases ---------------------------------------------------------------------------------------

def forward_cases(shapes: list[Shape], dtype: str, backends=SDPA_BACKENDS, descriptor_path: bool = False) -> list[Case]:
    from mlsyscalc.kernels import attention as A
    from mlsyscalc.kernels import attention_fwd

    cases = []
    for s in shapes:
        variant = "causal" if s.causal else "full"
        case = partial(Case, shape=s.label(), dtype=dtype, flops=forward_flops(s), bytes=forward_bytes(s),
                       variant=variant)

        def build(s=s, use_desc=None, backend=None):
            q, k, v = _qkv(s, dtype)
            if backend is not None:
                return Bench(run=lambda: sdpa(backend)(q, k, v, s.causal),
                             reference=lambda: reference_attention(q, k, v, s.causal))
            baseline = None if use_desc is not None or harness.interpreting() else \
                (lambda: sdpa("flash")(q, k, v, s.causal))
            bench = Bench(run=lambda: A.attention_forward(q, k, v, causal=s.causal, use_desc=use_desc)[0],
                          reference=lambda: reference_attention(q, k, v, s.causal), baseline=baseline)
            if q.is_cuda and not harness.interpreting():   # which load path and tile the shape got
                bench.run()
                path = (A.chosen_path(q, k, v, s.causal) or "pointers") if use_desc is None else \
                    attention_fwd.PATH_NAMES[use_desc]   # no choice recorded: descriptors did not apply
                bench.extra["config"] = f"{path}: {attention_fwd.attention_fwd_tuned.best_config}"
            return bench

        baseline = "sdpa_flash" if not harness.interpreting() else ""
        cases.append(case(kernel="triton_fwd", baseline=baseline, build=build))
        if descriptor_path and not harness.interpreting():   # each load path forced, beside the auto choice
            cases.append(case(kernel="triton_fwd_desc", baseline="", build=partial(build, s, use_desc=True)))
            cases.append(case(kernel="triton_fwd_ptr", baseline="", build=partial(build, s, use_desc=False)))
            cases.append(case(kernel="triton_fwd_hostdesc", baseline="", build=partial(build, s, use_desc="host")))
        for name in backends:
            if name == "math" and s.b * s.h * s.q_len * s.s_kv * 4 > 2**30:
                continue  # MATH materialises the S x S scores (~25 TFLOP/s): skip past 1 GiB of them
            cases.append(case(kernel=f"sdpa_{name}", baseline="", build=partial(build, s, backend=name)))
    return cases


def backward_cases(shapes: list[Shape], dtype: str, backends=("flash", "cudnn", "efficient")) -> list[Case]:
    """dQ, dK, dV given dO; the timed region is the backward alone (forward done in build)."""
    from mlsyscalc.kernels import attention as A

    cases = []
    for s in shapes:
        case = partial(Case, shape=s.label(), dtype=dtype, flops=backward_flops(s), bytes=backward_bytes(s),
                       variant="causal" if s.causal else "full")

        def build(s=s, backend=None):
            import torch

            q, k, v = _qkv(s, dtype, grad=True)
            do = torch.randn_like(q)

            def reference():
                qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
                return _cat_grads(torch.autograd.grad(reference_attention(qf, kf, vf, s.causal), (qf, kf, vf), do.float()))

            def sdpa_grads(name):
                o = sdpa(name)(q, k, v, s.causal)
                return lambda: _cat_grads(torch.autograd.grad(o, (q, k, v), do, retain_graph=True))

            if backend is not None:
                return Bench(run=sdpa_grads(backend), reference=reference)
            with torch.no_grad():
                o, lse = A.attention_forward(q, k, v, causal=s.causal)
            run = lambda: _cat_grads(A.attention_backward(do, q, k, v, o, lse, causal=s.causal))  # noqa: E731
            return Bench(run=run, reference=reference,
                         baseline=None if harness.interpreting() else sdpa_grads("flash"))

        baseline = "sdpa_flash" if not harness.interpreting() else ""
        cases.append(case(kernel="triton_bwd", baseline=baseline, build=build))
        for name in backends:
            cases.append(case(kernel=f"sdpa_{name}_bwd", baseline="", build=partial(build, s, name)))
    return cases


def decode_bytes(s: Shape, itemsize: int = 2) -> float:
    """The whole KV cache read once, q read and o written once (the forward's IO-aware count)."""
    return forward_bytes(s, itemsize)


def _decode_inputs(s: Shape, dtype: str, page: int | None):
    """q (B, H, n_q, D) and a cache: contiguous (B, H_kv, S, D), or paged with a shuffled table."""
    import torch

    dev, dt = harness.device(), _torch_dtype(dtype)
    q = torch.randn(s.b, s.h, s.q_len, s.d, device=dev, dtype=dt)
    if page is None:
        k = torch.randn(s.b, s.h_kv, s.s_kv, s.d, device=dev, dtype=dt)
        return q, k, torch.randn_like(k), None
    per_seq = math.ceil(s.s_kv / page)
    k = torch.randn(s.b * per_seq, page, s.h_kv, s.d, device=dev, dtype=dt)
    table = torch.randperm(s.b * per_seq, device=dev, dtype=torch.int64).reshape(s.b, per_seq).int()
    return q, k, torch.randn_like(k), table


def decode_cases(shapes: list[Shape], dtype: str, pages=(None, 16, 256), backends=SDPA_BACKENDS) -> list[Case]:
    """Triton decode (contiguous vs SDPA's default choice; paged untimed against a baseline, compare
    with the contiguous rows of the same shape) and each SDPA backend on the contiguous cache."""
    from mlsyscalc.kernels import attention as A
    from mlsyscalc.kernels.matmul_launch import add_host_times

    cases = []
    for s in shapes:
        case = partial(Case, shape=s.label(), dtype=dtype, flops=forward_flops(s), bytes=decode_bytes(s))

        def build(s=s, page=None, backend=None):
            q, k, v, table = _decode_inputs(s, dtype, page)
            lens = None
            reference = lambda: A.decode_ref(q, k, v, lens, table)  # noqa: E731
            if backend is not None:
                return Bench(run=lambda: sdpa(backend)(q, k, v, False), reference=reference)
            timed = page is None and s.q_len == 1 and not harness.interpreting()
            baseline = (lambda: sdpa(None)(q, k, v, False)) if timed else None
            bench = Bench(run=lambda: A.decode_attention(q, k, v, lens, table), reference=reference, baseline=baseline)
            add_host_times(bench, q.is_cuda)
            return bench

        for page in pages:
            variant = "contiguous" if page is None else f"paged{page}"
            baseline = "sdpa" if page is None and s.q_len == 1 and not harness.interpreting() else ""
            cases.append(case(kernel="triton_decode", baseline=baseline, variant=variant,
                              build=partial(build, s, page=page)))
        if s.q_len == 1:  # SDPA has no bottom-right causal mask for n_q > 1 queries
            for name in backends:
                if name == "math" and s.s_kv > 8192:
                    continue  # MATH expands GQA heads and scores in memory
                cases.append(case(kernel=f"sdpa_{name}", baseline="", variant="contiguous",
                                  build=partial(build, s, backend=name)))
    return cases


def bandwidth_cases(nbytes: int) -> list[Case]:
    """HBM read bandwidth: a Triton streaming sum (kernel) against torch's sum (baseline)."""
    from mlsyscalc.kernels import attention as A

    block, iters = 4096, 16
    n = nbytes // 4 // (block * iters) * (block * iters)

    def build():
        import torch

        x = torch.randn(n, device=harness.device())
        return Bench(run=lambda: A.stream_read(x, block, iters),
                     reference=lambda: x.view(-1, block * iters).double().sum(1),
                     baseline=lambda: x.view(-1, block * iters).sum(1))

    return [Case(kernel="hbm_read", baseline="torch.sum", shape=f"{n * 4}B", dtype="float32", build=build,
                 bytes=float(n * 4), gate="float32")]


def read_bandwidth_GBps(rows) -> float | None:
    """The best measured read bandwidth (Triton stream or torch.sum) among the sweep's rows."""
    rates = [r for row in rows if row.kernel == "hbm_read" and row.ok for r in (row.GBps, row.baseline_GBps) if r]
    return max(rates) if rates else None
