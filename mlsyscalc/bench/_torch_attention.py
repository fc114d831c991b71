"""Attention modules of the torch models: multi-head / grouped-query attention (biases, q/k norms,
partial rotary) and DeepSeek multi-head latent attention, each with a training/prefill path and
a one-token KV-cached decode path. Imported by `_torch_decoder` only (torch at module level).

Kernels: "torch" runs SDPA (or the explicit softmax(QK^T)V when flash=False); "triton" runs the
project's flash attention (prefill/train) and paged flash-decoding (decode) where their shapes
allow (head_dim a power of two in 16..256, equal K and V widths), SDPA otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._torch_layers import Norm, apply_rope
from .torch_alloc import PAGE


@dataclass
class Step:
    """Where a decode step writes: position `pos` (python int, fixed in a CUDA graph); the triton
    path also gets the identity block table (B, pages) and the valid lengths (B,) as int32."""

    pos: int
    table: torch.Tensor | None = None
    seqlens: torch.Tensor | None = None


def _triton_fits(q, k, v) -> bool:
    d = q.shape[-1]
    return k.shape[-1] == v.shape[-1] == d and d in (16, 32, 64, 128, 256)


class Attention(nn.Module):
    def __init__(self, spec, flash=True, kernels="torch"):
        super().__init__()
        h, d, dv = spec.hidden_size, spec.head_dim, spec.v_head_dim
        self.heads, self.kv_heads, self.d, self.dv, self.flash = spec.num_heads, spec.num_kv_heads, d, dv, flash
        self.kernels = kernels
        self.rope = spec.position_embedding == "rope"
        self.q_proj = nn.Linear(h, spec.q_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(h, spec.kv_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * dv, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.attn_out_dim, h, bias=spec.o_bias)
        self.q_norm = Norm(d, rms=False, bias=True) if spec.qk_norm else None  # phi qk_layernorm
        self.k_norm = Norm(d, rms=False, bias=True) if spec.qk_norm else None

    def forward(self, x, cos, sin, cache=None, step: Step | None = None):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.d)  # (B, S, H, D)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.d)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.dv)
        if self.q_norm is not None and self.k_norm is not None:  # both or neither (spec.qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if step is not None:  # decode: append at step.pos, attend over the cache
            k_cache, v_cache = cache
            k_cache[:, step.pos:step.pos + s].copy_(k)
            v_cache[:, step.pos:step.pos + s].copy_(v)
            out = self._decode(q, k_cache, v_cache, step)
        else:
            if cache is not None:  # prefill into a preallocated (B, S_max, KV, D) cache
                cache[0][:, :s].copy_(k)
                cache[1][:, :s].copy_(v)
            out = self._flash(q, k, v) if self.flash else self._math(q, k, v)  # (B, S, H, Dv)
        return self.o_proj(out.reshape(b, s, self.heads * self.dv))

    def _flash(self, q, k, v):
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, S, D)
        if self.kernels == "triton" and _triton_fits(q, k, v):
            from mlsyscalc.kernels.attention import attention

            return attention(q, k, v, causal=True).transpose(1, 2)
        gqa = self.heads != self.kv_heads
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).transpose(1, 2)

    def _math(self, q, k, v):
        """Softmax(QK^T)V with the query heads of a KV group stacked: no K/V expansion."""
        b, s, g = q.shape[0], q.shape[1], self.heads // self.kv_heads
        qg = q.view(b, s, self.kv_heads, g, self.d).permute(0, 2, 3, 1, 4).reshape(b, self.kv_heads, g * s, self.d)
        scores = qg @ k.permute(0, 2, 3, 1) * (1.0 / self.d ** 0.5)  # (B, KV, G*S, S)
        bias = torch.full((s, s), float("-inf"), device=q.device, dtype=q.dtype).triu(1).repeat(g, 1)
        probs = F.softmax(scores + bias, dim=-1)
        out = probs @ v.transpose(1, 2)  # (B, KV, G*S, Dv)
        return out.view(b, self.kv_heads, g, s, self.dv).permute(0, 3, 1, 2, 4)

    def _decode(self, q, k_cache, v_cache, step: Step):
        """One new token per sequence over the cached positions 0..pos (q (B, 1, H, D))."""
        b, g = q.shape[0], self.heads // self.kv_heads
        if self.kernels == "triton" and step.table is not None and _triton_fits(q, k_cache, v_cache):
            from mlsyscalc.kernels.attention import decode_attention

            pages = k_cache.shape[1] // PAGE  # the (B, S_max, KV, D) cache is B x pages pages of PAGE tokens
            k_pages = k_cache.view(b * pages, PAGE, self.kv_heads, self.d)
            v_pages = v_cache.view(b * pages, PAGE, self.kv_heads, self.dv)
            out = decode_attention(q.transpose(1, 2), k_pages, v_pages, step.seqlens, step.table)
            return out.transpose(1, 2)  # (B, 1, H, D)
        keys = k_cache[:, :step.pos + 1].transpose(1, 2)  # (B, KV, L, D)
        vals = v_cache[:, :step.pos + 1].transpose(1, 2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, vals, enable_gqa=g > 1)  # (B, H, 1, Dv)
        return out.transpose(1, 2)


class LatentAttention(nn.Module):
    """DeepSeek-V2/V3 multi-head latent attention (arXiv:2405.04434, section 2.1): low-rank query,
    a joint K/V latent plus one shared rotary key cached per token. Prefill/train expand the
    latent to per-head K and V; decode absorbs kv_b_proj into the query and the output (MQA over
    the cached latent, section 2.1.2), the form `calc.roofline.model` predicts."""

    def __init__(self, spec, flash=True, kernels="torch"):
        super().__init__()
        m, h = spec.mla, spec.hidden_size
        self.heads, self.nope, self.rot, self.dv, self.rank = spec.num_heads, m.qk_nope_head_dim, m.qk_rope_head_dim, \
            m.v_head_dim, m.kv_lora_rank
        qk = self.nope + self.rot
        if m.q_lora_rank:
            self.q_a_proj = nn.Linear(h, m.q_lora_rank, bias=spec.qkv_bias)
            self.q_a_norm = Norm(m.q_lora_rank, rms=True)
            self.q_b_proj = nn.Linear(m.q_lora_rank, self.heads * qk, bias=False)
        else:
            self.q_proj = nn.Linear(h, self.heads * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.rank + self.rot, bias=spec.qkv_bias)
        self.kv_a_norm = Norm(self.rank, rms=True)
        self.kv_b_proj = nn.Linear(self.rank, self.heads * (self.nope + self.dv), bias=False)
        self.o_proj = nn.Linear(self.heads * self.dv, h, bias=spec.o_bias)
        self.scale = qk ** -0.5

    def _query(self, x):
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))

    def forward(self, x, cos, sin, cache=None, step: Step | None = None):
        b, s, _ = x.shape
        q = self._query(x).view(b, s, self.heads, self.nope + self.rot)
        q_nope, q_rot = q.split([self.nope, self.rot], dim=-1)
        latent, k_rot = self.kv_a_proj_with_mqa(x).split([self.rank, self.rot], dim=-1)
        latent = self.kv_a_norm(latent)
        q_rot, k_rot = apply_rope(q_rot, cos, sin), apply_rope(k_rot.view(b, s, 1, self.rot), cos, sin)
        if cache is not None:  # one (B, S_max, 1, rank + rot) tensor: latent, then the rotary key
            at = 0 if step is None else step.pos
            cache[0][:, at:at + s].copy_(torch.cat([latent.view(b, s, 1, self.rank), k_rot], dim=-1))
        if step is not None:
            out = self._absorbed(q_nope, q_rot, cache[0][:, :step.pos + 1])
        else:
            kv = self.kv_b_proj(latent).view(b, s, self.heads, self.nope + self.dv)
            k_nope, v = kv.split([self.nope, self.dv], dim=-1)
            k = torch.cat([k_nope, k_rot.expand(b, s, self.heads, self.rot)], dim=-1)
            qh = torch.cat([q_nope, q_rot], dim=-1)
            out = F.scaled_dot_product_attention(qh.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True, scale=self.scale).transpose(1, 2)
        return self.o_proj(out.reshape(b, s, self.heads * self.dv))

    def _absorbed(self, q_nope, q_rot, cached):
        """q (B, 1, H, .) over cached (B, L, 1, rank + rot): the H heads are H query rows of one MQA problem."""
        w = self.kv_b_proj.weight.view(self.heads, self.nope + self.dv, self.rank)
        w_k, w_v = w[:, :self.nope], w[:, self.nope:]  # (H, nope, rank), (H, dv, rank)
        q_lat = torch.einsum("bhn,hnr->bhr", q_nope[:, 0], w_k)  # (B, H, rank)
        qq = torch.cat([q_lat, q_rot[:, 0]], dim=-1)[:, None]  # (B, 1, H, rank + rot)
        keys = cached.transpose(1, 2)  # (B, 1, L, rank + rot)
        o_lat = F.scaled_dot_product_attention(qq, keys, keys[..., :self.rank], scale=self.scale)  # (B, 1, H, rank)
        return torch.einsum("bhr,hvr->bhv", o_lat[:, 0], w_v)[:, None]  # (B, 1, H, dv)
