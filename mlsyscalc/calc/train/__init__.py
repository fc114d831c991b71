"""One optimizer step of a whole parallel layout: step time, MFU, memory per GPU, whether it fits."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "step": ("TrainStep", "train_step", "step_breakdown", "resolve_cluster"),
    "options": ("TrainStepOptions",),
    "probe": ("solve_probe",),
})
