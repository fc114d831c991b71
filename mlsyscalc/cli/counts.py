"""`mlsys params MODEL` and `mlsys flops MODEL`."""

from __future__ import annotations

import click

from ..calc.counts.flops import PHASES, FlopOptions, count_flops
from ..calc.counts.params import count_params
from ..units import fmt_count, fmt_flops
from . import render
from .options import model_argument, positive_int, reject_unused, resolve_model


@click.command()
@model_argument
@render.output_options
def params(model, overrides, fmt, as_json):
    """Parameter counts of MODEL: total, active per token, embeddings, head, breakdown.

    Exact to the parameter (checked against transformers); tied embeddings count once; MoE
    active excludes the routed experts a token does not use.
    """
    spec = resolve_model(model, overrides)
    result = count_params(spec)
    data = {
        "model": result.model, "total_params": result.total, "active_params": result.active,
        "embedding_params": result.embedding, "lm_head_params": result.lm_head,
        "non_embedding_params": result.non_embedding, "breakdown": dict(result.breakdown),
        "num_layers": spec.num_layers, "tied_embeddings": spec.tie_word_embeddings,
    }
    rows = [[k, v, fmt_count(v), f"{100 * v / result.total:.2f}%"] for k, v in result.breakdown.items()]
    rows.append(["total", result.total, fmt_count(result.total), "100.00%"])
    summary = [
        ["total", result.total, fmt_count(result.total)],
        ["active per token", result.active, fmt_count(result.active)],
        ["embedding", result.embedding, fmt_count(result.embedding)],
        ["lm_head (0 if tied)", result.lm_head, fmt_count(result.lm_head)],
        ["non-embedding", result.non_embedding, fmt_count(result.non_embedding)],
    ]
    notes = ["Tied input/output embeddings are counted once; buffers are not parameters."]
    if spec.is_moe:
        notes.append("Active: attention, router, shared experts, embeddings and head, plus top-k routed experts.")
    render.emit(render.Output(data, (
        render.table(f"{spec.name}: parameters", ["count", "params", "approx"], summary),
        render.table("breakdown", ["part", "params", "approx", "share"], rows),
    ), tuple(notes)), fmt, as_json)


@click.command()
@model_argument
@positive_int("--batch", FlopOptions.batch, "Sequences in the batch.")
@positive_int("--seq", FlopOptions.seq, "Tokens per sequence processed in this pass (prefill).")
@click.option("--phase", type=click.Choice(PHASES), default=FlopOptions.phase, show_default=True,
              help="prefill: --seq new tokens; decode: one new token per sequence.")
@click.option("--context", type=click.IntRange(min=0), default=FlopOptions.context, show_default=True,
              help="Tokens already in the KV cache (decode attends to context + 1).")
@click.option("--causal", is_flag=True, help="Halve attention scores and attention-times-V (prefill).")
@render.output_options
@click.pass_context
def flops(ctx, model, overrides, batch, seq, phase, context, causal, fmt, as_json):
    """FLOPs of a forward pass of MODEL, with backward, training step and per-token figures.

    Counted as torch.utils.flop_counter.FlopCounterMode counts them: 2 FLOPs per multiply-add,
    matrix multiplications only, attention over the full S x S unless --causal, MoE experts as
    routed (top-k). Backward = 2x forward; training step = 3x (4x with full recomputation).
    """
    if phase == "decode":
        reject_unused(ctx, {"seq": "with --phase decode (one new token per sequence; --context sets the cache)",
                            "causal": "with --phase decode (one query attends to every cached key)"})
    spec = resolve_model(model, overrides)
    opts = FlopOptions(batch=batch, seq=seq, phase=phase, context=context, causal=causal)
    r = count_flops(spec, opts)
    data = {
        "model": r.model, "batch": batch, "seq": opts.new_tokens, "phase": phase, "context": context,
        "kv_len": opts.kv_len, "causal": causal, "tokens": r.tokens,
        "forward_flops": r.forward, "backward_flops": r.backward, "train_step_flops": r.train_step,
        "train_step_recompute_flops": r.train_step_recompute, "flops_per_token": r.per_token,
        "train_flops_per_token": 3 * r.per_token, "approx_6n_flops": r.approx_6n,
        "approx_6n_attn_flops": r.approx_6n_attn, "breakdown": dict(r.breakdown),
    }
    totals = [
        ["forward", r.forward, fmt_flops(r.forward)],
        ["backward (2x forward)", r.backward, fmt_flops(r.backward)],
        ["training step (3x forward)", r.train_step, fmt_flops(r.train_step)],
        ["training step, full recompute (4x)", r.train_step_recompute, fmt_flops(r.train_step_recompute)],
        ["forward per token", r.per_token, fmt_flops(r.per_token)],
        ["approx. training 6N*T", r.approx_6n, fmt_flops(r.approx_6n)],
        ["approx. training (6N + 12*L*S*d_attn)*T", r.approx_6n_attn, fmt_flops(r.approx_6n_attn)],
    ]
    rows = [[k, v, fmt_flops(v), f"{100 * v / r.forward:.1f}%"] for k, v in r.breakdown.items()]
    notes = (
        "2 FLOPs per multiply-add; matmuls only, as torch.utils.flop_counter counts them.",
        ("Attention: the pairs each layer's mask keeps (full layers half the rectangle)." if causal and phase == "prefill"
         else "Attention over the full S x S_kv (a window or chunk layer: its cache's last W - 1 tokens + the new)."),
        "N in the approximations: active parameters that multiply activations (no embedding tables).",
    )
    title = f"{spec.name}: {phase}, batch {batch}, " + (
        f"{opts.new_tokens} tokens" if phase == "prefill" else f"1 new token after {context} cached")
    render.emit(render.Output(data, (
        render.table(title, ["quantity", "FLOPs", "approx"], totals),
        render.table("forward breakdown", ["part", "FLOPs", "approx", "share"], rows),
    ), notes), fmt, as_json)
