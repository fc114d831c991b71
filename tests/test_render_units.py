"""Engineering suffixes: human output never shows scientific notation and reads back within 0.5%."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc.cli import render
from mlsyscalc.cli.render_units import PREFIXES, eng, gib, number, plain_text, seconds
from mlsyscalc.units import parse_count

SCIENTIFIC = re.compile(r"\d[eE][-+]?\d")
POWER = {prefix: 1000.0 ** power for power, prefix in PREFIXES.items()}
magnitudes = st.floats(-12, 18).map(lambda exponent: 10.0 ** exponent)
signed = st.tuples(magnitudes, st.booleans()).map(lambda pair: -pair[0] if pair[1] else pair[0])


def read_back(text: str) -> float:
    """The number an engineering-form string stands for ("70.2k" -> 70200, "15u" -> 1.5e-5)."""
    match = re.fullmatch(r"(-?[\d.]+)([a-zA-Z]?)", text)
    assert match, text
    return float(match.group(1)) * POWER[match.group(2)]


@settings(max_examples=400, deadline=None)
@given(signed)
def test_every_magnitude_prints_without_exponent_and_reads_back(value):
    for text in (eng(value), number(value), render._cell(value)):
        assert not SCIENTIFIC.search(text) and "e+" not in text and "e-" not in text, text
        assert math.isclose(read_back(text), value, rel_tol=0.005), (value, text)


@settings(max_examples=200, deadline=None)
@given(st.floats(3, 18).map(lambda exponent: 10.0 ** exponent))
def test_large_suffixes_are_the_ones_options_accept(value):
    """k, M, G, T, P, E: what eng() prints, parse_count (every count option) reads back."""
    assert math.isclose(parse_count(eng(value), "x"), value, rel_tol=0.005)


def test_the_examples_people_see():
    assert eng(70181.3) == "70.2k" and eng(81128.0) == "81.1k" and eng(1.5e-5) == "15u"
    assert eng(999_700.0) == "1M"  # rounding carries into the next prefix, never "1000k"
    assert number(0.5) == "0.5" and number(1234.5) == "1234" and number(0.0) == "0"
    assert number(12345.6) == "12.35k" and number(7.018e4) == "70.18k"  # cells keep 4 digits at any size
    assert seconds(11.78) == "11.8 s" and seconds(0.01234) == "12.3 ms" and seconds(4.5e-5) == "45 us"
    assert seconds(1000.0) == "1000 s" and seconds(7200.0) == "2 h"
    assert gib(61.2 * 2 ** 30) == "61.2 GiB" and gib(1.24 * 2 ** 40) == "1.24 TiB"


def test_text_loses_its_exponents():
    assert plain_text("7.018e+04 GPU-hours, GB = 1e9 bytes, rms 9.51e-08") == "70.2k GPU-hours, GB = 10^9 bytes, rms 95.1n"
    assert plain_text("llama3-8b 4096x4096 e5m2 fp8e4m3") == "llama3-8b 4096x4096 e5m2 fp8e4m3"


def test_tables_carry_suffixes_json_and_csv_raw_numbers(run_cli):
    code, table, _ = run_cli("scaling", "budget", "--compute", "1e23", "--gpu", "h100")
    assert code == 0 and "70.18k" in table and not SCIENTIFIC.search(table)
    data = run_cli.json("scaling", "budget", "--compute", "1e23", "--gpu", "h100")
    assert data["gpu_hours"] == data["compute_flops"] / data["sustained_flops_per_s"] / 3600
    code, csv, _ = run_cli("scaling", "budget", "--compute", "1e23", "--gpu", "h100", "--format", "csv")
    assert f"gpu_hours,{data['gpu_hours']!r}" in csv


def test_prefix_joins_the_unit():
    from mlsyscalc.cli.render_units import eng_unit

    assert eng_unit(2.9261612e13, "FLOP") == "29.3 TFLOP" and eng_unit(7.06e14, "FLOP/s") == "706 TFLOP/s"
    assert eng_unit(512.0, "FLOP") == "512 FLOP" and eng_unit(5.76e23, "FLOP") == "576 ZFLOP"
