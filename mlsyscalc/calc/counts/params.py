"""Parameter counts, exact to the parameter (checked against transformers on the meta device).

Tied input/output embeddings are counted once; buffers (rotary tables, DeepSeek's routing
bias correction) are not parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from ...specs.model import ModelSpec
from .layers import embedding_params, head_linears, layer_linears, layer_norm_params, norm_width, sink_params

BREAKDOWN_KEYS = ("embeddings", "attention", "mlp", "norms", "lm_head")


@dataclass(frozen=True)
class ParamCount:
    model: str
    total: int
    active: int  # per token: routed experts a token does not use are excluded
    embedding: int  # token (+ learned position) embedding tables
    lm_head: int  # 0 when tied to the token embedding
    breakdown: Mapping[str, int]  # embeddings, attention, mlp, norms, lm_head: sums to total
    per_layer: tuple[int, ...]  # parameters of each decoder layer

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding


@lru_cache(maxsize=32)  # pure in the frozen spec; the layout calculators ask for it per layout
def count_params(spec: ModelSpec) -> ParamCount:
    """Count every parameter of `spec`, split into the breakdown groups."""
    tokens, positions = embedding_params(spec)
    parts = dict.fromkeys(BREAKDOWN_KEYS, 0)
    parts["embeddings"] = tokens + positions
    inactive = 0
    per_layer = []
    sinks = sink_params(spec)
    for layer in range(spec.num_layers):
        linears = layer_linears(spec, layer)
        for lin in linears:
            parts[lin.group] += lin.params
            inactive += lin.params - lin.active_params
        norms = layer_norm_params(spec, layer)
        parts["norms"] += norms
        parts["attention"] += sinks
        per_layer.append(sum(lin.params for lin in linears) + norms + sinks)
    if spec.final_norm:
        parts["norms"] += spec.hidden_size * norm_width(spec)
    head = 0
    for lin in head_linears(spec):
        key = "lm_head" if lin.group == "head" else "embeddings"
        parts[key] += lin.params
        head += lin.params if lin.group == "head" else 0
    total = sum(parts.values())
    return ParamCount(
        model=spec.name, total=total, active=total - inactive, embedding=tokens + positions,
        lm_head=head, breakdown=parts, per_layer=tuple(per_layer),
    )
