"""Ceilings for the roofline: what a kernel on this card can reach, per dtype and per byte.

Two sources:

- the datasheet (`GPUSpec`): dense peak FLOP/s and HBM bandwidth, times efficiency ceilings
  (the fraction that real kernels reach; defaults below, with the measurement behind each);
- a calibration file written by `mlsys bench ceilings` (format in docs/bench.md and
  docs/roofline.md): measured matmul peaks per dtype and read/write/copy bandwidth. Measured
  figures are already achievable, so their matmul and memory efficiencies default to 1.

Nothing here reads a file except `read_calibration`, which the CLI and the harness call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ...errors import MlsysError, require
from ...specs.gpu import DEFAULT_GPU, AmbiguousGPU, GPUSpec, builtin_gpus, load_gpu, normalise_dtype, peak_from
from ...specs.lookup import read_json
from ...validate import fraction, non_negative, positive
from .host import HostCosts, host_from_record
from .steady import CLOCKS, STEADY, SteadyState, steady_from_record

# Fixed cost of one kernel: launch, prologue/epilogue and the tail of the last wave. An assumption
# (2 us is the usual back-to-back launch gap on a CUDA stream); a calibration file may measure it.
LAUNCH_OVERHEAD_S = 2e-6
# The stream's idle time between one kernel's end and the next one's start, which no kernel's own
# duration counts: a step pays it once a kernel (calc.roofline.ops' OpRow.total_s), a profiler's kernel
# time does not. One decode replay under torch.profiler (`experiments/graph_gaps.py`) of each model of the
# H100 fit set (gpt2, llama2-7b, pythia-1.4b, qwen2.5-7b, TinyLlama) at B1, B8 and B32, H100 80GB HBM3,
# torch 2.11, CUDA graphs: 0.43-0.68 us a kernel (median of the 15 replays 0.485, pooled 0.52; most
# boundaries 0.42-0.45 us, 0.96 us before a split-K reduction, hence qwen2.5-7b's 0.66-0.68);
# experiments/graph_gaps_fitset_h100/. The held-out models traced on an H100 and an H200 (graph_gaps_h100/,
# graph_gaps_h200/) give 0.43-0.54: the same on both cards.
KERNEL_GAP_S = 0.5e-6
# The shortest time a cuBLAS GEMM/GEMV kernel runs beyond that fixed cost, however few bytes it moves:
# gpt2's 768x768 projections (1.2 MB, 0.45 us at matmul_skinny) run 4.08-4.19 us per kernel in the
# H100 decode profiles at B1-B16 (torch 2.11, CUDA graphs: reports/models/h100_fitset.jsonl,
# h100_decode_gemms.jsonl), 4.15 - 2.0 = 2.15 us. A floor, not an addition: the large decode GEMMs
# (from which matmul_skinny was derived with the 2 us fixed cost) stream for longer than it.
MATMUL_FLOOR_S = 2.15e-6
# A memory-bound (elementwise, norm, reduction, copy) kernel's fixed cost may differ from a GEMM's:
# `mlsys calibrate` fits it apart (`memory_launch_overhead_s` in the calibration file). Unset (the
# datasheet, or a file without the key), such a kernel pays launch_s like every other.
# The grouped GEMM streams at most this many bytes a second per SM, whatever the HBM: mixtral-8x7b (4
# layers) decode B16 and B64 under CUDA graphs, all 8 experts active (939.5 MB a projection), torch 2.11:
# on an H200 327.5-355.4 us a kernel, median 343.4, 2 us fixed cost out: 2.75 TB/s = 20.85 GB/s per SM
# (0.57 of 4.8 TB/s; reports/models/h200_moe.jsonl); on an H100 (same 132 SMs) 350.2-368.2 us, 2.65-2.71
# TB/s (0.79-0.81 of 3.35 TB/s, where matmul_skinny's 0.78 binds first; reports/models/h100_moe.jsonl).
# A fraction of the datasheet chosen on the H200 rows (0.57) priced the H100's 20% long: the kernel's
# rate does not follow the HBM. The cap's form comes from both cards; deepseek-v3's rows are held out.
GROUPED_STREAM_SM_BPS = 20.85e9
# PyTorch's memory-bound kernels (elementwise, norms, reductions, copies: the "memory" class) stream at most
# this many bytes a second per SM, whatever the HBM. H200, torch 2.11, the profiled memory-bound kernels of the
# H200 fit-set rows (reports/models/h200.jsonl and the files after it: deepseek-v3, gpt2, llama2-7b,
# mixtral-8x7b, pythia-1.4b, qwen2.5-7b, TinyLlama; prefill and train steps with >= 5 ms of them), the other
# classes' predicted time and the 2 us fixed cost a kernel taken out: 14.9-33.8 GB/s per SM over 16 rows,
# median 23.75 (3.14 TB/s on 132 SMs, 0.65 of 4.8 TB/s; the training steps 23.2-25.0). A large copy reaches
# 0.89 of the H200's datasheet (`Efficiency.memory`); the model's kernels do not: the H200 ran them only
# 1.15-1.25x faster than the H100 (3.35 TB/s), where 0.89 of the datasheet (22.6 GB/s per SM) binds first.
# Copies and casts inside the steps are capped too: exempting kernels that count no FLOPs left the H200's
# training steps 5% slower than predicted on average, against 1% with them capped. A standalone 4 GiB copy
# (`mlsys bench ceilings`) does stream faster, 4.26 TB/s (32 GB/s per SM): the cap prices PyTorch's kernels
# in a model's step, not the best copy. The per-SM form (bytes in flight per SM over the memory latency) is
# an assumption read on two cards of one architecture with 132 SMs each, so it applies to Hopper only.
MEMORY_STREAM_SM_BPS = 23.75e9  # memory-bound kernels (kind "memory", class "memory") on Hopper
MEMORY_STREAM_ARCHITECTURES = ("Hopper",)
STREAM_CAP_SM_BPS = {"matmul_grouped_stream": GROUPED_STREAM_SM_BPS}  # class -> bytes/s per SM at most


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the ceiling that a good kernel reaches (multiplied onto the base ceilings)."""

    matmul: float = 0.74  # H200 cuBLAS bf16 4096^3: 732 / 989.5 TFLOP/s datasheet (ARCHITECTURE.md, "Reference measurements")
    attention: float = 0.61  # H200 SDPA cuDNN bf16 fwd, d=128, S=4096: 603 / 989.5 (ARCHITECTURE.md, "Reference measurements")
    memory: float = 0.89  # H200 copy 4.26 / 4.8 TB/s datasheet (ARCHITECTURE.md, "Reference measurements")
    # GEMMs stream their operands at this fraction of the base bandwidth (not of `memory`, which is
    # that of the elementwise kernels): it sets the time of the memory-bound (skinny, decode) GEMMs;
    # compute-bound (square) ones are unaffected. Two readings, torch 2.11 cuBLAS (nvjet): the kernels'
    # own times, H200 llama2-7b decode B1 profiler rows (reports/models/h200.jsonl): 4096x4096 10.7 us,
    # 4096x11008 24.0 us, 11008x4096 25.1 us per kernel, 2 us fixed cost out: 0.90, 0.96 and 0.91 of
    # bytes / (0.89 x 4.8 TB/s), weighted by calls per layer (4, 2, 1) 0.92 of the copy rate = 0.82 of
    # the datasheet; the steps, H100 fit-set decode replays (28 rows of gpt2, llama2-7b, pythia-1.4b,
    # qwen2.5-7b, TinyLlama, B1-B128) with KERNEL_GAP_S priced: 0.78 gives the smallest median |error|
    # (1.2%; 0.76 and 0.80 give 1.8% and 1.5%). Kept 0.78, the steps' reading: a step timed alone (synchronised
    # after each replay, as a serving loop that samples every token runs it) also waits for the graph's launch,
    # 0-1.5% of the step at B1 and 1.5-11% at B8-B32 (experiments/replay_timing_h100/: gpt2, qwen2.5-0.5b,
    # llama2-7b on an H100; replays queued back to back or behind a spin kernel match kernels plus gaps),
    # which the lower stream efficiency absorbs on average: priced per step it is not (it varies with the batch).
    matmul_skinny: float = 0.78
    # Classes of kernels that reach less than their kind's ceiling (docs/roofline.md, "Efficiency
    # classes"), each a fraction of the datasheet roof like the four above; H100 80GB HBM3, torch
    # 2.11, profiler times of `mlsys bench model` rows (reports/models/h100*.jsonl), chosen on those rows.
    # Broadcasting and strided elementwise kernels (rotary's x * cos with an (S, 1, D) table, roll,
    # addcmul; the partial-rotary slice copy and cat): TensorIterator runs them unvectorised.
    # llama2-7b prefill B8 S2048, per call on a 134 MB tensor: roll 352 us (0.23 of 3.35 TB/s),
    # x * cos 238 us (0.34), addcmul 274 us (0.44); weighted by the bytes of one rotated tensor's
    # three kernels (2 : 2 : 3): 0.32.
    memory_broadcast: float = 0.32
    # GEMMs with N or K not a multiple of 16 bytes (8 bf16 elements): cuBLAS falls back to its
    # unaligned sm75 CUTLASS kernels (cutlass_75_tensorop_bf16_s1688gemm_..._align1). gpt2 train
    # B8 S1024, the 50257-wide lm_head forward, dgrad and wgrad: 1.90 TFLOP in 15.4 ms, 123
    # TFLOP/s = 0.12 of 989.5.
    matmul_unaligned: float = 0.12
    # The same unaligned GEMMs stream their bytes slowly too once cuBLAS runs them on those CUTLASS
    # kernels (8 or more rows; one row takes its GEMV, 2-7 its small-N gemmSN kernel): gpt2 decode's
    # lm_head (77.2 MB of weights) per kernel at B8/B16/B32/B64: 105.8, 95.6, 104.1, 151.7 us,
    # 0.218 / 0.241 / 0.221 / 0.152 of 3.35 TB/s (reports/models/h100_fitset.jsonl,
    # h100_decode_gemms.jsonl); the median, 0.22.
    matmul_unaligned_stream: float = 0.22
    # MoE experts' GEMMs when they stream (decode, few tokens an expert), one grouped GEMM a projection
    # (torch._grouped_mm's CUTLASS grouped kernel): the fraction of the base bandwidth, as matmul_skinny,
    # and at most GROUPED_STREAM_SM_BPS per SM (Ceilings.memory_s), which binds on an H200.
    matmul_grouped_stream: float = 0.78
    # Attention whose head dim pads to a 64-wide tile (cuDNN's d64 kernels, `--impl torch`): the
    # d64 / d128 ratio of measured cuDNN efficiencies at S2048 (forward 0.36 vs 0.47, backward 0.35
    # vs 0.41: TinyLlama vs pythia-1.4b B4 S2048 train), 0.8, times the attention default 0.61.
    attention_small_head: float = 0.49
    # FP8 GEMMs (cuBLASLt, as torch._scaled_mm and Transformer Engine run them) reach a smaller share of the
    # fp8 datasheet than bf16 GEMMs of theirs: H200, torch 2.11, one `mlsys bench ceilings` run
    # (reports/matmul/ceilings.json): fp8 1224 / 1284 / 1284 TFLOP/s at 4096^3 / 8192^3 / 16384x8192x8192
    # against bf16 784 / 687 / 703, 1.56-1.87x (mean 1.75x) where the datasheet says 2x; the best fp8
    # reading is 0.65 of 1979, and `matmul` x 1.75 / 2 is 0.65 too.
    matmul_fp8: float = 0.65
    # FlashAttention-2-generation kernels (Ampere's mma.sync, no wgmma: flash-attn 2.x, SDPA's FLASH backend,
    # Triton kernels built without Hopper's instructions) on Hopper, `--attention flash2`: SDPA FLASH against
    # cuDNN on the same shapes of one H200 (reports/attention/rows.jsonl, torch 2.11, 43 forward and 10
    # backward pairs, d 64-256, causal and full): median 0.59 (forward 0.49-0.67, backward 0.56-0.61), times
    # the attention default 0.61 (cuDNN's). Off Hopper `flash2` prices as `attention` (attention_ceilings).
    attention_flash2: float = 0.36
    # The fused list's memory-bound kernels (`--impl fused`: the norms, rotary, gated activations and residual adds
    # that Megatron-LM / Transformer Engine and serving engines run as one kernel each): the bandwidth this
    # project's own Triton kernels of those ops reach, as a share of the datasheet, not the per-SM cap of
    # PyTorch's kernels (which a fused kernel exceeds). `mlsys bench fused --sweep train` on one H200 (torch 2.11,
    # triton 3.6, CUDA-graph replays; reports/fused/), every row of 1-65536 tokens, time = t0 + bytes / B fitted per
    # kernel: B / 4.8 TB/s = SwiGLU and GeGLU 0.85 forward and backward, rotary 0.81 / 0.81, dropout + residual add
    # forward 0.86, RMSNorm forward 0.84, LayerNorm forward 0.71, the chunked cross-entropy 0.87: the median 0.85
    # (each fit within 14% of every row but LayerNorm's, 28%; t0 5.4-6.5 us, do_bench's cold start included).
    memory_fused: float = 0.85
    # Their norms' backward (dx with the dw/db partial sums and their reduction): the kernels of de628d9 (the
    # partial sums in 32-column programs, 3 row blocks in flight, wide LayerNorm's bias as a pass of its own;
    # since 05befe7 wide LayerNorm's dw and db by columns, reading x and dy again, priced as such: 24 / 35 and
    # 28 / 35 within 15%, median |error| 10.2% / 9.7% on the rows of both),
    # `mlsys bench fused --op rmsnorm --op layernorm` on one H200 (reports/fused/rows.jsonl, 70 rows of 1-65536
    # tokens x widths 1024-16384): time = 5.73 us + 3.84 us for the partial-sum launch (fused_ops.PARTIAL_SUM_CALL_S)
    # + bytes / B, one B for both norms fitted on relative error: B / 4.8 TB/s = 0.705 (median |error| 11%, 25 / 35
    # RMSNorm and 22 / 35 LayerNorm rows within 15%; the 16384-wide rows run 20-42% slower than that, those of
    # 1-16 tokens up to 26% faster). The kernels before de628d9 gave 0.44 (RMSNorm 0.50, LayerNorm 0.37).
    memory_fused_norm_bwd: float = 0.705

    def validate(self) -> None:
        for name in EFFICIENCY_FIELDS:
            fraction(getattr(self, name), f"efficiency {name}")


# With measured ceilings the matmul and memory ceilings are the measurement itself; attention keeps
# the measured gap between SDPA cuDNN and cuBLAS on the same H200: 603 / 732 TFLOP/s (ARCHITECTURE.md, "Reference measurements").
# The classes keep their ratio to their kind's default (0.32 / 0.89, 0.12 / 0.74, 0.8 x 0.82, 0.59 x 0.82, 0.85 / 0.89,
# 0.705 / 0.89); the measured fp8 peak is the fp8 GEMMs' ceiling itself (1.0).
CALIBRATED_EFFICIENCY = Efficiency(matmul=1.0, attention=0.82, memory=1.0, matmul_skinny=0.88,
                                   memory_broadcast=0.36, matmul_unaligned=0.16, matmul_unaligned_stream=0.25,
                                   matmul_grouped_stream=0.88,
                                   attention_small_head=0.66, matmul_fp8=1.0, attention_flash2=0.48,
                                   memory_fused=0.96, memory_fused_norm_bwd=0.79)
KINDS = ("matmul", "attention", "memory")
CLASSES = ("matmul_skinny", "memory_broadcast", "matmul_unaligned", "matmul_unaligned_stream", "matmul_grouped_stream",
           "attention_small_head", "matmul_fp8", "attention_flash2", "memory_fused", "memory_fused_norm_bwd")
EFFICIENCY_FIELDS = KINDS + CLASSES  # kinds plus the shape classes that price some kernels of a kind
# classes fitted files from before them lack
LATER_CLASSES = ("matmul_fp8", "attention_flash2", "memory_fused", "memory_fused_norm_bwd")


def gemm_class(dtype: str) -> str:
    """The efficiency class of a plain GEMM computing in `dtype`: matmul_fp8 in fp8, else matmul."""
    return "matmul_fp8" if normalise_dtype(dtype) == "fp8" else "matmul"


@dataclass(frozen=True)
class Ceilings:
    """Base ceilings (datasheet or measured) and the efficiencies applied to them."""

    gpu: GPUSpec  # the datasheet figures (MFU and MBU are quoted against these)
    base_flops: Mapping[str, float | None]  # FLOP/s per compute dtype before efficiency
    read_Bps: float  # base HBM read bandwidth before efficiency
    write_Bps: float  # base HBM write bandwidth before efficiency
    sm_count: int
    efficiency: Efficiency
    launch_s: float = LAUNCH_OVERHEAD_S
    matmul_floor_s: float = MATMUL_FLOOR_S  # a plain GEMM kernel runs at least this, fixed cost apart
    memory_launch_s: float | None = None  # a memory-bound kernel's fixed cost (None: launch_s)
    gap_s: float = KERNEL_GAP_S  # the stream's idle time before each kernel (outside its duration)
    source: str = "datasheet"  # "datasheet" or the calibration file
    host: HostCosts = HostCosts()  # the host's cost of an eager one-GPU step (calc.roofline.host)
    notes: tuple[str, ...] = field(default=(), compare=False)
    steady: SteadyState | None = None  # the card's steady-state ceilings (calc.roofline.steady), None: not measured
    clocks: str = "burst"  # the efficiencies are burst figures, or have been capped to the steady state (at_clocks)

    def __post_init__(self) -> None:
        non_negative(self.launch_s, "launch overhead (s)")
        non_negative(self.matmul_floor_s, "GEMM floor (s)")
        non_negative(self.gap_s, "gap between kernels (s)")
        if self.memory_launch_s is not None:
            non_negative(self.memory_launch_s, "memory-bound kernel launch overhead (s)")
        positive(self.read_Bps, "read bandwidth (B/s)")
        positive(self.write_Bps, "write bandwidth (B/s)")
        self.efficiency.validate()

    def overhead_s(self, kind: str) -> float:
        """The fixed cost of one kernel of this kind ("matmul", "attention" or "memory")."""
        if kind == "memory" and self.memory_launch_s is not None:
            return self.memory_launch_s
        return self.launch_s

    @property
    def calibrated(self) -> bool:
        return self.source != "datasheet"

    def peak(self, dtype: str) -> float:
        """Base FLOP/s for a compute dtype (measured if calibrated, else datasheet)."""
        return peak_from(self.base_flops, dtype,
                         self.gpu.name + ": no {key} peak (datasheet or calibration) for this GPU")

    def flops_per_s(self, dtype: str, kind: str = "matmul") -> float:
        """Achievable FLOP/s of one kind of kernel: base peak x efficiency of that kind (a GEMM's, `matmul`, is
        gemm_class's for the dtype, so the JSON's matmul ceiling and ridge are the ones its GEMMs are priced at)."""
        return self.peak(dtype) * getattr(self.efficiency, gemm_class(dtype) if kind == "matmul" else kind)

    @property
    def read_ceiling_Bps(self) -> float:
        return self.read_Bps * self.efficiency.memory

    @property
    def write_ceiling_Bps(self) -> float:
        return self.write_Bps * self.efficiency.memory

    @property
    def bandwidth_Bps(self) -> float:
        """Achievable bandwidth of a copy (as many bytes read as written): harmonic mean."""
        return 2.0 / (1.0 / self.read_ceiling_Bps + 1.0 / self.write_ceiling_Bps)

    def memory_s(self, read_bytes: float, write_bytes: float, skinny: bool = False, cls: str | None = None,
                 kind: str = "") -> float:
        """Reads and writes share the HBM bus: their times add. A GEMM (skinny) streams at
        efficiency.matmul_skinny of the base bandwidths, other kernels at efficiency.memory, or
        at the efficiency named by `cls` (memory_broadcast), and no faster than the class's per-SM cap
        (STREAM_CAP_SM_BPS; a memory-bound kernel of the plain memory class on Hopper: MEMORY_STREAM_SM_BPS)."""
        return max(self.memory_parts(read_bytes, write_bytes, skinny, cls, kind))

    def stream_cap_Bps(self, cls: str, kind: str = "") -> float | None:
        """The bytes a second a kernel of this efficiency class (and kind) streams at most on this card, whatever
        the HBM: STREAM_CAP_SM_BPS, or for a memory-bound kernel of the plain memory class on Hopper
        MEMORY_STREAM_SM_BPS, times the SMs; None: no cap."""
        per_sm = STREAM_CAP_SM_BPS.get(cls)
        if cls == "memory" and kind == "memory" and self.gpu.architecture in MEMORY_STREAM_ARCHITECTURES:
            per_sm = MEMORY_STREAM_SM_BPS
        return None if per_sm is None else per_sm * self.sm_count

    @property
    def memory_cap_Bps(self) -> float | None:
        """The memory-bound kernels' streaming cap on this card (MEMORY_STREAM_SM_BPS x SMs; None off Hopper)."""
        return self.stream_cap_Bps("memory", "memory")

    def memory_parts(self, read_bytes: float, write_bytes: float, skinny: bool = False,
                     cls: str | None = None, kind: str = "") -> tuple[float, float]:
        """(the bytes at the class's efficiency of the bandwidth, the bytes at the class's per-SM cap, 0 without
        one): memory_s is the larger; only the first scales with the efficiency."""
        cls = cls or ("matmul_skinny" if skinny else "memory")
        seconds = (read_bytes / self.read_Bps + write_bytes / self.write_Bps) / getattr(self.efficiency, cls)
        cap = self.stream_cap_Bps(cls, kind)
        return seconds, 0.0 if cap is None else (read_bytes + write_bytes) / cap

    def ridge(self, dtype: str, kind: str = "matmul") -> float:
        """FLOP/byte where this kind's achievable compute roof meets the achievable bandwidth."""
        return self.flops_per_s(dtype, kind) / self.bandwidth_Bps

    def datasheet_flops(self, dtype: str) -> float:
        return self.gpu.peak_flops(dtype)

    @property
    def datasheet_Bps(self) -> float:
        return self.gpu.memory_bandwidth_Bps

    def with_efficiency(self, **changes: float) -> "Ceilings":
        unknown = set(changes) - set(EFFICIENCY_FIELDS)
        require(not unknown, f"unknown efficiency {', '.join(sorted(unknown))} (use: {', '.join(EFFICIENCY_FIELDS)})")
        eff = replace(self.efficiency, **changes)
        eff.validate()
        return replace(self, efficiency=eff)

    def at_clocks(self, clocks: str, mix: Mapping[str, float] | None = None) -> "Ceilings":
        """These ceilings at `clocks` (calc.roofline.steady): "burst" as they are; "sustained" at the clock the step's kernel
        `mix` (seconds per calc.roofline.steady.MIX_KINDS kind at burst rates; None: a lone GEMM) holds under the power cap:
        each GEMM kind's efficiency capped at its steady share of the datasheet times that clock over its own steady
        clock (the unaligned class keeps its ratio to matmul), attention's times its steady / burst ratio at that
        clock over its own (at most 1), memory-bound kernels as they are. A card without a steady state (none
        measured) stays as it is, and says so in its notes."""
        require(clocks in CLOCKS, f"clocks must be one of {', '.join(CLOCKS)}, got {clocks!r}")
        if clocks == self.clocks:
            return self
        s = self.steady
        if s is None or clocks == "burst":
            note = (f"sustained clocks: no steady-state measurement for {self.gpu.name} ({self.source}); efficiencies "
                    "kept") if clocks == "sustained" else "burst clocks"
            return replace(self, clocks=clocks, notes=self.notes + (note,))
        e = self.efficiency
        mhz = s.clock_MHz(mix)
        matmul = min(e.matmul, s.matmul * mhz / s.matmul_MHz * self.datasheet_flops("bf16") / self.peak("bf16"))
        attention = min(1.0, s.attention * mhz / s.attention_MHz)
        changes = {"matmul": matmul, "matmul_unaligned": e.matmul_unaligned * matmul / e.matmul,
                   **{k: getattr(e, k) * attention for k in ("attention", "attention_small_head", "attention_flash2")}}
        if s.matmul_fp8 is not None and self.base_flops.get("fp8"):
            changes["matmul_fp8"] = min(e.matmul_fp8, s.matmul_fp8 * mhz / s.kind_MHz("matmul_fp8")
                                        * self.datasheet_flops("fp8") / self.peak("fp8"))
        note = f"sustained clocks: {mhz:.0f} MHz for this step's kernel mix; {s.source}"
        return replace(self.with_efficiency(**changes), clocks=clocks, notes=self.notes + (note,))

    def with_host(self, s_per_kernel: float | None = None, s_per_layer: float | None = None,
                  source: str = "command line") -> "Ceilings":
        """These ceilings with the host's costs replaced where given (the others kept)."""
        if s_per_kernel is None and s_per_layer is None:
            return self
        host = HostCosts(self.host.s_per_kernel if s_per_kernel is None else s_per_kernel,
                         self.host.s_per_layer if s_per_layer is None else s_per_layer, source)
        return replace(self, host=host)

    def as_dict(self, dtype: str) -> dict[str, Any]:
        """The ceilings behind a prediction in `dtype` (JSON: base units, FLOP/s and B/s)."""
        return {
            "source": self.source, "gpu": self.gpu.name, "sm_count": self.sm_count, "dtype": normalise_dtype(dtype),
            "base_flops_per_s": self.peak(dtype), "matmul_flops_per_s": self.flops_per_s(dtype, "matmul"),
            "attention_flops_per_s": self.flops_per_s(dtype, "attention"),
            "read_Bps": self.read_ceiling_Bps, "write_Bps": self.write_ceiling_Bps, "bandwidth_Bps": self.bandwidth_Bps,
            "datasheet_flops_per_s": self.datasheet_flops(dtype), "datasheet_Bps": self.datasheet_Bps,
            "ridge_flops_per_byte": self.ridge(dtype), "launch_overhead_s": self.launch_s,
            "memory_launch_overhead_s": self.overhead_s("memory"),
            "matmul_floor_s": self.matmul_floor_s, "kernel_gap_s": self.gap_s,
            "memory_stream_cap_Bps": self.memory_cap_Bps, "host": self.host.as_dict(), "clocks": self.clocks,
            "steady_source": self.steady.source if self.steady else None,
            "efficiency": {k: getattr(self.efficiency, k) for k in EFFICIENCY_FIELDS}, "notes": list(self.notes),
        }


def datasheet_ceilings(gpu: GPUSpec | str, efficiency: Efficiency | None = None,
                       launch_s: float | None = None) -> Ceilings:
    spec = gpu if isinstance(gpu, GPUSpec) else find_gpu(gpu)
    if spec.sm_count is None:
        raise MlsysError(f"{spec.name}: the spec has no sm_count (needed for waves)")
    eff = efficiency or Efficiency()
    eff.validate()
    bw = spec.memory_bandwidth_Bps
    return Ceilings(
        gpu=spec, base_flops=dict(spec.peak_flops_by_dtype), read_Bps=bw, write_Bps=bw,
        sm_count=spec.sm_count, efficiency=eff,
        launch_s=LAUNCH_OVERHEAD_S if launch_s is None else launch_s, steady=STEADY.get(spec.name),
    )


def read_calibration(path: str | Path) -> dict[str, Any]:
    """The calibration JSON as a dict; a missing or malformed file is an MlsysError."""
    data = read_json(Path(path), "calibration")
    require(isinstance(data, dict), f"calibration: {path} must hold a JSON object")
    return data


def match_gpu(device_name: str) -> GPUSpec:
    """A built-in GPU for a device name as torch reports it ('NVIDIA H100 80GB HBM3' -> H100-SXM).

    Tries the name without 'NVIDIA', spaces as dashes, then names/aliases that start with it,
    then drops trailing words ('h100-80gb-hbm3' -> 'h100-80gb').
    """
    words = str(device_name).lower().replace("nvidia", " ").replace("_", "-").split()
    keys = {n.lower(): s for s in builtin_gpus().values() for n in (s.name, *s.aliases)}
    while words:
        wanted = "-".join(words)
        if wanted in keys:
            return keys[wanted]
        starts = {s.name: s for k, s in keys.items() if k.startswith(wanted)}
        if len(starts) == 1:
            return next(iter(starts.values()))
        words = words[:-1]
    raise MlsysError(f"calibration: no built-in GPU matches device {device_name!r}; pass --gpu NAME")


def find_gpu(name: str) -> GPUSpec:
    """A built-in GPU by name or alias, else by device name ('NVIDIA H200'), else load_gpu's error."""
    try:
        return load_gpu(name)
    except AmbiguousGPU:
        raise
    except MlsysError as exc:
        try:
            return match_gpu(name)
        except MlsysError:
            raise exc from None


def _matched_name(device_name: str) -> str | None:
    try:
        return match_gpu(device_name).name
    except MlsysError:
        return None


def _positive(value: Any, what: str, where: str = "calibration") -> float | None:
    if value is None:
        return None
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    require(isinstance(value, (int, float, str)) and not isinstance(value, bool) and not math.isnan(number),
            f"{where}: {what} must be a number, got {value!r}")
    require(number > 0, f"{where}: {what} must be positive, got {value!r}")
    require(math.isfinite(number), f"{where}: {what} must be finite, got {value!r}")
    return number


# A measured ceiling lies between these shares of the card's datasheet figure: above it is not a ceiling
# (efficiencies and MFU are quoted against the datasheet and would pass 1), and below 1/1000 of it (1e-300
# FLOP/s, say) is no measurement of the card (a MIG slice or a throttled card keeps more than a tenth).
MEASURED_SHARE = (1e-3, 1.0)


def _measured(value: Any, what: str, datasheet: float | None, where: str) -> float | None:
    """A measured peak or bandwidth within MEASURED_SHARE of its datasheet figure (None: not measured)."""
    number = _positive(value, what, where)
    if number is None or not datasheet:
        return number
    low, high = MEASURED_SHARE
    require(number <= high * datasheet,
            f"{where}: {what} = {number:.4g} is above the datasheet's {datasheet:.4g}: a measured ceiling cannot "
            "exceed the card's peak (is --gpu the card it was measured on?)")
    require(number >= low * datasheet,
            f"{where}: {what} = {number:.4g} is below 1/1000 of the datasheet's {datasheet:.4g}: not a measurement "
            "of this card")
    return number


def _sm_count(value: Any, default: int, where: str = "calibration") -> int:
    """The measured SM count: a positive whole number (a MIG slice has fewer), at most the spec's."""
    if value is None:
        return default
    number = _positive(value, "sm_count", where)
    if number is None or number != int(number):
        raise MlsysError(f"{where}: sm_count must be a whole number, got {value!r}")
    require(number <= default, f"{where}: sm_count {int(number)} is more than the card's {default}")
    return int(number)


def file_efficiency(data: Mapping[str, Any], where: str = "calibration") -> Efficiency | None:
    """The `efficiency` object a fitted calibration (`mlsys calibrate`) carries: fractions of its
    peak_flops / bandwidth_Bps that model kernels reach; kinds it omits keep CALIBRATED_EFFICIENCY's."""
    fitted = data.get("efficiency")
    if fitted is None:
        return None
    require(isinstance(fitted, dict), f"{where}: efficiency must be an object")
    unknown = set(fitted) - set(EFFICIENCY_FIELDS)
    require(not unknown, f"{where}: unknown efficiency {', '.join(sorted(unknown))} (use: {', '.join(EFFICIENCY_FIELDS)})")
    values: dict[str, float] = {}
    for k, v in fitted.items():
        number = _positive(v, f"efficiency.{k}", where)
        if number is None:  # a JSON null
            raise MlsysError(f"{where}: efficiency.{k} must be a number, got None")
        values[k] = fraction(number, f"{where}: efficiency.{k}")
    # classes added after a file was fitted take what `mlsys calibrate` writes for a class it does not fit: its
    # base's value, the datasheet defaults over a datasheet base (`base`), else CALIBRATED_EFFICIENCY's
    base = Efficiency() if data.get("base") == "datasheet" else CALIBRATED_EFFICIENCY
    later = {k: getattr(base, k) for k in LATER_CLASSES if k not in values}
    return replace(CALIBRATED_EFFICIENCY, **later, **values)


# The keys a calibration record may hold: what `mlsys bench ceilings` and `mlsys calibrate` write, and the
# optional host objects (docs/roofline.md, docs/train.md). Any other key means the file is something else
# (a cluster spec, a benchmark row) given where a calibration belongs.
CALIBRATION_KEYS = ("gpu", "sm_count", "source", "peak_flops", "bandwidth_Bps", "efficiency", "launch_overhead_s",
                    "kernel_gap_s", "matmul_floor_s", "memory_launch_overhead_s", "fitted_on", "base", "host",
                    "torch_host", "matmul_runs", "env", "measured_at", "notes", "sustained", "sustained_fraction")


def calibrated_ceilings(data: Mapping[str, Any], gpu: GPUSpec | str | None = None, where: str = "calibration",
                        efficiency: Efficiency | None = None, launch_s: float | None = None) -> Ceilings:
    """Ceilings from a calibration record; dtypes or bandwidths it lacks fall back to the datasheet."""
    unknown = sorted(map(str, set(data) - set(CALIBRATION_KEYS)))
    require(not unknown, f"{where}: not a calibration: unknown key {', '.join(unknown[:4])} (a calibration holds "
                         f"{', '.join(CALIBRATION_KEYS[:6])}, ...: docs/roofline.md)")
    spec = gpu if isinstance(gpu, GPUSpec) else find_gpu(gpu) if gpu else match_gpu(data.get("gpu", ""))
    base = datasheet_ceilings(spec)
    eff = efficiency or file_efficiency(data, where) or CALIBRATED_EFFICIENCY
    eff.validate()
    notes = []
    measured_peaks = data.get("peak_flops") or {}
    require(isinstance(measured_peaks, dict), f"{where}: peak_flops must be an object")
    flops: dict[str, float | None] = {}
    for dtype, value in base.base_flops.items():
        measured = _measured(measured_peaks.get(dtype), f"peak_flops.{dtype}", value, where)
        # A dtype without a measurement keeps its datasheet peak scaled to match the measured ones.
        scale = Efficiency().matmul_fp8 if dtype == "fp8" else Efficiency().matmul
        flops[dtype] = measured if measured else (value * scale if value else None)
        if value and not measured:
            notes.append(f"{dtype}: not in the calibration file; datasheet x {scale}")
    bws = data.get("bandwidth_Bps") or {}
    require(isinstance(bws, dict), f"{where}: bandwidth_Bps must be an object")
    sheet_Bps = spec.memory_bandwidth_Bps
    copy = _measured(bws.get("copy"), "bandwidth_Bps.copy", sheet_Bps, where)
    read = _measured(bws.get("read"), "bandwidth_Bps.read", sheet_Bps, where)
    write = _measured(bws.get("write"), "bandwidth_Bps.write", sheet_Bps, where)
    fallback = copy or spec.memory_bandwidth_Bps * Efficiency().memory
    if not copy and not (read and write):
        notes.append("bandwidth: not measured; datasheet x the default memory efficiency")
    sm_count = _sm_count(data.get("sm_count"), base.sm_count, where)
    if gpu and data.get("gpu") and _matched_name(data["gpu"]) != spec.name:
        notes.append(f"calibration measured on {data['gpu']!r}, used with the {spec.name} datasheet")
    measured_launch = _positive(data.get("launch_overhead_s"), "launch_overhead_s", where)
    measured_floor = _positive(data.get("matmul_floor_s"), "matmul_floor_s", where)
    measured_memory_launch = _positive(data.get("memory_launch_overhead_s"), "memory_launch_overhead_s", where)
    gap = data.get("kernel_gap_s")
    measured_gap = 0.0 if gap == 0 and not isinstance(gap, bool) else _positive(gap, "kernel_gap_s", where)
    if data.get("efficiency") is not None:  # `mlsys calibrate` fitted them to measured steps, clocks and all
        notes.append("efficiencies fitted to measured steps: their clocks are in the fit, none derated for sustained")
    if measured_gap is None and data.get("efficiency") is not None:
        # a fitted file (`mlsys calibrate`) from before the key existed: its fixed costs absorbed the gap
        measured_gap = 0.0
        notes.append("kernel_gap_s: not in this fitted file; its fixed costs include the gap (0 us)")
    return Ceilings(
        gpu=spec, base_flops=flops,
        read_Bps=read or fallback, write_Bps=write or fallback,
        sm_count=sm_count, efficiency=eff,
        launch_s=launch_s if launch_s is not None else measured_launch or LAUNCH_OVERHEAD_S,
        matmul_floor_s=measured_floor or MATMUL_FLOOR_S, source=where,
        gap_s=KERNEL_GAP_S if measured_gap is None else measured_gap,
        # one fixed cost given for every kernel (--launch-us) replaces the file's two
        memory_launch_s=None if launch_s is not None else measured_memory_launch,
        host=host_from_record(data.get("host"), where) or HostCosts(), notes=tuple(notes),
        steady=None if data.get("efficiency") is not None else steady_from_record(
            data.get("sustained"), spec.peak_flops_by_dtype, spec.memory_bandwidth_Bps, where) or STEADY.get(spec.name),
    )


def load_ceilings(gpu: GPUSpec | str | None = None, calibration: str | Path | Mapping[str, Any] | None = None,
                  efficiency: Efficiency | None = None, launch_s: float | None = None) -> Ceilings:
    """Datasheet ceilings for `gpu` (default DEFAULT_GPU), or measured ones from a calibration file
    (path) or record (dict); with a calibration and no `gpu`, the GPU the file names."""
    if calibration is None:
        return datasheet_ceilings(gpu or DEFAULT_GPU, efficiency, launch_s)
    if isinstance(calibration, Mapping):
        return calibrated_ceilings(calibration, gpu, "calibration record", efficiency, launch_s)
    return calibrated_ceilings(read_calibration(calibration), gpu, str(calibration), efficiency, launch_s)
