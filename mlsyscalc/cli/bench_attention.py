"""`mlsys bench attention`: Triton flash attention (forward, backward, decode) vs SDPA backends."""

from __future__ import annotations

import click

from .bench import emit_rows, run_sweep, sweep_options

KINDS = ("bandwidth", "fwd", "bwd", "decode")
DTYPES = ("bfloat16", "float16", "float32")


@click.command()
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS),
              help="Repeatable; default all: HBM read bandwidth, forward, backward, decode.")
@click.option("--sweep", type=click.Choice(["goals", "extra", "smoke", "serving"]), default="goals", show_default=True,
              help="goals: the issue's shapes (d=128, H=32, B*S=16k; decode B=64, KV 1k..32k); "
                   "extra: d=64/256, GQA, multi-token decode; serving: decode at batch 1-16 (Llama-3-8B heads); "
                   "--interpret always runs tiny shapes.")
@click.option("--dtype", type=click.Choice(DTYPES), help="Default bfloat16 (float16 under --interpret).")
@sweep_options
def attention(kinds, sweep, dtype, interpret, out, quiet, fmt, as_json):
    """Flash attention forward/backward and paged decode against SDPA FLASH, cuDNN, EFFICIENT, MATH.

    FLOPs: 4*B*H*S_q*S_kv*D forward (halved when causal), 2.5x that backward; bytes: each input
    read once, each output written once (decode: the whole KV cache once). Triton rows carry the
    SDPA FLASH backend (prefill) or SDPA's default choice (decode) as their in-row baseline; every
    SDPA backend is also a row of its own, gated against the same fp32 reference.
    """
    from ..bench.cases import attention as sweeps
    from ..bench import harness

    backend = harness.use_backend(interpret)
    name = "interpret" if backend == "interpret" else sweep
    dtype = dtype or ("float16" if backend == "interpret" else "bfloat16")
    backends = ("math",) if backend == "interpret" else sweeps.SDPA_BACKENDS  # CPU SDPA has only MATH
    cases = []
    for kind in kinds or KINDS:
        if kind == "bandwidth":
            cases += sweeps.bandwidth_cases(2**20 if backend == "interpret" else 4 * 2**30)
        elif kind == "fwd":
            cases += sweeps.forward_cases(sweeps.prefill_shapes(name), dtype, backends, descriptor_path=name != "goals")
        elif kind == "bwd":
            cases += sweeps.backward_cases(sweeps.prefill_shapes(name), dtype, backends[:3])
        else:
            cases += sweeps.decode_cases(sweeps.decode_shapes(name), dtype, backends=backends)
    rows = run_sweep(cases, out, quiet)
    emit_rows(rows, fmt, as_json, "attention")
