"""Torch building blocks of `bench.torch_models`: norms, rotary embedding, MLPs, MoE, quantized
linears. Imports torch at module level, so only `torch_models.build_model` (and the modules it
loads) import it.

Norms and rotary are small autograd Functions that save only their input (as fused Megatron-LM /
Transformer Engine kernels do), so the tensors saved for backward are the ones
`calc.counts.activations` lists.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

# HF `hidden_act` names -> the torch function (tanh-approximated GeLU for the "new"/"fast" names)
ACTIVATIONS = {
    "silu": F.silu, "swish": F.silu, "relu": F.relu, "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def activation(name: str):
    from ..errors import require

    require(name in ACTIVATIONS, f"the torch builder has no activation {name!r} (known: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


def rope_tables(seq: int, dim: int, theta: float = 10000.0, device=None, dtype=None, start: int = 0):
    """cos and signed sin (S, dim) of positions start..start+S-1 (rotate-half convention; the sin
    table's first half is negated, so rotate_half(x) * sin == roll(x, dim/2) * signed sin)."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    pos = torch.arange(start, start + seq, device=device, dtype=torch.float32)
    ang = torch.outer(pos, inv)  # (S, D/2)
    return torch.cat([ang, ang], dim=-1).cos().to(dtype), torch.cat([-ang.sin(), ang.sin()], dim=-1).to(dtype)


# torch's fused CUDA RMSNorm (one kernel each way, torch >= 2.8); elsewhere the fp32 formula
_FUSED_RMS = hasattr(torch.ops.aten, "_fused_rms_norm") and hasattr(torch.ops.aten, "_fused_rms_norm_backward")


class _RMSNorm(torch.autograd.Function):
    """y = x * rsqrt(mean(x^2) + eps) * w; saves x and the per-token fp32 rstd only."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.fused = _FUSED_RMS and x.is_cuda
        if ctx.fused:
            y, rstd = torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], weight, eps)
        else:
            rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)  # (..., 1) fp32
            y = (x.float() * rstd).to(x.dtype) * weight
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        if ctx.fused:
            dx, dw = torch.ops.aten._fused_rms_norm_backward(grad.contiguous(), x, [x.shape[-1]], rstd, weight,
                                                             [True, True])
            return dx, dw, None
        xn = x.float() * rstd
        g = grad.float() * weight.float()
        dx = rstd * (g - xn * (g * xn).mean(-1, keepdim=True))
        dw = (grad.float() * xn).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype), None


class _Rope(torch.autograd.Function):
    """Rotary embedding on (B, S, H, D) with rope_tables' signed sin: y = x cos + roll(x, D/2) sin
    (three kernels); saves nothing but the shared tables."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, -1), sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return grad * cos + torch.roll(grad * sin, -(grad.shape[-1] // 2), -1), None, None


def apply_rope(x, cos, sin):
    """Rotary on the first cos.shape[-1] features of x (B, S, H, D); the rest pass (partial rotary)."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return _Rope.apply(x, cos, sin)
    return torch.cat([_Rope.apply(x[..., :rot], cos, sin), x[..., rot:]], dim=-1)


class Norm(nn.Module):
    """RMSNorm (weight) or LayerNorm (weight, optional bias) over the last `width` features."""

    def __init__(self, width: int, rms: bool, bias: bool = False):
        super().__init__()
        self.rms = rms
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if (not rms and bias) else None

    @classmethod
    def of(cls, spec) -> "Norm":
        return cls(spec.hidden_size, spec.norm == "rmsnorm", spec.norm_bias)

    def forward(self, x):
        if self.rms:
            return _RMSNorm.apply(x, self.weight, 1e-6)
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)


class MLP(nn.Module):
    """Gated (act(gate) * up -> down) or plain (act(up) -> down) feed-forward."""

    def __init__(self, h, inter, gated, bias, act="gelu_new"):
        super().__init__()
        self.gated, self.act = gated, activation(act)
        self.gate_proj = nn.Linear(h, inter, bias=bias) if gated else None
        self.up_proj = nn.Linear(h, inter, bias=bias)
        self.down_proj = nn.Linear(inter, h, bias=bias)

    def forward(self, x):
        if self.gate_proj is not None:  # gated
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(self.act(self.up_proj(x)))


class GroupedExperts(nn.Module):
    """E gated experts stored stacked, (E, out, in) a projection as nn.Linear stores (out, in). From
    tokens sorted by expert, torch's grouped GEMM (torch._grouped_mm) runs one projection of every
    expert in one kernel, the group offsets staying on the device: no count reaches the host, so an
    MoE step can be captured in a CUDA graph, and the step runs the one GEMM per projection that the
    roofline prices (calc.roofline.ops.predict_grouped_matmul). The grouped GEMM has no CPU backward:
    a training step on the CPU runs one expert at a time instead (same weights, same result)."""

    def __init__(self, experts: int, h: int, inter: int, act: str):
        super().__init__()
        self.act = activation(act)
        self.gate_proj = nn.Parameter(torch.empty(experts, inter, h))
        self.up_proj = nn.Parameter(torch.empty(experts, inter, h))
        self.down_proj = nn.Parameter(torch.empty(experts, h, inter))
        for w in (self.gate_proj, self.up_proj, self.down_proj):
            bound = w.shape[-1] ** -0.5  # nn.Linear's default init range, 1 / sqrt(fan_in)
            nn.init.uniform_(w, -bound, bound)

    ranges: str | None = None  # while bench.model_profile profiles a step: the prefix of each projection's range

    def forward(self, routed, counts):
        """routed (T*k, h) in expert order; counts (E,) int32 tokens per expert, on routed's device."""
        if routed.is_cuda or not torch.is_grad_enabled():
            offs = counts.cumsum(0, dtype=torch.int32)

            def mm(x, name):
                label = nullcontext() if self.ranges is None else torch.profiler.record_function(self.ranges + name)
                with label:
                    return torch._grouped_mm(x, getattr(self, name).transpose(-2, -1), offs=offs)

            return mm(self.act(mm(routed, "gate_proj")) * mm(routed, "up_proj"), "down_proj")
        parts = routed.split(counts.tolist())
        return torch.cat([F.linear(self.act(F.linear(x, g)) * F.linear(x, u), d)
                          for x, g, u, d in zip(parts, self.gate_proj, self.up_proj, self.down_proj)])


class MoE(nn.Module):
    """Top-k routed gated experts (Mixtral, DeepSeek) plus always-on shared experts: gather each
    token's k copies in expert order, run the experts (GroupedExperts), weight, scatter back."""

    def __init__(self, spec):
        super().__init__()
        moe = spec.moe
        self.k = moe.experts_per_token
        self.router = nn.Linear(spec.hidden_size, moe.num_experts, bias=False)
        self.experts = GroupedExperts(moe.num_experts, spec.hidden_size, moe.expert_intermediate_size, spec.activation)
        self.shared = (MLP(spec.hidden_size, moe.shared_intermediate_size, True, False, spec.activation)
                       if moe.num_shared_experts else None)

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (T, h)
        probs = F.softmax(self.router(flat).float(), dim=-1)  # (T, E) fp32
        weights, chosen = probs.topk(self.k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        picks = chosen.flatten()
        order = picks.argsort()
        token = order // self.k
        counts = torch.zeros(probs.shape[-1], dtype=torch.int32, device=x.device).scatter_add_(
            0, picks, torch.ones_like(picks, dtype=torch.int32))  # on the device: no host sync
        outs = self.experts(flat[token], counts)  # (T*k, h) in expert order
        combined = outs * weights.flatten()[order, None]
        y = combined[order.argsort()].view(-1, self.k, shape[-1]).sum(1)  # back to (T, h): saves indices only
        if self.shared is not None:
            y = y + self.shared(flat)
        return y.view(shape)


class QuantLinear(nn.Module):
    """Weight-only int8 / int4 (group 128) Linear through mlsyscalc.kernels.quant.weight_only_matmul: the
    Triton GEMV for up to 16 rows, the tiled W8A16 kernel or a dequantize + cuBLAS for more (int4 in the
    "halves" packing it takes). Weights quantized from a Linear."""

    GROUP = 128

    def __init__(self, linear: nn.Linear, bits: int):
        super().__init__()
        from mlsyscalc.kernels.quant import pack_halves, quantize

        self.bits = bits
        w = linear.weight.detach()
        group = self.GROUP if bits == 4 else None
        q, scale = quantize(w, "int4" if bits == 4 else "int8", group, scale_dtype=w.dtype)
        self.register_buffer("q", pack_halves(q, self.GROUP) if bits == 4 else q)
        self.register_buffer("scale", scale)
        self.bias = linear.bias
        self.out_features = w.shape[0]

    def forward(self, x):
        from mlsyscalc.kernels.quant import weight_only_matmul

        flat = x.reshape(-1, x.shape[-1]).contiguous()
        group = self.GROUP if self.bits == 4 else None
        y = weight_only_matmul(flat, self.q, self.scale, self.bits, group)  # the path by rows: GEMV up to 16
        y = y.view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


def quantize_linears(module: nn.Module, bits: int, skip=("lm_head", "router")) -> int:
    """Replace every nn.Linear under `module` (except `skip` names) by a QuantLinear; returns how many."""
    count = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and name not in skip:
            setattr(module, name, QuantLinear(child, bits))
            count += 1
        else:
            count += quantize_linears(child, bits, skip)
    return count
