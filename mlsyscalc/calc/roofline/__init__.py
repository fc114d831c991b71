"""Roofline times: one op, a whole model step, against a GPU's ceilings (datasheet or calibrated)."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "model": ("ModelRoofline", "predict_model"),
    "options": ("RooflineOptions",),
    "ops": ("OpPrediction", "predict_matmul", "predict_attention", "predict_memory_op"),
    "calibration": ("Ceilings", "load_ceilings", "datasheet_ceilings"),
    "calibration_fit": ("fit",),
    "fused_ops": ("FusedOp", "predict_fused"),
    "sweep": ("Sweep", "sweep_batch"),
    "steady": ("SteadyState",),
})
