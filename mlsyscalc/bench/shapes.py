"""Named shape sweeps for `mlsys bench`: LLM projection shapes and squares.

Projection (N, K) pairs are nn.Linear weights (out_features, in_features) from the public HF
configs: Llama-2-7B (hidden 4096, intermediate 11008, 32 heads, 32 KV heads) and Llama-3-70B
(hidden 8192, intermediate 28672, 64 heads, 8 KV heads, head_dim 128); q/k/v and gate/up fused.
"""

from __future__ import annotations

from ..errors import MlsysError

PROJECTIONS = {
    "llama2-7b.qkv": (12288, 4096),
    "llama2-7b.o": (4096, 4096),
    "llama2-7b.gate_up": (22016, 4096),
    "llama2-7b.down": (4096, 11008),
    "llama3-70b.qkv": (10240, 8192),
    "llama3-70b.o": (8192, 8192),
    "llama3-70b.gate_up": (57344, 8192),
    "llama3-70b.down": (8192, 28672),
}
PREFILL_M = (2048, 8192, 16384)
SQUARES = (1024, 2048, 4096, 8192)
DECODE_M = (1, 4, 16)
Shape = tuple[int, int, int]   # (M, N, K)


def _llm(ms: tuple[int, ...] = PREFILL_M) -> list[Shape]:
    return [(m, n, k) for m in ms for n, k in PROJECTIONS.values()]


# name -> list of (M, N, K); "interpret" holds small odd shapes the CPU interpreter can run.
MATMUL_SWEEPS: dict[str, list[Shape]] = {
    "interpret": [(37, 45, 53), (64, 48, 40)],
    "smoke": [(1000, 1000, 1000), (4096, 4096, 4096), (2048, 12288, 4096)],
    "squares": [(s, s, s) for s in SQUARES],
    "llm": _llm(),
    "prefill": [(s, s, s) for s in SQUARES] + _llm(),
    "decode": [(m, n, k) for m in DECODE_M for n, k in PROJECTIONS.values()],
    # few output tiles for 132 SMs: where split-K (kernels/matmul_splitk.py) is meant to help
    "splitk_squares": [(s, s, s) for s in (1024, 2048, 4096)],
    "skinny": [(m, n, k) for m in (1, 16) for n, k in PROJECTIONS.values()],
    "int8_squares": [(s, s, s) for s in (4096, 6144, 8192)],
    # prefill through the quantized matmuls: where they dequantize once and call cuBLAS
    "quant_prefill": [(m, n, k) for m in (256, 2048, 8192) for n, k in PROJECTIONS.values()],
}


def parse_shapes(text: str) -> list[Shape]:
    """'4096x4096x4096,1x4096x11008' -> [(4096, 4096, 4096), (1, 4096, 11008)] (MxNxK)."""
    shapes: list[Shape] = []
    for part in text.split(","):
        dims = part.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise MlsysError(f"shape {part!r} is not MxNxK with positive integers (e.g. 4096x4096x4096)")
        m, n, k = (int(d) for d in dims)
        shapes.append((m, n, k))
    return shapes


def pick(shapes: str | None, sweep: str | None, default: str,
         sweeps: dict[str, list[Shape]] = MATMUL_SWEEPS) -> list[Shape]:
    if shapes:
        return parse_shapes(shapes)
    name = sweep or default
    if name not in sweeps:
        raise MlsysError(f"unknown sweep {name!r} (choose from {', '.join(sorted(sweeps))})")
    return list(sweeps[name])
