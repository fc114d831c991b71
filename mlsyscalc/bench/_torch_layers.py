"""The torch modules behind `bench.torch_models.build_model` (imports torch at module level,
so only import it from there)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .torch_models import rope_tables


class _RMSNorm(torch.autograd.Function):
    """y = x * rsqrt(mean(x^2) + eps) * w; saves x and the per-token rstd only."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)  # (..., 1) fp32
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        xn = x.float() * rstd
        g = grad.float() * weight.float()
        dx = rstd * (g - xn * (g * xn).mean(-1, keepdim=True))
        dw = (grad.float() * xn).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype), None


class _Rope(torch.autograd.Function):
    """Rotary embedding on (B, S, H, D); saves nothing but the shared cos/sin tables."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return x * cos + _rotate(x) * sin

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return grad * cos - _rotate(grad * sin), None, None


def _rotate(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Norm(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.rms = spec.norm == "rmsnorm"
        self.weight = nn.Parameter(torch.ones(spec.hidden_size))
        self.bias = nn.Parameter(torch.zeros(spec.hidden_size)) if (not self.rms and spec.norm_bias) else None

    def forward(self, x):
        if self.rms:
            return _RMSNorm.apply(x, self.weight, 1e-6)
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)


class Attention(nn.Module):
    def __init__(self, spec, flash):
        super().__init__()
        h, d, dv = spec.hidden_size, spec.head_dim, spec.v_head_dim
        self.heads, self.kv_heads, self.d, self.dv, self.flash = spec.num_heads, spec.num_kv_heads, d, dv, flash
        self.rope = spec.position_embedding == "rope"
        self.q_proj = nn.Linear(h, spec.q_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(h, spec.kv_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * dv, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.attn_out_dim, h, bias=spec.o_bias)

    def forward(self, x, cos, sin, cache=None):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d)  # (B, S, H, D)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.dv)
        if self.rope:
            q, k = _Rope.apply(q, cos, sin), _Rope.apply(k, cos, sin)
        if cache is not None:  # prefill into a preallocated (B, S_max, KV, D) cache
            k_cache, v_cache = cache
            k_cache[:, :s].copy_(k)
            v_cache[:, :s].copy_(v)
        out = self._flash(q, k, v) if self.flash else self._math(q, k, v)  # (B, S, H, Dv)
        return self.o_proj(out.reshape(b, s, self.heads * self.dv))

    def _flash(self, q, k, v):
        gqa = self.heads != self.kv_heads
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, enable_gqa=gqa)
        return out.transpose(1, 2)

    def _math(self, q, k, v):
        """Softmax(QK^T)V with the query heads of a KV group stacked: no K/V expansion."""
        b, s, g = q.shape[0], q.shape[1], self.heads // self.kv_heads
        qg = q.view(b, s, self.kv_heads, g, self.d).permute(0, 2, 3, 1, 4).reshape(b, self.kv_heads, g * s, self.d)
        scores = qg @ k.permute(0, 2, 3, 1) * (1.0 / self.d ** 0.5)  # (B, KV, G*S, S)
        bias = torch.full((s, s), float("-inf"), device=q.device, dtype=q.dtype).triu(1).repeat(g, 1)
        probs = F.softmax(scores + bias, dim=-1)
        out = probs @ v.transpose(1, 2)  # (B, KV, G*S, Dv)
        return out.view(b, self.kv_heads, g, s, self.dv).permute(0, 3, 1, 2, 4)


class MLP(nn.Module):
    def __init__(self, h, inter, gated, bias):
        super().__init__()
        self.gated = gated
        self.gate_proj = nn.Linear(h, inter, bias=bias) if gated else None
        self.up_proj = nn.Linear(h, inter, bias=bias)
        self.down_proj = nn.Linear(inter, h, bias=bias)

    def forward(self, x):
        if self.gated:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x), approximate="tanh"))


class MoE(nn.Module):
    """Top-k routed gated experts (Mixtral): gather each token's k copies, run, weight, scatter."""

    def __init__(self, spec):
        super().__init__()
        moe = spec.moe
        self.k = moe.experts_per_token
        self.router = nn.Linear(spec.hidden_size, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(spec.hidden_size, moe.expert_intermediate_size, True, False)
                                     for _ in range(moe.num_experts))
        self.shared = (MLP(spec.hidden_size, moe.shared_intermediate_size, True, False)
                       if moe.num_shared_experts else None)

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # (T, h)
        probs = F.softmax(self.router(flat).float(), dim=-1)  # (T, E) fp32
        weights, chosen = probs.topk(self.k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        order = chosen.flatten().argsort()
        token = order // self.k
        counts = torch.bincount(chosen.flatten(), minlength=len(self.experts)).tolist()
        routed = flat[token]  # (T*k, h) dispatched copies
        outs = torch.cat([e(part) for e, part in zip(self.experts, routed.split(counts))])
        combined = outs * weights.flatten()[order, None]
        y = combined[order.argsort()].view(-1, self.k, shape[-1]).sum(1)  # back to (T, h): saves indices only
        if self.shared is not None:
            y = y + self.shared(flat)
        return y.view(shape)


class Layer(nn.Module):
    def __init__(self, spec, index, flash):
        super().__init__()
        self.input_norm, self.post_norm = Norm(spec), Norm(spec)
        self.attn = Attention(spec, flash)
        self.mlp = MoE(spec) if spec.layer_is_moe(index) else MLP(
            spec.hidden_size, spec.intermediate_size, spec.gated_mlp, spec.mlp_bias)

    def forward(self, x, cos, sin, cache=None):
        x = x + self.attn(self.input_norm(x), cos, sin, cache)
        return x + self.mlp(self.post_norm(x))


class Decoder(nn.Module):
    def __init__(self, spec, flash=True, checkpoint=False):
        super().__init__()
        self.spec, self.checkpoint = spec, checkpoint
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.pos = nn.Embedding(spec.learned_positions, spec.hidden_size) if spec.learned_positions else None
        self.layers = nn.ModuleList(Layer(spec, i, flash) for i in range(spec.num_layers))
        self.norm = Norm(spec) if spec.final_norm else nn.Identity()
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=spec.lm_head_bias)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight

    def hidden(self, ids, caches=None):
        s = ids.shape[1]
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(s, device=ids.device))
        cos, sin = rope_tables(s, self.spec.head_dim, device=ids.device, dtype=x.dtype)
        cos, sin = cos[:, None, :], sin[:, None, :]  # (S, 1, D) broadcast over heads
        for i, layer in enumerate(self.layers):
            if self.checkpoint and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint

                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin, None if caches is None else caches[i])
        return self.norm(x)

    def forward(self, ids, targets):
        """Training: mean cross-entropy in fp32 over all positions."""
        logits = self.lm_head(self.hidden(ids))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    @torch.no_grad()
    def prefill(self, ids, caches):
        """Inference: fill the KV caches, return the last position's fp32 logits."""
        x = self.hidden(ids, caches)
        return self.lm_head(x[:, -1]).float()
