"""`mlsys memory train MODEL` and `mlsys memory infer MODEL`: per-GPU memory and what fits."""

from __future__ import annotations

from dataclasses import replace

import click

from ..calc.memory import inference as mi
from ..calc.memory import training as mt
from ..calc.parallel.shards import parse_bytes_overrides, verdict
from ..calc.memory.schedule import FRAMEWORKS, SCHEDULES
from ..errors import MlsysError, require
from ..specs.gpu import DEFAULT_GPU
from ..units import fmt_bytes
from . import render
from .options import POSITIVE, fsdp_framework, model_argument, world_dp, positive_int, reject_unused, resolve_model
from .plots import plot_note
from .train import pipeline_split_options

TRAIN_SWEEPS = {"zero": (0, 1, 2, 3), "recompute": mt.RECOMPUTE, "optimizer": mt.OPTIMIZERS}
INFER_SWEEPS = {"dtype": mi.WEIGHT_DTYPES, "kv_dtype": ("fp32", "bf16", "fp8", "int8", "int4")}
_BYTE_MEANING = {
    "weight": "weights (per parameter)", "grad": "gradients (per parameter)",
    "master": "fp32 master weights (per parameter, mixed precision)", "state": "per optimizer-state element",
    "activation": "saved activations (per element)", "mask": "dropout masks (per element)",
    "logits": "loss temporaries per logit (fp32 log-probs + 2 gradients)",
    "logits_saved": "per logit of each other micro-batch in flight: its loss's saved log-probs",
    "logits_kept": "per logit of each micro-batch: last pipeline stage outputs kept to the step's end",
    "gather": "ZeRO-3 gathered weights (per parameter)",
    "fp8": "FP8 linears' saved inputs (per element; --dtype fp8)",
    "fp8_weight_copy": "FP8 weight copies TE keeps (per FP8-linear weight element: rowwise + transpose)",
    "base": "embeddings, lm_head, norms, biases", "kv": "KV cache (per element)",
    "scale": "quantisation scale (per group)", "zero": "quantisation zero point (per group)",
}


_FRAMEWORK_NOTE = {
    "megatron": "Gradients are resident in both (persistent gradient buffers, as in Megatron-LM/DeepSpeed).",
    "torch": "Gradients are set to None between steps (PyTorch's zero_grad default): absent at the start of a step's "
             "first backward, except DDP's buckets (ZeRO-0 with dp x cp > 1).",
}


def _gb(value: int) -> str:
    return f"{value / 1e9:,.2f} GB"


def _parts_table(title: str, parts: dict[str, int], total: int):
    rows = [[k, v, fmt_bytes(v), _gb(v), f"{100 * v / total:.1f}%" if total else "-"] for k, v in parts.items()]
    rows.append(["total", total, fmt_bytes(total), _gb(total), "100.0%"])
    return render.table(title, ["part", "bytes", "KiB..TiB (2^10..)", "GB (10^9)", "share"], rows)


def _assumptions(nbytes: dict) -> render.Table:
    rows = [[k, v, _BYTE_MEANING.get(k, "")] for k, v in nbytes.items()]
    return render.table("bytes per element (override with --bytes KEY=VALUE)", ["key", "bytes", "applies to"], rows)


def _fit(data: dict, tables: list, gpu: str | None, total: int, reserve: str):
    data["fits"] = None
    if not gpu:
        return None
    from ..specs.gpu import load_gpu

    v = verdict(load_gpu(gpu), total, reserve)
    data.update({"gpu": v.gpu, "fits": v.fits, "capacity_bytes": v.capacity_bytes, "reserve_bytes": v.reserve_bytes,
                 "usable_bytes": v.usable_bytes, "headroom_bytes": v.headroom_bytes})
    rows = [["GPU memory", v.capacity_bytes, fmt_bytes(v.capacity_bytes), _gb(v.capacity_bytes)],
            [f"reserve ({reserve})", v.reserve_bytes, fmt_bytes(v.reserve_bytes), _gb(v.reserve_bytes)],
            ["usable", v.usable_bytes, fmt_bytes(v.usable_bytes), _gb(v.usable_bytes)],
            ["needed", total, fmt_bytes(total), _gb(total)],
            ["headroom", v.headroom_bytes, fmt_bytes(v.headroom_bytes), _gb(v.headroom_bytes)]]
    tables.append(render.table(f"{v.gpu}: {'fits' if v.fits else 'does NOT fit'}", ["", "bytes", "KiB..TiB (2^10..)", "GB (10^9)"], rows))
    return v


def _bytes_json(parts: dict[str, int]) -> dict[str, int]:
    return {f"{k}_bytes": v for k, v in parts.items()}


def _gpu_options(func):
    func = click.option("--reserve", default="10%", show_default=True,
                        help="Memory kept back for the CUDA context, allocator and workspaces: a size (2GiB) or a share of the card (10%, vLLM's default utilisation 0.9).")(func)
    func = click.option("--gpu", default=DEFAULT_GPU, show_default=True,
                        help="GPU name or alias for the fits verdict (`mlsys gpus`).")(func)
    func = click.option("--bytes", "byte_overrides", multiple=True, metavar="KEY=VALUE",
                        help="Override a bytes-per-element assumption (printed in the output).")(func)
    return click.option("--plot", "plot_path", default=None, metavar="FILE",
                        help="Draw the breakdown as stacked bars across --sweep (PNG/SVG/PDF).")(func)


def _check_unused(ctx, plot_path, gpu) -> None:
    if not plot_path:
        reject_unused(ctx, {"sweep": "without --plot (it names the option the plot sweeps)"})


@click.group()
def memory():
    """Per-GPU memory for training and inference, and what fits on a GPU."""


@memory.command()
@model_argument
@positive_int("--batch", mt.TrainOptions.batch, "Micro-batch size (sequences).")
@positive_int("--seq", mt.TrainOptions.seq, "Sequence length (tokens).")
@positive_int("--grad-accum", mt.TrainOptions.grad_accum, "Micro-batches per step (with --pp: micro-batches in the pipeline).")
@click.option("--dtype", default=mt.TrainOptions.dtype, show_default=True,
              help="fp32, or bf16/fp16 mixed precision; fp8: bf16 with Transformer Engine's FP8 linears.")
@click.option("--fp8-params/--no-fp8-params", default=mt.TrainOptions.fp8_params, show_default=True,
              help="--dtype fp8: the linears' weights are FP8 themselves (Megatron-LM --fp8-param-gather).")
@click.option("--master-weights/--no-master-weights", default=True, show_default=True,
              help="bf16/fp16: keep fp32 master weights and fp32 optimizer states (off: everything in --dtype).")
@click.option("--optimizer", type=click.Choice(mt.OPTIMIZERS), default="adamw", show_default=True)
@click.option("--gpus", type=click.IntRange(min=1), default=None,
              help="GPUs in the job (the world size, as `mlsys train --gpus`): dp = gpus / (tp*pp*cp).")
@click.option("--dp", type=click.IntRange(min=1), default=None, help="Data-parallel ranks [default: gpus/(tp*pp*cp), else 1].")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel ranks.")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline stages (see --schedule).")
@click.option("--vp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model chunks per pipeline rank: the interleaved 1F1B schedule.")
@click.option("--sp/--no-sp", default=False, show_default=True, help="Megatron sequence parallelism over the TP ranks.")
@click.option("--vocab-parallel/--no-vocab-parallel", default=mt.TrainOptions.vocab_parallel, show_default=True,
              help="With --tp: embedding, lm_head and logits split over the vocabulary, or whole on every TP rank.")
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
              help="Expert-parallel ranks: the routed experts split over ep of each stage's tp x cp x dp ranks.")
@click.option("--etp", type=click.IntRange(min=1), default=None,
              help="Expert tensor-parallel ranks: each routed expert split over etp ranks; etp x ep divides "
                   "tp x cp x dp, the experts' states shard by ZeRO over the rest (edp) [default: --tp].")
@click.option("--cp", type=click.IntRange(min=1), default=1, show_default=True, help="Context-parallel ranks (sequence split, ring attention).")
@click.option("--zero", type=click.IntRange(0, 3), default=None, help="ZeRO stage 0-3 (default 0), sharded over dp x cp: 1 optimizer states, 2 + gradients, 3 + weights.")
@click.option("--fsdp", default=None, help="FSDP strategy: full_shard (= --zero 3), shard_grad_op (= 2), no_shard (= 0).")
@click.option("--offload", type=click.Choice(mt.OFFLOAD), default="none", show_default=True, help="ZeRO-Offload of the optimizer to CPU memory.")
@click.option("--recompute", type=click.Choice(mt.RECOMPUTE), default="none", show_default=True,
              help="selective: attention scores recomputed; full: each layer keeps only its input (Korthikanti et al. 2022).")
@click.option("--flash/--no-flash", default=True, show_default=True, help="Flash attention: no S x S scores saved.")
@click.option("--dropout/--no-dropout", default=False, show_default=True, help="Dropout masks (1 byte per element).")
@click.option("--capacity-factor", type=POSITIVE, default=1.0, show_default=True, help="MoE: expert slots per routed token.")
@click.option("--schedule", type=click.Choice(SCHEDULES), default=mt.TrainOptions.schedule, show_default=True,
              help="Pipeline schedule: 1f1b (stage s holds min(pp - s, m) micro-batches), gpipe (all m), zb1p (as "
                   "1f1b) or dualpipe (rank s holds stages s and pp - 1 - s and pp + 1 micro-batches of them).")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=mt.TrainOptions.framework, show_default=True,
              help="What the training code keeps: megatron (persistent gradient buffers) or torch (gradients set to "
                   "None, DDP buckets, FSDP2 fp32 shards, loss_parallel, torch.distributed.pipelining buffers).")
@click.option("--grad-accumulation-fusion/--no-grad-accumulation-fusion", default=None,
              help="The head's weight gradient written straight into the gradient buffer (Megatron-LM's default) "
                   "rather than returned through autograd (plain torch): with a tied embedding, autograd holds three "
                   "table-sized gradients at the backward's end. Default: the --framework's.")
@click.option("--world-size", type=click.IntRange(min=1), default=None,
              help="Check dp*tp*pp*cp against this (kept for scripts; --gpus also derives dp).")
@pipeline_split_options
@click.option("--sweep", type=click.Choice(list(TRAIN_SWEEPS)), default="zero", show_default=True, help="Option swept by --plot.")
@_gpu_options
@render.output_options
@click.pass_context
def train(ctx, model, overrides, batch, seq, grad_accum, dtype, fp8_params, master_weights, optimizer, gpus, dp, tp, pp, vp, sp,
          vocab_parallel, ep, etp, cp, zero, fsdp, offload, recompute, flash, dropout, capacity_factor, schedule, framework, grad_accumulation_fusion, world_size, pipeline_split, sweep, plot_path,
          byte_overrides, gpu, reserve, fmt, as_json):
    """Per-GPU memory of a training step of MODEL: weights, gradients, optimizer states,
    activations (Korthikanti et al. 2022) and temporaries at the peak, for the worst pipeline
    stage. Defaults: mixed-precision AdamW at 2 + 2 + 12 bytes per parameter, gradients
    resident at the start of backward. Every bytes-per-element assumption is printed and can
    be overridden with --bytes.
    """
    _check_unused(ctx, plot_path, gpu)
    spec = resolve_model(model, overrides)
    require(zero is None or fsdp is None, "give --zero or --fsdp, not both")
    framework = fsdp_framework(framework, fsdp)
    dp = world_dp(gpus, dp, tp, pp, cp)
    stage = mt.zero_from_fsdp(fsdp) if fsdp else (0 if zero is None else zero)
    opts = mt.TrainOptions(batch=batch, seq=seq, grad_accum=grad_accum, dtype=dtype, fp8_params=fp8_params,
                           master_weights=master_weights,
                           optimizer=optimizer, dp=dp, tp=tp, pp=pp, sp=sp, ep=ep, etp=etp, cp=cp, zero=stage,
                           offload=offload,
                           recompute=recompute, flash=flash, dropout=dropout, capacity_factor=capacity_factor,
                           schedule=schedule, vp=vp, framework=framework, world_size=world_size,
                           grad_accumulation_fusion=grad_accumulation_fusion,
                           bytes_overrides=parse_bytes_overrides(byte_overrides), vocab_parallel=vocab_parallel,
                           pipeline_split=pipeline_split)
    r = mt.train_memory(spec, opts)
    peak = r.peak_stage
    data = {
        "model": r.model, "batch": batch, "seq": seq, "grad_accum": grad_accum, "dtype": dtype, "fp8_params": fp8_params,
        "master_weights": master_weights, "optimizer": optimizer,
        "parallel": {"dp": dp, "tp": tp, "pp": pp, "vp": vp, "sp": sp, "ep": ep, "etp": opts.experts.expert_tp,
                     "edp": opts.experts.edp, "cp": cp, "world_size": r.world_size,
                     "vocab_parallel": vocab_parallel, "pipeline_split": pipeline_split.as_dict()},
        "zero": stage, "offload": offload, "recompute": recompute, "flash": flash, "dropout": dropout,
        "total_bytes": r.total, "peak_bytes": r.total, **_bytes_json(dict(r.breakdown)),
        "breakdown": _bytes_json(dict(r.breakdown)), "detail": _bytes_json(dict(peak.detail)),
        "cpu_offload_bytes": peak.cpu_bytes, "peak_stage": peak.stage, "schedule": schedule, "framework": framework,
        "grad_accumulation_fusion": opts.wgrad_fusion,
        "peak_phase": peak.phase, "phases": _bytes_json(dict(peak.phases)),
        "model_state_bytes_unsharded": r.model_state_bytes_unsharded,
        "stages": [{"stage": s.stage, "layers": s.layers, "micro_batches_in_flight": s.micro_batches_in_flight,
                    "params": s.params, "total_bytes": s.total, "phase": s.phase, "phases": _bytes_json(dict(s.phases)),
                    "breakdown": _bytes_json(dict(s.breakdown))} for s in r.stages],
        "activation_bytes_per_layer": {name: round(b) for name, b in r.activation_items},
        "bytes_per_element": dict(r.bytes_per_element),
    }
    title = (f"{spec.name}: training, micro-batch {batch} x {seq} tokens, {dtype}, {optimizer}, "
             f"dp{dp} tp{tp} pp{pp} cp{cp} ep{ep} etp{opts.experts.expert_tp}, ZeRO-{stage}, recompute {recompute} (per GPU, stage {peak.stage})")
    tables = [_parts_table(title, dict(r.breakdown), r.total),
              _parts_table("detail", dict(peak.detail), r.total)]
    layer_total = sum(b for _, b in r.activation_items)
    tables.append(render.table("activations saved per layer (layer 0, one micro-batch, this rank)",
                               ["tensor", "bytes", "KiB..TiB (2^10..)"], [[n, round(b), fmt_bytes(b)] for n, b in r.activation_items]
                               + [["layer total (before recompute)", round(layer_total), fmt_bytes(layer_total)]]))
    if pp > 1:
        tables.append(render.table("pipeline stages", ["stage", "layers", "micro-batches in flight", "peak phase",
                                                       "total bytes", "KiB..TiB (2^10..)"],
                                   [[s.stage, s.layers, s.micro_batches_in_flight, s.phase, s.total, fmt_bytes(s.total)]
                                    for s in r.stages]))
    tables.append(_assumptions(dict(r.bytes_per_element)))
    v = _fit(data, tables, gpu, r.total, reserve)
    notes = [
        f"Peak = the largest of a stage's phases, here the {peak.phase} phase: the start of backward (saved "
        "activations of the micro-batches in flight, the loss's fp32 logits temporaries, gradients if they exist then), "
        "a later backward when gradients were absent at the first, the backward's end on the embedding's stage (all "
        "gradients and the embedding-sized gradients autograd holds: 3 with a tied head and no gradient-accumulation "
        "fusion, else 1) or the optimizer step (weights, all gradients, optimizer states). " + _FRAMEWORK_NOTE[framework],
        f"Model states (weights + gradients + optimizer) of all parameters on one GPU: {r.model_state_bytes_unsharded:,} bytes.",
    ]
    if opts.zero == 3:
        notes.append("ZeRO-3 temporaries: the gathered weights (`weight` bytes each) of two decoder layers (the one in "
                     "use and the one prefetched) and of the root unit (embeddings, final norm, head), which FSDP keeps "
                     "unsharded from forward to the end of backward; this assumes each decoder layer is wrapped as a unit.")
    if peak.cpu_bytes:
        notes.append(f"ZeRO-Offload: {peak.cpu_bytes:,} bytes ({fmt_bytes(peak.cpu_bytes)}) of fp32 master weights and "
                     "optimizer states per rank live in CPU memory; the optimizer step runs on the CPU.")
    if plot_path:
        pairs = _sweep(mt.train_memory, spec, opts, sweep, TRAIN_SWEEPS[sweep])
        title = (f"{spec.name}: training memory per GPU{' on ' + v.gpu if v else ''}, dp {dp} x tp {tp} x pp {pp}, "
                 f"micro-batch {batch} x {seq}, {dtype}, across {sweep}")
        _plot(plot_path, title, sweep, pairs, v, notes, data)
    render.emit(render.Output(data, tuple(tables), tuple(notes)), fmt, as_json)


def _sweep(calc, spec, opts, option, values):
    """(value, result) for each swept value the options allow (e.g. --offload skips ZeRO-0)."""
    pairs = []
    for val in values:
        try:
            pairs.append((val, calc(spec, replace(opts, **{option: val}))))
        except MlsysError:
            continue
    return pairs


def _plot(path, title, option, pairs, v, notes, data):
    from ..report.memory_plot import plot_breakdowns

    plot_breakdowns(path, title, option, [str(x) for x, _ in pairs], [dict(r.breakdown) for _, r in pairs],
                    v.usable_bytes if v else None)
    notes.append(plot_note(path))
    data["plot"] = str(path)


@memory.command()
@model_argument
@positive_int("--batch", mi.InferOptions.batch, "Sequences served together.")
@positive_int("--context", mi.InferOptions.context, "Tokens per sequence in the KV cache (prompt + output).")
@click.option("--dtype", default=mi.InferOptions.dtype, show_default=True, help="Weights of the decoder projections: " + ", ".join(mi.WEIGHT_DTYPES) + ".")
@click.option("--base-dtype", default=mi.InferOptions.base_dtype, show_default=True, help="Embeddings, lm_head, norms, activations.")
@click.option("--kv-dtype", default=mi.InferOptions.kv_dtype, show_default=True)
@click.option("--group-size", type=click.IntRange(min=1), default=None, help="Quantisation group (input columns per scale); default int4 128, nf4 64, int8 per channel.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel ranks (split weights and KV heads).")
@click.option("--block-size", type=click.IntRange(min=0), default=0, show_default=True, help="Paged KV block (tokens); 0 = contiguous.")
@positive_int("--prefill-chunk", mi.InferOptions.prefill_chunk, "Tokens per prefill step (activation workspace).")
@click.option("--flash/--no-flash", default=True, show_default=True)
@click.option("--max", "solve", type=click.Choice(["batch", "context"]), default=None, help="Solve for the largest batch or context that fits --gpu.")
@click.option("--sweep", type=click.Choice(list(INFER_SWEEPS)), default="dtype", show_default=True, help="Option swept by --plot.")
@_gpu_options
@render.output_options
@click.pass_context
def infer(ctx, model, overrides, batch, context, dtype, base_dtype, kv_dtype, group_size, tp, block_size, prefill_chunk,
          flash, solve, sweep, plot_path, byte_overrides, gpu, reserve, fmt, as_json):
    """Per-GPU memory for serving MODEL: weights, KV cache and activation workspace; with
    --gpu a fits verdict, and with --max the largest batch or context that fits. KV cache:
    K and V of the KV heads (MLA: the compressed latent), sliding windows honoured, --tp
    splitting KV heads (replicating them when tp exceeds them).
    """
    _check_unused(ctx, plot_path, gpu)
    spec = resolve_model(model, overrides)
    opts = mi.InferOptions(batch=batch, context=context, dtype=dtype, base_dtype=base_dtype, kv_dtype=kv_dtype,
                           group_size=group_size, tp=tp, block_size=block_size, prefill_chunk=prefill_chunk,
                           flash=flash, bytes_overrides=parse_bytes_overrides(byte_overrides))
    notes = []
    solved = 0  # with --max: the largest batch or context that fits
    if solve:
        from ..specs.gpu import load_gpu

        usable = verdict(load_gpu(gpu), 0, reserve).usable_bytes
        solved, found = mi.solve_max(spec, opts, solve, usable)
        if found is None:
            notes.append(f"Nothing fits: even {solve} = 1 needs more than the usable memory; showing {solve} = 1.")
        fitted = max(solved, 1)
        opts = replace(opts, batch=fitted) if solve == "batch" else replace(opts, context=fitted)
    r = mi.infer_memory(spec, opts)
    data = {
        "model": r.model, "batch": opts.batch, "context": opts.context, "dtype": dtype, "kv_dtype": kv_dtype,
        "base_dtype": base_dtype, "tp": tp, "block_size": block_size, "prefill_chunk": prefill_chunk,
        "total_bytes": r.total, **_bytes_json(dict(r.breakdown)), "breakdown": _bytes_json(dict(r.breakdown)),
        "detail": _bytes_json(dict(r.detail)), "kv_bytes_per_token": r.kv_bytes_per_token,
        "kv_bytes_per_token_per_layer": r.kv_bytes_per_token / spec.num_layers,
        "bytes_per_element": dict(r.bytes_per_element),
    }
    if solve:
        data.update({"solved_for": solve, "max_value": solved, f"max_{solve}": solved})
    title = (f"{spec.name}: inference, batch {opts.batch} x {opts.context} tokens, weights {dtype}, KV {kv_dtype}, "
             f"tp {tp} (per GPU)")
    tables = [_parts_table(title, dict(r.breakdown), r.total), _parts_table("detail", dict(r.detail), r.total),
              _assumptions(dict(r.bytes_per_element))]
    v = _fit(data, tables, gpu, r.total, reserve)
    notes.append(f"KV cache: {r.kv_bytes_per_token:,.0f} bytes per token on this rank "
                 f"({spec.kv_cache_elements_per_token} elements per token per layer before TP)"
                 + (f"; {spec.sliding_window_layers} layers keep a {spec.sliding_window}-token window" if spec.sliding_window else "") + ".")
    if spec.mla is not None and tp > 1:
        notes.append("MLA: the compressed latent is shared by all heads, so every TP rank keeps the whole KV cache.")
    elif spec.mla is None and tp > spec.num_kv_heads:
        notes.append(f"tp {tp} > {spec.num_kv_heads} KV heads: each rank keeps one KV head (replicated {tp // spec.num_kv_heads}x).")
    if solve:
        notes.append(f"Largest {solve} that fits {gpu} after the reserve: {solved:,}.")
        if solve == "context" and spec.max_position_embeddings and solved > spec.max_position_embeddings:
            notes.append(f"(beyond the model's max_position_embeddings {spec.max_position_embeddings:,})")
    if plot_path:
        pairs = _sweep(mi.infer_memory, spec, opts, sweep, INFER_SWEEPS[sweep])
        title = (f"{spec.name}: inference memory per GPU{' on ' + v.gpu if v else ''}, tp {tp}, batch {opts.batch} x "
                 f"{opts.context} tokens, across {sweep}")
        _plot(plot_path, title, sweep, pairs, v, notes, data)
    render.emit(render.Output(data, tuple(tables), tuple(notes)), fmt, as_json)
