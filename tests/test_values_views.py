"""What users read outside calc/: every rendered table cell against the JSON of the same call.

The JSON is the contract; the tables are the views people read. Each test runs one command with
--format markdown and --json and reads every cell back as a number in base units (`quantity`:
"693 us" -> 6.93e-4 s, "54.8 GiB" -> 54.8 x 2^30 bytes, "61.5%" -> 0.615), so a column showing the
wrong key (p90 under p99), a unit computed in the wrong base (GB as GiB) or a share of the wrong
total fails. Workloads are chosen so that the quantities a bug would confuse differ by far more
than the tables' three or four significant digits.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "h": 3600.0, "days": 86400.0, "B": 1.0, "KiB": 2**10, "MiB": 2**20,
         "GiB": 2**30, "TiB": 2**40, "GB": 1e9, "FLOP": 1.0, "kFLOP": 1e3, "MFLOP": 1e6, "GFLOP": 1e9, "TFLOP": 1e12,
         "PFLOP": 1e15, "EFLOP": 1e18}
SUFFIXES = {"f": 1e-15, "p": 1e-12, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
            "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}  # engineering suffixes of bare numbers (cli/render_units.py)


def quantity(cell: str) -> float:
    """A rendered number in base units: '693 us', '54.79 GiB', '61.5%', '86.6k', '15u', '1,234', 'yes'."""
    text = cell.strip().replace(",", "")
    if text in ("yes", "no"):
        return float(text == "yes")
    if text.endswith("%"):
        return float(text[:-1]) / 100
    match = re.fullmatch(r"([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)", text)
    assert match, f"not a number: {cell!r}"
    value, unit = match.groups()
    return float(value) * (UNITS.get(unit) or SUFFIXES[unit] if unit else 1.0)


def close(cell: str, value: float, digits: int = 3) -> bool:
    """The cell shows value to its printed precision (3 significant digits: within 0.5%)."""
    shown = quantity(cell)
    return shown == pytest.approx(value, rel=0.6 * 10 ** (1 - digits), abs=1e-12)


def tables(markdown: str) -> dict[str, list[dict[str, str]]]:
    """title -> rows (column -> cell) of every table of a `--format markdown` output."""
    out: dict[str, list[dict[str, str]]] = {}
    title, header = None, None
    for line in markdown.splitlines():
        if line.startswith("### "):
            title, header = line[4:], None
        elif line.startswith("|") and title is not None:
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if header is None:
                header = cells
                out[title] = []
            elif not set(line) <= set("|:- "):
                out[title].append(dict(zip(header, cells)))
    return out


def run_both(run_cli, *args: str) -> tuple[dict, dict[str, list[dict[str, str]]]]:
    code, md, err = run_cli(*args, "--format", "markdown")
    assert code == 0, err
    return run_cli.json(*args), tables(md)


def table(views: dict, pattern: str) -> list[dict[str, str]]:
    found = [rows for title, rows in views.items() if re.search(pattern, title)]
    assert len(found) == 1, (pattern, list(views))
    return found[0]


# ---- mlsys serve --------------------------------------------------------------------------------------------

LATENCY_ROWS = {"time to first token": "ttft", "time per output token": "tpot", "end-to-end latency": "e2e",
                "queueing delay": "queue_delay"}
BURSTY = ("--rate", "30", "--burstiness", "0.3", "--requests", "300", "--prompt-len", "uniform:64,2048",
          "--output-len", "uniform:8,256", "--max-seqs", "16")


@pytest.fixture(scope="module")
def bursty(request):
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    runner = CliRunner()
    args = ["serve", "llama2-7b", *BURSTY, "--slo", "ttft=0.5,tpot=0.05"]
    md = runner.invoke(cli, [*args, "--format", "markdown"]).stdout
    return json.loads(runner.invoke(cli, [*args, "--json"]).stdout), tables(md)


def test_serve_latency_table_shows_each_percentile_in_its_column(bursty):
    data, views = bursty
    rows = {r["latency"]: r for r in table(views, r"^llama2-7b on H100-SXM \([a-z0-9-]+, tp 1\): rate 30/s")}
    assert set(rows) == set(LATENCY_ROWS)
    for label, key in LATENCY_ROWS.items():
        for column, suffix in (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("mean", "mean")):
            assert close(rows[label][column], data[f"{key}_{suffix}_s"]), (label, column, rows[label], data)
    for key in ("ttft", "e2e", "queue_delay"):  # the workload tells the columns apart
        p50, p90, p99 = (data[f"{key}_p{q}_s"] for q in (50, 90, 99))
        assert p50 < p90 / 1.05 and p90 < p99 / 1.05, key


def test_serve_throughput_table_rows(bursty):
    data, views = bursty
    rows = {r["quantity"]: r for r in table(views, "^throughput and KV cache$")}
    assert quantity(rows["requests"]["value"]) == data["requests"] == 300
    assert close(rows["makespan"]["value"], data["makespan_s"], 4) and close(rows["makespan"]["note"], data["makespan_s"])
    for label, key in (("throughput (requests/s)", "throughput_requests_per_s"),
                       ("throughput (output tokens/s)", "throughput_tokens_per_s"),
                       ("goodput (requests/s within SLO)", "goodput_requests_per_s"),
                       ("busy fraction", "busy_fraction"), ("mean batch tokens", "mean_batch_tokens"),
                       ("KV utilisation mean / max", "kv_utilization_mean")):
        assert close(rows[label]["value"], data[key], 4), label
    assert rows["goodput (requests/s within SLO)"]["note"] == f"{100 * data['slo_attainment']:.1f}% attain"
    assert rows["KV utilisation mean / max"]["note"] == f"max {100 * data['kv_utilization_max']:.1f}%"
    assert quantity(rows["iterations"]["value"]) == data["iterations"]
    assert quantity(rows["KV blocks"]["value"]) == data["kv_blocks"]
    assert close(rows["KV blocks"]["note"].removesuffix(" each"), data["kv_block_bytes"])
    assert data["kv_block_bytes"] == 16 * 32 * 2 * 4096 * 2  # block of 16 tokens: 32 layers x K,V x 4096 x bf16
    assert (quantity(rows["preemptions"]["value"]), rows["preemptions"]["note"]) == (data["preemptions"], "recompute")


def test_serve_sweep_table_columns_are_the_json_keys(run_cli):
    """Latencies in ms, rates as they are; goodput only with --slo."""
    data, views = run_both(run_cli, "serve", "llama2-7b", "--requests", "60", "--sweep", "rate=2,40",
                           "--burstiness", "0.3", "--prompt-len", "uniform:64,2048", "--slo", "ttft_p99=0.5")
    rows = table(views, "rate sweep$")
    assert [quantity(r["rate (req/s)"]) for r in rows] == [2, 40]
    columns = {"TTFT p50 (ms)": "ttft_p50_s", "TTFT p99 (ms)": "ttft_p99_s", "TPOT p50 (ms)": "tpot_p50_s",
               "TPOT p99 (ms)": "tpot_p99_s", "e2e p99 (ms)": "e2e_p99_s"}
    for row, point in zip(rows, data["sweep"]):
        for column, key in columns.items():
            assert close(row[column], point[key] * 1e3, 4), key
        for column, key in (("requests/s", "throughput_requests_per_s"), ("tokens/s", "throughput_tokens_per_s"),
                            ("goodput (req/s)", "goodput_requests_per_s"), ("preemptions", "preemptions")):
            assert close(row[column], point[key], 4), key
    assert data["sweep"][0]["ttft_p99_s"] != data["sweep"][1]["ttft_p99_s"]


def test_serve_speculative_table(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-13b", "--draft", "llama2-7b", "--spec-k", "5", "--accept",
                           "0.6", "--rate", "2", "--requests", "20")
    spec = data["speculative"]
    rows = {r["at"]: r for r in table(views, "^speculative decoding: draft llama2-7b, k 5, acceptance 0.6$")}
    for at, key in (("batch 1", "batch1"), ("mean batch", "mean_batch")):
        v = spec[key]
        for column, field in (("plain TPOT", "tpot_plain_s"), ("draft steps", "draft_s"), ("verify pass", "verify_s"),
                              ("spec TPOT", "tpot_spec_s")):
            assert close(rows[at][column], v[field]), (at, column)
        assert close(rows[at]["tokens/step"], v["expected_tokens_per_step"], 4)
        assert close(rows[at]["tokens/step"], (1 - 0.6 ** 6) / (1 - 0.6), 4)  # Leviathan et al. 2023, eq. 1
        assert close(rows[at]["speedup"], v["speedup"], 4) and rows[at]["pays"] == ("yes" if v["pays"] else "no")


def test_serve_disaggregated_tables(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", *BURSTY[:8], "--disagg", "1:2")
    rows = {r["latency"]: r for r in table(views, "disaggregated 1P")}
    for label, key in LATENCY_ROWS.items():
        for q in ("p50", "p90", "p99"):
            assert close(rows[label][q], data[f"{key}_{q}_s"]), (label, q)
    pools = {r["quantity"]: r["value"] for r in table(views, "^pools$")}
    assert quantity(pools["GPUs"]) == data["gpus"] == 3
    for label, key in (("prefill busy fraction", "prefill_busy_fraction"), ("decode busy fraction", "decode_busy_fraction"),
                       ("goodput per GPU", "goodput_per_gpu_requests_per_s"),
                       ("throughput (requests/s)", "throughput_requests_per_s")):
        assert close(pools[label], data[key], 4), label
    assert close(pools["KV transfer mean"], data["kv_transfer_mean_s"])


def test_serve_search_table_rows_are_the_layouts(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", "--rate", "4", "--requests", "20", "--search",
                           "--max-gpus", "3", "--slo", "ttft=0.5,tpot=0.05", "--tp", "2")
    rows = table(views, "disaggregated layouts within 3 GPUs")
    assert len(rows) == len(data["layouts"]) + 1
    for row, layout in zip(rows, data["layouts"]):
        assert row["layout"] == layout["layout"] and quantity(row["GPUs"]) == layout["gpus"]
        for key in ("goodput_per_gpu", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "goodput_requests_per_s"):
            want = layout["goodput_per_gpu_requests_per_s"] if key == "goodput_per_gpu" else layout[key]
            assert close(row[key], want, 4), key
    colocated = rows[-1]
    assert colocated["layout"] == "colocated (one engine, tp 2)" and quantity(colocated["GPUs"]) == 2
    assert close(colocated["goodput_per_gpu"], data["colocated"]["goodput_requests_per_s"] / 2, 4)  # per GPU of 2
    assert data["colocated"]["goodput_requests_per_s"] > 0


# ---- mlsys train / plan -------------------------------------------------------------------------------------

def test_train_tables(run_cli):
    data, views = run_both(run_cli, "train", "llama2-7b", "--gpu", "H100-SXM", "--gpus", "8", "--pp", "2",
                           "--global-batch", "16", "--seq", "2048", "--recompute", "full")
    parts = {r["part"]: r for r in table(views, "tp1 pp2 dp4")}
    total = data["step_time_s"]
    assert close(parts["step_time_s"]["seconds"], total, 4) and parts["step_time_s"]["share"] == "100.0%"
    for part, seconds in data["breakdown"].items():
        assert close(parts[part]["seconds"], seconds, 4), part
        assert parts[part]["share"] == f"{100 * seconds / total:.1f}%", part
    assert sum(data["breakdown"].values()) == pytest.approx(total, rel=1e-12)
    rates = {r[""]: r["value"] for r in table(views, "^rates$")}
    assert close(rates["tokens/s"], data["tokens_per_s"], 4) and close(rates["MFU"], data["mfu"], 4)
    assert close(rates["HFU"], data["hfu"], 4) and data["hfu"] > 1.2 * data["mfu"]  # full recomputation: 4/3 x
    assert close(rates["model TFLOP/s per GPU"], data["tflops_per_gpu"] / 1e12, 4)
    assert close(rates["memory per GPU"], data["memory_bytes_per_gpu"], 4)  # GiB: bytes / 2^30
    assert close(rates["usable per GPU"], data["usable_bytes"], 4) and rates["fits"] == ("yes" if data["fits"] else "no")
    assert data["tokens_per_s"] == pytest.approx(16 * 2048 / total, rel=1e-12)
    comm = {r["dimension"]: r for r in table(views, "^communication per step$")}
    for dim, row in comm.items():
        assert close(row["exposed s"], data["breakdown"][f"{dim}_comm_s"], 4)
    stages = table(views, r"^pipeline stages, one micro-batch \(stage \d is the slowest\)$")
    assert [int(quantity(s["layers"])) for s in stages] == [16, 16]
    assert [s["ends"] for s in stages] == ["embedding", "head"]


def test_plan_table_rows_are_the_candidates(run_cli):
    data, views = run_both(run_cli, "plan", "llama2-7b", "--gpu", "H100-SXM", "--gpus", "8", "--global-batch", "16",
                           "--top", "4", "--fix", "recompute=full")  # full recomputation: HFU = 4/3 MFU
    title, rows = next((t, r) for t, r in views.items() if "layouts timed" in t)
    assert f"{data['searched']:,} layouts timed, {data['feasible']:,} fit" in title and "global batch 16" in title
    assert len(rows) == len(data["candidates"]) == 4
    for rank, (row, c) in enumerate(zip(rows, data["candidates"]), 1):
        lay = c["layout"]
        assert quantity(row["#"]) == rank
        for column, key in (("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"), ("vp", "vp"),
                            ("mb", "micro_batch"), ("m", "num_micro_batches"), ("zero", "zero")):
            assert quantity(row[column]) == lay[key], column
        assert row["recompute"] == lay["recompute"]
        assert close(row["step s"], c["step_time_s"], 4) and close(row["MFU"], c["mfu"], 4) and c["hfu"] > 1.2 * c["mfu"]
        assert close(row["memory"], c["memory_bytes_per_gpu"], 4)
    steps = [c["step_time_s"] for c in data["candidates"]]
    assert steps == sorted(steps)
    best = {r["part"]: r["seconds"] for r in table(views, "^best layout: step time$")}
    for part, seconds in data["candidates"][0]["breakdown"].items():
        assert close(best[part], seconds, 4), part


# ---- mlsys roofline, memory ---------------------------------------------------------------------------------

def test_roofline_summary_and_kernel_rows(run_cli):
    data, views = run_both(run_cli, "roofline", "llama2-7b", "--batch", "2", "--seq", "1024")
    summary = {r["quantity"]: r for r in table(views, "prefill on H100-SXM: batch 2, seq 1024, bf16$")}
    t = data["totals"]
    assert close(summary["time to first token"]["value"], data["predicted_s"], 4)
    assert close(summary["time to first token"]["readable"], data["predicted_s"])
    assert close(summary["MFU (of datasheet peak)"]["readable"], data["mfu"])
    assert close(summary["MBU (of datasheet bandwidth)"]["readable"], data["mbu"])
    assert close(summary["weights per GPU"]["readable"], t["weight_bytes"], 4)
    assert t["weight_bytes"] == 6_738_415_616 * 2
    assert close(summary["KV cache per GPU"]["readable"], t["kv_cache_bytes"], 4)
    assert t["kv_cache_bytes"] == 2 * 1024 * 32 * 2 * 4096 * 2  # batch x tokens x layers x K,V x width x bf16
    compute, memory, fixed = summary["kernels: compute / memory / fixed"]["readable"].split(" / ")
    assert close(compute, t["compute_s"]) and close(memory, t["memory_s"]) and close(fixed, t["overhead_s"])
    kernels = table(views, "^kernels ")
    assert len(kernels) == len(data["ops"])
    for row, op in zip(kernels, data["ops"]):
        assert row["op"] == op["name"] and quantity(row["count"]) == op["count"] and row["bound"] == op["bound"]
        assert close(row["FLOPs"], op["flops"], 4) and close(row["bytes"], op["bytes"], 4)
        assert close(row["each us"], op["predicted_s"] * 1e6, 4) and close(row["total ms"], op["total_s"] * 1e3, 4)
        assert abs(quantity(row["share"]) - op["total_s"] / data["predicted_s"]) <= 0.0006  # shown to 0.1%


def test_an_fp8_kv_cache_moves_bytes_not_the_attention_peak(run_cli):
    """--kv-dtype fp8 halves the K/V bytes; the attention still computes in bf16, at the bf16 attention ceiling
    (a compute-bound prefill's MFU moves by the bytes alone: well under 1%)."""
    bf16, fp8 = (run_cli.json("roofline", "llama2-7b", "--seq", "4096", "--kv-dtype", kv) for kv in ("bf16", "fp8"))
    peak = bf16["ceilings"]["attention_flops_per_s"]
    assert peak == pytest.approx(989.5e12 * 0.61, rel=1e-12)  # H100 bf16 datasheet x the attention efficiency
    for data in (bf16, fp8):
        attention = next(op for op in data["ops"] if op["kind"] == "attention")
        assert attention["dtype"] == "bf16" and attention["compute_s"] >= attention["flops"] / peak
    assert abs(fp8["mfu"] - bf16["mfu"]) < 0.01 * bf16["mfu"]
    assert fp8["totals"]["kv_cache_bytes"] == bf16["totals"]["kv_cache_bytes"] / 2


def test_memory_train_parts_in_bytes_gib_and_gb(run_cli):
    data, views = run_both(run_cli, "memory", "train", "llama2-7b", "--gpu", "H100-SXM", "--seq", "2048")
    rows = {r["part"]: r for r in table(views, "^llama2-7b: training, micro-batch 1 x 2048 tokens")}
    total = data["total_bytes"]
    for part, key in (("weights", "weights_bytes"), ("gradients", "gradients_bytes"), ("optimizer", "optimizer_bytes"),
                      ("activations", "activations_bytes"), ("temporaries", "temporaries_bytes"), ("total", "total_bytes")):
        value = data[key]
        assert quantity(rows[part]["bytes"]) == value, part
        assert close(rows[part]["KiB..TiB (2^10..)"], value, 4), part  # binary units
        assert quantity(rows[part]["GB (10^9)"]) == pytest.approx(value, abs=0.006e9), part  # decimal, 2 places
        assert rows[part]["share"] == f"{100 * value / total:.1f}%", part
    assert data["weights_bytes"] == 6_738_415_616 * 2 and data["optimizer_bytes"] == 6_738_415_616 * 12


# ---- bench views: rows, whole-model tables ------------------------------------------------------------------

def test_bench_rows_table_is_the_rows_file(run_cli):
    path = ROOT / "reports" / "matmul" / "rows.jsonl"
    data, views = run_both(run_cli, "bench", "rows", str(path))
    rows = table(views, "^rows.jsonl$")
    assert len(rows) == len(data["rows"]) > 10
    for row, record in zip(rows, data["rows"]):
        assert row["key"] == record["key"] == "|".join(record[k] for k in ("kernel", "baseline", "shape", "dtype",
                                                                           "variant"))
        for key in ("median_ms", "tflops_per_s", "speedup", "prediction_error"):
            if record.get(key) is not None:
                assert close(row[key], record[key], 4), key
        if record.get("median_ms") and record.get("flops"):  # the rate is the row's own FLOPs over its time
            assert record["tflops_per_s"] == pytest.approx(record["flops"] / (record["median_ms"] * 1e-3) / 1e12)


def test_bench_model_case_table_from_measured_rows():
    from mlsyscalc.bench.model_report import CASE_COLUMNS, case_table
    from mlsyscalc.bench.rows import ResultStore

    rows = ResultStore(ROOT / "reports" / "models" / "h100_fitset.jsonl").rows()
    for row, cells in zip(rows, case_table(rows)):
        got = dict(zip(CASE_COLUMNS, cells))
        x = row.extra
        assert (got["model"], got["phase"], got["shape"], got["mode"]) == (x["model"], x["phase"], row.shape,
                                                                           row.baseline)
        assert got["measured_ms"] == row.median_ms and got["predicted_ms"] == row.predicted_ms
        assert got["error"] == pytest.approx((row.median_ms - row.predicted_ms) / row.predicted_ms, rel=1e-9)
        if x.get("peak_bytes"):
            assert got["peak_GiB"] == pytest.approx(x["peak_bytes"] / 2**30, rel=1e-12)
            assert got["predicted_peak_GiB"] == pytest.approx(x["predicted_peak_bytes"] / 2**30, rel=1e-12)
        assert got["status"] == "ok"


def test_the_result_guard_refuses_any_negative_size_and_keeps_signed_keys():
    from mlsyscalc.cli.render import check_numbers
    from mlsyscalc.errors import MlsysError

    for bad in ({"weights_bytes": -0.5}, {"step_time_s": -1e-9}, {"a": {"b": [{"tokens": -2}]}}, {"x_flops": float("nan")}):
        with pytest.raises(MlsysError):
            check_numbers(bad)
    check_numbers({"prediction_error": -0.4, "headroom_bytes": -5e9, "loss_delta": -1.0, "weights_bytes": 0})


def test_units_formatters_by_hand():
    from mlsyscalc.units import fmt_bytes, fmt_count, fmt_flops, fmt_seconds

    assert [fmt_bytes(v) for v in (512, 2**10, 1536 * 2**20, 100.4 * 2**30, 3 * 2**40)] == [
        "512 B", "1 KiB", "1.5 GiB", "100.4 GiB", "3 TiB"]
    assert [fmt_seconds(v) for v in (6.6e-3, 4.2e-7, 2.5, 7200, 3 * 86400)] == ["6.6 ms", "0.42 us", "2.5 s", "2 h",
                                                                                   "3 days"]
    assert [fmt_count(v) for v in (6_738_415_616, 1.4e12, 999, 2500)] == ["6.74 B", "1.4 T", "999", "2.5 k"]
    assert [fmt_flops(v) for v in (2.93e13, 5e9, 12)] == ["29.3 TFLOP", "5 GFLOP", "12 FLOP"]


def test_units_formatters_never_print_exponents():
    """Durations of 1000-3600 s, counts past the last prefix and values that round up to the next unit print
    as plain decimals (docs/cli.md, "Numbers in tables"): no '1.5e+03 s'."""
    from mlsyscalc.units import fmt_count, fmt_seconds, significant

    assert [fmt_seconds(v) for v in (1000, 1500, 1234.5, 3599.9, 0.9997, 9.9996e-4, -0.5, 2000 * 86400)] == [
        "1000 s", "1500 s", "1234 s", "1 h", "1 s", "1 ms", "-500 ms", "2000 days"]
    assert [fmt_count(v) for v in (999.7, 999_960, 1.5e18, -2500)] == ["1 k", "1 M", "1500 P", "-2.5 k"]
    assert [significant(v) for v in (1234.5, 2.5, 0.04216, 0.0)] == ["1234", "2.5", "0.0422", "0"]
