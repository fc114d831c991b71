"""`mlsys compare MODEL --cards h100,b200,gb200-nvl72 ...`: one question asked of several cards, side by side.

The same question on each card, answered by the calculator that owns it:

- `train`: one optimizer step of the same layout (`calc.train.step.train_step`: time, tokens/s, MFU, memory, fits);
- `serve`: the same workload through the serving simulation (`calc.serve.simulator.simulate`: TTFT, TPOT, throughput);
- `memory`: the inference memory of the same batch and context (`calc.memory.inference`: bytes, fits, largest batch).

A card is a GPU name (`mlsys gpus`; its built-in cluster links the GPUs) or a cluster name (`mlsys comm
clusters`: its GPU and links, e.g. gb200-nvl72). Each card is priced at its own datasheet ceilings (datasheet x
the default efficiencies: a card with no measured ceiling says so in `ceilings`). Cost follows calc.cost.gpu_hours: with a
price for the card, cost per step or per million tokens; without, none. A card that cannot answer (no fp4 rate
for --dtype nvfp4, a layout its node cannot hold) gets its reason in `error`; if every card fails the first
reason is the error.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ...errors import MlsysError, require
from ...specs.cluster import ClusterSpec, builtin_clusters
from ...specs.gpu import GPUSpec, load_gpu
from ...specs.lookup import find_named
from ...specs.model import ModelSpec
from ..roofline.calibration import load_ceilings
from .gpu_hours import ServingCost, TrainingCost
from ..parallel.shards import verdict
from ..memory.inference import InferOptions, infer_memory, solve_max
from ..serve.simulator import ServeOptions, WorkloadSpec, simulate
from ..train.step import resolve_cluster, train_step
from ..train.options import TrainStepOptions

TASKS = ("train", "serve", "memory")
MAX_CARDS = 16  # a comparison is a table a reader can scan; each card costs one calculator call


@dataclass(frozen=True)
class Card:
    ref: str  # as the user named it
    gpu: GPUSpec
    cluster: ClusterSpec | None  # the links (train, TP collectives); None: the GPU has no built-in cluster


@dataclass(frozen=True)
class CompareOptions:
    task: str = "train"
    gpus: int = 8  # GPUs of the job on each card (train); serve and memory use --tp of them
    train: TrainStepOptions = TrainStepOptions()
    serve: ServeOptions = ServeOptions()
    workload: WorkloadSpec | None = None  # serve: the workload (calc.serve.simulator.WorkloadSpec)
    infer: InferOptions = InferOptions()
    reserve: str = "10%"  # memory: GPU memory kept back, as `mlsys memory --reserve`
    prices: Mapping[str, float] = field(default_factory=dict)  # card ref (lower case) -> price per GPU-hour

    def validate(self) -> None:
        require(self.task in TASKS, f"--task must be one of {', '.join(TASKS)}, got {self.task!r}")
        require(self.task != "serve" or self.workload is not None, "--task serve needs a workload")


@dataclass(frozen=True)
class Answer:
    """One card's answer: the task's numbers, whether it fits, its cost (with a price) or why it could not answer."""

    card: str
    gpu: str
    cluster: str | None
    time_s: float | None  # the headline time: step (train), p50 TPOT (serve); None for memory
    fits: bool | None
    metrics: Mapping[str, Any]
    cost: Mapping[str, Any] | None = None
    error: str | None = None
    ceilings: str = "datasheet"  # what the prices' ceilings are: datasheet x default efficiencies, or a calibration

    def as_dict(self) -> dict[str, Any]:
        data = {"card": self.card, "gpu": self.gpu, "cluster": self.cluster, "time_s": self.time_s, "fits": self.fits,
                "ceilings": self.ceilings, **self.metrics, "error": self.error}
        if self.cost is not None:
            data["cost"] = dict(self.cost)
        return data


@dataclass(frozen=True)
class Comparison:
    model: str
    options: CompareOptions
    answers: tuple[Answer, ...]

    def as_dict(self) -> dict[str, Any]:
        first = next((a.time_s for a in self.answers if a.time_s), None)
        cards = []
        for a in self.answers:
            row = a.as_dict()
            row["relative_time"] = a.time_s / first if first and a.time_s else None
            cards.append(row)
        return {"model": self.model, "task": self.options.task, "gpus": self.options.gpus, "cards": cards}


def resolve_cards(refs: Sequence[str], gpus: int) -> tuple[Card, ...]:
    """Each reference as a card: a built-in cluster (its GPU and links), else a GPU (its built-in cluster, if any)."""
    names = [r.strip() for r in refs if r.strip()]
    require(bool(names), "--cards: give at least one card, e.g. --cards h100,b200,gb200-nvl72")
    require(len(names) <= MAX_CARDS, f"--cards: at most {MAX_CARDS} cards, got {len(names)}")
    require(len({n.lower() for n in names}) == len(names), f"--cards names a card twice: {', '.join(names)}")
    cards = []
    for name in names:
        cluster = find_named(builtin_clusters(), name)
        if cluster is not None:
            cards.append(Card(name, load_gpu(cluster.gpu), cluster))
            continue
        gpu = load_gpu(name)
        try:
            links: ClusterSpec | None = resolve_cluster(gpu.name, None, gpus)
        except MlsysError:
            links = None
        cards.append(Card(name, gpu, links))
    return tuple(cards)


def _train(spec: ModelSpec, card: Card, opts: CompareOptions, price: float | None) -> Answer:
    require(card.cluster is not None, f"{card.gpu.name} has no built-in cluster to train on (name a cluster)")
    assert card.cluster is not None
    step = train_step(spec, load_ceilings(card.gpu), card.cluster, replace(opts.train, gpus=opts.gpus))
    tokens = step.options.global_batch * step.options.seq
    metrics = {"step_time_s": step.step_time_s, "tokens_per_s": step.tokens_per_s, "mfu": step.mfu,
               "memory_bytes_per_gpu": step.memory_bytes_per_gpu, "usable_bytes": step.usable_bytes}
    cost = TrainingCost(price, step.options.gpus, step.step_time_s, tokens).as_dict() if price else None
    return Answer(card.ref, card.gpu.name, step.cluster, step.step_time_s, step.fits, metrics, cost)


def _serve(spec: ModelSpec, card: Card, opts: CompareOptions, price: float | None) -> Answer:
    assert opts.workload is not None
    cluster = card.cluster.name if card.cluster is not None and opts.serve.tp > 1 else None
    result = simulate(spec, load_ceilings(card.gpu), opts.workload.build(), replace(opts.serve, cluster=cluster))
    m = result.metrics
    keys = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "throughput_tokens_per_s", "input_tokens_per_s",
            "throughput_requests_per_s")
    cost = (ServingCost(price, opts.serve.tp, m["throughput_tokens_per_s"], m["input_tokens_per_s"]).as_dict()
            if price else None)
    return Answer(card.ref, card.gpu.name, cluster, m["tpot_p50_s"], True, {k: m[k] for k in keys}, cost)


def _memory(spec: ModelSpec, card: Card, opts: CompareOptions) -> Answer:
    mem = infer_memory(spec, opts.infer)
    fit = verdict(card.gpu, mem.total, opts.reserve)
    most, _ = solve_max(spec, opts.infer, "batch", fit.usable_bytes)
    metrics = {"total_bytes": mem.total, "usable_bytes": fit.usable_bytes, "headroom_bytes": fit.usable_bytes - mem.total,
               "max_batch": most}
    return Answer(card.ref, card.gpu.name, None, None, mem.total <= fit.usable_bytes, metrics)


def compare(spec: ModelSpec, cards: Sequence[Card], opts: CompareOptions) -> Comparison:
    """The task on every card (module docstring)."""
    opts.validate()
    answers = []
    for card in cards:
        price = opts.prices.get(card.ref.lower())
        try:
            if opts.task == "train":
                answer = _train(spec, card, opts, price)
            elif opts.task == "serve":
                answer = _serve(spec, card, opts, price)
            else:
                answer = _memory(spec, card, opts)
        except MlsysError as exc:
            answer = Answer(card.ref, card.gpu.name, card.cluster.name if card.cluster else None, None, None, {},
                            error=str(exc))
        answers.append(answer)
    if all(a.error for a in answers):
        raise MlsysError(answers[0].error or "no card could answer")
    return Comparison(spec.name, opts, tuple(answers))
