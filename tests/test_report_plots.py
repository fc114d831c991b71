"""Every `--plot` in the CLI: the path in JSON (`plot`) and in a note, a title naming what was plotted, and
exit 2 naming the `science` extra when matplotlib is missing."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from mlsyscalc.cli.main import cli

# (argv, words the figure's title must name: model, GPU, layout)
PLOTS = [
    (["roofline", "op", "matmul", "--m", "1024"], ["matmul 1024x4096x4096 (bf16)", "H100-SXM"]),
    (["roofline", "llama2-7b", "--phase", "decode", "--context", "64", "--gpu", "h200"],
     ["llama2-7b decode kernels", "context 64", "H200"]),
    (["roofline", "llama3-8b", "--phase", "decode", "--context", "64", "--tp", "2", "--sweep", "batch=1,8"],
     ["llama3-8b decode", "H100-SXM x2 (TP)"]),
    (["memory", "train", "llama2-7b", "--dp", "8", "--gpu", "h100"], ["llama2-7b: training memory", "H100-SXM", "dp 8"]),
    (["memory", "infer", "llama3-8b", "--tp", "2", "--gpu", "a100-80gb"], ["llama3-8b: inference memory", "A100", "tp 2"]),
    (["scaling", "optimal", "--params", "70B"], ["Compute-optimal frontier"]),
    (["scaling", "loss", "--params", "7B", "--tokens", "140B"], ["IsoFLOP curves"]),
]


def _invoke(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("argv, title_words", PLOTS)
def test_plot_path_in_json_and_notes_and_title_names_what_was_plotted(tmp_path, argv, title_words):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sub" / "figure.svg"  # a missing folder is created
    result = _invoke(*argv, "--plot", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["plot"] == str(path)
    assert f"Plot written to {path}." in data["notes"]
    svg = path.read_text()  # text stays text in our SVGs (svg.fonttype none)
    for word in title_words:
        assert word in svg, word
    table = _invoke(*argv, "--plot", str(tmp_path / "again.png"))
    assert table.exit_code == 0 and f"Plot written to {tmp_path / 'again.png'}." in table.stdout


@pytest.mark.parametrize("argv", [argv for argv, _ in PLOTS])
def test_plot_without_matplotlib_exits_2_naming_the_extra(tmp_path, monkeypatch, argv):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    result = _invoke(*argv, "--plot", str(tmp_path / "figure.png"))
    assert result.exit_code == 2, result.output
    assert "pip install 'mlsyscalc[science]'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "figure.png").exists()


def test_roofline_key_and_legend_sit_in_their_own_panel(tmp_path):
    """Many kernels: numbered points, the key and the roof legend outside the roofline axes, so no kernel
    label can land on roof text (the overlap the old figure had)."""
    pytest.importorskip("matplotlib")
    path = tmp_path / "k.svg"
    assert _invoke("roofline", "llama2-7b", "--phase", "decode", "--context", "64", "--plot", str(path)).exit_code == 0
    svg = path.read_text()
    assert "kernels" in svg and "1: " in svg and "datasheet roofs, TFLOP/s" in svg
    assert "datasheet 990 TFLOP/s (ridge" not in svg  # no roof text drawn on the lines any more
