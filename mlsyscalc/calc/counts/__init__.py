"""Sizes of a model: parameters, FLOPs, attention FLOPs and bytes, activations saved for backward."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "params": ("ParamCount", "count_params"),
    "flops": ("FlopOptions", "FlopCount", "count_flops"),
    "attention": ("AttentionShape", "attention_flops", "attention_bytes"),
    "activations": ("Saved", "layer_saved", "layer_bytes"),
    "layers": ("Linear", "layer_linears", "head_linears"),
})
