"""Report sections for the model and its training: spec, parameters, FLOPs, memory under ZeRO x
recomputation, and the step time of a layout. Every number comes from a quoted command's JSON."""

from __future__ import annotations

from ..errors import MlsysError
from .markdown import markdown_table
from .model_report import Context, Figure, Section, commands_block, require_command
from .model_report_infer import inference_section, serving_section
from .model_report_more import measured_section, scaling_section
from .model_report_system import (RECOMPUTE, ZERO_STAGES, memory_argv, plan_part, roofline_train_part, train_part,
                                  training_layout)

MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "temporaries")

# (ModelSpec JSON path, label, formatter): rows of the spec summary, MoE/MLA rows only when present
SPEC_ROWS = (
    ("model_type", "model type", "text"), ("num_layers", "layers", "int"), ("hidden_size", "hidden size", "int"),
    ("num_heads", "attention heads", "int"), ("num_kv_heads", "KV heads", "int"), ("head_dim", "head dim", "int"),
    ("intermediate_size", "MLP intermediate size", "int"), ("vocab_size", "vocabulary", "int"),
    ("max_position_embeddings", "max positions", "int"),
)
MOE_ROWS = (("moe.num_experts", "routed experts", "int"), ("moe.experts_per_token", "experts per token", "int"),
            ("moe.num_shared_experts", "shared experts", "int"), ("num_moe_layers", "MoE layers", "int"))
MLA_ROWS = (("mla.kv_lora_rank", "MLA KV latent rank", "int"), ("mla.q_lora_rank", "MLA query rank", "int"),
            ("mla.qk_rope_head_dim", "MLA rotary head dim", "int"))


def model_section(ctx: Context, sect: Section) -> None:
    m = ctx.model_args()
    show = sect.run("models", "show", *m)
    params = sect.run("params", *m)
    flops = sect.run("flops", *m, "--batch", "1", "--seq", str(ctx.options.seq))
    rows = [(label, sect.q(show, path, fmt)) for path, label, fmt in SPEC_ROWS]
    if show.data.get("moe"):
        rows += [(label, sect.q(show, path, fmt)) for path, label, fmt in MOE_ROWS]
    if show.data.get("mla"):
        rows += [(label, sect.q(show, path, fmt)) for path, label, fmt in MLA_ROWS]
    sect.add(f"Source: {show.data.get('source') or 'a local config.json'}", "", *markdown_table(["spec", "value"], rows), "")
    parts = [(name, sect.q(params, f"breakdown.{name}", "int"), sect.q(params, f"breakdown.{name}/total_params", "pct"))
             for name in params.data["breakdown"]]
    parts += [("**total**", sect.q(params, "total_params", "int"), ""),
              ("active per token", sect.q(params, "active_params", "int"), sect.q(params, "active_params/total_params", "pct"))]
    sect.add(*markdown_table(["parameters", "count", "share"], parts), "")
    frows = [(name, sect.q(flops, f"breakdown.{name}", "flops"), sect.q(flops, f"breakdown.{name}/forward_flops", "pct"))
             for name in flops.data["breakdown"]]
    frows += [("**forward**", sect.q(flops, "forward_flops", "flops"), ""),
              ("backward", sect.q(flops, "backward_flops", "flops"), ""),
              ("training step (3 x forward)", sect.q(flops, "train_step_flops", "flops"), ""),
              ("training step, full recomputation", sect.q(flops, "train_step_recompute_flops", "flops"), ""),
              ("6 N T (Kaplan et al. 2020)", sect.q(flops, "approx_6n_flops", "flops"), "")]
    sect.add(f"FLOPs of one sequence of {ctx.options.seq:,} tokens "
             f"({sect.q(flops, 'flops_per_token', 'flops')} per token forward):", "",
             *markdown_table(["FLOPs", "count", "share of forward"], frows), "")
    sect.add(*[f"- {note}" for note in flops.data.get("notes", [])], "")
    commands_block(sect, sect.calls)


def memory_section(ctx: Context, sect: Section) -> None:
    o = ctx.options
    tp, pp, dp = training_layout(ctx)
    grid = {(z, r): sect.run(*memory_argv(ctx, z, r)) for z in ZERO_STAGES for r in RECOMPUTE}
    rows = [[f"ZeRO-{z}", *[f"{sect.q(grid[z, r], 'total_bytes', 'GiB')} ({'fits' if grid[z, r].data['fits'] else 'no'})"
                            for r in RECOMPUTE]] for z in ZERO_STAGES]
    usable = sect.q(grid[0, "none"], "usable_bytes", "GiB")
    sect.add(f"Per-GPU training memory in GiB, micro-batch {o.micro_batch} x {o.seq:,} tokens, mixed-precision AdamW, "
             f"dp {dp} x tp {tp} x pp {pp} on {ctx.gpu} ({usable} GiB usable after the reserve):", "",
             *markdown_table(["ZeRO stage", *[f"recompute {r}" for r in RECOMPUTE]], rows), "")
    bars = [{"zero": z, "recompute": r, **{p: grid[z, r].data[f"{p}_bytes"] for p in MEMORY_PARTS}}
            for z in ZERO_STAGES for r in RECOMPUTE]
    sect.figures.append(_memory_figure(ctx, tp, pp, dp, bars, grid[0, "none"].data["usable_bytes"]))
    sect.add(f"- {grid[0, 'none'].data['notes'][0]}", "")
    commands_block(sect, sect.calls)


def _memory_figure(ctx: Context, tp: int, pp: int, dp: int, bars: list, usable: int):
    title = (f"{ctx.options.model}: training memory per GPU on {ctx.gpu}, dp {dp} x tp {tp} x pp {pp}, "
             f"micro-batch {ctx.options.micro_batch} x {ctx.options.seq}, by ZeRO stage and activation recomputation")
    return Figure("training_memory", "memory_bars", title, {"bars": bars, "usable_bytes": usable})


def step_section(ctx: Context, sect: Section) -> None:
    """The layout's step time: `mlsys train` for a given --tp/--pp, else `mlsys plan`'s top layouts;
    the per-GPU roofline of one micro-batch always (it needs neither)."""
    given = ctx.options.tp is not None or ctx.options.pp is not None
    first = (train_part, "train") if given else (plan_part, "plan")
    for part, needed in (first, (roofline_train_part, "roofline")):
        try:
            require_command(ctx, needed)
            part(ctx, sect)
        except MlsysError as exc:  # one failing part keeps the other
            sect.add(f"*{exc}*", "")
    commands_block(sect, sect.calls)


SECTIONS = (
    ("model", "Model", model_section),
    ("training_memory", "Training: memory per GPU", memory_section),
    ("training_step", "Training: step time and MFU", step_section),
    ("inference", "Inference", inference_section),
    ("serving", "Serving", serving_section),
    ("scaling", "Scaling", scaling_section),
    ("measured", "Measured", measured_section),
)
