"""Steady-state (sustained) clocks: the SM clock a long run settles at under the card's power cap, and what it
leaves of each kernel's rate.

A roofline efficiency read from do_bench (short calls with an L2 flush between them) is a burst figure. A training
step runs heavy kernels back to back, and on a 700 W Hopper card the power cap then binds within a fraction of a
second. `mlsys bench ceilings --sustained` (bench.cases.sustained) ran each ceiling's workload back to back on one
H200 (torch 2.11.0+cu130, driver 580.159.04, code of fb21aea, 20 s each; reports/matmul/runs/h200-sustained/):

    workload                         burst -> steady        SM clock at steady   power    throttle
    bf16 GEMM 8192^3                 672 -> 656 TFLOP/s     1,425 of 1,980 MHz   693 W    sw_power_cap
    bf16 GEMM 4096^3                 710 -> 651 TFLOP/s     1,470 MHz            693 W    sw_power_cap
    fp8 GEMM 8192^3                 1310 -> 1188 TFLOP/s    1,305 MHz            694 W    sw_power_cap
    SDPA fwd B4 H32 S4096 d128       519 -> 501 TFLOP/s     1,620 MHz            692 W    sw_power_cap
    2 GiB copy                      4.27 -> 4.28 TB/s       1,980 MHz            675 W    none

Each workload alone holds the cap at its own clock c_k (the copy would reach it at 1,980 x 700 / 675 = 2,053 MHz,
above the card's top clock). A step mixes them, and the controller holds one clock over the mix: taking each kind's
power as proportional to the clock (P_k(c) = P_cap c / c_k), the step's average power reaches the cap at

    1 / c = sum_k share_k / c_k        (share_k: the kind's share of the step's kernel time at burst rates)

capped at the top clock. At that clock a GEMM reaches its steady rate scaled by c / c_k, at most its burst
efficiency; attention likewise (its steady / burst ratio 0.966 at 1,620 MHz); memory-bound kernels keep theirs
(the copy does not throttle). The GEMMs' steady rate is kept as a share of the datasheet (bf16 656 / 989.5 =
0.658 at the two shapes' mean clock 1,447 MHz; fp8 1,188 / 1,979 = 0.600 at 1,305 MHz), since a power cap bounds
FLOP/s whatever the shape's burst rate.

Held out (not used to build this): one H200 training step of llama3-8b (8 of its layers, B1 S8192, plain torch,
eager; scripts/train_ops_measure.py --steady 20, reports/train/runs/h200-step-ops/) ran 84 steps at 238.0 ms with the
SM clock at 1,590 MHz median and the power-cap reason set from its first second (its first five steps 235.0 ms):
the mix of the roofline's rows of that step (63% GEMMs, 12% attention, 24% memory-bound) gives 1,584 MHz.

Which cards: the measurement is an H200's; the H100 SXM has the same GH100 die, SM count, clocks and 700 W limit
and takes the same figures (not measured on an H100). No other card has a measurement, so no other card is
derated; a calibration file with a `sustained` record (`mlsys bench ceilings --sustained --out FILE`) gives any
card its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import require
from ...validate import fraction

CLOCKS = ("sustained", "burst")  # a long run's steady clocks, or do_bench's short bursts
MIX_KINDS = ("matmul", "matmul_fp8", "attention", "memory")  # the step's kernel time, by what draws its power


@dataclass(frozen=True)
class SteadyState:
    """A card's steady-state ceilings (module docstring)."""

    matmul: float  # steady bf16/fp16 GEMM rate as a share of the datasheet dense peak, at matmul_MHz
    matmul_fp8: float | None  # steady fp8 GEMM rate as a share of the fp8 datasheet peak, at matmul_fp8_MHz
    attention: float  # steady / burst rate of the flash attention kernel, at attention_MHz
    memory: float  # steady copy rate as a share of the datasheet bandwidth (it holds the top clock)
    matmul_MHz: float  # the SM clock each kind alone settles at under the cap
    matmul_fp8_MHz: float | None
    attention_MHz: float
    memory_MHz: float  # the clock at which the copy would reach the cap: top clock x cap / its power there
    max_MHz: float  # the card's top SM clock
    source: str

    def __post_init__(self) -> None:
        for name in ("matmul", "attention", "memory") + (("matmul_fp8",) if self.matmul_fp8 is not None else ()):
            fraction(getattr(self, name), f"steady {name}")
        for name in ("matmul_MHz", "attention_MHz", "memory_MHz", "max_MHz"):
            require(0 < getattr(self, name) < 1e5, f"steady {name} must be a clock in MHz, got {getattr(self, name)}")

    def kind_MHz(self, kind: str) -> float:
        """The clock `kind` alone settles at (fp8 GEMMs without a measurement: bf16's)."""
        if kind == "matmul_fp8":
            return self.matmul_fp8_MHz or self.matmul_MHz
        return float(getattr(self, f"{kind}_MHz"))

    def clock_MHz(self, mix: Mapping[str, float] | None) -> float:
        """The step's clock: 1 / sum(share / c_k) over the mix's kinds, at most the top clock (module docstring);
        no mix: the bf16 GEMMs' own (a lone GEMM)."""
        total = sum(mix.values()) if mix else 0.0
        if not mix or total <= 0:
            return self.matmul_MHz
        inverse = sum(share / total / self.kind_MHz(kind) for kind, share in mix.items() if share > 0)
        return min(self.max_MHz, 1.0 / inverse)


MEASURED_H200 = "reports/matmul/runs/h200-sustained/ceilings.json (H200, torch 2.11, fb21aea)"
H200_STEADY = SteadyState(matmul=0.658, matmul_fp8=0.600, attention=0.966, memory=0.892, matmul_MHz=1447.5,
                          matmul_fp8_MHz=1305.0, attention_MHz=1620.0, memory_MHz=1980.0 * 700.0 / 675.0,
                          max_MHz=1980.0, source=MEASURED_H200)
# GPU name -> its steady state; cards without a measurement are not derated
STEADY: Mapping[str, SteadyState] = {
    "H200": H200_STEADY,
    "H100-SXM": SteadyState(**{**H200_STEADY.__dict__, "source": MEASURED_H200 + "; an H200's figures (same GH100 "
                                                                                  "die, SMs, clocks and 700 W limit)"}),
}


def steady_from_record(record: Any, datasheet_flops: Mapping[str, float | None], datasheet_Bps: float,
                       where: str) -> SteadyState | None:
    """The steady state a calibration file's `sustained` record (bench.cases.sustained.measure) gives: each GEMM
    kind's lowest steady rate over the datasheet and the mean steady clock of its workloads, attention's steady /
    burst ratio and clock, the copy's steady rate over the datasheet bandwidth and the clock at which its power
    would reach the limit. None without a record; an error where it is not the record that command writes."""
    if record is None:
        return None
    require(isinstance(record, dict) and isinstance(record.get("workloads"), list),
            f"{where}: sustained must be the object `mlsys bench ceilings --sustained` writes (with workloads)")
    card = record.get("card") if isinstance(record.get("card"), dict) else {}
    top = _number(card.get("max_sm_clock_MHz"), where, "card.max_sm_clock_MHz")
    limit = _number(card.get("power_limit_W"), where, "card.power_limit_W")
    caps: dict[str, float] = {}
    clocks: dict[str, list[float]] = {}
    for w in record["workloads"]:
        require(isinstance(w, dict), f"{where}: sustained.workloads must hold objects")
        if "error" in w or w.get("kind") not in MIX_KINDS:
            continue
        kind = w["kind"]
        rate, burst = _number(w.get("sustained_rate"), where), _number(w.get("burst_rate"), where)
        steady = w.get("card_steady") if isinstance(w.get("card_steady"), dict) else {}
        if kind == "attention":
            value = rate / burst
        elif kind == "memory":
            value = rate / datasheet_Bps
        else:
            peak = datasheet_flops.get("fp8" if kind == "matmul_fp8" else "bf16")
            require(bool(peak), f"{where}: sustained {kind} needs a datasheet peak for this GPU")
            value = rate / float(peak or 1.0)
        caps[kind] = min(caps.get(kind, 1.0), value)
        mhz = _number(steady.get("sm_clock_MHz"), where, f"{w.get('name')}.card_steady.sm_clock_MHz")
        power = _number(steady.get("power_W"), where, f"{w.get('name')}.card_steady.power_W")
        clocks.setdefault(kind, []).append(mhz * limit / power if kind == "memory" else mhz)
    require("matmul" in caps, f"{where}: sustained has no bf16 GEMM workload that finished")
    mean = {k: sum(v) / len(v) for k, v in clocks.items()}
    return SteadyState(matmul=min(caps["matmul"], 1.0), matmul_fp8=min(caps["matmul_fp8"], 1.0) if "matmul_fp8" in caps
                       else None, attention=min(caps.get("attention", 1.0), 1.0),
                       memory=min(caps.get("memory", 1.0), 1.0), matmul_MHz=mean["matmul"],
                       matmul_fp8_MHz=mean.get("matmul_fp8"), attention_MHz=mean.get("attention", top),
                       memory_MHz=mean.get("memory", top), max_MHz=top, source=where)


def _number(value: Any, where: str, what: str = "rates") -> float:
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf"),
            f"{where}: sustained {what} must be positive numbers, got {value!r}")
    return float(value)
