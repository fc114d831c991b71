"""The shared checks: one suffix rule, option hardening for any command, the result guard."""

from __future__ import annotations

import math

import click
import pytest
from click.testing import CliRunner

from mlsyscalc.cli import render
from mlsyscalc.cli.options import FRACTION, harden
from mlsyscalc.errors import MlsysError
from mlsyscalc.units import parse_bytes, parse_count
from mlsyscalc.validate import count, fraction, positive


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("1k", 1000), ("1K", 1000), ("1kB", 1000), ("1KiB", 1024), ("256MB", 256_000_000),
    ("256M", 256_000_000), ("1G", 10**9), ("1GB", 10**9), ("1GiB", 2**30), ("1Gi", 2**30), ("2TiB", 2 * 2**40),
    ("1.5MiB", 3 * 2**19), ("1_000", 1000), ("8 KiB", 8192),
])
def test_bytes_follow_the_one_suffix_rule(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("70B", 70e9), ("70G", 70e9), ("1.4T", 1.4e12), ("500M", 5e8), ("16Mi", 16 * 2**20), ("5.76e23", 5.76e23),
    ("2k", 2000.0), ("1P", 1e15),
])
def test_counts_follow_the_one_suffix_rule(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text, words", [("1e400", "too large"), ("-1", "positive"), ("nan", "not a number"),
                                         ("1 parsec", "unknown"), ("0.1", "less than one byte")])
def test_bad_sizes_say_what_is_wrong(text, words):
    with pytest.raises(MlsysError, match=words):
        parse_bytes(text, "--size")


def test_value_checks():
    assert fraction(1, "f") == 1.0 and positive(1e-9, "p") == 1e-9 and count(3.0, "c") == 3
    for bad in (0, 1.5, math.nan, math.inf):
        with pytest.raises(MlsysError, match="f"):
            fraction(bad, "f")
    with pytest.raises(MlsysError, match="too large"):
        count(2**60, "c", maximum=2**53)
    with pytest.raises(MlsysError, match="whole"):
        count(2.5, "c")


def test_harden_checks_any_new_command():
    """A command written without any checks gets them once a lazy group loads it."""
    @click.command()
    @click.option("--rate", type=float, default=1.0)
    @click.option("--share", type=FRACTION, default=0.5)
    @click.option("--n", type=int, default=1)
    @click.option("--name", default="x")
    def new(rate, share, n, name):
        click.echo(f"{rate} {share} {n} {name}")

    harden(new)
    runner = CliRunner()
    assert runner.invoke(new, ["--rate", "2.5"]).output == "2.5 0.5 1 x\n"
    for args, option in ((["--rate", "nan"], "--rate"), (["--rate", "-inf"], "--rate"), (["--rate", "1e400"], "--rate"),
                         (["--share", "1.5"], "--share"), (["--n", str(2**60)], "--n"), (["--name", ""], "--name")):
        result = runner.invoke(new, args)
        assert result.exit_code == 2 and option in result.output, (args, result.output)
    assert click.FLOAT.convert("nan", None, None) != click.FLOAT.convert("nan", None, None)  # shared type untouched


@pytest.mark.parametrize("data, words", [({"time_s": math.nan}, "non-finite time_s"),
                                         ({"a": {"flops": -1}}, "negative a.flops"),
                                         ({"rows": [{"bytes": math.inf}]}, "rows\\[0\\].bytes")])
def test_results_with_nan_or_negative_sizes_are_refused(data, words):
    with pytest.raises(MlsysError, match=words):
        render.emit(render.Output(data), "json")


def test_signed_quantities_may_be_negative(capsys):
    render.emit(render.Output({"headroom_bytes": -5, "prediction_error": -0.1, "excess_loss": -1.0}), "json")
    assert '"headroom_bytes": -5' in capsys.readouterr().out
