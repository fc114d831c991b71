"""How tensor parallelism splits each projection, and which tp a model allows.

Megatron-LM's layout (Shoeybi et al. 2019, section 3): q/k/v, gate/up and MLA's up-projections
are column-parallel (weight and bias split), o_proj and down_proj are row-parallel (weight
split, bias replicated); norms, the router and MLA's low-rank down-projections (q_a_proj,
kv_a_proj_with_mqa) are replicated; the embedding table and lm_head are split along the
vocabulary. k/v projections split only as far as the KV heads allow: with tp > KV heads each
rank keeps one whole KV head's projection (Megatron-LM, vLLM). Shared by the memory and
roofline calculators.
"""

from __future__ import annotations

from functools import lru_cache

from ...errors import divide, require
from ...specs.model import ModelSpec
from ..counts.layers import Linear, layer_linears

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


@lru_cache(maxsize=256)  # pure in the frozen spec; a layout search checks the same few tp for every layout
def check_tp(spec: ModelSpec, tp: int, experts: int | None = None) -> None:
    """Heads (`check_heads`) and every split width (MLP and expert intermediates) divide by tp,
    as Megatron-LM's and vLLM's parallel linears require; the routed experts' widths by `experts`
    instead when given (their own expert tensor-parallel size, calc.parallel.expert_grid)."""
    check_heads(spec, tp)
    seen = set()
    for layer in range(spec.num_layers):
        for lin in layer_linears(spec, layer):
            kind = tp_kind(lin)
            width = lin.out_features if kind == "column" else lin.in_features
            if kind == "replicated" or lin.name.rsplit(".", 1)[-1] in _KV_PROJ or (lin.name, width) in seen:
                continue
            seen.add((lin.name, width))
            if lin.copies > 1 and experts is not None:
                divide(width, experts, f"{spec.name}: {lin.name} width over --etp")
            else:
                divide(width, tp, f"{spec.name}: {lin.name} width over --tp")


def rank_split(lin: Linear, tp: int, etp: int | None = None) -> int:
    """The tensor-parallel size a projection is split over: etp for a routed expert's (its own expert
    tensor-parallel group, calc.parallel.expert_grid; None: tp), tp for every other."""
    return etp if lin.copies > 1 and etp is not None else tp


def kv_divisor(spec: ModelSpec, tp: int) -> int:
    """By how much TP shrinks the per-token K/V width (kv_heads / kv_heads_per_rank)."""
    if spec.mla is not None:
        return 1
    return spec.num_kv_heads // check_heads(spec, tp)
