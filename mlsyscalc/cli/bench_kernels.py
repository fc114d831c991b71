"""`mlsys bench matmul` and `mlsys bench quant`: kernel sweeps against torch baselines."""

from __future__ import annotations

import click

from ..errors import MlsysError
from .bench import emit_rows, run_sweep, sweep_options

MATMUL_DTYPES = ("bfloat16", "float16", "float32", "fp8_tensor", "fp8_row")
QUANT_KINDS = ("quantize", "w8a16", "w4a16", "w8a8")   # bench/cases/quant.py KINDS


@click.command()
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(MATMUL_DTYPES),
              help="Repeatable; default bfloat16 (float16/float32 under --interpret).")
@click.option("--shapes", help="Comma-separated MxNxK list, e.g. 4096x4096x4096,2048x12288x4096.")
@click.option("--sweep", help="Named sweep: squares, llm, prefill (squares + llm), smoke, splitk_squares, skinny.")
@click.option("--activation", type=click.Choice(["none", "relu", "gelu", "silu"]), default="none",
              show_default=True, help="Fused epilogue (no torch baseline is timed for it).")
@click.option("--split-k", "splits", multiple=True, default=("none",), show_default=True,
              help="Repeatable: none (persistent kernel), auto, or a K-split count; each is its own kernel row.")
@click.option("--no-launch-cache", "no_cache", is_flag=True,
              help="Go through the autotuner and binder on every call (kernel name *_nocache).")
@click.option("--path", "paths", multiple=True, default=("auto",), show_default=True,
              type=click.Choice(["auto", "tma", "dtma", "ptr"]),
              help="Repeatable load path: auto, tma (host-built descriptors), dtma (device-built), ptr; "
                   "each forced path is its own kernel row (*_tma, ...).")
@sweep_options
def matmul(dtypes, shapes, sweep, activation, splits, no_cache, paths, interpret, out, quiet, fmt, as_json):
    """Triton matmul (persistent, grouped, TMA, autotuned) vs cuBLAS / torch._scaled_mm.

    Shapes are MxNxK for x (M,K) @ W.T with W (N,K), nn.Linear's layout. --split-k times the
    split-K kernel (kernels/matmul_splitk.py) beside the persistent one: kernel names
    triton_matmul, triton_matmul_splitk_auto, triton_matmul_splitk<S>.
    """
    from ..bench import harness, shapes as shape_sets

    backend = harness.use_backend(interpret)
    chosen = shape_sets.pick(shapes, sweep, "interpret" if backend == "interpret" else "smoke")
    dtypes = dtypes or (("float16", "float32") if backend == "interpret" else ("bfloat16",))
    from ..bench.cases import matmul as kernel

    try:
        split_ks = [kernel.parse_split_k(s) for s in splits]
    except ValueError as exc:
        raise MlsysError(str(exc)) from None
    cases = [kernel.bench_case(m, n, k, dtype, activation, split, not no_cache, path)
             for dtype in dtypes for split in split_ks for path in paths for m, n, k in chosen]
    rows = run_sweep(cases, out, quiet)
    emit_rows(rows, fmt, as_json, "matmul")


@click.command()
@click.option("--kind", "kinds", multiple=True, type=click.Choice(QUANT_KINDS), help="Repeatable; default all.")
@click.option("--shapes", help="Comma-separated MxNxK list (M tokens, weight N x K).")
@click.option("--sweep", help="Named sweep: decode (M = 1, 4, 16 x llama weights), quant_prefill (M = 256, 2048, "
                              "8192), int8_squares, smoke.")
@sweep_options
def quant(kinds, shapes, sweep, interpret, out, quiet, fmt, as_json):
    """Quantize kernels and W8A16 / W4A16 (g=128) / W8A8 matmuls vs torch baselines.

    quantize rows report GB/s and the measured quantisation error; w8a16 / w4a16 run
    kernels/quant.py's weight_only_matmul, which picks its path by M (one-launch GEMV for decode,
    dequantize once + cuBLAS for prefill; extra_path says which), against bf16 torch.matmul on the
    same weights; w8a8 is an int8 GEMM against torch._int_mm (bf16 torch.matmul where M <= 16).
    """
    from ..bench import harness

    backend = harness.use_backend(interpret)
    from ..bench.cases import quant as kernel

    cases = kernel.bench_cases(kinds or QUANT_KINDS, shapes, sweep, small=backend == "interpret")
    rows = run_sweep(cases, out, quiet)
    emit_rows(rows, fmt, as_json, "quant")
