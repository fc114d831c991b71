"""Caps on the work one `mlsys serve` call may ask for (docs/cli.md, "Caps on loops").

The simulator's cost is linear in the iterations it runs, and a workload's iterations are at most
its output tokens plus its requests (every iteration decodes a token of a running sequence or
prefills part of a prompt; calc.serve.engine). One iteration costs about 1.5 us on a laptop core, so
these caps keep the worst call (every request decoding alone) under about 15 s; typical workloads
batch many sequences an iteration and take a small fraction of that.
"""

from __future__ import annotations

from ...errors import require
from ...specs.model import ModelSpec
from .workload import Workload

MAX_REQUESTS = 100_000  # --requests, and the rows of a --trace
MAX_OUTPUT_TOKENS = 10_000_000  # output tokens of every request of every simulation of one call
MAX_SIMULATIONS = 100  # --sweep rates (each a whole simulation); --search's layouts are bounded by MAX_SEARCH_GPUS
MAX_SPEC_K = 64  # --spec-k: draft tokens a step (published speculative decoders propose 2-10)
MAX_INSTANCES = 1024  # --disagg P and D: instances of each pool
MAX_SEARCH_GPUS = 16  # --search --max-gpus: the layouts tried grow with its square


def check_requests(requests: int, what: str = "--requests") -> None:
    require(requests <= MAX_REQUESTS, f"{what}: {requests:,} requests; at most {MAX_REQUESTS:,} are simulated")


def check_workload(workload: Workload, simulations: int = 1, what: str = "one simulation", sweep: bool = True) -> None:
    """The requests and the output tokens that `simulations` runs of this workload decode, within the caps
    (a sweep's simulations at most MAX_SIMULATIONS; sweep=False: --search, whose layouts MAX_SEARCH_GPUS bounds)."""
    check_requests(len(workload.requests), f"the workload ({workload.source})")
    require(not sweep or simulations <= MAX_SIMULATIONS, f"{what}: {simulations:,} simulations; at most {MAX_SIMULATIONS}")
    tokens = simulations * sum(o for _, _, o in workload.requests)
    require(tokens <= MAX_OUTPUT_TOKENS,
            f"{what}: {tokens:,} output tokens to simulate ({simulations} x {len(workload.requests):,} requests); at "
            f"most {MAX_OUTPUT_TOKENS:,} (fewer --requests, shorter --output-len, fewer rates or a smaller --max-gpus)")


def check_positions(spec: ModelSpec, workload: Workload) -> None:
    """A model with a learned position table cannot serve a request longer than it: the last output token
    is generated at position prompt + output - 1 (as `mlsys flops` and `mlsys roofline` refuse it)."""
    limit = spec.max_position_embeddings or spec.learned_positions
    if not spec.learned_positions:
        return
    _, prompt, output = max(workload.requests, key=lambda r: r[1] + r[2])
    require(prompt + output - 1 <= limit,
            f"{spec.name} has {limit} learned position embeddings; a request of {prompt} prompt + {output} output "
            f"tokens needs {prompt + output - 1} positions (shorten --prompt-len/--output-len or the trace's)")
