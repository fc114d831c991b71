"""Bytes per GPU: inference (weights, KV cache), training (states, activations), the caching allocator."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "inference": ("InferOptions", "InferMemory", "infer_memory", "solve_max"),
    "training": ("TrainOptions", "TrainMemory", "train_memory"),
    "caching_allocator": ("CachingAllocator",),
})
