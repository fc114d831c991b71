"""Run a list of benchmark cases: gate, time, append, go on.

A kernel module describes each benchmark as a `Case` whose `build()` allocates fresh random
inputs and returns a `Bench` (the kernel call, the torch reference, the torch baseline). The
sweep never lets one case stop the others: a failed gate, a compile error or an OOM becomes a row
with `error` set, and the next case runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from . import harness
from .rows import ResultStore, Row


@dataclass
class Bench:
    """What one case needs at run time; built by Case.build() on fresh inputs."""

    run: Callable[[], Any]                    # the kernel under test -> output tensor
    reference: Callable[[], Any]              # torch, higher precision, same inputs -> tensor
    baseline: Callable[[], Any] | None = None  # torch/cuBLAS path timed beside it -> tensor
    extra: dict[str, Any] = field(default_factory=dict)   # measured side numbers (quant error, ...)
    view: Callable[[Any], Any] | None = None  # maps run()/baseline() results to the tensor gated
    graph: bool = False  # time replays of a CUDA graph of `run` (no host launch cost; harness.graphed); baseline eager


@dataclass(frozen=True)
class Case:
    kernel: str
    baseline: str
    shape: str
    dtype: str
    build: Callable[[], Bench]
    flops: float = 0.0
    bytes: float = 0.0
    variant: str = ""
    gate: str = ""          # TOLERANCES key; defaults to dtype
    tol: float | None = None
    predicted_ms: float | None = None   # the roofline's time for it, where the case module prices it

    @property
    def key(self) -> str:
        return "|".join((self.kernel, self.baseline, self.shape, self.dtype, self.variant))


def run_case(case: Case) -> Row:
    """Gate, then time kernel and baseline; any exception becomes the row's `error`."""
    row = Row(kernel=case.kernel, baseline=case.baseline, shape=case.shape, dtype=case.dtype,
              variant=case.variant, flops=case.flops or None, bytes=case.bytes or None,
              predicted_ms=case.predicted_ms, env=dict(harness.env_metadata()), measured_at=harness.now())
    bench = None
    try:
        bench = case.build()
        row.extra.update(bench.extra)
        view = bench.view or (lambda result: result)
        check = harness.check_close(view(bench.run()), bench.reference(), case.gate or case.dtype, case.tol)
        row.ok, row.rel_err, row.tol = check.ok, check.rel_err, check.tol
        if not check.ok:
            row.error = f"correctness gate failed: {check.message}"
            return row.finish()
        run, row.extra["timing"] = harness.graphed(bench.run) if bench.graph else (bench.run, "eager")
        row.median_ms = harness.time_ms(run)
        if bench.baseline is not None:
            base = harness.check_close(view(bench.baseline()), bench.reference(), case.gate or case.dtype, case.tol)
            row.extra["baseline_rel_err"] = base.rel_err
            row.extra["baseline_timing"] = "eager"  # torch's paths (autograd) run on their own streams: not captured
            row.baseline_median_ms = harness.time_ms(bench.baseline)
    except Exception as exc:  # noqa: BLE001 - compile errors, OOM: record and go on
        row.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
    finally:
        del bench
        _free_memory()
    return row.finish()


Progress = Callable[[int, int, str], None]   # (cases finished, cases to run, the next one's name)


def run_cases(cases: Iterable[Case], store: ResultStore, progress: Progress | None = None) -> list[Row]:
    """Run every case not already in `store`, appending each row as it finishes.

    `progress`, when given, is called before each case and once after the last (the caller draws
    it; the harness prints nothing). Returns the rows of this sweep: the stored ones it skipped
    plus the new ones.
    """
    cases = list(cases)
    stored = {row.key: row for row in store.rows()}
    done = {key for key, row in stored.items() if not row.error}
    todo = [c for c in cases if c.key not in done]
    rows = {c.key: stored[c.key] for c in cases if c.key in done}
    for index, case in enumerate(todo):
        if progress:
            progress(index, len(todo), f"{case.kernel} {case.dtype} {case.shape}")
        row = run_case(case)
        store.append(row)
        rows[case.key] = row
    if progress and todo:
        progress(len(todo), len(todo), "")
    return [rows[c.key] for c in cases if c.key in rows]


def _free_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass
