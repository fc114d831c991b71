"""`mlsys roofline op KIND ...` (one kernel) and `mlsys roofline [model] MODEL ...` (a whole step).

The group treats a first argument that is not a subcommand as a MODEL, so
`mlsys roofline llama2-7b --phase decode` is `mlsys roofline model llama2-7b --phase decode`.
"""

from __future__ import annotations

import functools

import click

from ..calc.roofline.calibration import EFFICIENCY_FIELDS, KERNEL_GAP_S, LAUNCH_OVERHEAD_S
from ..calc.roofline.memory_bound import elementwise_op, embedding_op, norm_op, rotary_op, softmax_op
from ..calc.roofline.model import predict_model
from ..calc.roofline.options import IMPLS, LAUNCHES, LOGITS, LOSSES, PHASES, RECOMPUTE, WINDOW_MODES, RooflineOptions
from ..calc.roofline.steady import CLOCKS
from ..calc.roofline.ops import predict_attention, predict_matmul
from ..calc.roofline.sweep import sweep_batch
from ..errors import MlsysError, require
from ..units import parse_count
from ..validate import count as whole
from . import render
from .intervals import with_interval
from .options import ceilings_from_options, host_options, model_argument, positive_int, reject_unused, resolve_model
from .plots import with_plot
from .roofline_views import model_output, op_output, sweep_output

DTYPES = ("bf16", "fp16", "fp8", "int8", "tf32", "fp32", "nvfp4", "mxfp4", "mxfp6", "mxfp8")


class _ModelDefaultGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["model", *args]
        return super().parse_args(ctx, args)


def ceiling_options(func):
    """--gpu, --calibration, --efficiency, --launch-us, --plot: shared by every roofline command."""
    @click.option("--gpu", default=None, help="GPU name or alias (`mlsys gpus`); default H100-SXM, or the "
                  "calibration file's GPU.")
    @click.option("--calibration", type=click.Path(dir_okay=False), default=None,
                  help="Measured ceilings from `mlsys bench ceilings` instead of datasheet x efficiency.")
    @click.option("--efficiency", "efficiency", multiple=True, metavar="KIND=FRACTION",
                  help=f"Override an efficiency ceiling ({', '.join(EFFICIENCY_FIELDS)}), e.g. --efficiency matmul=0.8.")
    @click.option("--launch-us", type=click.FloatRange(min=0), default=None,
                  help=f"Fixed cost per kernel in microseconds (default {LAUNCH_OVERHEAD_S * 1e6:g}, or the "
                  "calibration's).")
    @click.option("--gap-us", type=click.FloatRange(min=0, max=1e6), default=None,
                  help=f"Idle microseconds on the stream before each kernel of a step (default {KERNEL_GAP_S * 1e6:g}, "
                  "or the calibration's; 0 prices kernels back to back).")
    @click.option("--plot", type=click.Path(dir_okay=False), default=None,
                  help="Write a roofline plot (PNG or SVG by extension).")
    @functools.wraps(func)
    def wrapper(*args, gpu, calibration, efficiency, launch_us, gap_us, **kwargs):
        return func(*args, ceilings=ceilings_from_options(gpu, calibration, efficiency, launch_us, gap_us), **kwargs)
    return wrapper


def _emit_op(pred, ceilings, plot, fmt, as_json) -> None:
    output = op_output(pred, ceilings)
    if plot:
        from ..report.roofline_plots import plot_roofline

        plot_roofline(ceilings, [pred], plot, dtype=pred.dtype if pred.kind != "memory" else "bf16")
        output = with_plot(output, plot)
    render.emit(output, fmt, as_json)


@click.group(cls=_ModelDefaultGroup)
def roofline():
    """Roofline time predictions: `op KIND` for one kernel, `[model] MODEL` for a whole step.

    predicted = max(compute, memory, a GEMM's floor) + a fixed per-kernel cost, where compute counts tile and
    wave quantisation over the SMs and both use achievable ceilings (datasheet x efficiency, or
    measured with --calibration). See docs/roofline.md.
    """


@roofline.group()
def op():
    """One kernel: matmul, attention, elementwise, norm, softmax, rotary, embedding."""


def _dtype_option(default: str = "bf16"):
    return click.option("--dtype", type=click.Choice(DTYPES), default=default, show_default=True,
                        help="Compute/storage dtype.")


@op.command()
@positive_int("--m", 4096, "Rows of A and C.")
@positive_int("--n", 4096, "Columns of B and C.")
@positive_int("--k", 4096, "Inner dimension.")
@positive_int("--batch", 1, "Independent matmuls (batched GEMM).")
@_dtype_option()
@click.option("--weight-dtype", default=None, help="B's storage dtype if different (e.g. int4 for W4A16).")
@ceiling_options
@render.output_options
def matmul(m, n, k, batch, dtype, weight_dtype, ceilings, plot, fmt, as_json):
    """(M, K) @ (K, N): FLOPs 2MNK, bytes MK + NK + MN elements, tile/wave-quantised compute."""
    pred = predict_matmul(m, n, k, dtype, ceilings, batch=batch, weight_dtype=weight_dtype)
    _emit_op(pred, ceilings, plot, fmt, as_json)


@op.command()
@positive_int("--batch", 1, "Sequences.")
@positive_int("--heads", 32, "Query heads.")
@click.option("--kv-heads", type=click.IntRange(min=1), default=None, help="KV heads (GQA/MQA); default --heads.")
@positive_int("--seq", 4096, "Query length.")
@click.option("--kv-len", type=click.IntRange(min=1), default=None, help="Keys per query; default --seq.")
@positive_int("--head-dim", 128, "Per-head width of Q and K.")
@click.option("--v-head-dim", type=click.IntRange(min=1), default=None, help="Per-head width of V; default --head-dim.")
@click.option("--causal", is_flag=True, help="Causal mask (keeps 1 - Sq/(2 Skv) of the scores).")
@click.option("--window", type=click.IntRange(min=1), default=None,
              help="Sliding window W (with --causal): skip KV tiles outside it (FLOPs ~ Sq x min(Skv, W)).")
@click.option("--chunk", type=click.IntRange(min=1), default=None,
              help="Chunked attention C (with --causal; Llama 4): each query sees its own chunk's keys only.")
@click.option("--backward", is_flag=True, help="FlashAttention-2 backward instead of forward.")
@_dtype_option()
@click.option("--kv-dtype", default=None, help="K/V storage dtype (e.g. fp8 cache); default --dtype.")
@ceiling_options
@render.output_options
def attention(batch, heads, kv_heads, seq, kv_len, head_dim, v_head_dim, causal, window, chunk, backward, dtype,
              kv_dtype, ceilings, plot, fmt, as_json):
    """Flash-style attention: Q, K, V read once, O written once (no S x S round trip)."""
    require(window is None or chunk is None, "--window and --chunk are two attention kinds: give one")
    pred = predict_attention(batch, heads, kv_heads or heads, seq, kv_len or seq, head_dim, causal, dtype, ceilings,
                             v_head_dim=v_head_dim, kv_dtype=kv_dtype, backward=backward, window=window or chunk,
                             mask="chunked_attention" if chunk else "sliding_attention")
    _emit_op(pred, ceilings, plot, fmt, as_json)


@op.command()
@click.option("--elements", default="16M", show_default=True, help="Elements per tensor (accepts 16M, 1e8).")
@positive_int("--inputs", 1, "Tensors read.")
@positive_int("--outputs", 1, "Tensors written.")
@click.option("--flops-per-element", type=click.FloatRange(min=0), default=1.0, show_default=True)
@_dtype_option()
@ceiling_options
@render.output_options
def elementwise(elements, inputs, outputs, flops_per_element, dtype, ceilings, plot, fmt, as_json):
    """y = f(x1..xn) element by element (residual add: --inputs 2)."""
    count = whole(parse_count(elements, "--elements"), "--elements")
    _emit_op(elementwise_op(count, inputs, outputs, flops_per_element, dtype, ceilings), ceilings, plot, fmt, as_json)


def _memory_command(name: str, builder, doc: str, sizes: list[tuple[str, int, str]]) -> None:
    """Register `op NAME` for a memory-bound kernel builder taking its sizes as keyword arguments."""
    def command(dtype, ceilings, plot, fmt, as_json, **kwargs):
        _emit_op(builder(dtype=dtype, gpu=ceilings, **kwargs), ceilings, plot, fmt, as_json)

    command.__doc__ = doc
    command = _dtype_option()(ceiling_options(render.output_options(command)))
    for flag, default, help_text in reversed(sizes):
        command = positive_int(flag, default, help_text)(command)
    op.command(name)(command)


_memory_command("norm", norm_op, "RMSNorm/LayerNorm over (tokens, hidden).",
                [("--tokens", 4096, "Rows."), ("--hidden", 4096, "Normalised width.")])
_memory_command("softmax", softmax_op, "Row softmax, one read and one write.",
                [("--rows", 4096, "Rows."), ("--cols", 32000, "Row length (e.g. the vocabulary).")])
_memory_command("rotary", rotary_op, "Rotary position embedding applied to q and k.",
                [("--tokens", 4096, "Tokens."), ("--heads", 40, "Query + key heads rotated."),
                 ("--rotary-dim", 128, "Rotated dims per head.")])
_memory_command("embedding", embedding_op, "Embedding lookup: only the looked-up rows are read.",
                [("--tokens", 4096, "Token ids looked up."), ("--hidden", 4096, "Embedding width.")])


def _sweep_values(text: str) -> list[int]:
    key, sep, values = text.partition("=")
    if key.strip() != "batch" or not sep:
        raise MlsysError(f"--sweep {text!r}: expected batch=1,2,4,... (only batch sweeps are supported)")
    batches = [parse_count(v, "--sweep batch") for v in values.split(",") if v.strip()]
    for value in batches:
        if value != int(value):
            raise MlsysError(f"--sweep batch: {value:g} is not a whole number of sequences")
    return [int(v) for v in batches]


@roofline.command("model")
@model_argument
@click.option("--phase", type=click.Choice(PHASES), default=RooflineOptions.phase, show_default=True)
@positive_int("--batch", RooflineOptions.batch, "Sequences in the batch.")
@positive_int("--seq", RooflineOptions.seq, "prefill/train: tokens per sequence.")
@click.option("--context", type=click.IntRange(min=0), default=RooflineOptions.context, show_default=True,
              help="decode: tokens already in the KV cache (required).")
@positive_int("--tp", RooflineOptions.tp, "Tensor-parallel GPUs (Megatron-style).")
@click.option("--dtype", default=RooflineOptions.dtype, show_default=True,
              help="Weights/activations: bf16, fp16, fp8, int8, fp32; int4/nf4 = weight-only (bf16 compute); "
                   "nvfp4, mxfp4, mxfp6, mxfp8 = block-scaled weights and activations (docs/formats.md).")
@click.option("--matmul-dtype", default=None,
              help="The GEMMs' activation dtype when it differs from --dtype's weights: --dtype nvfp4 --matmul-dtype "
                   "bf16 is W4A16, --matmul-dtype fp8 W4A8 (default: --dtype's; int4/nf4 compute in bf16).")
@click.option("--kv-dtype", default=None, help="KV cache dtype; default --dtype.")
@click.option("--cluster", default=None, help="Cluster spec for the TP collectives; default: one with this GPU.")
@click.option("--no-fit-check", is_flag=True, help="Predict even if weights + KV cache exceed GPU memory.")
@click.option("--sweep", default=None, metavar="batch=1,2,4,...", help="Decode/prefill curve over batch sizes.")
@click.option("--sliding-window", "window", type=click.Choice(WINDOW_MODES), default=RooflineOptions.window,
              show_default=True, help="Sliding-window layers: kernels skip KV tiles outside the window, or count "
              "the full causal sequence.")
@click.option("--recompute", type=click.Choice(RECOMPUTE), default=RooflineOptions.recompute, show_default=True,
              help="train: activation recomputation (selective = attention core only).")
@positive_int("--dp", RooflineOptions.dp, "train: data-parallel replicas (adds gradient communication).")
@click.option("--zero", type=click.IntRange(0, 3), default=RooflineOptions.zero, show_default=True,
              help="train with --dp: ZeRO stage (communication rules of `mlsys comm step`).")
@click.option("--dp-overlap", is_flag=True, help="train with --dp: overlap DP traffic with the backward kernels.")
@click.option("--impl", type=click.Choice(IMPLS), default=RooflineOptions.impl, show_default=True,
              help="Kernels per op: fused (one each) or torch (the kernels plain PyTorch runs; docs/roofline.md).")
@click.option("--logits", type=click.Choice(LOGITS), default=RooflineOptions.logits, show_default=True,
              help="prefill: lm_head over all positions, or only the last one (as serving engines do).")
@click.option("--launch", type=click.Choice(LAUNCHES), default=None,
              help="With --impl torch: the step replayed from a CUDA graph (no host path), or issued eagerly from "
                   "Python (adds the host's path: per layer for prefill/decode, per kernel for train; docs/roofline.md, "
                   "\"Host path\"). Default: graph for prefill/decode, eager for train.")
@click.option("--master-weights/--no-master-weights", default=RooflineOptions.master_weights, show_default=True,
              help="train: AdamW over fp32 master weights and moments, or states in --dtype.")
@click.option("--clocks", type=click.Choice(CLOCKS), default=None,
              help="sustained: the steady rates back-to-back heavy kernels reach under the card's power cap; burst: "
                   "short calls' efficiencies (docs/roofline.md, \"Sustained clocks\"). Default: sustained for "
                   "train, burst for prefill and decode.")
@click.option("--loss", "loss_kernels", type=click.Choice(LOSSES), default=RooflineOptions.loss, show_default=True,
              help="train with --impl fused: the loss's kernels, fp32 (Megatron-LM's vocab-parallel cross-entropy) or "
                   "fused (one chunked kernel).")
@click.option("--dropout", type=click.FloatRange(0.0, 1.0, max_open=True), default=RooflineOptions.dropout,
              show_default=True, help="train: hidden dropout before each residual add (its 1-byte mask).")
@host_options
@ceiling_options
@render.output_options
@click.pass_context
def model(ctx, model, overrides, phase, batch, seq, context, tp, dtype, matmul_dtype, kv_dtype, cluster, no_fit_check,
          sweep, window, recompute, dp, zero, dp_overlap, impl, logits, launch, master_weights, clocks, loss_kernels,
          dropout, host, ceilings, plot, fmt, as_json):
    """Per-kernel roofline of one layer (and the head) of MODEL, and the step's totals.

    prefill: time to first token; decode: time per output token (needs --context); train:
    forward + backward + AdamW step. Also tokens/s, MFU, MBU, and with --tp the collectives.
    """
    reject_unused(ctx, {"seq": "with --phase decode (one new token per sequence; --context sets the cache)"}
                  if phase == "decode" else {"context": "with --phase train (training keeps no KV cache)"}
                  if phase == "train" else {})
    spec = resolve_model(model, overrides)
    ceilings = ceilings.with_host(*host, source="--host-us-per-kernel/--host-ms-per-layer")
    opts = RooflineOptions(phase=phase, batch=batch, seq=seq, context=context, tp=tp, dtype=dtype,
                           matmul_dtype=matmul_dtype, kv_dtype=kv_dtype, cluster=cluster, check_fit=not no_fit_check, window=window,
                           recompute=recompute, dp=dp, zero=zero, dp_overlap=dp_overlap, impl=impl, logits=logits,
                           master_weights=master_weights, launch=launch, clocks=clocks, loss=loss_kernels,
                           dropout=dropout)
    if sweep:
        swept = sweep_batch(spec, ceilings, opts, _sweep_values(sweep))
        output = sweep_output(swept)
        if plot:
            from ..report.roofline_plots import plot_model

            plot_model(swept.points[0], plot, sweep=swept)
            output = with_plot(output, plot)
    else:
        result = predict_model(spec, ceilings, opts)
        output = with_interval(model_output(result), f"roofline_{opts.impl}_{opts.phase}", result.time_s,
                               label="predicted_s")
        if plot:
            from ..report.roofline_plots import plot_model

            plot_model(result, plot)
            output = with_plot(output, plot)
    render.emit(output, fmt, as_json)

