"""The search over parallel layouts for the fastest training step that fits."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "search": ("plan",),
    "space": ("PlanOptions",),
    "result": ("Plan",),
})
