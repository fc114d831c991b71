"""Roofline time of a whole model: one row per kernel of a layer (and the head), totals per phase.

prefill: `batch` sequences of `seq` new tokens (time to first token); decode: one new token per
sequence after `context` cached ones (time per output token); train: forward + backward + an
AdamW step over `batch` x `seq` tokens. Each row is an `OpPrediction` from calc.roofline.ops
times how often it runs (layers of that kind); the step time is the sum of the rows (each kernel's
time plus the stream's idle gap before it) plus the tensor-parallel collectives (calc.comm.tp_rows).
Kernels run one after another on one stream: no overlap of communication or of consecutive kernels.

Tensor parallel follows Megatron-LM (Shoeybi et al. 2019, section 3): q/k/v, gate/up and the
vocabulary are column-parallel, o_proj and down_proj row-parallel, norms replicated; two
all-reduces of the (tokens, hidden) activations per layer forward, two more backward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from ...dtypes import bytes_per_element, dtype_name
from ...errors import MlsysError, divide, require
from ...specs.model import ModelSpec
from .calibration import Ceilings, gemm_class
from ..counts.attention import keys_read
from ..counts.flops import attention_layer_flops, count_flops, layer_kinds
from ..counts.layers import Linear, head_linears, layer_linears
from ..counts.params import count_params
from ..comm.tp_rows import CommRow, dp_comm_rows, tp_comm_rows
from .host import eager_host_path_s
from .memory_bound import copy_cast_op, elementwise_op, embedding_op, norm_op, rotary_op
from .mem_efficient import mem_efficient_attention, runs_mem_efficient
from .head import loss_forward_ops
from .steady import MIX_KINDS
from .notes import model_notes
from .paged import paged_attention
from .ops import (ATTENTION_ROWS, OpPrediction, OpRow, predict_attention, predict_grouped_matmul,
                           predict_matmul, predict_memory_op)
from .options import PHASES, RooflineOptions  # noqa: F401  (re-exported)
from . import torch_kernels as roofline_torch
from .training import backward_rows, matmul_backward, optimizer_row, recompute_rows
from ..parallel.tensor_parallel import rank_split, tp_kind


@dataclass(frozen=True)
class ModelRoofline:
    model: str
    gpu: str
    options: RooflineOptions
    ceilings: Ceilings
    rows: tuple[OpRow, ...]
    comm: tuple[CommRow, ...]
    model_flops: float  # useful FLOPs of the step on all GPUs (calc.counts.flops convention; train: 3x forward)
    weight_bytes: float  # per GPU
    kv_cache_bytes: float  # per GPU, at the end of the step
    notes: tuple[str, ...] = ()
    host_path_s: float = 0.0  # the host's time to issue the step's kernels (calc.roofline.host; 0: none)

    def _sum(self, attr: str) -> float:
        return sum(r.count * getattr(r.pred, attr) for r in self.rows)

    @property
    def compute_s(self) -> float:
        return self._sum("compute_s")

    @property
    def memory_s(self) -> float:
        return self._sum("memory_s")

    @property
    def overhead_s(self) -> float:
        return self._sum("overhead_s")

    @property
    def gap_s(self) -> float:
        """The stream's idle time between the step's kernels (ceilings.gap_s each)."""
        return self._sum("gap_s")

    @property
    def ops_s(self) -> float:
        return sum(r.total_s for r in self.rows)

    @property
    def comm_s(self) -> float:
        return sum(c.total_s for c in self.comm)

    @property
    def comm_hidden_s(self) -> float:
        """Communication overlapped with kernels (data-parallel traffic with dp_overlap only)."""
        return sum(c.hidden_s for c in self.comm)

    def pass_s(self, pass_name: str) -> float:
        """Kernel time of one pass: forward, backward, recompute or optimizer."""
        return sum(r.total_s for r in self.rows if r.pass_name == pass_name)

    @property
    def gpu_s(self) -> float:
        """The GPU's path: every kernel's predicted time plus the collectives' exposed time."""
        return self.ops_s + self.comm_s - self.comm_hidden_s

    @property
    def host_s(self) -> float:
        """The part of the host's path beyond the GPU's (calc.roofline.host): 0 unless the host paces the step."""
        return max(0.0, self.host_path_s - self.gpu_s)

    @property
    def time_s(self) -> float:
        """The step: the GPU's path plus the host's excess over it (the longer of the two)."""
        return self.gpu_s + self.host_s

    @property
    def bytes(self) -> float:
        return self._sum("bytes")

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def tokens_per_s(self) -> float:
        """decode: new tokens (one per sequence) per second; prefill/train: tokens processed per second
        (train: over all dp replicas)."""
        return self.options.tokens * self.options.dp / self.time_s

    @property
    def mfu(self) -> float:
        """Model FLOPs / (time x GPUs x datasheet peak of the dtype) (PaLM, Chowdhery et al. 2022, app. B)."""
        peak = self.ceilings.datasheet_flops(self.options.compute_dtype)
        return self.model_flops / (self.time_s * self.options.tp * peak)

    def totals(self) -> dict[str, float | int | str | bool | dict[str, int] | None]:
        """The step's sums and rates (JSON `totals`)."""
        o = self.options
        latency_key = {"prefill": "ttft_s", "decode": "tpot_s", "train": "step_s"}[o.phase]
        return {
            "predicted_s": self.time_s, latency_key: self.time_s, "bound": self.bound,
            "compute_s": self.compute_s, "memory_s": self.memory_s, "overhead_s": self.overhead_s,
            "gap_s": self.gap_s, "ops_s": self.ops_s, "comm_s": self.comm_s, "comm_hidden_s": self.comm_hidden_s,
            "gpu_s": self.gpu_s, "host_path_s": self.host_path_s, "host_s": self.host_s,
            **{f"{name}_s": self.pass_s(name) for name in ("forward", "backward", "recompute", "optimizer")},
            "tp_comm_s": sum(c.total_s for c in self.comm if not c.method.startswith("comm_step")),
            "dp_comm_s": sum(c.total_s for c in self.comm if c.method.startswith("comm_step")), "bytes": self.bytes, "flops": self._sum("flops"),
            "model_flops": self.model_flops, "tokens": o.tokens, "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu, "mbu": self.mbu, "weight_bytes": self.weight_bytes,
            "kv_cache_bytes": self.kv_cache_bytes, "fits": self.fits if o.phase != "train" else None,
            "kernels": self.kernels, "kernels_by_class": self.kernels_by_class, "impl": o.impl, "logits": o.logits,
        }

    @property
    def kernels_by_class(self) -> dict[str, int]:
        """Kernel launches per efficiency class (the field that prices each row's binding time)."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.pred.efficiency_class] = out.get(r.pred.efficiency_class, 0) + r.count
        return dict(sorted(out.items()))

    @property
    def kernels(self) -> int:
        """Kernel launches of the step (every row's count; collectives not included)."""
        return sum(r.count for r in self.rows)

    @property
    def fits(self) -> bool:
        """Weights + KV cache fit in one GPU's memory (inference; training is not checked)."""
        return self.weight_bytes + self.kv_cache_bytes <= self.ceilings.gpu.memory_bytes

    @property
    def mbu(self) -> float:
        """Bytes every kernel moves on one GPU / (time x datasheet bandwidth)."""
        return self.bytes / (self.time_s * self.ceilings.datasheet_Bps)


def expected_distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """E (1 - (1 - k/E)^T): experts hit by T tokens routed uniformly, k each (per expert,
    P(missed by one token) = 1 - k/E, independent across tokens)."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class _Pass:
    spec: ModelSpec
    ceil: Ceilings
    opts: RooflineOptions

    @property
    def act(self) -> str:
        """Matmul compute dtype."""
        return self.opts.compute_dtype

    @property
    def store(self) -> str:
        """Activation storage dtype (memory-bound kernels, attention, matmul outputs)."""
        return self.opts.activation_dtype

    @property
    def a(self) -> float:
        return bytes_per_element(self.store)

    @property
    def tokens(self) -> int:
        return self.opts.tokens

    @property
    def heads(self) -> int:
        return self.spec.num_heads // self.opts.tp

    @property
    def kv_heads(self) -> int:
        return max(1, self.spec.num_kv_heads // self.opts.tp)

    def attention(self, kind: str, backward: bool = False) -> OpPrediction:
        return _attention_op(self, kind, backward)



def _shard(p: _Pass, lin: Linear) -> tuple[int, int]:
    """(in, out) features of one GPU's slice of a Linear (a routed expert's: split over etp)."""
    tp, base, kind = rank_split(lin, p.opts.tp, p.opts.etp), lin.name.split(".")[-1], tp_kind(lin)
    if tp == 1 or kind == "replicated":
        return lin.in_features, lin.out_features
    if kind == "row":
        return divide(lin.in_features, tp, f"--tp {tp}: {lin.name} input"), lin.out_features
    if base in ("k_proj", "v_proj"):
        return lin.in_features, p.kv_heads * (lin.out_features // p.spec.num_kv_heads)
    if base == "lm_head":  # Megatron pads the vocabulary to a multiple of tp
        return lin.in_features, math.ceil(lin.out_features / tp)
    return lin.in_features, divide(lin.out_features, tp, f"--tp {tp}: {lin.name} output")


def _linear_op(p: _Pass, lin: Linear, tokens: int | None = None) -> OpPrediction:
    k, n = _shard(p, lin)
    w_dtype = dtype_name(p.opts.dtype)
    if lin.copies == 1:
        return predict_matmul(tokens or p.tokens, n, k, p.act, p.ceil, weight_dtype=w_dtype, out_dtype=p.store,
                              name=lin.name)
    # routed experts (calc.parallel.expert_grid): the rank holds E / ep of them and reads the routed copies of the tokens
    # of its tp ep group, tokens x etp / tp of them (the sequence shards of its etp ranks, gathered); etp = tp,
    # ep = 1: every token of the pass over all E experts
    o = p.opts
    etp = o.etp or o.tp
    routed = p.tokens * lin.active * etp // o.tp
    groups = expected_distinct_experts(lin.copies, lin.active, p.tokens * etp * o.ep // o.tp) / o.ep
    return predict_grouped_matmul(routed, groups, n, k, p.act, p.ceil, weight_dtype=w_dtype, out_dtype=p.store,
                                  name=lin.name, experts=True)


def _attention_op(p: _Pass, kind: str, backward: bool = False) -> OpPrediction:
    """Attention of one layer of `kind`; on a windowed or chunked layer with window "skip", decode
    reads only the keys the mask lets the new token see and prefill/train count only the tiles
    inside the mask (calc.counts.attention.MASKS); "full" prices the whole causal sequence."""
    spec, o = p.spec, p.opts
    size = spec.mask_size(kind) if o.window == "skip" else None
    kv_len = o.kv_len
    if size is not None and o.phase == "decode":
        kv_len, size = keys_read(kind, size, 1, kv_len), None
    causal, kv_dtype = o.phase != "decode", o.kv_dtype_name
    name = ATTENTION_ROWS[kind] + (".bwd" if backward else "")
    if spec.mla is not None and o.phase == "decode":  # absorbed MLA: MQA over the cached latent
        mla = spec.mla
        width = mla.kv_lora_rank + mla.qk_rope_head_dim
        if o.impl == "torch" and runs_mem_efficient(width, mla.kv_lora_rank):  # SDPA's CUTLASS kernel
            return mem_efficient_attention(o.batch, p.heads, kv_len, width, mla.kv_lora_rank, p.store, p.ceil,
                                           kv_dtype, name=name)
        pred = predict_attention(o.batch, p.heads, 1, 1, kv_len, width, False,
                                 p.store, p.ceil, v_head_dim=mla.kv_lora_rank, kv_dtype=kv_dtype, v_in_k=True, name=name)
        kv_heads = 1
    else:
        pred = predict_attention(o.batch, p.heads, p.kv_heads, o.new_tokens, kv_len, spec.head_dim, causal, p.store,
                                 p.ceil, v_head_dim=spec.v_head_dim, kv_dtype=None if backward else kv_dtype,
                                 backward=backward, window=size, pad_head_dim=o.impl == "torch" and spec.mla is None,
                                 name=name, mask=kind, sinks=spec.attention_sinks)
        kv_heads = p.kv_heads
    if o.kv_layout != "paged" or o.phase == "train":
        return pred
    return paged_attention(pred, p.ceil, o.batch, kv_heads, o.new_tokens, kv_len, p.heads // kv_heads)


def _mlp_widths(p: _Pass, layer: int) -> float:
    """Activation elements through the MLP nonlinearity (routed tokens x expert width for MoE)."""
    spec, tp = p.spec, p.opts.tp
    if not spec.layer_is_moe(layer):
        return p.tokens * spec.intermediate_size / tp
    moe = spec.moe
    assert moe is not None
    return p.tokens * (moe.experts_per_token * moe.expert_intermediate_size + moe.shared_intermediate_size) / tp


def _memory_ops(p: _Pass, layer: int) -> list[tuple[OpPrediction, str]]:
    """Norms, rotary, KV-cache append, activation, residual adds, MoE routing: HBM-bound kernels
    (one per op; impl "torch": the kernels plain PyTorch runs, calc.roofline.torch_kernels)."""
    if p.opts.impl == "torch":
        return roofline_torch.layer_memory_ops(p, layer, _mlp_widths(p, layer))
    spec, o, t, act, ceil = p.spec, p.opts, p.tokens, p.store, p.ceil
    h = spec.hidden_size
    fused = FUSED_MEMORY_CLASS  # one kernel each, at the fused kernels' measured bandwidth (calc.roofline.calibration)
    ops = [(norm_op(t, h, act, ceil, cls=fused), "norm")] * spec.norms_per_layer  # with or without affine weights
    if spec.layer_uses_rope(layer):
        rot = spec.mla.qk_rope_head_dim if spec.mla else int(spec.head_dim * spec.rotary_fraction)
        heads = p.heads + (1 if spec.mla else p.kv_heads)
        ops.append((rotary_op(t, heads, rot, act, ceil, positions=o.new_tokens, cls=fused), "attention"))
    if o.phase != "train":
        per_token = spec.kv_cache_elements_per_token if spec.mla else p.kv_heads * (spec.head_dim + spec.v_head_dim)
        ops.append((copy_cast_op(t * per_token, act, o.kv_dtype_name, ceil), "attention"))
    gated = spec.gated_mlp or spec.layer_is_moe(layer)
    ops.append((elementwise_op(_mlp_widths(p, layer), 2 if gated else 1, 1, 5, act, ceil,
                               name="mlp_act" + ("*up" if gated else ""), cls=fused), "mlp"))
    adds = 1 if spec.parallel_attention else 2
    ops += [(_residual_add(p), "norm")] * adds
    return ops + _moe_ops(p, layer)


FUSED_MEMORY_CLASS = "memory_fused"  # the fused list's norms, rotary, activations and residual adds


def _residual_add(p: _Pass) -> OpPrediction:
    """x + f(x): read both, write the sum; with dropout in training the fused bias-dropout-add also writes its
    1-byte mask (read back in the backward)."""
    elements = p.tokens * p.spec.hidden_size
    if p.opts.phase == "train" and p.opts.dropout > 0:
        return predict_memory_op("residual_add", 2 * elements * p.a, elements * (p.a + 1), elements, p.store, p.ceil,
                                 shape=f"{elements:.0f} 2->1 + mask", cls=FUSED_MEMORY_CLASS)
    return elementwise_op(elements, 2, 1, 1, p.store, p.ceil, name="residual_add", cls=FUSED_MEMORY_CLASS)


def _moe_ops(p: _Pass, layer: int) -> list[tuple[OpPrediction, str]]:
    """Router softmax + top-k, and the token dispatch/combine of an MoE layer."""
    spec, t, act, ceil = p.spec, p.tokens, p.store, p.ceil
    moe = spec.moe
    if moe is None or not spec.layer_is_moe(layer):
        return []
    e, k, h = moe.num_experts, moe.experts_per_token, spec.hidden_size
    # router softmax + top-k: read the logits, write k (int32 index, fp32 weight) per token
    return [(predict_memory_op("router_topk", t * e * p.a, t * k * 8, 5 * t * e, act, ceil), "mlp"),
            # dispatch (gather tokens into expert order) and combine (weighted scatter back)
            (elementwise_op(2 * t * k * h, 1, 1, 1, act, ceil, name="moe_permute"), "mlp")]


def _layer_kinds(spec: ModelSpec) -> list[tuple[int, int, str]]:
    """(example layer index, layer count, attention kind) per kind of layer: layers that run the same
    kernels (the same MLP kind, attention kind, RoPE or NoPE, q/k norm or not) share one set of rows."""
    groups: dict[tuple, list[int]] = {}
    for i in range(spec.num_layers):
        key = (spec.layer_is_moe(i), spec.layer_type(i), spec.layer_uses_rope(i), spec.layer_has_qk_norm(i))
        groups.setdefault(key, []).append(i)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0], item[1][0]))  # dense kinds first
    return [(layers[0], len(layers), key[1]) for key, layers in ordered]


def forward_rows(p: _Pass) -> list[OpRow]:
    rows: list[OpRow] = []
    spec = p.spec
    for layer, count, kind in _layer_kinds(spec):
        where = "moe layers" if spec.layer_is_moe(layer) else "layers"
        ops = [(_linear_op(p, lin), lin.group) for lin in layer_linears(spec, layer)] + _memory_ops(p, layer)
        kind_rows = [OpRow(op, group, where, count) for op, group in ops]
        kind_rows.append(OpRow(_attention_op(p, kind), "attention", where, count))
        rows += kind_rows + (roofline_torch.split_rows(p, kind_rows) if p.opts.impl == "torch" else [])
    return _merge(rows) + head_rows(p)


def head_rows(p: _Pass) -> list[OpRow]:
    """Embedding and learned positions, the final norm, the lm_head over `logit_tokens` positions
    (impl "torch": the logits' fp32 cast, or the loss in training, and split-K reductions)."""
    spec, t, act, torch_impl = p.spec, p.tokens, p.store, p.opts.impl == "torch"
    extra = spec.hidden_size if spec.learned_positions else 0
    ops = roofline_torch.head_ops(p) if torch_impl else [embedding_op(t, spec.embed_dim, act, p.ceil, extra_width=extra)]
    if spec.final_norm:
        ops.append(norm_op(t, spec.hidden_size, act, p.ceil, name="final_norm",
                           cls="memory" if torch_impl else FUSED_MEMORY_CLASS))
    ops += [_linear_op(p, lin, p.opts.logit_tokens if lin.name == "lm_head" else None) for lin in head_linears(spec)]
    if torch_impl:
        ops += roofline_torch.loss_ops(p, False) if p.opts.phase == "train" else [roofline_torch.logits_cast(p)]
    elif p.opts.phase == "train":
        ops += loss_forward_ops(p)
    rows = [OpRow(op, "head", "head", 1) for op in ops]
    return rows + (roofline_torch.split_rows(p, rows) if torch_impl else [])


def _merge(rows: list[OpRow]) -> list[OpRow]:
    """Identical kernels of one layer kind (two norms, two residual adds) become one row with a count."""
    merged: dict[tuple, OpRow] = {}
    for row in rows:
        key = (row.pred, row.group, row.layers)
        merged[key] = replace(merged[key], count=merged[key].count + row.count) if key in merged else row
    return list(merged.values())


@lru_cache(maxsize=32)
def _params(spec: ModelSpec) -> int:
    return count_params(spec).total


def _fit(p: _Pass) -> tuple[float, float]:
    """(weight bytes, KV-cache bytes) per GPU; weights split evenly over tp (norms are replicated: small)."""
    spec, o = p.spec, p.opts
    weights = _params(spec) * bytes_per_element(o.dtype) / o.tp
    if o.phase == "train":
        return weights, 0.0
    per_token = spec.kv_cache_elements_per_token if spec.mla else p.kv_heads * (spec.head_dim + spec.v_head_dim)
    kv = o.batch * o.kv_len * spec.num_layers * per_token * bytes_per_element(o.kv_dtype_name)
    if o.check_fit and weights + kv > p.ceil.gpu.memory_bytes:
        raise MlsysError(
            f"{spec.name} does not fit on one {p.ceil.gpu.name} ({p.ceil.gpu.memory_bytes / 1e9:.0f} GB): "
            f"weights {weights / 1e9:.1f} GB + KV cache {kv / 1e9:.1f} GB per GPU; use --tp, a smaller "
            f"--dtype/--kv-dtype, --batch or --context (or --no-fit-check)")
    return weights, kv


def predict_model(spec: ModelSpec, ceilings: Ceilings, options: RooflineOptions | None = None) -> ModelRoofline:
    """Per-kernel roofline rows and totals for one prefill, decode step or training step; at sustained clocks the
    step is priced at the clock its own kernel mix holds under the power cap (calc.roofline.steady), read off a pass at
    burst clocks (ceilings already at sustained clocks are used as they are)."""
    opts = options or RooflineOptions()
    opts.validate(spec)
    if opts.clocks_mode == "sustained" and ceilings.clocks != "sustained":
        burst_ceilings = ceilings.at_clocks("burst")
        burst = _predict(spec, burst_ceilings, opts)
        ceilings = ceilings.at_clocks("sustained", kernel_mix(burst.rows, burst_ceilings))
    return _predict(spec, ceilings.at_clocks(opts.clocks_mode), opts)


def kernel_mix(rows: tuple[OpRow, ...] | list[OpRow], ceilings: Ceilings | None = None) -> dict[str, float]:
    """Seconds of the forward and backward rows by what draws the card's power (calc.roofline.steady.MIX_KINDS):
    compute-bound GEMMs (bf16, or fp8), attention, and the rest (memory-bound kernels, streaming GEMMs). The
    optimizer step is left out: a phase of its own, after the backward, which the card's power controller (its
    clock moves within 50-100 ms: reports/train/runs/h200-step-ops/) does not average with the layers'. So is a
    recomputed forward, which repeats the forward's mix (and so a step's clock does not depend on it).
    With `ceilings` (the pass's burst ones) the routed experts' grouped GEMMs count as GEMMs at their FLOPs
    over the GEMM rate, each forward one with its dgrad and wgrad (3 x its FLOPs, unpadded): a GPU's routed work,
    which its experts' grid (ep, etp: calc.parallel.expert_grid) does not change under balanced routing, so every expert
    layout of a pass runs at one clock (`with_experts`)."""
    mix = dict.fromkeys(MIX_KINDS, 0.0)
    for r in rows:
        if r.pass_name in ("optimizer", "recompute"):
            continue
        p = r.pred
        if ceilings is not None and p.kind == "matmul" and _routed(p.name):
            cls = gemm_class(p.dtype)
            if r.pass_name == "forward":  # its backward rows counted here
                mix["matmul_fp8" if cls == "matmul_fp8" else "matmul"] += 3 * r.count * (
                    p.flops / ceilings.flops_per_s(p.dtype) + p.overhead_s + p.gap_s)
        elif p.kind == "matmul" and p.compute_s >= p.memory_s:
            mix["matmul_fp8" if p.compute_class == "matmul_fp8" else "matmul"] += r.total_s
        elif p.kind == "attention":
            mix["attention"] += r.total_s
        else:
            mix["memory"] += r.total_s
    return mix


def _predict(spec: ModelSpec, ceilings: Ceilings, opts: RooflineOptions) -> ModelRoofline:
    p = _Pass(spec, ceilings, opts)
    weights, kv = _fit(p)
    rows = forward_rows(p)
    comm = tp_comm_rows(spec, ceilings.gpu, opts, p.a)
    if opts.phase == "train":
        backward = recompute_rows(rows, opts.recompute) + backward_rows(p, rows)
        if opts.impl == "torch":
            backward += roofline_torch.backward_memory_rows(p, _layer_kinds(spec), lambda i: _mlp_widths(p, i))
        forward_s, backward_s = sum(r.total_s for r in rows), sum(r.total_s for r in backward)
        rows += backward + [optimizer_row(p, _params(spec))]
        if opts.impl == "torch":
            rows.append(roofline_torch.zero_grad_row(p, _params(spec)))
        comm += dp_comm_rows(spec, ceilings.gpu, opts, forward_s, backward_s)
    counted = count_flops(spec, opts.flop_options)
    forward = (counted.forward - counted.breakdown["attention_core"] + _attention_model_flops(spec, opts)
               - _logit_saving_flops(spec, opts))
    host = eager_host_path_s(opts, sum(r.count for r in rows), spec.num_layers, ceilings.host)
    return ModelRoofline(spec.name, ceilings.gpu.name, opts, ceilings, tuple(rows), tuple(comm),
                         forward * (3 if opts.phase == "train" else 1), weights, kv,
                         model_notes(spec, opts, ceilings.host), host)


def _routed(name: str) -> bool:
    """A routed expert's GEMM (forward, dgrad or wgrad): the rows that depend on the experts' grid."""
    return name.startswith("experts.")


def with_experts(spec: ModelSpec, result: ModelRoofline, ep: int, etp: int | None) -> ModelRoofline:
    """`result` (a training pass of the fused kernel list) with its routed experts on another grid (ep, etp:
    calc.parallel.expert_grid): what `predict_model` gives for those options, priced again only where they enter, the
    routed experts' forward, dgrad and wgrad GEMMs. Every other row is the same, and so is the clock (the kernel
    mix counts the routed GEMMs by their FLOPs, which the grid does not change: `kernel_mix`)."""
    o = replace(result.options, ep=ep, etp=etp)
    require(o.phase == "train" and o.impl == "fused" and o.recompute == "none",
            "with_experts re-prices a training pass of the fused list without recomputation")
    o.validate(spec)
    p = _Pass(spec, result.ceilings, o)
    moe = next((i for i in range(spec.num_layers) if spec.layer_is_moe(i)), None)
    routed = {lin.name: lin for lin in layer_linears(spec, moe)} if moe is not None else {}
    forward = {r.pred.name: replace(r, pred=_linear_op(p, routed[r.pred.name])) for r in result.rows
               if r.pass_name == "forward" and r.pred.kind == "matmul" and _routed(r.pred.name)}
    backward = {row.pred.name: row for r in forward.values() for row in matmul_backward(p, r)}
    if not forward:
        return replace(result, options=o)
    rows = tuple((forward if r.pass_name == "forward" else backward).get(r.pred.name, r)
                 if r.pred.kind == "matmul" and _routed(r.pred.name) else r for r in result.rows)
    return replace(result, options=o, rows=rows)


def _logit_saving_flops(spec: ModelSpec, opts: RooflineOptions) -> float:
    """lm_head FLOPs calc.counts.flops counts at every position that logits "last" does not compute."""
    skipped = opts.tokens - opts.logit_tokens
    return sum(lin.forward_flops(skipped) for lin in head_linears(spec) if lin.name == "lm_head") if skipped else 0.0


def _attention_model_flops(spec: ModelSpec, opts: RooflineOptions) -> float:
    """The attention FLOPs of the step's kernels, so that MFU counts the model's own work: with window
    "skip", a windowed or chunked layer computes the pairs its mask keeps (decode: the keys the new
    token sees); with "full", every layer the whole causal sequence (decode: every cached key)."""
    o = opts.flop_options
    total = 0.0
    for kind, layers in layer_kinds(spec).items():
        size = spec.mask_size(kind) if opts.window == "skip" else None
        if opts.phase == "decode":
            keys = o.kv_len if size is None else keys_read(kind, size, 1, o.kv_len)
            per_layer = attention_layer_flops(spec, "full_attention", o.batch, 1, keys, False)
        else:
            per_layer = attention_layer_flops(spec, kind if size else "full_attention", o.batch, o.new_tokens,
                                              o.kv_len, True)
        total += layers * per_layer
    return total
