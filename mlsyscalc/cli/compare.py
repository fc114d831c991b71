"""`mlsys compare MODEL --cards h100,h200,b200,gb200-nvl72`: the same question on each card, side by side."""

from __future__ import annotations

import click

from ..calc.cost.compare import MAX_CARDS, TASKS, CompareOptions, compare as run_compare, resolve_cards
from ..calc.memory.inference import InferOptions
from ..calc.serve.simulator import ServeOptions, WorkloadSpec
from ..calc.serve.workload import parse_length
from ..calc.train.options import RECOMPUTE, TrainStepOptions
from ..errors import require
from ..units import fmt_bytes, parse_count
from . import render
from .options import model_argument, positive_int, resolve_model

S = ServeOptions


def parse_prices(text: str | None, cards) -> dict[str, float]:
    """--price-per-gpu-hour P (every card) or CARD=P,CARD=P (those cards; the others unpriced)."""
    if text is None:
        return {}
    refs = {c.ref.lower() for c in cards}
    if "=" not in text:
        price = parse_count(text, "--price-per-gpu-hour")
        return {ref: price for ref in refs}
    out = {}
    for item in text.split(","):
        card, sep, value = item.partition("=")
        card = card.strip().lower()
        require(bool(sep) and card in refs, f"--price-per-gpu-hour {item!r}: expected CARD=PRICE for a card of --cards "
                                            f"({', '.join(sorted(refs))})")
        out[card] = parse_count(value, f"--price-per-gpu-hour {card}")
    return out


@click.command()
@model_argument
@click.option("--cards", default=None, metavar="CARD,CARD,...",
              help=f"Cards to compare (at most {MAX_CARDS}): GPU names (`mlsys gpus`) or clusters (`mlsys comm clusters`, "
                   "e.g. gb200-nvl72).")
@click.option("--gpus", "gpus_given", default=None, metavar="N",
              help="train: GPUs of the job on each card, as in every command [default: 8]. A card list here "
                   "(--gpus h100,b200) still works, as --cards, with a note: it is the older spelling.")
@click.option("--task", type=click.Choice(TASKS), default="train", show_default=True,
              help="The question: one training step of the same layout, serving the same workload, or the inference "
                   "memory of the same batch and context.")
@click.option("--num-gpus", type=click.IntRange(min=1), default=None, help="The older name of --gpus N.")
@click.option("--dtype", default="bf16", show_default=True, help="Compute dtype (train: bf16, fp8, mxfp8, nvfp4; serve and "
                                                                 "memory: any weight dtype, e.g. nvfp4).")
@click.option("--kv-dtype", default=None, help="serve, memory: KV cache dtype (default: the activations').")
@positive_int("--tp", 1, "Tensor-parallel GPUs (train: of the layout; serve: of one engine; memory: per shard).")
@positive_int("--pp", 1, "train: pipeline stages.")
@positive_int("--cp", 1, "train: context-parallel GPUs.")
@positive_int("--ep", 1, "train: expert-parallel GPUs.")
@positive_int("--micro-batch", 1, "train: sequences per micro-batch.")
@click.option("--zero", type=click.IntRange(0, 3), default=1, show_default=True, help="train: ZeRO stage.")
@click.option("--recompute", type=click.Choice(RECOMPUTE), default="none", show_default=True, help="train: recomputation.")
@positive_int("--seq", 4096, "train: tokens per sequence.")
@click.option("--global-batch", type=click.IntRange(min=1), default=None,
              help="train: sequences per step [default: 8 x --num-gpus].")
@click.option("--rate", type=click.FloatRange(0, min_open=True), default=10.0, show_default=True,
              help="serve: arrivals per second.")
@click.option("--prompt-len", default="512", show_default=True, help="serve: prompt tokens (as `mlsys serve`).")
@click.option("--output-len", default="256", show_default=True, help="serve: output tokens.")
@positive_int("--requests", 300, "serve: requests simulated on each card.")
@positive_int("--batch", 1, "memory: sequences held.")
@positive_int("--context", 4096, "memory: tokens per sequence in the KV cache.")
@click.option("--price-per-gpu-hour", "prices", default=None, metavar="P|CARD=P,...",
              help="Price of a GPU-hour, for every card or per card (h100=2.5,b200=4.5): adds cost per step (train) or per "
                   "million output tokens (serve). No price, no cost columns.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="Write the bars (PNG, SVG or PDF).")
@render.output_options
def compare(model, overrides, cards, gpus_given, task, num_gpus, dtype, kv_dtype, tp, pp, cp, ep, micro_batch, zero, recompute, seq,
            global_batch, rate, prompt_len, output_len, requests, batch, context, prices, plot, fmt, as_json):
    """Ask MODEL's question of several cards side by side: the time, the cost with a price, and whether it fits.

    Each card is priced at its datasheet ceilings x the default efficiencies (docs/hardware.md, "mlsys compare").
    """
    cards, num_gpus = cards_and_count(cards, gpus_given, num_gpus)
    spec = resolve_model(model, overrides)
    found = resolve_cards(cards.split(","), num_gpus)
    train = TrainStepOptions(gpus=num_gpus, seq=seq, global_batch=global_batch or 8 * num_gpus, micro_batch=micro_batch,
                             tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, recompute=recompute, dtype=dtype)
    serve = ServeOptions(tp=tp, dtype=dtype, kv_dtype=kv_dtype)
    work = WorkloadSpec(parse_length(prompt_len, "--prompt-len"), parse_length(output_len, "--output-len"), rate,
                        requests) if task == "serve" else None
    infer = InferOptions(batch=batch, context=context, dtype=dtype, kv_dtype=kv_dtype or "bf16", tp=tp)
    opts = CompareOptions(task=task, gpus=num_gpus, train=train, serve=serve, workload=work, infer=infer,
                          prices=parse_prices(prices, found))
    result = run_compare(spec, found, opts)
    output = compare_output(result)
    if plot:
        from ..report.compare_plot import plot_compare
        from .plots import with_plot

        plot_compare(output.data, plot)
        output = with_plot(output, plot)
    render.emit(output, fmt, as_json)


def cards_and_count(cards: str | None, gpus: str | None, num_gpus: int | None) -> tuple[str, int]:
    """(card list, GPU count) from --cards, --gpus and --num-gpus: --gpus N is the count, as in every other
    command; --gpus CARD,... is the older spelling of --cards (a note on stderr). Contradictions exit 2."""
    ctx = click.get_current_context()
    count = None
    if gpus is not None and gpus.strip().isdigit():
        count = int(gpus)
        if count < 1:
            raise click.BadParameter(f"{gpus!r} is not a positive GPU count", ctx, param_hint="'--gpus'")
    elif gpus is not None:
        if cards is not None:
            raise click.UsageError("give the cards once: --cards (--gpus CARD,... is its older spelling)", ctx)
        click.echo(f"note: --gpus {gpus} names cards: the spelling is now --cards {gpus} (--gpus N is the GPU "
                   "count, as in mlsys train)", err=True)
        cards = gpus
    if count is not None and num_gpus is not None and count != num_gpus:
        raise click.UsageError(f"--gpus {count} and --num-gpus {num_gpus} disagree: give one (--num-gpus is the "
                               "older name of --gpus N)", ctx)
    if cards is None:
        raise click.UsageError("give the cards to compare: --cards h100,b200,gb200-nvl72", ctx)
    return cards, count or num_gpus or CompareOptions.gpus


COLUMNS = {"train": (("step s", "step_time_s"), ("tokens/s", "tokens_per_s"), ("MFU", "mfu")),
           "serve": (("TTFT p50 s", "ttft_p50_s"), ("TPOT p50 s", "tpot_p50_s"), ("out tok/s", "throughput_tokens_per_s")),
           "memory": (("max batch", "max_batch"),)}


def compare_output(result) -> render.Output:
    data = result.as_dict()
    task = result.options.task
    priced = any(c.get("cost") for c in data["cards"])
    cost_key = {"train": "cost_per_step", "serve": "cost_per_million_output_tokens"}.get(task)
    columns = ["card", "gpu", *(name for name, _ in COLUMNS[task]), *(["x first"] if task != "memory" else []),
               *(["memory/GPU"] if task != "serve" else []), "fits", *([cost_key.replace("_", " ")] if priced and cost_key else []), "note"]
    rows = []
    for c in data["cards"]:
        if c["error"]:  # card and gpu, every figure empty, the error as the note
            rows.append([c["card"], c["gpu"], *([None] * (len(columns) - 3)), c["error"]])
            continue
        mem = c.get("memory_bytes_per_gpu", c.get("total_bytes"))
        cells = [c["card"], c["gpu"], *(c[k] for _, k in COLUMNS[task]),
                 *([c["relative_time"]] if task != "memory" else []),
                 *([fmt_bytes(mem) if mem is not None else None] if task != "serve" else []), c["fits"]]
        cells += [c["cost"][cost_key] if c.get("cost") else None] if priced else []
        rows.append(cells + [""])
    title = f"{result.model}: {task} on each card" + (f" ({result.options.gpus} GPUs)" if task == "train" else "")
    notes: tuple[str, ...] = ("Each card at its datasheet ceilings x the default efficiencies (no measured ceiling: a "
                              "datasheet prediction); `x first`: time relative to the first card that answered.",)
    if not all(c["error"] is None for c in data["cards"]):
        notes += ("note: why a card could not answer",)
    return render.Output(data, (render.table(title, columns, rows),), notes)

