"""`mlsys train MODEL --gpus N ...`: one optimizer step of a full parallel layout."""

from __future__ import annotations

import functools

import click

from ..calc.roofline.calibration import load_ceilings, read_calibration
from ..calc.train.host import host_cost_fields, host_overrides
from ..calc.train.step import resolve_cluster
from ..calc.train.attention_time import ATTENTION
from ..calc.precision.fp8 import RECIPES
from ..calc.memory.schedule import FRAMEWORKS, SCHEDULES
from ..calc.train.options import DTYPES, GRAD_REDUCE, OVERLAP_DIMS, RECOMPUTE, TrainStepOptions
from ..calc.memory.training import zero_from_fsdp
from ..calc.roofline.options import LOSSES
from ..calc.roofline.steady import CLOCKS
from ..calc.parallel.pipeline_split import PipelineSplit
from ..errors import MlsysError, require
from ..specs.gpu import DEFAULT_GPU
from ..units import fmt_bytes
from ..validate import check_gpus
from . import render
from .intervals import train_interval_key, with_interval
from .cost_views import run_options, with_step_cost
from .hardware_notes import with_ceilings_note
from .options import POSITIVE, fsdp_framework, model_argument, positive_int, reject_unused, resolve_model
from .train_fit import fit_layout, with_fit

D = TrainStepOptions


def cluster_options(func):
    """--gpus, --gpu, --cluster, --calibration, --seq, --global-batch: shared by train and plan."""
    @positive_int("--gpus", D.gpus, "GPUs in the job (tp x pp x dp x cp).")
    @click.option("--gpu", default=None, help=f"GPU name or alias (`mlsys gpus`); its built-in cluster links the GPUs "
                                              f"[default: the cluster's GPU, else {DEFAULT_GPU}].")
    @click.option("--cluster", default=None, help="Cluster name or JSON file (`mlsys comm`); default: the GPU's.")
    @click.option("--calibration", type=click.Path(dir_okay=False), default=None,
                  help="Measured kernel ceilings from `mlsys bench ceilings` instead of datasheet x efficiency; "
                       "its optional torch_host object replaces --framework torch's host costs (docs/train.md).")
    @click.option("--host-us-per-kernel", type=POSITIVE, default=None,
                  help="--framework torch: host microseconds per priced kernel (op_s), e.g. what `mlsys bench host` "
                       "measured on your host; replaces the built-in 53.7 and the calibration's torch_host.op_s.")
    @click.option("--host-costs", default=None, metavar="FILE|JSON",
                  help="--framework torch: host costs measured on your host, a JSON object (inline or a file) of "
                       "op_s, dtensor_matmul_s, fsdp_layer_s, dtensor_param_s (seconds), p2p_slowdown, "
                       "overlap_slowdown (shares), any subset; e.g. a row's host_probe.costs of "
                       "scripts/train_measure.py. Replaces the built-in costs and the calibration's torch_host.")
    @click.option("--nvlink-domain", type=click.IntRange(min=1), default=None,
                  help="GPUs the job takes in each NVLink domain (default: all of one domain, or across domains the "
                       "most that divides --gpus in whole nodes: 64 of a GB200 NVL72 rack's 72 for 256 GPUs).")
    @positive_int("--seq", D.seq, "Tokens per sequence.")
    @positive_int("--global-batch", D.global_batch, "Sequences per optimizer step, all replicas.")
    @functools.wraps(func)
    def wrapper(*args, gpus, gpu, cluster, calibration, host_us_per_kernel, host_costs, nvlink_domain, **kwargs):
        check_gpus(gpus, "--gpus")
        spec = resolve_cluster(gpu or (None if cluster else DEFAULT_GPU), cluster, gpus).for_job(gpus, nvlink_domain)
        ceilings = load_ceilings(gpu or spec.gpu, calibration)
        framework = kwargs.get("framework")
        if "fsdp" in kwargs:  # train: --fsdp implies --framework torch
            framework = fsdp_framework(framework, kwargs["fsdp"])
        host, source = torch_host_costs(read_calibration(calibration) if calibration else None, host_costs,
                                        host_us_per_kernel, framework)
        return func(*args, gpus=gpus, cluster=spec, ceilings=ceilings, host_costs=host, host_source=source, **kwargs)
    return wrapper


def torch_host_costs(calibration: dict | None, host_costs: str | None, host_us_per_kernel: float | None,
                     framework: str | None) -> tuple[tuple[tuple[str, float], ...], str]:
    """The torch host costs that replace the built-in ones, and a phrase naming where they come from: the
    calibration's torch_host, then --host-costs over it, then --host-us-per-kernel (op_s; not both with
    --host-costs' op_s). --host-costs needs --framework torch (megatron has no host term)."""
    host = dict(host_overrides(calibration))
    sources = ["the calibration file's torch_host"] if host else []
    if host_costs is not None:
        require(framework == "torch", "--host-costs prices --framework torch's host: add --framework torch")
        host |= dict(host_cost_fields(_json_object(host_costs), "--host-costs"))
        sources.append("--host-costs")
    if host_us_per_kernel is not None:
        require(host_costs is None or "op_s" not in host,
                "give op_s once: --host-us-per-kernel or --host-costs' op_s, not both")
        host["op_s"] = host_us_per_kernel * 1e-6
        sources.append("--host-us-per-kernel")
    return tuple(host.items()), " and ".join(sources)


def _json_object(text: str):
    """--host-costs: inline JSON (starting with { or [) or a JSON file."""
    import json
    from pathlib import Path

    from ..specs.lookup import read_json

    if not text.lstrip().startswith(("{", "[")):
        return read_json(Path(text), "--host-costs")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MlsysError(f"--host-costs: not valid JSON ({exc.msg} at column {exc.colno})") from None


def step_options(func):
    """--dtype, --overlap, --capacity-factor, --reserve: shared by train and plan (parsed overlap)."""
    @click.option("--dtype", type=click.Choice(DTYPES), default=D.dtype, show_default=True, help="Matmul dtype.")
    @click.option("--overlap", default=",".join(D.overlap), show_default=True,
                  help=f"Dimensions whose traffic hides behind compute: comma list of {', '.join(OVERLAP_DIMS)}, "
                       "or none.")
    @click.option("--capacity-factor", type=float, default=D.capacity_factor, show_default=True,
                  help="MoE: expert slots per routed token.")
    @click.option("--reserve", default=D.reserve, show_default=True, help="GPU memory kept back (size or share).")
    @click.option("--clocks", type=click.Choice(CLOCKS), default=D.clocks, show_default=True,
                  help="sustained: kernels at the steady rates an hours-long run reaches under the card's power cap "
                       "(measured: H100/H200 GEMMs 0.658 of the datasheet, not do_bench's 0.74); burst: the short-call "
                       "efficiencies (docs/train.md, \"Sustained clocks\").")
    @click.option("--loss", "loss_kernels", type=click.Choice(LOSSES), default=D.loss, show_default=True,
                  help="The loss's kernels: fp32 (Megatron-LM's vocab-parallel cross-entropy on logits cast to fp32, "
                       "its default; torch's F.cross_entropy(logits.float())), fused (--framework megatron: one chunked "
                       "kernel, as Liger-Kernel, Transformer Engine and Megatron-Bridge's --cross-entropy-loss-fusion "
                       "run it) or bf16 (--framework torch: F.cross_entropy on the bf16 logits, no upcast, as NeMo "
                       "AutoModel's fp32_upcast false; 6 bytes a logit element, not 16).")
    @click.option("--dropout", type=click.FloatRange(0.0, 1.0, max_open=True), default=D.dropout, show_default=True,
                  help="Hidden dropout before each residual add (its 1-byte mask is written and read back); "
                       "Megatron's GPT recipes use 0.1, Llama-style ones 0.")
    @click.option("--grad-reduce", type=click.Choice(GRAD_REDUCE), default=None,
                  help="The data-parallel gradient reduction's dtype. Default: the framework's (megatron fp32, as "
                       "Megatron-LM, NeMo and Megatron-Bridge reduce bf16 training's gradients; torch fp32 with FSDP, "
                       "the model's dtype with DDP).")
    @click.option("--clip-grad/--no-clip-grad", default=D.clip_grad, show_default=True,
                  help="The gradient norm and clipping before the optimizer step (Megatron-LM's --clip-grad 1.0).")
    @click.option("--attention", type=click.Choice(ATTENTION), default=D.attention, show_default=True,
                  help="Attention core: one flash kernel (the card's best: cuDNN, FlashAttention-3), flash2 (one of "
                       "FlashAttention-2's generation: flash-attn 2, SDPA's FLASH backend; on Hopper 0.59 of flash's "
                       "rate, measured), triton (the Triton flash-attention kernel of 2022 that llm-foundry runs: "
                       "flash2's time x 1.4 forward, x 2 backward, Dao 2023 section 4.1), or the unfused S x S kernels of Megatron-LM before flash attention "
                       "(Korthikanti et al. 2022, section 4.1).")
    @functools.wraps(func)
    def wrapper(*args, overlap, **kwargs):
        return func(*args, overlap=parse_overlap(overlap), **kwargs)
    return wrapper


def pipeline_split_options(func):
    """Megatron-LM's uneven pipeline options, parsed into one `pipeline_split`: shared by train and memory train."""
    @click.option("--decoder-first-pipeline-num-layers", "first", type=int, default=None,
                  help="Decoder layers on the first pipeline stage; the rest split evenly over the middle stages "
                       "(Megatron-LM's option; docs/train.md).")
    @click.option("--decoder-last-pipeline-num-layers", "last", type=int, default=None,
                  help="Decoder layers on the last pipeline stage (Megatron-LM's option).")
    @click.option("--account-for-embedding-in-pipeline-split", "embedding", is_flag=True, default=False,
                  help="The embedding counts as one layer of the split: the first stage holds one decoder layer fewer.")
    @click.option("--account-for-loss-in-pipeline-split", "loss", is_flag=True, default=False,
                  help="The loss counts as one layer of the split: the last stage holds one decoder layer fewer.")
    @functools.wraps(func)
    def wrapper(*args, first, last, embedding, loss, **kwargs):
        return func(*args, pipeline_split=PipelineSplit(first, last, embedding, loss), **kwargs)
    return wrapper


def fp8_options(func):
    """--fp8-recipe, --fp8-params (Transformer Engine's FP8 with --dtype fp8): shared by train and plan."""
    func = click.option("--fp8-params/--no-fp8-params", default=D.fp8_params, show_default=True,
                        help="--dtype fp8: the linears' weights are FP8 themselves (Megatron-LM "
                             "--fp8-param-gather).")(func)
    return click.option("--fp8-recipe", type=click.Choice(RECIPES), default=D.fp8_recipe, show_default=True,
                        help="--dtype fp8: Transformer Engine's scaling, delayed (amax history) or current (an amax "
                             "pass before each cast); docs/train_fp8.md.")(func)


def reject_step_unused(dtype: str, framework: str) -> None:
    """Options of train and plan that the chosen dtype or framework ignores (docs/cli.md)."""
    unused = {}
    if dtype != "fp8":
        unused["fp8_recipe"] = "without --dtype fp8 (Transformer Engine scales FP8 GEMMs only)"
    if framework != "torch":
        unused["host_us_per_kernel"] = f"with --framework {framework} (only torch's host time paces a step)"
    reject_unused(click.get_current_context(), unused)


def parse_overlap(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip() and x.strip() != "none")
    require(set(names) <= set(OVERLAP_DIMS), f"--overlap: use a comma list of {', '.join(OVERLAP_DIMS)} "
                                             f"(or none), got {text!r}")
    return names


@click.command()
@model_argument
@cluster_options
@positive_int("--micro-batch", D.micro_batch, "Sequences per micro-batch on one replica.")
@positive_int("--tp", D.tp, "Tensor-parallel GPUs (within a node).")
@positive_int("--pp", D.pp, "Pipeline stages (1F1B).")
@click.option("--dp", type=click.IntRange(min=1), default=None, help="Data-parallel replicas [default: gpus/(tp*pp*cp)].")
@positive_int("--cp", D.cp, "Context-parallel GPUs (sequence split, ring attention).")
@positive_int("--ep", D.ep, "Expert-parallel GPUs: the routed experts split over ep of each stage's tp x cp x dp ranks "
              "(Megatron-Core's MoE parallel folding).")
@click.option("--etp", type=click.IntRange(min=1), default=None,
              help="Expert tensor-parallel GPUs: each routed expert split over etp ranks; etp x ep must divide "
                   "tp x cp x dp [default: --tp, as Megatron-Core].")
@positive_int("--vp", D.vp, "Model chunks per GPU: the interleaved 1F1B schedule.")
@click.option("--sp/--no-sp", default=D.sp, show_default=True, help="Megatron sequence parallelism with --tp.")
@click.option("--vocab-parallel/--no-vocab-parallel", default=D.vocab_parallel, show_default=True,
              help="Memory with --tp: the embedding, lm_head and logits split over the vocabulary (Megatron), or "
                   "whole on every TP rank (a TP plan that leaves them unsharded).")
@click.option("--zero", type=click.IntRange(0, 3), default=None, help="ZeRO stage over dp x cp [default: 0].")
@click.option("--fsdp", default=None, help="FSDP strategy: full_shard (= --zero 3), shard_grad_op (= 2), no_shard (= 0).")
@click.option("--recompute", type=click.Choice(RECOMPUTE), default=D.recompute, show_default=True,
              help="Activation recomputation (selective: attention core only).")
@click.option("--comm-sms", type=click.IntRange(min=0), default=D.comm_sms, show_default=True,
              help="SMs NCCL holds while overlapped traffic runs (one per channel); compute beside it runs on "
                   "the rest. 0: overlapped traffic is free.")
@click.option("--schedule", type=click.Choice(SCHEDULES), default=D.schedule, show_default=True,
              help="Pipeline schedule: 1f1b (--vp interleaves it), gpipe (all micro-batches in flight; the same "
                   "bubble), zb1p (zero-bubble 1F1B: weight gradients fill the drain) or dualpipe (DeepSeek-V3's "
                   "bidirectional schedule: two copies of the parameters, pp + 1 micro-batches held); bubbles by the "
                   "DeepSeek-V3 report's Table 2 (docs/train.md).")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=D.framework, show_default=True,
              help="The training code: megatron (persistent gradient buffers; the host keeps ahead of the GPU) or "
                   "torch (gradients set to None, FSDP2, DTensor, torch pipelining; the host's time per op can pace "
                   "the step; docs/memory.md, docs/train.md).")
@pipeline_split_options
@fp8_options
@step_options
@run_options
@render.output_options
def train(model, overrides, gpus, cluster, ceilings, host_costs, host_source, seq, global_batch, micro_batch, tp, pp, dp, cp, ep, etp, vp, sp,
          vocab_parallel, zero, fsdp, recompute, comm_sms, schedule, framework, pipeline_split, fp8_recipe, fp8_params, dtype, overlap,
          capacity_factor, reserve, attention, clocks, loss_kernels, dropout, grad_reduce, clip_grad, price_per_gpu_hour, train_tokens,
          fmt, as_json):
    """Step time, tokens/s, MFU, HFU and memory per GPU of one training step of MODEL on a full
    TP x PP x DP x CP layout with its routed experts on an ETP x EP x EDP grid of each stage (Megatron-Core's
    MoE parallel folding): the roofline's kernel times per pipeline stage, the 1F1B bubble
    (p-1)/(v m), each dimension's exposed communication and the AdamW step (docs/train.md).
    """
    framework = fsdp_framework(framework, fsdp)
    reject_step_unused(dtype, framework)
    spec = resolve_model(model, overrides)
    require(zero is None or fsdp is None, "give --zero or --fsdp, not both")
    opts = TrainStepOptions(gpus=gpus, seq=seq, global_batch=global_batch, micro_batch=micro_batch, tp=tp, pp=pp,
                            dp=dp, cp=cp, ep=ep, etp=etp, vp=vp, sp=sp, zero=zero_from_fsdp(fsdp) if fsdp else (zero or 0),
                            recompute=recompute, dtype=dtype, overlap=overlap, comm_sms=comm_sms,
                            capacity_factor=capacity_factor, reserve=reserve, attention=attention,
                            schedule=schedule, framework=framework, host_costs=host_costs, host_source=host_source,
                            vocab_parallel=vocab_parallel, pipeline_split=pipeline_split, fp8_recipe=fp8_recipe, fp8_params=fp8_params,
                            clocks=clocks, loss=loss_kernels, dropout=dropout, clip_grad=clip_grad,
                            grad_reduce=grad_reduce)
    fitted = fit_layout(spec, ceilings, cluster, opts)
    step = fitted.step
    for line in (*fitted.notes, *fitted.warnings):
        render.note(line, warning=line in fitted.warnings)
    output = with_fit(step_output(step), fitted)
    output = with_step_cost(output, step, price_per_gpu_hour, train_tokens)
    output = with_interval(output, train_interval_key(spec), step.step_time_s, label="step_time_s")
    render.emit(with_ceilings_note(output, ceilings), fmt, as_json)


def step_output(step) -> render.Output:
    data = step.as_dict()
    total = step.step_time_s
    rows = [[k, v, f"{100 * v / total:.1f}%"] for k, v in step.breakdown.items()]
    rows.append(["step_time_s", total, "100.0%"])
    lay = data["layout"]
    title = (f"{step.model} on {step.options.gpus} x {step.gpu} ({step.cluster}): tp{lay['tp']} pp{lay['pp']} "
             f"dp{lay['dp']} cp{lay['cp']} ep{lay['ep']} etp{lay['etp']} vp{lay['vp']}, micro-batch {lay['micro_batch']} x "
             f"{lay['num_micro_batches']}, ZeRO-{lay['zero']}, recompute {lay['recompute']}")
    rates = [["tokens/s", step.tokens_per_s], ["model TFLOP/s per GPU", step.tflops_per_gpu / 1e12],
             ["MFU", step.mfu], ["HFU", step.hfu],
             ["memory per GPU", fmt_bytes(step.memory_bytes_per_gpu)], ["peak stage", step.memory.peak_stage.stage],
             ["usable per GPU", fmt_bytes(step.usable_bytes)],
             ["fits", step.fits]]
    comm = [[d, t, step.breakdown[f"{d}_comm_s"]] for d, t in step.comm_total_s.items() if t]
    tables = [render.table(title, ["part", "seconds", "share"], rows), render.table("rates", ["", "value"], rates),
              render.table("communication per step", ["dimension", "total s", "exposed s"], comm)]
    if len(step.pipeline) > 1:
        slowest = data["pipeline"]["slowest_stage"]
        tables.append(render.table(f"pipeline stages, one micro-batch (stage {slowest} is the slowest)",
                                ["stage", "layers", "ends", "forward s", "backward s"],
                                [[st.stage, st.layers, _ends(st), st.forward_s, st.backward_s] for st in step.pipeline]))
    notes = (step.as_dict()["flop_convention"],
             f"overlap: {', '.join(step.options.overlap) or 'none'} (docs/train.md says which window hides what); "
             f"contention_s: compute lost to the {step.options.comm_sms} SMs NCCL holds while overlapped traffic runs",
             *_hidden_notes(step),
             f"kernels: {data['kernels']} (the {step.options.framework} framework's list: fused = Megatron-LM's fused "
             "kernels, torch = plain PyTorch's, `mlsys roofline model --impl`)",
             f"host_s: the {step.options.framework} host's issue time beyond the GPU's (0 when the host keeps ahead); "
             f"costs: {data['framework_source']}",
             "tflops_per_gpu is in FLOP/s (base units); the table shows TFLOP/s.", *_kernel_notes(step.options))
    return render.Output(data, tuple(tables), notes)


def _hidden_notes(step) -> tuple[str, ...]:
    """What the step assumed hidden, per dimension (traffic less its exposed part), and where that assumption is
    known to fail: ZeRO-3's gathers hide behind compute as Megatron-LM's and FSDP2's prefetch them; DeepSpeed's ZeRO-3
    engine of 2021 did not (docs/train.md)."""
    hidden = {d: t - step.breakdown[f"{d}_comm_s"] for d, t in step.comm_total_s.items() if t}
    if not any(v > 0 for v in hidden.values()):
        return ()
    out = ["assumed hidden behind compute: " + ", ".join(f"{d} {v:.3g} of {step.comm_total_s[d]:.3g} s"
                                                        for d, v in hidden.items() if v > 0)]
    if step.options.zero == 3 and hidden.get("dp", 0) > 0:
        out.append("ZeRO-3's parameter gathers are priced as prefetched beside compute (Megatron-LM, FSDP2); an engine "
                   "that gathers on demand (DeepSpeed's ZeRO-3) exposes them: price it with --overlap without dp")
    return tuple(out)


def _kernel_notes(opts) -> tuple[str, ...]:
    """What a non-default attention core or fp8 changes in the kernels' ceilings (docs/roofline.md, classes)."""
    out = []
    if opts.attention == "flash2":
        out.append("attention flash2: FlashAttention-2's generation, on Hopper at efficiency attention_flash2 (0.59 of "
                   "the flash kernels' rate, measured); elsewhere priced as flash")
    elif opts.attention == "triton":
        out.append("attention triton: the Triton flash-attention kernel of 2022 (llm-foundry's attn_impl triton), priced "
                   "as flash2's time x 1.4 in the forward and x 2 in the backward (Dao 2023, FlashAttention-2, "
                   "section 4.1)")
    elif opts.attention == "unfused":
        out.append("attention unfused: Megatron-LM's S x S kernels before flash attention (docs/train.md)")
    if opts.dtype in ("mxfp8", "nvfp4"):
        out.append(f"{opts.dtype}: Transformer Engine's block-scaled recipe (docs/formats.md): every decoder linear's three "
                   "GEMMs at the format's datasheet rate x the GEMM efficiency, its cast kernels in fp8_scaling_s; "
                   "attention and the head stay bf16")
    if opts.dtype == "fp8":
        out.append("fp8: linear GEMMs at efficiency matmul_fp8 of the fp8 datasheet (default 0.65: cuBLASLt's fp8 GEMMs reach "
                   "1.6-1.9x bf16's, not 2x); attention and the head stay bf16")
    return tuple(out)


def _ends(stage) -> str:
    return " + ".join(name for name, held in (("embedding", stage.embedding), ("head", stage.head)) if held) or "-"
