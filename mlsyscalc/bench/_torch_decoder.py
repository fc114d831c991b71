"""Decoder layers and the whole model behind `bench.torch_models.build_model` (torch at module level).

Layer forms: pre-norm sequential (llama, gpt2), gemma2's four norms (post-attention and
post-MLP norms too), and parallel attention (GPT-J style: attention and MLP read the same
normed input, falcon-7b/phi-2; or one norm each, falcon-40b/gpt-neox). OPT's post-norm layers
are built pre-norm (the same kernels in another order).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._torch_attention import PAGE, Attention, LatentAttention, Step
from ._torch_layers import MLP, MoE, Norm, rope_tables


class Layer(nn.Module):
    def __init__(self, spec, index, flash=True, kernels="torch"):
        super().__init__()
        self.parallel, self.four = spec.parallel_attention, spec.norms_per_layer == 4
        self.input_norm = Norm.of(spec)
        self.post_norm = Norm.of(spec) if spec.norms_per_layer >= 2 else None  # before the MLP
        self.attn_out_norm = Norm.of(spec) if self.four else None
        self.mlp_out_norm = Norm.of(spec) if self.four else None
        self.attn = (LatentAttention if spec.mla else Attention)(spec, flash, kernels)
        self.mlp = MoE(spec) if spec.layer_is_moe(index) else MLP(
            spec.hidden_size, spec.intermediate_size, spec.gated_mlp, spec.mlp_bias, spec.activation)

    def forward(self, x, cos, sin, cache=None, step: Step | None = None):
        if self.parallel:
            normed = self.input_norm(x)
            mlp_in = normed if self.post_norm is None else self.post_norm(x)
            return x + self.attn(normed, cos, sin, cache, step) + self.mlp(mlp_in)
        h = self.attn(self.input_norm(x), cos, sin, cache, step)
        x = x + (h if self.attn_out_norm is None else self.attn_out_norm(h))
        assert self.post_norm is not None, "a sequential layer has a norm before its MLP (norms_per_layer >= 2)"
        h = self.mlp(self.post_norm(x))
        return x + (h if self.mlp_out_norm is None else self.mlp_out_norm(h))


class Decoder(nn.Module):
    def __init__(self, spec, flash=True, checkpoint=False, kernels="torch"):
        super().__init__()
        self.spec, self.checkpoint, self.kernels = spec, checkpoint, kernels
        self.tp = 1  # tensor-parallel ranks the attention heads are split over (bench.model_parallel)
        self.embed = nn.Embedding(spec.vocab_size, spec.embed_dim)
        self.project_in = nn.Linear(spec.embed_dim, spec.hidden_size, bias=False) if spec.embed_proj_dim else None
        self.pos = nn.Embedding(spec.learned_positions, spec.hidden_size) if spec.learned_positions else None
        # OPT keeps 2 rows before position 0
        self.pos_offset = spec.learned_positions - spec.max_position_embeddings if spec.learned_positions and \
            spec.max_position_embeddings else 0
        self.layers = nn.ModuleList(Layer(spec, i, flash, kernels) for i in range(spec.num_layers))
        self.norm = Norm.of(spec) if spec.final_norm else nn.Identity()
        self.project_out = nn.Linear(spec.hidden_size, spec.embed_dim, bias=False) if spec.embed_proj_dim else None
        self.lm_head = nn.Linear(spec.embed_dim, spec.vocab_size, bias=spec.lm_head_bias)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        mla = spec.mla
        self.rot = mla.qk_rope_head_dim if mla else int(spec.head_dim * spec.rotary_fraction)
        self._tables: dict = {}
        self._steps: dict = {}

    def rope(self, start: int, s: int, like: torch.Tensor):
        """cos, sin (S, 1, rot) of positions start..start+S-1, sliced from a table kept per device/dtype."""
        key = (like.device, like.dtype)
        table = self._tables.get(key)
        if table is None or table[0].shape[0] < start + s:
            theta = float(self.spec.raw_config.get("rope_theta", 10000.0))
            table = rope_tables(max(start + s, 2 * start, 256), self.rot, theta, like.device, like.dtype)
            self._tables[key] = table
        return table[0][start:start + s, None], table[1][start:start + s, None]

    def hidden(self, ids, caches=None, step: Step | None = None):
        s, start = ids.shape[1], 0 if step is None else step.pos
        x = self.embed(ids)
        if self.project_in is not None:
            x = self.project_in(x)
        if self.pos is not None:
            x = x + self.pos(torch.arange(start, start + s, device=ids.device) + self.pos_offset)
        cos, sin = self.rope(start, s, x)
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            if self.checkpoint and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint

                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin, cache, step)
        x = self.norm(x)
        return x if self.project_out is None else self.project_out(x)

    def forward(self, ids, targets):
        """Training: mean cross-entropy in fp32 over all positions."""
        logits = self.lm_head(self.hidden(ids))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    @torch.no_grad()
    def logits(self, ids):
        """Every position's fp32 logits of a plain forward (no cache): the reference for decode."""
        return self.lm_head(self.hidden(ids)).float()

    @torch.no_grad()
    def prefill(self, ids, caches):
        """Inference: fill the KV caches, return the last position's fp32 logits."""
        x = self.hidden(ids, caches)
        return self.lm_head(x[:, -1]).float()

    @torch.no_grad()
    def decode(self, ids, caches, pos: int):
        """One new token per sequence (ids (B, 1)) at position `pos` after pos cached ones: fp32 logits (B, V)."""
        x = self.hidden(ids, caches, self._step(ids.shape[0], caches[0][0].shape[1], pos, ids.device))
        return self.lm_head(x[:, -1]).float()

    def _step(self, batch: int, length: int, pos: int, device) -> Step:
        """The decode position; for the triton kernels also its block table and lengths (made once)."""
        if self.kernels != "triton" or length % PAGE:
            return Step(pos)
        key = (batch, length, pos, device)
        if key not in self._steps:
            pages = length // PAGE
            table = torch.arange(batch * pages, device=device, dtype=torch.int32).view(batch, pages)
            lens = torch.full((batch,), pos + 1, device=device, dtype=torch.int32)
            self._steps[key] = Step(pos, table, lens)
        return self._steps[key]

    def new_caches(self, batch: int, length: int, dtype=None, device=None):
        """Per layer (K, V) caches (B, L, KV, D) (MLA: one (B, L, 1, rank + rot) latent, None);
        with the triton kernels L is rounded up to whole pages."""
        spec, dtype = self.spec, dtype or self.embed.weight.dtype
        device = device or self.embed.weight.device
        if self.kernels == "triton":
            length = -(-length // PAGE) * PAGE
        if spec.mla is not None:
            width = spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim
            return [(torch.zeros(batch, length, 1, width, dtype=dtype, device=device), None) for _ in self.layers]
        shape = (batch, length, spec.num_kv_heads // self.tp)
        return [(torch.zeros(*shape, spec.head_dim, dtype=dtype, device=device),
                 torch.zeros(*shape, spec.v_head_dim, dtype=dtype, device=device)) for _ in self.layers]
