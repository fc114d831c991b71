"""Pieces shared by the training and inference memory calculators: per-rank parameter counts
of a pipeline stage under the tensor-parallel layout of calc.parallel.tensor_parallel, byte assumptions
that the user can override, and the fits verdict against a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from ...errors import MlsysError, divide, require
from ...specs.gpu import GPUSpec
from ...specs.model import ModelSpec
from ...validate import non_negative
from ..counts.layers import (
    Linear,
    embedding_params,
    head_linears,
    layer_linears,
    layer_norm_params,
    norm_width,
    sink_params,
)
from .tensor_parallel import kv_divisor, rank_split, tp_kind, tp_split


def _copies(lin: Linear, ep: int) -> int:
    """Copies of a projection on one rank: E/ep routed experts, else its own count."""
    return lin.copies // ep if lin.copies > 1 else lin.copies


def linear_weight_per_rank(lin: Linear, tp: int, ep: int = 1, kv_split: int | None = None,
                           etp: int | None = None) -> int:
    """Weight-matrix elements of one projection held by one rank (experts: E/ep experts, each split over
    etp ranks; etp None: tp)."""
    if lin.tied:
        return 0
    return lin.in_features * lin.out_features * _copies(lin, ep) // tp_split(lin, rank_split(lin, tp, etp), kv_split)


def linear_params_per_rank(lin: Linear, tp: int, ep: int = 1, kv_split: int | None = None,
                           etp: int | None = None) -> int:
    """Parameters of one projection held by one rank: its weight share plus its bias (split with
    column-parallel weights, replicated with row-parallel ones)."""
    weight = linear_weight_per_rank(lin, tp, ep, kv_split, etp)
    if lin.tied or not lin.bias:
        return weight
    bias = lin.out_features * _copies(lin, ep)
    if tp_kind(lin) == "column":
        bias //= tp_split(lin, rank_split(lin, tp, etp), kv_split)
    return weight + bias


@dataclass(frozen=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds, split by how ZeRO shards them."""

    dense: int  # replicated over the data-parallel group (sharded over dp*cp by ZeRO)
    expert: int  # routed experts (sharded over the expert data-parallel group, edp = tp*cp*dp / (etp*ep))
    largest_layer: int  # unsharded (per TP rank) parameters of the biggest layer: ZeRO-3 gathers it
    matrix_factors: int  # Adafactor: rows + cols of each matrix, plus every vector's length
    root: int = 0  # per TP rank, outside the decoder layers: embeddings (first stage), final norm and head (last)

    @property
    def total(self) -> int:
        return self.dense + self.expert


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    per = divide(num_layers, pp, "num_layers over --pp")
    return range(stage * per, (stage + 1) * per)


def stage_params(spec: ModelSpec, layers: Iterable[int], first: bool, last: bool, tp: int, ep: int,
                 pp: int, vocab_parallel: bool = True, etp: int | None = None) -> StageParams:
    """Parameters per rank for the decoder layers in `layers`, plus embeddings on the first
    stage and final norm / lm_head on the last (a tied head keeps its own copy of the embedding
    on the last stage when pp > 1, as Megatron-LM does). The embedding and lm_head are split over
    the vocabulary across the TP ranks, or whole on each with vocab_parallel False. Routed experts:
    E / ep of them, each split over etp ranks (None: tp; calc.parallel.expert_grid)."""
    dense = expert = largest = factors = 0
    kv_split = kv_divisor(spec, tp)
    for layer in layers:
        norms = layer_norm_params(spec, layer) + sink_params(spec) // tp  # norms replicated; sinks split with the heads
        in_layer = norms
        for lin in layer_linears(spec, layer):
            n = linear_params_per_rank(lin, tp, ep, kv_split, etp)
            in_layer += n
            if lin.copies > 1:
                expert += n
                factors += _factors(lin, rank_split(lin, tp, etp), ep, kv_split)
            else:
                dense += n
                factors += _factors(lin, tp, 1, kv_split)
        dense += norms
        factors += norms
        largest = max(largest, in_layer)
    tokens, positions = embedding_params(spec)
    vocab_rows = -(-spec.vocab_size // (tp if vocab_parallel else 1))  # vocabulary-parallel split (padding ignored)
    in_layers = dense
    if first:
        dense += vocab_rows * spec.embed_dim + positions
        # a learned position table is a matrix as well: Adafactor keeps its rows + cols
        factors += vocab_rows + spec.embed_dim + (spec.learned_positions + spec.hidden_size if positions else 0)
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
        factors += spec.hidden_size * norm_width(spec)  # its weight (and bias) vectors, whole
    root = dense - in_layers  # outside the decoder layers: FSDP's root unit when each layer is wrapped
    return StageParams(dense=dense, expert=expert, largest_layer=largest, matrix_factors=factors, root=root)


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
            parsed.append((key.strip(), non_negative(float(value), f"--bytes {key.strip()}")))
        except ValueError as exc:
            if isinstance(exc, MlsysError):
                raise
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
    from ...units import parse_bytes

    text = str(text).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise MlsysError(f"--reserve: {text!r} is not a percentage") from None
        require(0 <= pct < 100, f"--reserve: percentage must be in [0, 100), got {text}")
        return int(capacity * pct / 100)
    return 0 if text in ("0", "0B") else parse_bytes(text, "--reserve")


def verdict(gpu: GPUSpec, needed: int, reserve: str) -> Verdict:
    cap = int(gpu.memory_bytes)
    res = reserve_bytes(cap, reserve)
    require(res < cap, f"--reserve {reserve}: {res:,} bytes leave nothing of {gpu.name}'s {cap:,} bytes")
    usable = cap - res
    return Verdict(gpu.name, cap, res, usable, int(needed), needed <= usable, usable - int(needed))
