"""`mlsys serve`: latency and throughput of an LLM served under load, by discrete-event simulation.

The pieces: a workload (calc.serve.workload), the iteration cost of any batch from the roofline
(calc.serve.iteration), KV capacity in blocks from the inference memory calculator (below), the engine
with its scheduler (calc.serve.engine) and the metrics (calc.serve.metrics).

KV capacity (vLLM's rule, `gpu_memory_utilization`): blocks = floor((utilisation x GPU memory -
weights - activation workspace) / (KV bytes per token x block_size)), all per GPU of a TP group,
with weights, workspace and KV bytes per token from `calc.memory.inference.infer_memory` (workspace of
one iteration's token budget and logits of max_seqs sequences).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ...dtypes import dtype_name
from ...errors import require
from ...specs.gpu import GPUSpec
from ...specs.model import ModelSpec
from ..roofline.steady import CLOCKS
from ..roofline.calibration import Ceilings
from ..memory.inference import InferMemory, InferOptions, infer_memory
from ..roofline.options import ALL_REDUCES, RooflineOptions
from ..roofline.paged import MAX_SPLITS
from .iteration import IterationCost
from .engine import ITERATION_LEVEL, POLICIES, Engine, EngineLimits
from .limits import check_positions, check_requests, check_workload
from .metrics import Slo, series, summary
from .spec import SpecDecode, expected_tokens
from .workload import LengthDist, Workload, synthetic

PREEMPTION = ("recompute", "swap")
# Token budget and running-sequence limit where --max-batch-tokens / --max-seqs are not given. A policy with
# engine_defaults (vllm-v1) takes `vllm serve`'s (UsageContext.OPENAI_API_SERVER) defaults of vLLM V1,
# EngineArgs._set_default_args (vllm-project/vllm vllm/engine/arg_utils.py at 99d7eb5d6a51): 8192 tokens and
# 1024 sequences on a card of at least 70 GiB that is not an A100, else 2048 and 256; max_num_seqs is at most
# max_num_batched_tokens. The other policies keep vLLM V0's max_num_seqs (256) and 8192 prompt tokens.
V1_LARGE_CARD_BYTES = 70 * 2**30
V1_LIMITS = {True: (8192, 1024), False: (2048, 256)}  # large card -> (max_num_batched_tokens, max_num_seqs)
V0_LIMITS = (8192, 256)
# Host time of one iteration (scheduling, input building, sampling, detokenising, streaming out): the measured
# replay's wall - GPU time of every decode iteration, least squares on the sequences that sample
# (scripts/serve_host_fit.py on reports/serving/replay_h200.json: six runs, 2-1000 requests/s, 11,686 decode
# iterations of 1-64 sequences, H200, CUDA graphs): 155 us + 7.4 us per sequence.
HOST_BASE_S = 155e-6
HOST_PER_SEQ_S = 7.4e-6


@dataclass(frozen=True)
class ServeOptions:
    scheduler: str = "vllm-v1"  # a row of calc.serve.engine.POLICIES
    max_batch_tokens: int | None = None  # tokens per iteration (vLLM max_num_batched_tokens); None: the policy's default
    max_seqs: int | None = None  # running sequences (vLLM max_num_seqs); None: the policy's default (V1_LIMITS, V0_LIMITS)
    chunk: int = 512  # a chunk_budget policy's (sarathi's) token budget per iteration (Sarathi-Serve's 512-token setting)
    block_size: int = 16  # tokens per KV block (vLLM default)
    gpu_memory_utilization: float = 0.9  # share of GPU memory for weights + workspace + KV (vLLM default)
    preemption: str = "recompute"  # vLLM's default for single-sequence requests
    kv_blocks: int | None = None  # override the KV capacity (blocks per GPU)
    tp: int = 1
    dtype: str = "bf16"
    matmul_dtype: str | None = None  # the GEMMs' activation dtype when not --dtype's (RooflineOptions.matmul_dtype)
    kv_dtype: str | None = None
    cluster: str | None = None  # cluster spec for the TP collectives
    slo: Slo = field(default_factory=Slo)
    prefix_caching: bool = False  # keep the workload's shared prompt prefix in the KV cache (whole blocks)
    spec_k: int = 4  # with a draft model: tokens proposed per step
    accept: float = 0.7  # with a draft model: per-token acceptance rate (Leviathan et al. 2023)
    iteration_overhead_s: float = HOST_BASE_S  # host time each iteration pays (scheduling, sampling, detokenising)
    iteration_overhead_per_seq_s: float = HOST_PER_SEQ_S  # and per sequence that samples a token in it
    frontend_s: float = 0.0  # the API server's time per request, one at a time, before the scheduler (calc.serve.engine)
    clocks: str = "burst"  # the card's clocks for every iteration (calc.roofline.steady): "burst" or "sustained"
    all_reduce: str = "custom"  # TP all-reduces on the one-shot custom kernel, or "nccl" (an engine without it)
    max_decode_splits: int = MAX_SPLITS  # KV splits of a decode attention pass at most (1: TensorRT-LLM 0.9's kernels)

    def validate(self) -> None:
        require(self.scheduler in POLICIES, f"--scheduler must be one of {', '.join(POLICIES)}, got {self.scheduler!r}")
        require(self.preemption in PREEMPTION, f"--preemption must be one of {', '.join(PREEMPTION)}")
        require(self.all_reduce in ALL_REDUCES, f"--all-reduce must be one of {', '.join(ALL_REDUCES)}, got {self.all_reduce!r}")
        for name in ("max_batch_tokens", "max_seqs", "chunk", "block_size", "tp", "max_decode_splits"):
            value = getattr(self, name)
            if value is None and name in ("max_batch_tokens", "max_seqs"):
                continue  # the policy's default for the card (resolved)
            require(isinstance(value, int) and value >= 1, f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        require(0 < self.gpu_memory_utilization <= 1,
                f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        expected_tokens(self.accept, self.spec_k)  # checks both
        require(not self.prefix_caching or POLICIES[self.scheduler].iteration_level,
                f"--prefix-caching needs an iteration-level scheduler ({ITERATION_LEVEL})")
        require(math.isfinite(self.iteration_overhead_s) and self.iteration_overhead_s >= 0,
                f"--iteration-overhead-us must be >= 0, got {self.iteration_overhead_s * 1e6:g}")
        require(math.isfinite(self.iteration_overhead_per_seq_s) and self.iteration_overhead_per_seq_s >= 0,
                f"--iteration-overhead-per-seq-us must be >= 0, got {self.iteration_overhead_per_seq_s * 1e6:g}")
        require(self.kv_blocks is None or self.kv_blocks >= 1, f"--kv-blocks must be >= 1, got {self.kv_blocks}")
        require(self.clocks in CLOCKS, f"--clocks must be one of {', '.join(CLOCKS)}, got {self.clocks!r}")
        require(math.isfinite(self.frontend_s) and self.frontend_s >= 0,
                f"--frontend-ms must be >= 0, got {self.frontend_s * 1e3:g}")
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            value = getattr(self.slo, name)
            require(value is None or value > 0, f"--slo {name[:-2]} must be positive, got {value}")

    @property
    def roofline(self) -> RooflineOptions:
        """As serving engines run: KV read through a block table, TP all-reduces on the custom kernel (or NCCL)."""
        return RooflineOptions(tp=self.tp, dtype=self.dtype, matmul_dtype=self.matmul_dtype, kv_dtype=self.kv_dtype,
                               cluster=self.cluster, kv_layout="paged", all_reduce=self.all_reduce, clocks=self.clocks)

    def resolved(self, gpu: GPUSpec) -> "ServeOptions":
        """The options with the policy's default token budget and sequence limit for this card filled in."""
        if self.max_batch_tokens is not None and self.max_seqs is not None:
            return self
        if POLICIES[self.scheduler].engine_defaults:
            large = gpu.memory_bytes >= V1_LARGE_CARD_BYTES and "a100" not in gpu.name.lower()
            tokens, seqs = V1_LIMITS[large]
            tokens = self.max_batch_tokens or tokens
            seqs = self.max_seqs or min(seqs, tokens)
        else:
            tokens, seqs = self.max_batch_tokens or V0_LIMITS[0], self.max_seqs or V0_LIMITS[1]
        return replace(self, max_batch_tokens=tokens, max_seqs=seqs)

    @property
    def iteration_tokens(self) -> int:
        """The most tokens one iteration computes (resolved options only)."""
        tokens = self.chunk if POLICIES[self.scheduler].chunk_budget else self.max_batch_tokens
        assert tokens is not None, "ServeOptions.resolved(gpu) first"
        return tokens


@dataclass(frozen=True)
class WorkloadSpec:
    """A synthetic workload's recipe (rate is what a sweep varies)."""

    prompt: LengthDist
    output: LengthDist
    rate: float
    requests: int = 1000
    seed: int = 0
    burstiness: float = 1.0
    prefix: int = 0  # shared tokens before every prompt
    concurrency: int = 0  # clients of a closed loop (0: open loop)

    def build(self) -> Workload:
        check_requests(self.requests)
        return synthetic(self.prompt, self.output, self.rate, self.requests, self.seed, self.burstiness, self.prefix,
                         self.concurrency)


@dataclass(frozen=True)
class KvCapacity:
    blocks: int
    block_bytes: float  # one block, all layers, one GPU
    weights_bytes: int
    activations_bytes: int
    usable_bytes: float  # utilisation x GPU memory

    def as_dict(self) -> dict[str, Any]:
        return {"kv_blocks": self.blocks, "kv_block_bytes": self.block_bytes,
                "weights_bytes": self.weights_bytes, "activations_bytes": self.activations_bytes,
                "usable_bytes": self.usable_bytes}


def _memory(spec: ModelSpec, opts: ServeOptions) -> InferMemory:
    """opts: resolved."""
    assert opts.max_seqs is not None
    ro = opts.roofline
    base = ro.activation_dtype if ro.activation_dtype in ("fp32", "bf16", "fp16") else "bf16"
    mem = infer_memory(spec, InferOptions(batch=opts.max_seqs, context=opts.iteration_tokens, dtype=dtype_name(opts.dtype),
                                          base_dtype=base, kv_dtype=ro.kv_dtype_name, tp=opts.tp,
                                          prefill_chunk=opts.iteration_tokens))
    return mem


def kv_capacity(spec: ModelSpec, ceilings: Ceilings, opts: ServeOptions, draft: ModelSpec | None = None) -> KvCapacity:
    """KV blocks per GPU; a draft model's weights and its KV per token come out of the same budget."""
    opts = opts.resolved(ceilings.gpu)
    mem = _memory(spec, opts)
    usable = opts.gpu_memory_utilization * ceilings.gpu.memory_bytes
    weights, acts = mem.breakdown["weights"], mem.breakdown["activations"]
    block_bytes = mem.kv_bytes_per_token * opts.block_size
    if draft is not None:
        dmem = _memory(draft, opts)
        weights += dmem.breakdown["weights"]
        block_bytes += dmem.kv_bytes_per_token * opts.block_size
    blocks = int((usable - weights - acts) // block_bytes) if opts.kv_blocks is None else opts.kv_blocks
    require(blocks >= 1, f"{spec.name} leaves no room for a KV cache on one {ceilings.gpu.name}: weights "
            f"{weights / 1e9:.1f} GB + workspace {acts / 1e9:.1f} GB of {usable / 1e9:.1f} GB usable "
            f"(use --tp, a smaller --dtype, or a larger --gpu-memory-utilization)")
    return KvCapacity(blocks, block_bytes, weights, acts, usable)


@dataclass(frozen=True)
class ServeResult:
    model: str
    gpu: str
    options: ServeOptions
    workload: Workload
    kv: KvCapacity
    metrics: dict[str, Any]
    series: tuple[dict[str, Any], ...]
    latencies: dict[str, list[float]]


def engine_limits(kv: KvCapacity, ceilings: Ceilings, opts: ServeOptions, prefix: int = 0) -> EngineLimits:
    """prefix: the workload's shared prompt prefix (cached in whole blocks with opts.prefix_caching)."""
    gpu = ceilings.gpu
    opts = opts.resolved(gpu)
    assert opts.max_batch_tokens is not None and opts.max_seqs is not None
    host_Bps = (gpu.pcie_Bps or 0) / 2  # spec lists both directions; a swap moves one way
    require(opts.preemption != "swap" or host_Bps > 0, f"{gpu.name}: no PCIe bandwidth in its spec for --preemption swap")
    return EngineLimits(opts.scheduler, opts.max_batch_tokens, opts.max_seqs, opts.chunk, opts.block_size,
                        kv.blocks, opts.preemption, kv.block_bytes / host_Bps if host_Bps else 0.0,
                        prefix // opts.block_size * opts.block_size if opts.prefix_caching else 0)


_COSTS: dict[tuple, IterationCost] = {}  # the last few engines' costs: a report or a search simulates one many times
COST_CACHE_SIZE = 8


def iteration_cost(spec: ModelSpec, ceilings: Ceilings, opts: ServeOptions) -> IterationCost:
    """The cost of one iteration of this engine: the roofline of its batch + its host time (its fit, ~0.1 s,
    is kept for the next call with the same model, ceilings and options; it is a pure function of them)."""
    key = (spec, repr(ceilings), opts.roofline, opts.iteration_overhead_s, opts.iteration_overhead_per_seq_s,
           opts.max_decode_splits)
    if key not in _COSTS:
        if len(_COSTS) >= COST_CACHE_SIZE:
            _COSTS.pop(next(iter(_COSTS)))
        _COSTS[key] = IterationCost(spec, ceilings, opts.roofline, opts.iteration_overhead_s,
                                    opts.iteration_overhead_per_seq_s, opts.max_decode_splits)
    return _COSTS[key]


def speculation(spec: ModelSpec, draft: ModelSpec, ceilings: Ceilings, opts: ServeOptions,
                cost: IterationCost | None = None) -> SpecDecode:
    require(POLICIES[opts.scheduler].iteration_level, f"--draft needs an iteration-level scheduler ({ITERATION_LEVEL})")
    require(draft.vocab_size == spec.vocab_size,
            f"draft {draft.name} has a {draft.vocab_size}-token vocabulary, {spec.name} {spec.vocab_size}: "
            "speculative decoding needs the same tokenizer")
    return SpecDecode(cost or iteration_cost(spec, ceilings, opts), IterationCost(draft, ceilings, opts.roofline),
                      opts.spec_k, opts.accept)


def simulate(spec: ModelSpec, ceilings: Ceilings, workload: Workload, opts: ServeOptions = ServeOptions(),
             cost: IterationCost | None = None, draft: ModelSpec | None = None) -> ServeResult:
    """Simulate serving `workload` on one engine (one GPU, or one TP group of opts.tp GPUs)."""
    from .metrics import latencies

    opts.validate()
    opts = opts.resolved(ceilings.gpu)
    require(not workload.concurrency or POLICIES[opts.scheduler].iteration_level,
            f"--concurrency needs an iteration-level scheduler ({ITERATION_LEVEL})")
    check_workload(workload)
    check_positions(spec, workload)
    cost = cost or iteration_cost(spec, ceilings, opts)
    sd = speculation(spec, draft, ceilings, opts, cost) if draft is not None else None
    kv = kv_capacity(spec, ceilings, opts, draft)
    trace = Engine(workload.requests, cost, engine_limits(kv, ceilings, opts, workload.shared_prefix), sd,
                   concurrency=workload.concurrency, frontend_s=opts.frontend_s).run()
    metrics: dict[str, Any] = summary(workload.requests, trace, kv.blocks, opts.slo)  # ServeResult.metrics
    if sd is not None:
        assert draft is not None  # sd is built only from a draft model
        mean_batch = max(1, round(metrics["mean_batch_tokens"]))
        metrics["speculative"] = {"draft": draft.name, "spec_k": opts.spec_k, "accept": opts.accept,
                                  "batch1": sd.verdict(1, workload.requests[0][1]),
                                  "mean_batch": sd.verdict(mean_batch, workload.requests[0][1])}
    return ServeResult(spec.name, ceilings.gpu.name, opts, workload, kv, metrics, tuple(series(trace, kv.blocks)),
                       latencies(workload.requests, trace))


def sweep_rates(spec: ModelSpec, ceilings: Ceilings, workload: WorkloadSpec, rates: tuple[float, ...],
                opts: ServeOptions = ServeOptions(), draft: ModelSpec | None = None) -> tuple[ServeResult, ...]:
    """The same engine and workload shape at each arrival rate (one cost model for all)."""
    require(len(rates) >= 1, "--sweep rate=... needs at least one rate")
    opts.validate()
    check_workload(replace(workload, rate=rates[0]).build(), len(rates), "--sweep")
    cost = iteration_cost(spec, ceilings, opts)
    return tuple(simulate(spec, ceilings, replace(workload, rate=r).build(), opts, cost, draft) for r in rates)
