"""`mlsys gpus`: the built-in accelerators with their datasheet figures."""

from __future__ import annotations

import click

from ..specs.gpu import DEFAULT_GPU, builtin_gpus
from . import render

DTYPES = ("fp32", "tf32", "bf16", "fp8", "int8", "fp4")


@click.command()
@render.output_options
def gpus(fmt, as_json):
    """List the built-in GPUs: dense peak TFLOP/s per dtype, memory, bandwidth, L2, SMs, links.

    fp4 is the 4-bit tensor rate (NVFP4, MXFP4); --json also gives fp6 and, per figure, its citation.
    """
    rows, data = [], []
    for spec in builtin_gpus().values():
        peaks = {k: v for k, v in spec.peak_flops_by_dtype.items()}
        data.append({
            "name": spec.name, "aliases": list(spec.aliases), "vendor": spec.vendor,
            "architecture": spec.architecture, "peak_flops": peaks, "memory_bytes": spec.memory_bytes,
            "memory_bandwidth_Bps": spec.memory_bandwidth_Bps, "l2_bytes": spec.l2_bytes,
            "sm_count": spec.sm_count, "nvlink_Bps": spec.nvlink_Bps, "pcie_Bps": spec.pcie_Bps,
            "tdp_w": spec.tdp_w, "source": list(spec.source), "notes": spec.notes,
            "citations": dict(spec.extra.get("citations", {})),
        })
        rows.append([spec.name, *(None if (peak := peaks.get(d)) is None else peak / 1e12 for d in DTYPES),
                     spec.memory_bytes / 1e9, spec.memory_bandwidth_Bps / 1e9,
                     None if spec.l2_bytes is None else spec.l2_bytes / 1e6, spec.sm_count,
                     None if spec.nvlink_Bps is None else spec.nvlink_Bps / 1e9])
    columns = ["name", *(f"{d} {'TOP/s' if d == 'int8' else 'TFLOP/s'}" for d in DTYPES), "memory GB", "HBM GB/s", "L2 MB", "SMs", "NVLink GB/s"]
    notes = ("Dense (non-sparse) vendor peaks; int8 in TOP/s; empty: none recorded (no such tensor rate, or not recorded: the notes say which). GB = 1e9 bytes. "
             "Sources and per-figure citations in --json.",
             f"Default GPU of every command's --gpu (when no --cluster names one): {DEFAULT_GPU}.")
    render.emit(render.Output({"gpus": data}, (render.table("built-in GPUs", columns, rows),), notes), fmt, as_json)
