"""Communication: one collective's time, a layout's traffic per step, the part of it left exposed."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "collectives": ("CollectiveCost", "collective_cost"),
    "step": ("StepOptions", "StepComm", "step_comm"),
    "exposed": ("Windows", "traffic", "dim_times", "contention_s"),
    "tp_rows": ("tp_comm_rows", "dp_comm_rows"),
})
