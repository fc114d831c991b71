"""`mlsys report MODEL`: one document for a model, built from the CLI's own JSON contract.

Every section runs `mlsys` commands (through a `run(argv) -> dict` callable the CLI layer
supplies; it adds `--json`), takes every number it prints from their JSON, and quotes the exact
command line beside the numbers. Each quoted number is recorded as a `Quote` (command, JSON path,
formatter), so rerunning the quoted commands must reproduce the quoted text: the tests do that.

A section whose command is not in the CLI (or fails) says so in one line; the rest still renders.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import MlsysError
from ..specs.gpu import DEFAULT_GPU  # noqa: F401  (re-exported: model_report_build imports it here)
from ..units import fmt_bytes, fmt_count, fmt_flops, fmt_seconds


@dataclass(frozen=True)
class ReportOptions:
    """What `mlsys report` is asked about; each default lives here once."""

    model: str
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, passed on to every command
    gpu: str | None = None  # default: the cluster's GPU, else DEFAULT_GPU
    cluster: str | None = None
    gpus: int = 8  # GPUs for training (data parallel unless --tp/--pp say otherwise)
    seq: int = 4096  # training and prefill tokens per sequence
    context: int = 8192  # decode: tokens in the KV cache
    dtype: str = "bf16"  # inference weights and compute
    micro_batch: int = 1  # training micro-batch (sequences)
    global_batch: int = 1024  # training global batch (sequences), for `train` and `plan`
    tp: int | None = None  # a training layout given by the user (with --pp): `mlsys train` runs it
    pp: int | None = None
    top: int = 3  # layouts from `mlsys plan`
    rates: tuple[float, ...] | None = None  # `mlsys serve` request rates (requests/s); None: around the knee
    serve_slo: str = "ttft_p99=0.5,tpot_p99=0.05"  # serving: the SLO whose highest rate places the rates
    serve_requests: int = 200  # serving: requests simulated per rate (and per probe of the capacity search)
    prompt_len: int = 1024  # serving: tokens per prompt
    output_len: int = 256  # serving: tokens generated per request
    measured: str | None = None  # folder of `mlsys bench` rows
    figures: bool = True


class CommandFailed(MlsysError):
    """A quoted command exited non-zero; the message is its stderr line."""


Runner = Callable[[Sequence[str]], dict]

def _three_digits(x: float) -> str:
    """Three significant digits without exponents: 0.0123, 1.23, 123, 12,345."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _gib(nbytes: float) -> str:
    return _three_digits(nbytes / 2**30)


# formatter name -> function; a Quote stores the name so a rerun can format the same way
FORMATS: Mapping[str, Callable[[Any], str]] = {
    "int": lambda v: f"{int(round(v)):,}",
    "count": fmt_count,
    "flops": fmt_flops,
    "bytes": fmt_bytes,
    "GiB": lambda v: _gib(v),
    "s": fmt_seconds,
    "ms": lambda v: _three_digits(v * 1e3),
    "pct": lambda v: f"{100 * v:.1f}%",
    "rate": lambda v: f"{v:,.0f}",
    "g": lambda v: f"{v:.4g}",
    "text": lambda v: "-" if v is None else str(v),
    "yes": lambda v: "yes" if v else "no",
}


def lookup(data: Any, path: str) -> Any:
    """`data` at a dotted path ('breakdown.mlp', 'sweep.3.tokens_per_s'); 'a/b' is a ratio of two paths."""
    if "/" in path:
        num, den = path.split("/")
        return lookup(data, num) / lookup(data, den)
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@dataclass(frozen=True)
class Quote:
    call: int  # index into the section's calls
    path: str
    fmt: str
    text: str


@dataclass(frozen=True)
class Call:
    argv: tuple[str, ...]
    data: dict

    @property
    def line(self) -> str:
        return "mlsys " + shlex.join([*self.argv, "--json"])


@dataclass(frozen=True)
class Figure:
    """A figure the writer draws (if matplotlib is there) from `data` with the drawer named `kind`."""

    name: str  # file stem under figures/
    kind: str
    title: str
    data: Any


@dataclass
class Section:
    """One part of the report: its commands, markdown lines, figures and quoted numbers."""

    key: str
    title: str
    runner: Runner
    calls: list[Call] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)
    unavailable: str | None = None  # one line when the section could not be built

    def run(self, *argv: str) -> Call:
        call = Call(tuple(argv), self.runner(list(argv)))
        self.calls.append(call)
        return call

    def q(self, call: Call, path: str, fmt: str = "g") -> str:
        """The formatted value at `path` of `call`'s JSON, recorded as a quote."""
        text = FORMATS[fmt](lookup(call.data, path))
        self.quotes.append(Quote(self.calls.index(call), path, fmt, text))
        return text

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)


@dataclass(frozen=True)
class Report:
    options: ReportOptions
    header: Mapping[str, Any]
    sections: tuple[Section, ...]


@dataclass(frozen=True)
class Context:
    """What every section builder gets: the options, the resolved GPU and the commands the CLI has."""

    options: ReportOptions
    gpu: str
    gpus_per_node: int
    available: frozenset[str]
    runner: Runner

    def model_args(self) -> list[str]:
        return [self.options.model, *[arg for item in self.options.overrides for arg in ("--set", item)]]


def commands_block(sect: Section, calls: Sequence[Call]) -> None:
    """The exact command lines behind a section's numbers, as a bash block under it."""
    sect.add("```bash", *[c.line for c in calls], "```", "")


def require_command(ctx: Context, name: str) -> None:
    if name not in ctx.available:
        raise MlsysError(f"`mlsys {name}` is not part of this installation yet; this section appears once it is.")
