"""Training speed parts of the report: `mlsys train` (a given layout), `mlsys plan` (the best layouts)
and the per-GPU roofline of one micro-batch. `train` and `plan` are optional commands: their parts
render from the JSON contract they publish, once the CLI has them."""

from __future__ import annotations

from ..calc.parallel.pipeline_split import SPLIT_NAMES, split_text
from ..errors import MlsysError
from .markdown import markdown_table
from .model_report import Context, Section

ZERO_STAGES = (0, 1, 2, 3)
RECOMPUTE = ("none", "selective", "full")

TRAIN_KEYS = (("step_time_s", "step time", "s"), ("tokens_per_s", "tokens/s (all GPUs)", "rate"),
              ("tflops_per_gpu", "TFLOP/s per GPU", "g"), ("mfu", "MFU", "pct"), ("hfu", "HFU", "pct"),
              ("memory_bytes_per_gpu", "memory per GPU", "bytes"), ("fits", "fits", "yes"))
PLAN_KEYS = (("step_time_s", "step time", "s"), ("mfu", "MFU", "pct"), ("tokens_per_s", "tokens/s", "rate"),
             ("memory_bytes_per_gpu", "memory per GPU", "bytes"))


def training_layout(ctx: Context) -> tuple[int, int, int]:
    """(tp, pp, dp) of the training sections: the user's --tp/--pp, data parallel over the rest."""
    o = ctx.options
    tp, pp = o.tp or 1, o.pp or 1
    if o.gpus % (tp * pp):
        raise MlsysError(f"--gpus {o.gpus} is not a multiple of tp {tp} x pp {pp}")
    return tp, pp, o.gpus // (tp * pp)


def memory_argv(ctx: Context, zero: int, recompute: str) -> list[str]:
    o = ctx.options
    tp, pp, dp = training_layout(ctx)
    return ["memory", "train", *ctx.model_args(), "--batch", str(o.micro_batch), "--seq", str(o.seq), "--dp", str(dp),
            "--tp", str(tp), "--pp", str(pp), "--gpu", ctx.gpu, "--zero", str(zero), "--recompute", recompute]


def lightest_fit(ctx: Context) -> tuple[int, str, bool]:
    """(ZeRO stage, recomputation, fits): the least sharding, then the least recomputation, that fits;
    ZeRO-3 with full recomputation when nothing does. Runs the same commands as the memory section."""
    for zero in ZERO_STAGES:
        for recompute in RECOMPUTE:
            if ctx.runner(memory_argv(ctx, zero, recompute))["fits"]:
                return zero, recompute, True
    return ZERO_STAGES[-1], RECOMPUTE[-1], False


def hardware_args(ctx: Context) -> list[str]:
    return ["--cluster", ctx.options.cluster] if ctx.options.cluster else ["--gpu", ctx.gpu]


def roofline_hardware(ctx: Context) -> list[str]:
    """`mlsys roofline` takes the GPU for its ceilings and the cluster for its collectives."""
    return ["--gpu", ctx.gpu, *(["--cluster", ctx.options.cluster] if ctx.options.cluster else [])]


def _batch_args(ctx: Context) -> list[str]:
    o = ctx.options
    return ["--gpus", str(o.gpus), *hardware_args(ctx), "--seq", str(o.seq), "--global-batch", str(o.global_batch)]


SPLIT_KEYS = {key for key, _ in SPLIT_NAMES}


def layout_text(layout: dict) -> str:
    """{'tp': 8, 'pp': 2, 'zero': 1} -> 'tp 8, pp 2, zero 1' (the order the command gives); an uneven pipeline's
    split options join pp ('pp 4 (first 21+last 19)'), an even one's are left out."""
    split = split_text(layout)
    return ", ".join(f"{k} {v}" + (f" ({split})" if k == "pp" and split else "")
                     for k, v in layout.items() if k not in SPLIT_KEYS)


def train_part(ctx: Context, sect: Section) -> None:
    o = ctx.options
    tp, pp, dp = training_layout(ctx)
    call = sect.run("train", *ctx.model_args(), *_batch_args(ctx), "--micro-batch", str(o.micro_batch),
                    "--tp", str(tp), "--pp", str(pp), "--dp", str(dp))
    rows = [(label, sect.q(call, key, fmt)) for key, label, fmt in TRAIN_KEYS if key in call.data]
    sect.add(f"The layout given ({layout_text(call.data.get('layout') or {'tp': tp, 'pp': pp, 'dp': dp})}), "
             f"global batch {o.global_batch:,} x {o.seq:,} tokens:", "", *markdown_table(["quantity", "value"], rows), "")
    parts = call.data.get("breakdown") or {}
    if parts:
        sect.add(*markdown_table(["step time part", "value"],
                                 [(k, sect.q(call, f"breakdown.{k}", "s" if k.endswith("_s") else "g"))
                                  for k, v in parts.items() if isinstance(v, (int, float))]), "")


def plan_part(ctx: Context, sect: Section) -> None:
    o = ctx.options
    call = sect.run("plan", *ctx.model_args(), *_batch_args(ctx), "--top", str(o.top))
    candidates = call.data.get("candidates") or []
    keys = [k for k in PLAN_KEYS if candidates and k[0] in candidates[0]]
    rows = [[i + 1, layout_text(c.get("layout", {})), *[sect.q(call, f"candidates.{i}.{k}", f) for k, _, f in keys]]
            for i, c in enumerate(candidates)]
    sect.add(f"The {len(rows)} fastest layouts of {o.gpus} GPUs that fit, global batch {o.global_batch:,} x "
             f"{o.seq:,} tokens (searched {sect.q(call, 'searched', 'int')} layouts, "
             f"{sect.q(call, 'feasible', 'int')} feasible):", "")
    if rows:
        sect.add(*markdown_table(["rank", "layout", *[label for _, label, _ in keys]], rows), "")
        _best_breakdown(call, sect, candidates[0])
    else:
        sect.add("No layout fits.", "")


def _best_breakdown(call, sect: Section, best: dict) -> None:
    """Layout 1's step time part by part, from the same `mlsys plan` pricing as the table."""
    parts = [k for k, v in (best.get("breakdown") or {}).items() if isinstance(v, (int, float))]
    if parts:
        sect.add("Layout 1's step time, part by part (the same `mlsys plan` pricing as the table):", "",
                 *markdown_table(["step time part", "value"],
                                 [(k, sect.q(call, f"candidates.0.breakdown.{k}", "s" if k.endswith("_s") else "g"))
                                  for k in parts]), "")


def roofline_train_part(ctx: Context, sect: Section) -> None:
    """One micro-batch of the model's TP group on the roofline: forward, backward, optimizer, comm; with the
    lightest ZeRO stage and recomputation that fit (from the memory section's commands)."""
    o = ctx.options
    tp, pp, dp = training_layout(ctx)
    zero, recompute, fits = lightest_fit(ctx)
    memory = sect.run(*memory_argv(ctx, zero, recompute))
    call = sect.run("roofline", *ctx.model_args(), "--phase", "train", "--batch", str(o.micro_batch), "--seq",
                    str(o.seq), "--tp", str(tp), "--dp", str(dp), "--zero", str(zero), "--recompute", recompute,
                    "--no-fit-check", *roofline_hardware(ctx))
    rows = [("step time of one micro-batch", sect.q(call, "predicted_s", "s")),
            ("forward kernels", sect.q(call, "totals.forward_s", "s")),
            ("backward kernels", sect.q(call, "totals.backward_s", "s")),
            ("recomputation", sect.q(call, "totals.recompute_s", "s")),
            ("optimizer", sect.q(call, "totals.optimizer_s", "s")),
            ("tensor-parallel communication", sect.q(call, "totals.tp_comm_s", "s")),
            ("data-parallel communication", sect.q(call, "totals.dp_comm_s", "s")),
            (f"tokens/s over the {dp} data-parallel replicas", sect.q(call, "tokens_per_s", "rate")),
            ("MFU", sect.q(call, "mfu", "pct")), ("bound", sect.q(call, "bound", "text")),
            ("memory per GPU (GiB)", sect.q(memory, "total_bytes", "GiB")), ("fits", sect.q(memory, "fits", "yes"))]
    verdict = ("the lightest setting that fits" if fits else "nothing fits; shown as a what-if") + (
        f"; {pp} pipeline stages are not modelled by the roofline" if pp > 1 else "")
    sect.add(f"Roofline of one training step of micro-batch {o.micro_batch} x {o.seq:,} tokens on a tensor-parallel "
             f"group of {tp} x {ctx.gpu}, gradients reduced over dp {dp}, ZeRO-{zero}, recompute {recompute} "
             f"({verdict}); kernels and collectives back to back.", "", ROOFLINE_DIFFERS, "",
             *markdown_table(["quantity", "value"], rows), "")


# why the per-micro-batch roofline's step time, tokens/s and MFU differ from train/plan's for the same model
ROOFLINE_DIFFERS = (
    "*Not the pricing of the layouts above, and slower by design:* it prices another layout (data parallel over "
    "every GPU with the lightest ZeRO stage and recomputation that fit, where `mlsys plan` searches tp, pp, cp, "
    "micro-batches and ZeRO), one micro-batch per step (the gradient reduction and the optimizer are paid on every "
    "micro-batch, not once per global batch) and no overlap (collectives after the kernels, where train and plan "
    "hide the data-parallel reduction under the backward pass); recomputed FLOPs count in its time, not its MFU. "
    "Read it for the split of one micro-batch into forward, backward, recomputation and communication; read the "
    "table above for the speed of a layout.")
