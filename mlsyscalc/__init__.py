"""mlsyscalc: performance modeling and benchmarking for ML systems.

    >>> from mlsyscalc import load_model, count_params, count_flops
    >>> count_params(load_model("llama2-7b")).total
    6738415616
"""

from .calc.counts.flops import FlopCount, FlopOptions, count_flops
from .calc.counts.params import ParamCount, count_params
from .errors import MlsysError
from .specs.gpu import GPUSpec, load_gpu
from .specs.lookup import load_model
from .specs.model import ModelSpec

__all__ = [
    "FlopCount", "FlopOptions", "GPUSpec", "MlsysError", "ModelSpec", "ParamCount",
    "count_flops", "count_params", "load_gpu", "load_model",
]
