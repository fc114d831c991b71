"""`mlsys bench fused`: the fused memory-bound kernels (norms, GLUs, rotary, dropout-add, cross-entropy) vs torch."""

from __future__ import annotations

import click

from ..bench.cases.fused import OPS, PASSES, SWEEPS, TORCH_DTYPES
from .bench import emit_rows, run_sweep, sweep_options


@click.command()
@click.option("--op", "ops", multiple=True, type=click.Choice(OPS), help="Repeatable; default all.")
@click.option("--sweep", type=click.Choice(SWEEPS),
              help="train (default): hidden 1k-16k, MLP widths 2816-53248, rotary 8-128 heads, vocabularies "
                   "32k-262k, 1-65536 tokens; goals: 4096 and 16384 tokens at common sizes; heldout: shapes "
                   "train lacks (8-32768 tokens, hidden 3072-12288, ...), for scoring predictions; fresh: a second "
                   "held-out grid (2-24576 tokens, hidden 1536-14336, ...) in no other sweep; blind: a third "
                   "(3-49152 tokens, hidden 1280-6656, ...); reserve: a fourth (5-40960 tokens, hidden 1152-9216, "
                   "...); small: tiny shapes, the only sweep under --interpret (and its default).")
@click.option("--pass", "passes", multiple=True, type=click.Choice(PASSES),
              help="Repeatable; default all. Cross-entropy's one kernel (loss and gradient) is pass fwdbwd.")
@click.option("--dtype", type=click.Choice(TORCH_DTYPES), help="Default bfloat16 (float16 under --interpret).")
@sweep_options
def fused(ops, sweep, passes, dtype, interpret, out, quiet, fmt, as_json):
    """Fused memory-bound kernels against the torch path a framework runs, priced by calc/roofline/fused_ops.py.

    Bytes: each tensor once (weight-gradient partials in extra_partial_bytes); GB/s = bytes / median
    time; each row carries the roofline prediction on the card's datasheet and its error. Backward
    rows time the backward alone (the forward runs first, untimed). A torch_copy row measures the
    copy bandwidth of the same card.
    """
    from ..bench import harness

    backend = harness.use_backend(interpret)
    from ..bench.cases import fused as cases

    chosen = cases.bench_cases(ops or OPS, passes or PASSES, sweep, dtype, small=backend == "interpret")
    rows = run_sweep(chosen, out, quiet)
    emit_rows(rows, fmt, as_json, "fused")
