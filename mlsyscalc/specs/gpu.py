"""GPUSpec: datasheet figures of an accelerator, read from model_specs/gpus/*.json.

Figures are the vendor's dense (non-sparse) peaks; each file names its sources (`source`, and per
figure `citations`: datasheet, URL, table). A calibration file measured by `mlsys bench ceilings`
can replace the peaks with achievable ones. fp6 and fp4 are the tensor rates of 6- and 4-bit
elements; the block-scaled formats that compute at them (NVFP4, MXFP4, MXFP6) are in
`mlsyscalc.block_formats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from ..errors import MlsysError, require
from ..dtypes import compute_rate, dtype_name
from .lookup import all_names, find_named, load_spec_dir, suggest

COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4")  # the keys of peak_dense_tflops


def normalise_dtype(dtype: str) -> str:
    """A compute dtype's canonical name (aliases as in mlsyscalc.dtypes; a block-scaled format computes at its
    elements' rate: nvfp4 and mxfp4 at fp4's, mxfp6 at fp6's, mxfp8 at fp8's); storage-only ones are errors."""
    text = str(dtype).lower()
    if text in COMPUTE_DTYPES:
        return text
    try:
        key: str | None = compute_rate(dtype_name(dtype))
    except MlsysError:
        key = None
    if key not in COMPUTE_DTYPES:
        raise MlsysError(f"unknown compute dtype {dtype!r} (use one of: {', '.join(COMPUTE_DTYPES)})")
    return key


def peak_from(table: Mapping[str, float | None], dtype: str, missing: str) -> float:
    """The FLOP/s a peak table gives a compute dtype; `missing` (with a {key} field) when it has none."""
    key = normalise_dtype(dtype)
    value = table.get(key)
    if not value:
        raise MlsysError(missing.format(key=key))
    return float(value)


@dataclass(frozen=True)
class GPUSpec:
    name: str
    vendor: str
    architecture: str
    peak_flops_by_dtype: Mapping[str, float | None]  # FLOP/s (int8: OP/s), dense
    memory_bytes: int
    memory_bandwidth_Bps: float
    l2_bytes: int | None
    sm_count: int | None
    boost_clock_hz: float | None
    nvlink_Bps: float | None  # total per GPU, both directions
    pcie_Bps: float | None
    tdp_w: float | None
    source: tuple[str, ...] = ()
    notes: str = ""
    aliases: tuple[str, ...] = ()
    calibrated: bool = False  # True when peaks/bandwidth come from a measurement
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for a compute dtype; an error if the vendor publishes none."""
        return peak_from(self.peak_flops_by_dtype, dtype, self.name + ": no {key} peak is published for this GPU")

    def ridge_point(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) where compute and bandwidth roofs meet."""
        return self.peak_flops(dtype) / self.memory_bandwidth_Bps


def _opt_scale(value: Any, scale: float) -> float | None:
    return None if value is None else float(value) * scale


def _capacity_bytes(data: Mapping[str, Any]) -> int:
    """The capacity the driver reports when the spec records it, else the datasheet's GB.

    An "80 GB" H100 reports 81,559 MiB (85.5e9 bytes): the marketing figure is neither exact
    GB nor GiB, and fit verdicts near the edge depend on the difference.
    """
    if data.get("memory_MiB_reported"):
        return int(data["memory_MiB_reported"]) * 2**20
    return int(float(data["memory_GB"]) * 1e9)


def gpu_from_dict(data: Mapping[str, Any], where: str) -> GPUSpec:
    try:
        return GPUSpec(
            name=data["name"], vendor=data.get("vendor", ""), architecture=data.get("architecture", ""),
            peak_flops_by_dtype={k: _opt_scale(v, 1e12) for k, v in data["peak_dense_tflops"].items()},
            memory_bytes=_capacity_bytes(data),
            memory_bandwidth_Bps=float(data["memory_bandwidth_GBps"]) * 1e9,
            l2_bytes=None if data.get("l2_MB") is None else int(float(data["l2_MB"]) * 1e6),
            sm_count=data.get("sm_count"), boost_clock_hz=_opt_scale(data.get("boost_clock_MHz"), 1e6),
            nvlink_Bps=_opt_scale(data.get("nvlink_GBps"), 1e9), pcie_Bps=_opt_scale(data.get("pcie_GBps"), 1e9),
            tdp_w=data.get("tdp_W"), source=tuple(data.get("source") or ()), notes=data.get("notes", ""),
            aliases=tuple(data.get("aliases", ())), extra={"citations": dict(data.get("citations") or {})},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MlsysError(f"{where}: malformed GPU spec ({exc.__class__.__name__}: {exc})") from None


@lru_cache(maxsize=None)
def builtin_gpus() -> dict[str, GPUSpec]:
    return load_spec_dir("gpus", gpu_from_dict, "GPU spec")


DEFAULT_GPU = "H100-SXM"  # the GPU of every command that takes --gpu when neither --gpu nor --cluster is given


class AmbiguousGPU(MlsysError):
    """A name that is the start of several built-in GPUs' names (kept for callers that catch it; family names
    now resolve by `family_pick`)."""


class NameResolved(UserWarning):
    """A GPU family name resolved to one GPU ('A100 -> A100-80GB-SXM'); the CLI prints it once on stderr."""


def family(name: str) -> list[GPUSpec]:
    """The built-in GPUs of which `name` is a family name: a name or alias starts with `name-` (A100: A100-40GB-SXM
    and A100-80GB-SXM), in name order."""
    wanted = str(name).strip().lower() + "-"
    return sorted((s for s in builtin_gpus().values() if any(n.lower().startswith(wanted) for n in (s.name, *s.aliases))),
                  key=lambda s: s.name)


def family_pick(members: list[GPUSpec]) -> GPUSpec:
    """The one rule for a family name: its SXM variant (the NVLink board of a data-centre GPU), and among those
    the largest memory; then the first by name."""
    return max(members, key=lambda s: ("sxm" in " ".join((s.name, *s.aliases)).lower(), s.memory_bytes,
                                       -members.index(s)))


def load_gpu(name: str) -> GPUSpec:
    """A built-in GPU by name or alias (exact, case-insensitive), else by family name (`family_pick`: A100 ->
    A100-80GB-SXM, said once on stderr by the CLI through a NameResolved warning)."""
    require(bool(str(name).strip()), "empty GPU name; `mlsys gpus` lists them")
    spec = find_named(builtin_gpus(), name)
    if spec is not None:
        return spec
    members = family(name)
    if members:
        spec = family_pick(members)
        import warnings

        warnings.warn(NameResolved(f"{str(name).strip()} -> {spec.name}"), stacklevel=2)
        return spec
    suggestion = suggest(str(name), all_names(builtin_gpus()))
    raise MlsysError(f"unknown GPU {name!r}{suggestion}; `mlsys gpus` lists them")
