"""The Bench of each fused (op, pass): fresh inputs, our kernel, an fp32 torch reference, the torch baseline.

Baselines are the torch paths a framework runs without these kernels: F.rms_norm, F.layer_norm,
F.silu(gate) * up, F.gelu(gate, approximate="tanh") * up, HF's rotate_half rotary, F.dropout(x + bias)
+ residual, and F.cross_entropy(logits.float(), target) with its backward. A backward case runs
both forwards in build and times the backward alone (torch: autograd.grad over the kept graph).

Outputs with several parts (dx and dw, loss and gradient) are gated as one vector of the parts each
divided by its reference's norm, so that a small part weighs as much as a large one. The dropout
baseline draws its own mask, so its `extra_baseline_rel_err` compares different masks and says
nothing about it; our kernel is gated against the reference with its own (Philox) mask.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import harness
from ..sweep import Bench

EPS = {"rmsnorm": 1e-6, "layernorm": 1e-5}
DROPOUT_P = 0.1      # Megatron-LM's default hidden dropout
ROTARY_POSITIONS = 131072   # table rows; positions are drawn from them


def _torch():
    import torch

    return torch


def _randn(*shape: int, dtype) -> Any:
    return _torch().randn(*shape, device=harness.device(), dtype=dtype)


def _joined(parts, norms) -> Any:
    torch = _torch()
    return torch.cat([(p.float() / n).reshape(-1) for p, n in zip(parts, norms)])


def _bench(run: Callable, reference_parts: list, baseline: Callable | None, extra: dict | None = None) -> Bench:
    """A Bench whose reference is computed once, here; several parts are gated as one normalised vector. Timed
    as CUDA-graph replays (harness.graphed): these kernels are short, and a Python launcher's host time would
    pace them."""
    if len(reference_parts) == 1:
        ref = reference_parts[0].float()
        return Bench(run=run, reference=lambda: ref, baseline=baseline, extra=extra or {}, graph=True)
    norms = [max(p.float().norm().item(), 1e-30) for p in reference_parts]
    ref = _joined(reference_parts, norms)
    return Bench(run=run, reference=lambda: ref, baseline=baseline, extra=extra or {},
                 view=lambda outs: _joined(outs, norms), graph=True)


def _leaves(*tensors):
    """fp32 copies that autograd can differentiate (the reference's inputs)."""
    return [t.detach().float().requires_grad_() for t in tensors]


def _grads(out, inputs, dy) -> list:
    return list(_torch().autograd.grad(out, inputs, dy, retain_graph=True))


# --- norms ----------------------------------------------------------------------------------------

def norm_inputs(op: str, tokens: int, width: int, dtype):
    x, w, dy = _randn(tokens, width, dtype=dtype), _randn(width, dtype=dtype), _randn(tokens, width, dtype=dtype)
    b = _randn(width, dtype=dtype) if op == "layernorm" else None
    return x, w, b, dy


def _norm_torch(op: str, x, w, b):
    import torch.nn.functional as F

    if op == "rmsnorm":
        return F.rms_norm(x, (x.shape[-1],), w, EPS[op])
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS[op])


def _norm_ref(op: str, x, w, b):
    from mlsyscalc.kernels import norm

    return norm.rms_norm_ref(x, w, EPS[op]) if op == "rmsnorm" else norm.layer_norm_ref(x, w, b, EPS[op])


def norm_fwd(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    from mlsyscalc.kernels import norm

    x, w, b, _dy = norm_inputs(op, tokens, width, dtype)
    if op == "rmsnorm":
        run = lambda: norm.rms_norm_forward(x, w, EPS[op])[0]  # noqa: E731
    else:
        run = lambda: norm.layer_norm_forward(x, w, b, EPS[op])[0]  # noqa: E731
    ref = _norm_ref(op, x.float(), w.float(), None if b is None else b.float())
    return _bench(run, [ref], lambda: _norm_torch(op, x, w, b))


def norm_bwd(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    from mlsyscalc.kernels import norm

    x, w, b, dy = norm_inputs(op, tokens, width, dtype)
    programs = norm.backward_programs(tokens, width, x.device, layer=op == "layernorm")
    if op == "rmsnorm":
        _, rstd = norm.rms_norm_forward(x, w, EPS[op])
        run = lambda: norm.rms_norm_backward(dy, x, w, rstd)  # noqa: E731
    else:
        _, mean, rstd = norm.layer_norm_forward(x, w, b, EPS[op])
        run = lambda: norm.layer_norm_backward(dy, x, w, mean, rstd)  # noqa: E731
    leaves = _leaves(*(t for t in (x, w, b) if t is not None))
    ref = _grads(_norm_ref(op, leaves[0], leaves[1], leaves[2] if b is not None else None), leaves, dy.float())
    theirs = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    y = _norm_torch(op, theirs[0], theirs[1], theirs[2] if b is not None else None)
    weight_grads = len(theirs) - 1
    partial_bytes = 2 * 4 * programs * width * weight_grads   # fp32 partial rows, written and read back
    return _bench(run, [r.detach() for r in ref], lambda: _grads(y, theirs, dy),
                  {"programs": programs, "partial_bytes": float(partial_bytes)})


# --- gated linear units ---------------------------------------------------------------------------

ACTIVATION = {"swiglu": "silu", "geglu": "gelu_tanh"}


def _glu_torch(op: str, gate, up):
    import torch.nn.functional as F

    return (F.silu(gate) if op == "swiglu" else F.gelu(gate, approximate="tanh")) * up


def glu_fwd(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    from mlsyscalc.kernels import glu

    fused = _randn(tokens, 2 * width, dtype=dtype)   # the projection's output: gate | up
    gate, up = fused[:, :width], fused[:, width:]
    ref = glu.glu_ref(gate.float(), up.float(), ACTIVATION[op])
    return _bench(lambda: glu.glu_forward(gate, up, ACTIVATION[op]), [ref], lambda: _glu_torch(op, gate, up))


def glu_bwd(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    from mlsyscalc.kernels import glu

    fused, dy = _randn(tokens, 2 * width, dtype=dtype), _randn(tokens, width, dtype=dtype)
    gate, up = fused[:, :width], fused[:, width:]
    leaves = _leaves(gate, up)
    ref = _grads(glu.glu_ref(*leaves, ACTIVATION[op]), leaves, dy.float())
    theirs = fused.detach().requires_grad_()
    y = _glu_torch(op, theirs[:, :width], theirs[:, width:])

    def baseline():   # one (tokens, 2I) gradient, as ours
        grad = _grads(y, [theirs], dy)[0]
        return grad[:, :width], grad[:, width:]

    return _bench(lambda: glu.glu_backward(dy, gate, up, ACTIVATION[op]), [r.detach() for r in ref], baseline)


# --- rotary ---------------------------------------------------------------------------------------

def _rotary_inputs(tokens: int, width: int, head_dim: int, dtype):
    from mlsyscalc.kernels import rotary

    torch = _torch()
    dev = harness.device()
    heads = width // head_dim
    cos, sin = rotary.rotary_tables(min(ROTARY_POSITIONS, max(tokens, 64)), head_dim, device=dev)
    positions = torch.randint(0, cos.shape[0], (tokens,), device=dev)
    x, dy = _randn(tokens, heads, head_dim, dtype=dtype), _randn(tokens, heads, head_dim, dtype=dtype)
    cos_full, sin_full = rotary.full_tables(cos, sin, positions, dtype)   # HF gathers them once a forward
    return x, dy, cos, sin, positions, cos_full, sin_full


def rotary_fwd(op: str, tokens: int, width: int, dtype, head_dim: int = 128, **_: Any) -> Bench:
    from mlsyscalc.kernels import rotary

    x, _dy, cos, sin, pos, cos_full, sin_full = _rotary_inputs(tokens, width, head_dim, dtype)
    ref = rotary.rotary_ref(x.float(), cos, sin, pos)
    return _bench(lambda: rotary.rotary_forward(x, cos, sin, pos), [ref],
                  lambda: rotary.rotate_half_apply(x, cos_full, sin_full))


def rotary_bwd(op: str, tokens: int, width: int, dtype, head_dim: int = 128, **_: Any) -> Bench:
    from mlsyscalc.kernels import rotary

    x, dy, cos, sin, pos, cos_full, sin_full = _rotary_inputs(tokens, width, head_dim, dtype)
    leaves = _leaves(x)
    ref = _grads(rotary.rotary_ref(leaves[0], cos, sin, pos), leaves, dy.float())
    tx = x.detach().requires_grad_()
    y = rotary.rotate_half_apply(tx, cos_full, sin_full)
    return _bench(lambda: rotary.rotary_backward(dy, cos, sin, pos), [ref[0].detach()],
                  lambda: _grads(y, [tx], dy)[0])


# --- bias-dropout-residual-add --------------------------------------------------------------------

def _dropout_inputs(tokens: int, width: int, dtype):
    torch = _torch()
    seed = int(torch.randint(0, 2**62, ()).item())
    return (_randn(tokens, width, dtype=dtype), _randn(width, dtype=dtype), _randn(tokens, width, dtype=dtype),
            _randn(tokens, width, dtype=dtype), seed)


def _dropout_torch(x, bias, residual):
    import torch.nn.functional as F

    return residual + F.dropout(x + bias, DROPOUT_P, training=True)


def dropout_fwd(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    from mlsyscalc.kernels import dropout_add as D

    x, bias, res, _dy, seed = _dropout_inputs(tokens, width, dtype)
    ref = D.bias_dropout_add_ref(x.float(), bias.float(), res.float(), DROPOUT_P, seed)
    return _bench(lambda: D.bias_dropout_add_forward(x, bias, res, DROPOUT_P, seed), [ref],
                  lambda: _dropout_torch(x, bias, res), {"p": DROPOUT_P})


def dropout_bwd(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    from mlsyscalc.kernels import dropout_add as D

    x, bias, res, dy, seed = _dropout_inputs(tokens, width, dtype)
    programs = D.bias_grad_programs(tokens, width, x.device)
    leaves = _leaves(x, bias)
    ref = _grads(D.bias_dropout_add_ref(*leaves, res.float(), DROPOUT_P, seed), leaves, dy.float())
    tx, tb = x.detach().requires_grad_(), bias.detach().requires_grad_()
    y = _dropout_torch(tx, tb, res)
    return _bench(lambda: D.bias_dropout_add_backward(dy, DROPOUT_P, seed)[:2], [r.detach() for r in ref],
                  lambda: _grads(y, [tx, tb], dy),
                  {"p": DROPOUT_P, "programs": programs, "partial_bytes": float(2 * 4 * programs * width)})


# --- cross-entropy --------------------------------------------------------------------------------

IGNORED_EVERY = 16   # every 16th target is ignore_index (-100), as padding is


def cross_entropy(op: str, tokens: int, width: int, dtype, **_: Any) -> Bench:
    """Loss and logits gradient; ours overwrites its own logits on every call (the timing repeats over
    gradients, the same work); the reference and torch's baseline keep copies of the first logits."""
    import torch.nn.functional as F

    from mlsyscalc.kernels import cross_entropy as CE

    torch = _torch()
    logits = _randn(tokens, width, dtype=dtype)
    target = torch.randint(0, width, (tokens,), device=logits.device)
    target[::IGNORED_EVERY] = -100
    ref_leaf = logits.detach().float().requires_grad_()
    ref_loss = F.cross_entropy(ref_leaf, target)
    ref_grad = torch.autograd.grad(ref_loss, ref_leaf)[0]
    del ref_leaf
    theirs = logits.detach().clone().requires_grad_()

    def baseline():
        loss = F.cross_entropy(theirs.float(), target)
        return loss, torch.autograd.grad(loss, theirs)[0]

    return _bench(lambda: CE.cross_entropy(logits, target), [ref_loss.detach(), ref_grad], baseline,
                  {"ignored_every": IGNORED_EVERY})


BUILDS: dict[tuple[str, str], Callable[..., Bench]] = {   # (op, pass) -> build(op, tokens, width, dtype, **shape)
    ("rmsnorm", "fwd"): norm_fwd, ("rmsnorm", "bwd"): norm_bwd,
    ("layernorm", "fwd"): norm_fwd, ("layernorm", "bwd"): norm_bwd,
    ("swiglu", "fwd"): glu_fwd, ("swiglu", "bwd"): glu_bwd,
    ("geglu", "fwd"): glu_fwd, ("geglu", "bwd"): glu_bwd,
    ("rotary", "fwd"): rotary_fwd, ("rotary", "bwd"): rotary_bwd,
    ("dropout_add", "fwd"): dropout_fwd, ("dropout_add", "bwd"): dropout_bwd,
    ("cross_entropy", "fwdbwd"): cross_entropy,
}
