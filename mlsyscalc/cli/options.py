"""Options shared by commands that take a MODEL (built-in name, config.json or folder)."""

from __future__ import annotations

from typing import Callable

import click

from ..specs.lookup import load_model, parse_overrides
from ..specs.model import ModelSpec


def model_argument(func: Callable) -> Callable:
    """MODEL argument plus repeatable `--set KEY=VALUE` config overrides."""
    func = click.option(
        "--set", "overrides", multiple=True, metavar="KEY=VALUE",
        help="Override a config.json key before normalising (what-if), e.g. --set num_hidden_layers=48.",
    )(func)
    return click.argument("model", metavar="MODEL")(func)


def resolve_model(model: str, overrides: tuple[str, ...]) -> ModelSpec:
    return load_model(model, parse_overrides(overrides) or None)


def positive_int(name: str, default: int, help: str) -> Callable:
    return click.option(name, type=click.IntRange(min=1), default=default, show_default=True, help=help)
