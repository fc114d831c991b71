"""Money: what GPU time costs, and which card answers a question for the least."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "gpu_hours": ("TrainingCost", "ServingCost", "run_cost"),
    "compare": ("CompareOptions", "compare"),
})
