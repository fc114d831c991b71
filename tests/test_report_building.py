"""What every report page is built with: the quote formatters and JSON paths of mlsyscalc/report/model_report.py,
the options model_report_build.py caps to a model's learned positions and the hardware it resolves, the cache
of repeated commands, and `mlsys bench report`'s regeneration of each family's page (report/bench.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mlsyscalc.report import bench as bench_pages
from mlsyscalc.report import model_report_build as build
from mlsyscalc.report.model_report import FORMATS, Call, ReportOptions, lookup

GiB = 2**30


@pytest.mark.parametrize("fmt,value,text", [
    ("int", 1234.6, "1,235"), ("GiB", 1.5 * GiB, "1.5"), ("GiB", 0.0123 * GiB, "0.0123"), ("GiB", 99.94 * GiB, "99.9"),
    ("GiB", 100.4 * GiB, "100"), ("GiB", 12345 * GiB, "12,345"), ("ms", 0.0123, "12.3"), ("ms", 1.5, "1,500"),
    ("pct", 0.4567, "45.7%"), ("rate", 1234567.8, "1,234,568"), ("g", 3.14159265, "3.142"), ("g", 12345678, "1.235e+07"),
    ("text", None, "-"), ("text", "memory", "memory"), ("yes", True, "yes"), ("yes", 0, "no"),
    ("bytes", 1.5 * GiB, "1.5 GiB"), ("s", 0.0066, "6.6 ms")])
def test_quote_formats(fmt, value, text):
    assert FORMATS[fmt](value) == text


def test_lookup_paths_list_indices_and_ratios():
    data = {"sweep": [{"t": 1.0}, {"t": 3.0, "n": {"x": 6.0}}], "total": 12.0, "part": 3.0}
    assert lookup(data, "sweep.1.t") == 3.0 and lookup(data, "sweep.1.n.x") == 6.0
    assert lookup(data, "part/total") == 0.25 and lookup(data, "sweep.1.n.x/sweep.1.t") == 2.0
    with pytest.raises(KeyError):
        lookup(data, "missing")


def test_a_call_quotes_its_command_line_for_a_shell():
    assert Call(("serve", "gpt2", "--slo", "ttft_p99=0.5,tpot_p99=0.05"), {}).line == (
        "mlsys serve gpt2 --slo ttft_p99=0.5,tpot_p99=0.05 --json")
    assert Call(("report", "my model", "--set", "a=b c"), {}).line == "mlsys report 'my model' --set 'a=b c' --json"


def test_options_are_capped_to_learned_positions_and_say_so():
    from mlsyscalc.specs.lookup import load_model

    gpt2 = load_model("gpt2")  # 1,024 learned positions
    assert gpt2.learned_positions and gpt2.max_position_embeddings == 1024
    capped, note = build._fit_to_model(ReportOptions("gpt2"), gpt2)
    assert (capped.seq, capped.context, capped.output_len, capped.prompt_len) == (1024, 1023, 256, 768)
    assert note == "sequence, context and served requests capped to gpt2's 1,024 learned positions"
    exact = ReportOptions("gpt2", seq=1024, context=1023, prompt_len=769, output_len=256)  # 769 + 256 - 1 = 1024
    assert build._fit_to_model(exact, gpt2) == (exact, None)
    for over in (replace(exact, seq=1025), replace(exact, context=1024), replace(exact, prompt_len=770)):
        assert build._fit_to_model(over, gpt2)[1] is not None, over
    short = build._fit_to_model(ReportOptions("gpt2", output_len=4000, prompt_len=10), gpt2)[0]
    assert (short.output_len, short.prompt_len) == (256, 10)  # output capped to a quarter of the table
    rope = load_model("llama2-7b")
    assert build._fit_to_model(ReportOptions("llama2-7b", seq=100_000), rope) == (ReportOptions("llama2-7b",
                                                                                               seq=100_000), None)


def test_bad_report_options_stop_before_any_command():
    from mlsyscalc.errors import MlsysError

    for options, message in ((ReportOptions("llama2-7b", gpus=12, tp=8), "--gpus 12 is not a multiple of tp x pp = 8"),
                             (ReportOptions("gpt2", gpus=13, pp=13), "--pp 13: gpt2 has 12 layers"),
                             (ReportOptions("gpt2", top=10**6), "--top: 1,000,000 is above the cap")):
        with pytest.raises(MlsysError, match=message):
            build._validate(options)
    assert build._validate(ReportOptions("gpt2", gpus=12, pp=12)).num_layers == 12


def test_hardware_from_the_gpu_or_the_cluster():
    assert build._resolve_hardware(ReportOptions("gpt2")) == ("H100-SXM", 8)
    assert build._resolve_hardware(ReportOptions("gpt2", gpu="h200")) == ("H200", 8)
    # the cluster's GPU and its NVLink domain (72), not the 4-GPU tray
    assert build._resolve_hardware(ReportOptions("gpt2", cluster="gb200-nvl72")) == ("GB200", 72)
    source = build._hardware_source(ReportOptions("gpt2", cluster="hgx-h100"), "H100-SXM")
    assert source["cluster"] == "hgx-h100" and source["cluster_measured"] is False and source["gpu_source"]
    assert "cluster" not in build._hardware_source(ReportOptions("gpt2"), "H100-SXM")


def test_a_repeated_command_runs_once():
    seen = []
    run = build._cached(lambda argv: seen.append(list(argv)) or {"n": len(seen)})
    assert run(["params", "gpt2"]) == {"n": 1} and run(["params", "gpt2"]) == {"n": 1}
    assert run(["params", "gpt2", "--x"]) == {"n": 2} and seen == [["params", "gpt2"], ["params", "gpt2", "--x"]]


def test_bench_report_copies_each_familys_rows_and_names_the_command(tmp_path, monkeypatch):
    written = []

    def page(folder: Path, command: str) -> Path:
        written.append((folder, command, sorted(p.name for p in folder.iterdir())))
        return folder / "README.md"

    monkeypatch.setattr(bench_pages, "PAGES", (bench_pages.Page("matmul", page, ("rows.jsonl", "ceilings.json")),
                                               bench_pages.Page("comm", page), bench_pages.Page("memory", page)))
    rows = tmp_path / "rows"
    for family, files in (("matmul", ("rows.jsonl", "ceilings.json", "other.txt")), ("memory", ("rows.jsonl",)),
                          ("comm", ("ceilings.json",))):  # comm has no rows: no page
        (rows / family).mkdir(parents=True)
        for name in files:
            (rows / family / name).write_text(name)
    out = bench_pages.regenerate(rows, tmp_path / "out")
    assert out == [tmp_path / "out" / "matmul" / "README.md", tmp_path / "out" / "memory" / "README.md"]
    assert written == [(tmp_path / "out" / "matmul", f"mlsys bench report {rows} --out {tmp_path / 'out'}",
                        ["ceilings.json", "rows.jsonl"]),
                       (tmp_path / "out" / "memory", f"mlsys bench report {rows} --out {tmp_path / 'out'}", ["rows.jsonl"])]
    written.clear()
    assert bench_pages.regenerate(rows, families=("memory",)) == [rows / "memory" / "README.md"]
    assert written[0][1] == f"mlsys bench report {rows}"  # in place: no --out
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError, match="no <family>/rows.jsonl under"):
        bench_pages.regenerate(rows, families=("comm",))
    assert bench_pages.FAMILIES == ("matmul", "quant", "attention", "fused", "comm", "memory")


def test_report_defaults_are_the_documented_ones():
    """docs/report.md's synopsis (8 GPUs, 4,096 tokens, context 8,192, bf16, micro-batch 1, global batch 1,024,
    top 3) and the serving defaults the Serving section states (1,024-token prompts, 256 output tokens, 200
    requests, the SLO whose highest rate places the rates)."""
    o = ReportOptions("m")
    assert (o.gpus, o.seq, o.context, o.dtype, o.micro_batch, o.global_batch, o.top) == (8, 4096, 8192, "bf16", 1,
                                                                                        1024, 3)
    assert (o.prompt_len, o.output_len, o.serve_requests, o.serve_slo) == (1024, 256, 200, "ttft_p99=0.5,tpot_p99=0.05")
    assert (o.gpu, o.cluster, o.tp, o.pp, o.rates, o.measured, o.figures, o.overrides) == (
        None, None, None, None, None, None, True, ())
