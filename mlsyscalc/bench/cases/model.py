"""Whole-model benchmark case: one prefill, decode step or training step of a plain-torch model
built from a ModelSpec, timed on the GPU beside `calc.roofline.model`'s prediction for the same
spec (and `calc.memory_*`'s peak memory), with per-kernel times from torch.profiler.

Timing: CUDA events around each call, median of `reps` calls after warm-up (no L2 flush: a
model step streams far more than L2). Every phase runs under a CUDA graph (the launch cost hidden,
as serving engines run prefill and decode; for training this is the GPU's time of the step, which
the host cannot pace) and eagerly as a second row (MoE layers too: their experts run as grouped GEMMs
whose group sizes stay on the GPU, bench._torch_layers.GroupedExperts). Training: forward, backward and torch's fused AdamW on bf16
parameters (states in bf16; `capturable` under a graph). With `layers` below the spec's count
the model and the prediction both have that many layers, and the full-depth time is estimated
as measured x predicted(full) / predicted(reduced).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial

from ...calc.memory.inference import InferOptions, infer_memory
from ...calc.memory.training import TrainOptions, train_memory
from ...calc.roofline.host import probe_host_costs
from ...calc.roofline.model import RooflineOptions, predict_model
from ...errors import require
from ..rows import Row
from ..torch_alloc import PAGE

WEIGHT_BITS = {"bf16": None, "int8": 8, "int4": 4}  # --dtype -> weight-only quantization bits


@dataclass(frozen=True)
class ModelCase:
    phase: str  # prefill, decode or train
    batch: int
    seq: int  # prefill/train: tokens per sequence; decode: tokens already cached
    graphs: bool = True  # the step captured in a CUDA graph and replayed (False: eager)
    kernels: str = "torch"
    dtype: str = "bf16"  # bf16, or int8/int4 weight-only (decode/prefill with triton kernels)
    layers: int | None = None  # run only this many decoder layers
    tp: int = 1  # tensor-parallel ranks (DTensor), under torchrun
    dp: int = 1  # FSDP2 ranks (ZeRO-3 data parallel), under torchrun

    @property
    def shape(self) -> str:
        return f"B{self.batch} " + (f"ctx{self.seq}" if self.phase == "decode" else f"S{self.seq}")

    @property
    def mode(self) -> str:
        return "graph" if self.graphs else "eager"


def reduced_spec(spec, layers: int | None):
    """The spec with only `layers` decoder layers (the first ones: DeepSeek keeps its dense layers first)."""
    if not layers or layers >= spec.num_layers:
        return spec
    require(layers >= 1, f"--layers must be positive, got {layers}")
    return replace(spec, num_layers=layers)


IMPL = "torch"  # the roofline lists the kernels plain PyTorch runs, as this model does


def roofline_options(case: ModelCase, impl: str = IMPL) -> RooflineOptions:
    """The same step for `calc.roofline.model` (FSDP: data parallel with ZeRO-3 over dp ranks):
    plain-PyTorch kernels, logits of the last position only (this model's prefill, as serving
    engines do), and training with AdamW states in bf16 (torch's fused AdamW on bf16 parameters)."""
    options = partial(RooflineOptions, batch=case.batch, dtype=case.dtype, check_fit=False, tp=case.tp, impl=impl)
    launch = "graph" if case.graphs else "eager"
    if case.phase == "decode":
        return options(phase="decode", context=case.seq, launch=launch)
    if case.phase == "prefill":
        return options(phase="prefill", seq=case.seq, logits="last", launch=launch)
    if case.dp > 1:
        return options(phase="train", seq=case.seq, master_weights=False, dp=case.dp, zero=3, launch=launch)
    return options(phase="train", seq=case.seq, master_weights=False, launch=launch)


def plain_torch_live_hidden(spec) -> int:
    """Hidden-wide tensors this model's layer keeps alive while its MLP runs (allocator trace,
    scripts/memory_attribution.py): the layer input (held by the caller's loop), the attention
    output, the residual sum and the norm output; a parallel block with one norm has no residual
    sum yet (input, norm output, attention output)."""
    return 3 if spec.parallel_attention and spec.norms_per_layer == 1 else 4


CUBLAS_WORKSPACE_KIB = {"sm90": 4096 * 8, "other": 4096 * 2 + 16 * 8}  # torch's CUBLAS_WORKSPACE_CONFIG defaults
CUBLASLT_WORKSPACE_KIB = 1024  # torch's TORCH_CUBLASLT_WORKSPACE_SIZE default; addmm with a bias runs through it


def blas_workspaces(spec, capability: tuple[int, int] = (9, 0), env: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """The cuBLAS workspaces torch allocates (through its caching allocator, so max_memory_allocated
    counts them) for the stream a step runs on, in bytes: CUBLAS_WORKSPACE_CONFIG's `:KiB:count`
    pairs, else torch's default (32 MiB on sm90, 8 MiB + 128 KiB elsewhere); plus cuBLASLt's
    workspace when the model's linears have biases. Measured on an H100 with torch 2.11: 32 MiB, and
    1 MiB more for gpt2."""
    import os

    source: Mapping[str, str] = os.environ if env is None else env
    config = source.get("CUBLAS_WORKSPACE_CONFIG", "")
    parts = [int(p) for p in config.split(":") if p.strip().isdigit()]
    if parts and len(parts) % 2 == 0:
        kib = sum(parts[i] * parts[i + 1] for i in range(0, len(parts), 2))
    else:
        kib = CUBLAS_WORKSPACE_KIB["sm90" if capability == (9, 0) else "other"]
    if spec.qkv_bias or spec.o_bias or spec.mlp_bias or spec.lm_head_bias:
        return kib * 1024, int(source.get("TORCH_CUBLASLT_WORKSPACE_SIZE", CUBLASLT_WORKSPACE_KIB)) * 1024
    return (kib * 1024,)


def blas_workspace_bytes(spec, capability: tuple[int, int] = (9, 0), env: Mapping[str, str] | None = None) -> int:
    return sum(blas_workspaces(spec, capability, env))


def allocator_rounding_bytes(spec, case: ModelCase, capability: tuple[int, int] = (9, 0)) -> int:
    """What torch's caching allocator counts beyond the requested bytes of the tensors alive at the
    measured step (bench.torch_alloc: the bf16 build from fp32, caches or gradients and optimizer
    states, the workspaces); 0 where the replay does not describe the layout (tensor or data
    parallel, quantized weights)."""
    from ..torch_alloc import persistent_rounding_bytes

    if case.tp > 1 or case.dp > 1 or case.dtype != "bf16":
        return 0
    return persistent_rounding_bytes(spec, case.phase, case.batch, case.seq, case.mode == "graph",
                                     blas_workspaces(spec, capability), case.kernels)


def predicted_peak_bytes(spec, case: ModelCase, capability: tuple[int, int] = (9, 0)) -> int:
    """calc.memory's peak for the same step, plus what torch adds: the cuBLAS workspace of the step's
    stream and the caching allocator's rounding of the persistent tensors. calc.memory: weights +
    KV cache (with the triton kernels, sized in whole pages of PAGE tokens, as the paged decode kernel reads it) + workspace (with this model's live hidden-wide tensors), or the training total with
    bf16 optimizer states (no fp32 master copy: fused AdamW on bf16 parameters)."""
    torch_side = blas_workspace_bytes(spec, capability) + allocator_rounding_bytes(spec, case, capability)
    if case.phase == "train":
        zero = 3 if case.dp > 1 else 0
        # persistent gradients (zero_grad(set_to_none=False)), every weight gradient through autograd
        return torch_side + train_memory(spec, TrainOptions(batch=case.batch, seq=case.seq, master_weights=False,
                                                            tp=case.tp, dp=case.dp, zero=zero,
                                                            grad_accumulation_fusion=False)).total
    tokens = case.batch * (1 if case.phase == "decode" else case.seq)
    context = case.seq + (1 if case.phase == "decode" else 0)
    opts = InferOptions(batch=case.batch, context=context, prefill_chunk=tokens, dtype=case.dtype, tp=case.tp,
                        live_hidden=plain_torch_live_hidden(spec), block_size=PAGE if case.kernels == "triton" else 0)
    return torch_side + infer_memory(spec, opts).total


def _capability(device: str) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability()) if device.startswith("cuda") else (9, 0)  # type: ignore[return-value]


def _time_s(fn, reps: int, warmup: int) -> float:
    """Median seconds of fn() by CUDA events (CPU wall clock without a GPU)."""
    import time

    import torch

    for _ in range(warmup):
        fn()
    cuda = torch.cuda.is_available()
    samples = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _graphed(fn):
    """fn captured in a CUDA graph after warm-up on a side stream; returns the replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()

    def replay(fn=fn):  # holds fn, and with it the inputs and caches the graph reads and writes
        graph.replay()
    return replay


def step_fn(model, spec, case: ModelCase, device: str):
    """The callable one timed step runs (inputs and caches allocated once, outside it)."""
    import torch

    b, s = case.batch, case.seq
    torch.manual_seed(0)  # the same inputs on every tensor-parallel rank
    ids = torch.randint(0, spec.vocab_size, (b, 1 if case.phase == "decode" else s), device=device)
    if case.phase == "train":
        graphed = case.graphs and device.startswith("cuda")
        params = [p for p in model.parameters() if p.requires_grad]
        # capturable: the step count stays on the GPU, so a replay advances it (a graph cannot read the host's)
        opt = torch.optim.AdamW(params, lr=1e-5, fused=device.startswith("cuda"), capturable=graphed)
        targets = torch.randint(0, spec.vocab_size, (b, s), device=device)

        def train():
            model(ids, targets).backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        return _graphed(train) if graphed else train
    caches = model.new_caches(b, s + (1 if case.phase == "decode" else 0))
    if case.phase == "prefill":
        prefill = lambda: model.prefill(ids, caches)  # noqa: E731
        return _graphed(prefill) if case.graphs and device.startswith("cuda") else prefill
    for cache in caches:  # a filled cache: contents do not change the time, only the shapes
        for t in cache:
            if t is not None:
                t.normal_()
    decode = lambda: model.decode(ids, caches, s)  # noqa: E731
    return _graphed(decode) if case.graphs and device.startswith("cuda") else decode


def run_model_case(spec_full, case: ModelCase, ceilings, device: str = "cuda", reps: int = 10,
                   profile: bool = True, source: dict | None = None, host: dict | None = None) -> Row:
    """Build, time, profile and predict one case; an exception (OOM, unsupported shape) becomes the row's error.
    `host`: the host probe's fields (cases.host), recorded in the row and pricing its host path."""
    from .. import harness
    from ..torch_models import build_model

    spec = reduced_spec(spec_full, case.layers)
    costs = probe_host_costs(host or {})
    if costs is not None:
        ceilings = replace(ceilings, host=costs)
    layers = f" L{spec.num_layers}/{spec_full.num_layers}" if spec is not spec_full else ""
    row = Row(kernel=f"model.{case.phase}", baseline=case.mode, shape=case.shape + layers, dtype=case.dtype,
              variant=variant(spec_full, case), env=dict(harness.env_metadata()), measured_at=harness.now())
    model = None
    try:
        roof = predict_model(spec, ceilings, roofline_options(case))
        row.predicted_ms, row.flops, row.bytes = roof.time_s * 1e3, roof.model_flops, roof.bytes
        row.extra.update(source or {})
        row.extra.update(host or {})
        row.extra.update(model=spec_full.name, phase=case.phase, batch=case.batch, seq=case.seq, mode=case.mode,
                         kernels=case.kernels, tp=case.tp, dp=case.dp, layers=spec.num_layers, full_layers=spec_full.num_layers,
                         predicted_kernels=sum(r.count for r in roof.rows), ceilings=ceilings.source,
                         predicted_peak_bytes=predicted_peak_bytes(spec, case, _capability(device)))
        model = _build(build_model, spec, case, device)
        if case.kernels == "triton" and case.phase != "train":
            row.rel_err, row.tol = _gate(model, spec, case, device), GATE_TOL
            require(row.rel_err <= GATE_TOL, f"correctness gate failed: triton logits differ from the torch "
                    f"attention path by {row.rel_err:.3g} (tolerance {GATE_TOL})")
        row.median_ms, peak = _measure(model, spec, case, device, reps, row.extra)
        row.ok = True
        row.extra.update(peak_bytes=peak, memory_error=(row.extra["predicted_peak_bytes"] - peak) / peak if peak else None)
        if spec is not spec_full:
            full = predict_model(spec_full, ceilings, roofline_options(case)).time_s
            row.extra.update(full_predicted_s=full, full_estimated_s=row.median_ms * 1e-3 * full / roof.time_s)
        if profile and device.startswith("cuda"):
            from ..model_profile import join_roofline, profile_step

            step = step_fn(model, spec, replace(case, graphs=False), device)
            step()  # a new optimizer's first step fills its states (2 kernels per parameter): not profiled
            prof = profile_step(step, model, top=PROFILE_TOP)
            row.extra.update(ops=join_roofline(prof, roof), kernel_s=prof.total_kernel_s)
    except Exception as exc:  # noqa: BLE001 - a failed case is a row, the sweep goes on
        row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    finally:
        del model
        _free()
    return row.finish()


PROFILE_TOP = 48  # distinct kernels kept per row (by summed time), names and call counts
GATE_TOL = 2e-2  # relative Frobenius error of bf16 logits, triton attention vs torch SDPA on the same weights


def _gate(model, spec, case: ModelCase, device: str) -> float:
    """One step with the project's attention kernels and one with SDPA on the same weights, inputs
    and caches: the relative error of the logits (weight-only GEMVs stay in both: they have their
    own gate in `mlsys bench quant`)."""
    import torch

    b, s = case.batch, case.seq
    torch.manual_seed(1)
    if case.phase == "decode":
        caches = model.new_caches(b, s + 1)
        for k, v in caches:
            k.normal_()
            if v is not None:
                v.normal_()
        ids = torch.randint(0, spec.vocab_size, (b, 1), device=device)
        run = lambda: model.decode(ids, caches, s)  # noqa: E731
    else:
        caches = model.new_caches(b, s)
        ids = torch.randint(0, spec.vocab_size, (b, s), device=device)
        run = lambda: model.prefill(ids, caches)  # noqa: E731
    got = run().float()
    modules = [m for m in model.modules() if hasattr(m, "kernels")]
    for m in modules:
        m.kernels = "torch"
    try:
        want = run().float()
    finally:
        for m in modules:
            m.kernels = case.kernels
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def variant(spec, case: ModelCase) -> str:
    parallel = (f" tp{case.tp}" if case.tp > 1 else "") + (f" fsdp{case.dp}" if case.dp > 1 else "")
    return f"{spec.name} {case.kernels}{parallel}"


def _build(build_model, spec, case: ModelCase, device: str):
    import torch

    from .. import model_parallel

    torch.manual_seed(0)  # the same weights on every rank (and for the gate's two runs)
    model = build_model(spec, "bfloat16", device, kernels=case.kernels, quant_bits=WEIGHT_BITS[case.dtype])
    if case.tp > 1:
        model_parallel.apply_tp(model, case.tp, "cuda" if device.startswith("cuda") else "cpu")
    if case.dp > 1:
        model_parallel.apply_fsdp(model)
    if case.phase != "train":
        model.requires_grad_(False)
    torch.manual_seed(0)
    return model


def _back_to_back_s(fn, reps: int) -> float:
    """Seconds per step of `reps` steps issued without a synchronisation between them (CUDA events around all):
    the GPU's time when the next step is queued before this one ends, so no launch is waited for."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / reps


def _measure(model, spec, case: ModelCase, device: str, reps: int, extra: dict | None = None) -> tuple[float, int | None]:
    """(median ms, peak bytes of one step after the warm-up). The peak is an eager step's: a CUDA
    graph replays its kernels in a private memory pool whose blocks max_memory_allocated stops
    counting once the capture has freed them, so a replay's peak misses the step's workspace.
    A one-GPU CUDA-graph step is also timed back to back (`extra`: back_to_back_ms, and launch_wait_ms, the
    median step's excess over it: the wait for the graph's launch that a step timed alone pays;
    experiments/replay_timing.py)."""
    import torch

    from ..model_parallel import max_over_ranks

    fn = step_fn(model, spec, case, device)
    seconds = max_over_ranks(_time_s(fn, reps, warmup=3))
    if not device.startswith("cuda"):
        return seconds * 1e3, None
    if case.mode == "graph" and case.tp == case.dp == 1 and extra is not None:
        back = _back_to_back_s(fn, reps)
        extra.update(back_to_back_ms=back * 1e3, launch_wait_ms=(seconds - back) * 1e3)
    if case.mode == "graph":
        del fn  # the graph, its pool and its caches: the eager step allocates its own
        fn = eager_peak_step(model, spec, case, device)
        fn()  # warm-up (cuBLAS handles and workspaces)
    _release_tuning()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return seconds * 1e3, torch.cuda.max_memory_allocated()


def eager_peak_step(model, spec, case: ModelCase, device: str):
    """The eager step whose peak a graph row reports (_measure): what the graph left is freed first (the
    caller drops its reference to the replay), then the eager step allocates its own inputs and caches."""
    _free()
    return step_fn(model, spec, replace(case, graphs=False), device)


def _release_tuning() -> None:
    """The project's kernel tuner keeps a 256 MiB L2-flush buffer per GPU once it has timed anything
    (kernels.tuning); it is the tuner's, not the model's, so it goes before a peak is measured."""
    import sys

    tuning = sys.modules.get("mlsyscalc.kernels.tuning")
    if tuning is not None:
        tuning.release_buffers()


def _free() -> None:
    """Free what a case left: its tensors, cached blocks, the tuner's buffers and the cuBLAS workspaces
    of every stream it used (torch keeps one per stream until cleared; a graph row's warm-up and capture
    streams add two), so each row's peak counts the workspace of its own step's stream only, whatever ran
    before."""
    import gc

    import torch

    _release_tuning()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()


def model_cases(phase: str, batches, seqs, modes=("graph", "eager"), kernels="torch", dtype="bf16",
                layers: int | None = None, tp: int = 1, dp: int = 1) -> list[ModelCase]:
    """Every (batch, seq) pair of one phase, once per mode (graph, eager)."""
    require(dtype == "bf16" or (kernels == "triton" and phase != "train"),
            f"--dtype {dtype} (weight-only) runs inference with --kernels triton")
    # a multi-GPU training step runs eagerly: FSDP2's hooks and DTensor's dispatch are the host's work it measures
    graph_modes = [m == "graph" for m in modes] if phase != "train" or tp * dp == 1 else [False]
    require(dp == 1 or phase == "train", "--fsdp shards a training step (use --tp for prefill/decode)")
    return [ModelCase(phase, b, s, g, kernels, dtype, layers, tp, dp) for b in batches for s in seqs for g in graph_modes]


def run_model_cases(spec, cases, ceilings, store, device: str = "cuda", reps: int = 10, profile: bool = True,
                    progress=None, source: dict | None = None, host_probe=None) -> list[Row]:
    """Run each case not already in `store` (appending its row at once); returns this run's rows
    plus the stored ones of the same cases. `source` (the MODEL argument and --set overrides) goes
    into each row, so `mlsys calibrate` can rebuild the spec. `host_probe(spec, ceilings, device)`
    (cases.host.probe_once; None: no probe) runs before the first case that is not stored."""
    rows, host, profiled = [], None, 0
    done = {r.key: r for r in store.rows() if not r.error}
    for case in cases:
        key = run_key(spec, case)
        if key in done:
            rows.append(done[key])
            continue
        if host is None and host_probe is not None:
            if progress:
                progress(f"{spec.name} host probe")
            host = host_probe(spec, ceilings, device)
        if progress:
            progress(f"{spec.name} {case.phase} {case.shape} {case.mode} {case.kernels} {case.dtype}")
        row = run_model_case(spec, case, ceilings, device, reps, profile, source, host)
        # how many cases this process profiled before this one was timed (torch.profiler can leave CUPTI's
        # callbacks attached, pytorch/pytorch#144455; on one H100 it did not slow later rows: notes.md)
        row.extra["profiled_before"] = profiled
        profiled += bool(row.extra.get("ops"))
        store.append(row)
        rows.append(row)
    return rows


def run_key(spec, case: ModelCase) -> str:
    layers = reduced_spec(spec, case.layers)
    suffix = f" L{layers.num_layers}/{spec.num_layers}" if layers is not spec else ""
    return "|".join((f"model.{case.phase}", case.mode, case.shape + suffix, case.dtype, variant(spec, case)))
