"""How a parallel layout splits a model: tensor-parallel shards, pipeline stages, the expert grid."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "tensor_parallel": ("check_tp", "tp_kind", "tp_split", "kv_divisor"),
    "pipeline_split": ("PipelineSplit", "stage_layer_ids"),
    "expert_grid": ("ExpertGrid", "check_experts"),
    "shards": ("StageParams", "stage_params", "Verdict", "verdict"),
})
