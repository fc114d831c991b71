"""Shared pieces of the row-wise fused kernels (norm, glu, rotary, dropout_add, cross_entropy).

- `row_tile(width)`: the (rows, columns) a program holds, chosen from the width by a small rule (no
  autotuning: compile time on the card is scarce). Columns are the width rounded up to a power of
  two; narrow rows are stacked so that one program holds about TILE_ELEMENTS values, enough bytes
  in flight to cover the memory latency.
- `warps_for(elements)`: num_warps from the elements a program holds, about 16 per thread at 4-16
  warps (two 16-byte vectors of a 16-bit tensor), 32 warps from 16384 (the widest norm rows).
- `programs_for(...)`: the program count of a persistent backward whose programs each sum a
  weight gradient over many rows (one fp32 partial row each): at least one a SM while there are
  row blocks, capped by what fits on the card.
- `sum_partials(partial, dtype)`: the reduction of those per-program partial rows (P, N) -> (N,);
  `column_sums(a, dtype)` the same for any 2-D tensor with contiguous rows.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

MAX_WIDTH = 65536        # widest row a program holds in registers (the norms' and the bias gradient's bound)
TILE_ELEMENTS = 4096     # values one program of a narrow-row kernel holds (rows x columns)
MIN_ROWS_PER_PROGRAM = 16  # a persistent backward's program sums at least this many rows into its partial,
                           # so the fp32 partials (8 bytes a column, written and read) stay under ~10%
                           # of the rows' own traffic (>= 6 bytes a column a row in 16 bits)
INTERPRETER_SMS = 4      # "SMs" under TRITON_INTERPRET: small, so that programs loop over several row blocks


def interpreting() -> bool:
    """True when Triton runs kernels through its numpy interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=8)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of the tensor's card (INTERPRETER_SMS on the CPU)."""
    if device.type != "cuda" or interpreting():
        return INTERPRETER_SMS
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def check_width(width: int, what: str) -> None:
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"{what}: width {width} is outside 1..{MAX_WIDTH}")


def row_tile(width: int, elements: int = TILE_ELEMENTS) -> tuple[int, int]:
    """(BLOCK_ROWS, BLOCK_W): the whole row (a power of two at least `width`), and as many rows as fit
    `elements` values (one row when the row alone is that wide)."""
    block_w = triton.next_power_of_2(width)
    return max(1, elements // block_w), block_w


def col_tile(width: int, elements: int = TILE_ELEMENTS, smallest: int = 1024) -> int:
    """BLOCK_C of an elementwise kernel that splits a row over programs: the power of two from `smallest` to
    `elements` columns that pads the row least (the larger on a tie); narrower rows take their own width
    rounded up. E.g. 2816 -> 1024 (3 blocks, 8% idle lanes, where 4096 idles 31%), 5632 -> 2048, 4096 -> 4096."""
    if width <= smallest:
        return triton.next_power_of_2(width)
    blocks = [b for b in (elements >> k for k in range(8)) if b >= smallest]
    return min(blocks, key=lambda b: (triton.cdiv(width, b) * b, -b))


def warps_for(elements: int) -> int:
    """num_warps for a program holding `elements` values of each tensor: 4 up to 2048, then one warp per
    512 values up to 16, and 32 from 16384 values. The norm backward of a 16384-wide bf16 row needs it: its
    sm_90 build (triton 3.6, cuobjdump -res-usage) holds 64 registers and a 240-byte stack at 32 warps,
    where at 16 warps LayerNorm's took a 1248-byte stack of spills."""
    if elements >= 16384:
        return 32
    return max(4, min(16, elements // 512))


def programs_for(row_blocks: int, rows_per_block: int, device: torch.device, warps: int,
                 programs: int | None = None) -> int:
    """Programs of a persistent kernel over `row_blocks` blocks of rows: about as many as fit on the card
    at once (32 // warps a SM), each summing at least MIN_ROWS_PER_PROGRAM rows, but never fewer than one
    a SM while there are row blocks for them (at a few hundred rows the partials' traffic costs less than
    leaving SMs idle: experiments/probe_fused_bwd.py, rule `fill`). `programs` forces a count (tests use
    it to make programs loop)."""
    if programs is not None:
        return max(1, min(programs, row_blocks))
    sms = num_sms(device)
    resident = sms * max(1, 32 // warps)
    wanted = max(triton.cdiv(row_blocks * rows_per_block, MIN_ROWS_PER_PROGRAM), sms)
    return max(1, min(resident, wanted, row_blocks))


# The partial-sum launch's tile: SUM_COLUMNS columns a program (width / 32 programs: 32 at width 1024, where the
# 256-column tile it replaced ran 4 and took 13-120 us of a backward's time), SUM_ROWS partial rows a step, two
# steps in flight. Read off an H200 (experiments/probe_norm_chunked.py, experiments/data/probe_norm_chunked.jsonl:
# the norm backwards 1.1-3.4x faster with it, 1024-16384 wide, 256-65536 tokens).
SUM_COLUMNS, SUM_ROWS, SUM_STAGES = 32, 128, 2


@triton.jit
def sum_partials_kernel(
    # tensors: partial (P, N) fp32, out (N,)
    part_ptr, out_ptr,
    # sizes and strides
    P, N, stride_pp,
    # meta
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr = 1,
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_cols = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for p0 in tl.range(0, P, BLOCK_P, num_stages=NUM_STAGES):
        rows = p0 + tl.arange(0, BLOCK_P)
        ok = (rows[:, None] < P) & in_cols[None, :]
        acc += tl.load(part_ptr + rows.to(tl.int64)[:, None] * stride_pp + cols[None, :], mask=ok,
                       other=0.0).to(tl.float32)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=in_cols)


def sum_partials(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Column sums of a (P, N) fp32 partial buffer, in `dtype`: the reduction after a persistent backward."""
    if partial.dim() != 2 or partial.dtype != torch.float32 or partial.stride(1) != 1:
        raise ValueError("partials must be a 2-D float32 tensor with contiguous rows")
    return column_sums(partial, dtype)


def column_sums(a: torch.Tensor, dtype: torch.dtype,
                tile: tuple[int, int, int] = (SUM_COLUMNS, SUM_ROWS, SUM_STAGES)) -> torch.Tensor:
    """Sums over the rows of a 2-D tensor with contiguous rows (of any float dtype), in fp32, returned in
    `dtype`; `tile` = (columns a program, rows a step, steps in flight)."""
    if a.dim() != 2 or a.stride(1) != 1:
        raise ValueError("column_sums needs a 2-D tensor with contiguous rows")
    p, n = a.shape
    out = torch.empty(n, device=a.device, dtype=dtype)
    columns, rows, stages = tile
    block_n = min(columns, triton.next_power_of_2(n))
    sum_partials_kernel[(triton.cdiv(n, block_n),)](a, out, p, n, a.stride(0), BLOCK_P=rows, BLOCK_N=block_n,
                                                    NUM_STAGES=stages, num_warps=4)
    return out


def sum_partials_ref(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return partial.double().sum(0).to(dtype)
