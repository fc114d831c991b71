"""Summaries of `mlsys bench model` rows: the ceilings a run predicts with, the per-case and
per-op tables (plain lists; the CLI renders them), and the markdown report of reports/models/."""

from __future__ import annotations

from ..errors import MlsysError

CASE_COLUMNS = ["model", "phase", "shape", "mode", "kernels", "dtype", "measured_ms", "predicted_ms", "error",
                "peak_GiB", "predicted_peak_GiB", "memory_error", "full_estimated_ms", "status"]
OP_COLUMNS = ["model", "phase", "shape", "op", "count", "measured_ms", "predicted_ms", "error"]


def ceilings_for(gpu: str | None, calibration: str | None, cpu: bool):
    """(device, Ceilings): the card torch sees (or --gpu), datasheet or calibrated."""
    import torch

    from ..calc.roofline.calibration import DEFAULT_GPU, load_ceilings, match_gpu

    if not cpu and not torch.cuda.is_available():
        raise MlsysError("no CUDA GPU: mlsys bench model measures on a GPU (--cpu runs a smoke test)")
    device = "cpu" if cpu else "cuda"
    name = gpu or (DEFAULT_GPU if cpu else match_gpu(torch.cuda.get_device_name(0)).name)
    return device, load_ceilings(name, calibration)


def _ms(seconds):
    return None if seconds is None else seconds * 1e3


def case_table(rows) -> list[list]:
    out = []
    for r in rows:
        x = r.extra
        peak, want = x.get("peak_bytes"), x.get("predicted_peak_bytes")
        out.append([x.get("model", r.variant), x.get("phase"), r.shape, r.baseline, x.get("kernels"), r.dtype,
                    r.median_ms, r.predicted_ms, r.prediction_error, peak / 2**30 if peak else None,
                    want / 2**30 if want else None, x.get("memory_error"), _ms(x.get("full_estimated_s")),
                    r.error or "ok"])
    return out


def op_table(rows) -> list[list]:
    """Per kind (matmul/attention/memory, all passes) and per forward linear, measured beside predicted."""
    out = []
    for r in rows:
        ops = r.extra.get("ops") or {}
        for section in ("kinds", "linears"):
            for name, e in sorted((ops.get(section) or {}).items()):
                label = f"[{name}]" if section == "kinds" else name
                count = e.get("measured_kernels") if section == "kinds" else e.get("count")
                out.append([r.extra.get("model"), r.extra.get("phase"), r.shape, label, count,
                            _ms(e.get("measured_s")), _ms(e.get("predicted_s")), e.get("error")])
    return out


def notes(rows) -> list[str]:
    text = ["measured: median of CUDA-event times per step; predicted: mlsys roofline for the same spec, "
            "phase and shapes; error = (measured - predicted) / predicted; memory_error = (predicted - "
            "max_memory_allocated) / max_memory_allocated"]
    if any(r.extra.get("layers") != r.extra.get("full_layers") for r in rows):
        text.append("--layers: model and prediction both run the reduced depth; full_estimated_ms = measured x "
                    "predicted(full depth) / predicted(reduced depth), an estimate, not a measurement")
    if any((r.env or {}).get("backend") == "interpret" or r.env.get("gpu", "").startswith("cpu") for r in rows):
        text.append("--cpu: the model ran on the CPU; times are not GPU times (a smoke test of the path)")
    return text
