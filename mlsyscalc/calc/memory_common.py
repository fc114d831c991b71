"""Pieces shared by the training and inference memory calculators: how tensor parallelism
splits each projection, per-rank parameter counts of a pipeline stage, byte assumptions that
the user can override, and the fits verdict against a GPU.

Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019, section 3): q/k/v, gate/up and
MLA's up-projections are column-parallel (weight and bias split), o_proj and down_proj are
row-parallel (weight split, bias replicated); norms, the router and MLA's low-rank
down-projections (q_a_proj, kv_a_proj_with_mqa) are replicated; the embedding table and
lm_head are split along the vocabulary. k/v projections split only as far as the KV heads
allow: with tp > KV heads each rank keeps one whole KV head's projection (Megatron-LM, vLLM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..errors import MlsysError, divide, require
from ..specs.model import ModelSpec
from .layers import Linear, embedding_params, head_linears, layer_linears, layer_norm_params, norm_width

_ROW_PARALLEL = ("o_proj", "down_proj")
_REPLICATED = ("router", "q_a_proj", "kv_a_proj_with_mqa", "project_in", "project_out")
_KV_PROJ = ("k_proj", "v_proj")  # split only as far as the KV heads allow (`kv_divisor`)


def tp_kind(lin: Linear) -> str:
    """'column', 'row' or 'replicated' for one projection under tensor parallelism."""
    base = lin.name.rsplit(".", 1)[-1]
    if base in _REPLICATED:
        return "replicated"
    return "row" if base in _ROW_PARALLEL else "column"


def tp_split(lin: Linear, tp: int, kv_split: int | None = None) -> int:
    """By how much TP divides one projection: 1 if replicated; k/v by `kv_split` (the KV heads
    per rank: tp exceeding the KV heads replicates them), every other projection by tp."""
    if tp_kind(lin) == "replicated":
        return 1
    if kv_split is not None and lin.name.rsplit(".", 1)[-1] in _KV_PROJ:
        return kv_split
    return tp


def linear_params_per_rank(lin: Linear, tp: int, ep: int = 1, kv_split: int | None = None) -> int:
    """Parameters of one projection held by one rank (experts: E/ep experts, each TP-split)."""
    if lin.tied:
        return 0
    copies = lin.copies // ep if lin.copies > 1 else lin.copies
    split = tp_split(lin, tp, kv_split)
    weight = lin.in_features * lin.out_features * copies // split
    bias = lin.out_features * copies if lin.bias else 0
    if tp_kind(lin) == "column":
        bias //= split
    return weight + bias


def check_heads(spec: ModelSpec, tp: int) -> int:
    """Attention heads per TP rank; KV heads are split when tp divides them, otherwise each
    rank keeps one KV head (replicated tp/kv times, as Megatron-LM and vLLM do), which needs
    kv_heads to divide tp. Returns KV heads per rank (MLA's latent is not per head: 1 copy)."""
    divide(spec.num_heads, tp, f"{spec.name}: num_heads over --tp")
    if spec.mla is not None:
        return 1
    kv = spec.num_kv_heads
    if kv % tp == 0:
        return kv // tp
    require(tp % kv == 0, f"{spec.name}: num_kv_heads {kv} and --tp {tp}: neither divides the other, "
                          "so KV heads can be neither split nor replicated evenly")
    return 1


def check_tp(spec: ModelSpec, tp: int) -> None:
    """Heads (`check_heads`) and every split width (MLP and expert intermediates) divide by tp,
    as Megatron-LM's and vLLM's parallel linears require."""
    check_heads(spec, tp)
    seen = set()
    for layer in range(spec.num_layers):
        for lin in layer_linears(spec, layer):
            kind = tp_kind(lin)
            width = lin.out_features if kind == "column" else lin.in_features
            if kind == "replicated" or lin.name.rsplit(".", 1)[-1] in _KV_PROJ or (lin.name, width) in seen:
                continue
            seen.add((lin.name, width))
            divide(width, tp, f"{spec.name}: {lin.name} width over --tp")


def kv_divisor(spec: ModelSpec, tp: int) -> int:
    """By how much TP shrinks the per-token K/V width (kv_heads / kv_heads_per_rank)."""
    if spec.mla is not None:
        return 1
    return spec.num_kv_heads // check_heads(spec, tp)


@dataclass(frozen=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds, split by how ZeRO shards them."""

    dense: int  # replicated over the data-parallel group (sharded over dp*cp by ZeRO)
    expert: int  # routed experts (sharded over the expert-data-parallel group dp*cp/ep)
    largest_layer: int  # unsharded (per TP rank) parameters of the biggest layer: ZeRO-3 gathers it
    matrix_factors: int  # Adafactor: rows + cols of each matrix, plus every vector's length

    @property
    def total(self) -> int:
        return self.dense + self.expert


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    per = divide(num_layers, pp, "num_layers over --pp")
    return range(stage * per, (stage + 1) * per)


def stage_params(spec: ModelSpec, layers: Iterable[int], first: bool, last: bool, tp: int, ep: int,
                 pp: int) -> StageParams:
    """Parameters per rank for the decoder layers in `layers`, plus embeddings on the first
    stage and final norm / lm_head on the last (a tied head keeps its own copy of the embedding
    on the last stage when pp > 1, as Megatron-LM does)."""
    dense = expert = largest = factors = 0
    norms = layer_norm_params(spec)
    kv_split = kv_divisor(spec, tp)
    for layer in layers:
        in_layer = norms
        for lin in layer_linears(spec, layer):
            n = linear_params_per_rank(lin, tp, ep, kv_split)
            in_layer += n
            if lin.copies > 1:
                expert += n
                factors += _factors(lin, tp, ep, kv_split)
            else:
                dense += n
                factors += _factors(lin, tp, 1, kv_split)
        dense += norms
        factors += norms
        largest = max(largest, in_layer)
    tokens, positions = embedding_params(spec)
    vocab_rows = -(-spec.vocab_size // tp)  # vocabulary-parallel split (padding ignored)
    if first:
        dense += vocab_rows * spec.embed_dim + positions
        factors += vocab_rows + spec.embed_dim + positions
    for lin in head_linears(spec):
        if lin.group == "head" and last:
            shares_table = lin.tied and pp == 1  # the table counted above, on this same rank
            n = 0 if shares_table else vocab_rows * lin.in_features + (vocab_rows if lin.bias else 0)
            dense += n
            factors += (vocab_rows + lin.in_features) if n else 0
        elif (lin.name == "project_in" and first) or (lin.name == "project_out" and last):
            dense += lin.params
            factors += lin.in_features + lin.out_features
    if last and spec.final_norm:
        dense += spec.hidden_size * norm_width(spec)
        factors += spec.hidden_size
    return StageParams(dense=dense, expert=expert, largest_layer=largest, matrix_factors=factors)


def _factors(lin: Linear, tp: int, ep: int, kv_split: int) -> int:
    """Adafactor's factored second moment of one projection on one rank: rows + cols per matrix."""
    if lin.tied:
        return 0
    copies = lin.copies // ep if lin.copies > 1 else 1
    split = tp_split(lin, tp, kv_split)
    rows = lin.out_features // split if tp_kind(lin) != "row" else lin.out_features
    cols = lin.in_features // split if tp_kind(lin) == "row" else lin.in_features
    return copies * (rows + cols + (rows if lin.bias else 0))


def merge_bytes(defaults: Mapping[str, float], overrides: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Byte-per-element assumptions with the user's overrides applied (unknown keys are errors)."""
    merged = dict(defaults)
    for key, value in overrides:
        require(key in merged, f"--bytes: unknown key {key!r} (known: {', '.join(merged)})")
        require(math.isfinite(value) and value >= 0, f"--bytes {key}: must be a finite number >= 0, got {value}")
        merged[key] = float(value)
    return merged


def parse_bytes_overrides(items: Iterable[str]) -> tuple[tuple[str, float], ...]:
    """'weight=2' -> ('weight', 2.0) for each --bytes KEY=VALUE."""
    parsed = []
    for item in items:
        key, sep, value = str(item).partition("=")
        require(bool(sep), f"--bytes expects KEY=VALUE, got {item!r}")
        try:
            parsed.append((key.strip(), float(value)))
        except ValueError:
            raise MlsysError(f"--bytes {key}: {value!r} is not a number") from None
    return tuple(parsed)


@dataclass(frozen=True)
class Verdict:
    gpu: str
    capacity_bytes: int  # the card's memory
    reserve_bytes: int  # kept back for the CUDA context, allocator and library workspaces
    usable_bytes: int
    needed_bytes: int
    fits: bool
    headroom_bytes: int  # usable - needed (negative: short by that much)


def reserve_bytes(capacity: int, text: str) -> int:
    """'10%' of the card or a size ('2GiB', '1.5GB', '0')."""
    from ..units import parse_bytes

    text = str(text).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise MlsysError(f"--reserve: {text!r} is not a percentage") from None
        require(0 <= pct < 100, f"--reserve: percentage must be in [0, 100), got {text}")
        return int(capacity * pct / 100)
    return 0 if text in ("0", "0B") else parse_bytes(text, "--reserve")


def verdict(gpu, needed: int, reserve: str) -> Verdict:
    cap = int(gpu.memory_bytes)
    res = reserve_bytes(cap, reserve)
    require(res < cap, f"--reserve {reserve}: {res:,} bytes leave nothing of {gpu.name}'s {cap:,} bytes")
    usable = cap - res
    return Verdict(gpu.name, cap, res, usable, int(needed), needed <= usable, usable - int(needed))
