"""`mlsys models` (list the built-ins) and `mlsys models show MODEL` (the normalised spec)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import click

from ..calc.counts.params import count_params
from ..specs.lookup import builtin_configs, load_model
from ..units import fmt_count
from . import render
from .options import model_argument, resolve_model


@click.group(invoke_without_command=True)
@render.output_options
@click.pass_context
def models(ctx, fmt, as_json):
    """List the built-in models (`mlsys models show MODEL` prints one normalised spec)."""
    if ctx.invoked_subcommand is not None:
        return
    rows, data = [], []
    for name in builtin_configs():
        spec = load_model(name)
        total = count_params(spec).total
        data.append({"name": name, "model_type": spec.model_type, "total_params": total,
                     "aliases": list(spec.aliases), "source": spec.source})
        rows.append([name, spec.model_type, fmt_count(total), spec.num_layers, spec.hidden_size,
                     f"{spec.num_heads}/{spec.num_kv_heads}", ", ".join(spec.aliases)])
    columns = ["name", "type", "params", "layers", "hidden", "heads/kv", "aliases"]
    render.emit(render.Output({"models": data}, (render.table("built-in models", columns, rows),),
                              ("Any HF config.json (or a folder holding one) also works as MODEL.",)), fmt, as_json)


def spec_dict(spec) -> dict:
    """The normalised spec as plain data (nested MoE/MLA specs as dicts)."""
    data = dataclasses.asdict(spec)
    data.pop("raw_config", None)
    data["aliases"] = list(spec.aliases)
    data.update(q_dim=spec.q_dim, kv_dim=spec.kv_dim, num_moe_layers=spec.num_moe_layers,
                sliding_window_layers=spec.sliding_window_layers,
                kv_cache_elements_per_token_per_layer=spec.kv_cache_elements_per_token)
    return data


@models.command()
@model_argument
@render.output_options
def show(model, overrides, fmt, as_json):
    """Print the normalised spec of MODEL (built-in name, config.json or folder)."""
    spec = resolve_model(model, overrides)
    data = spec_dict(spec)
    rows: list[list] = []
    def cell(value):
        """A list as one line: long per-layer lists (layer_types) as counts of each entry."""
        if not isinstance(value, (list, tuple)):
            return value
        if len(value) > 8 and all(isinstance(v, str) for v in value):
            return ", ".join(f"{n} x {v}" for v, n in Counter(value).items())
        return ", ".join(map(str, value))

    for key, value in data.items():
        if isinstance(value, dict):
            rows.extend([f"{key}.{k}", cell(v)] for k, v in value.items())
        else:
            rows.append([key, cell(value)])
    render.emit(render.Output(data, (render.table(f"{spec.name} (normalised)", ["field", "value"], rows),)), fmt, as_json)
