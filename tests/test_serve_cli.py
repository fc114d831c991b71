"""`mlsys serve` through click's CliRunner: JSON keys, traces, sweeps, plots, bad input (exit 2)."""

from __future__ import annotations

import json
import math
import random
import statistics
import sys

import pytest

from mlsyscalc.calc.serve.workload import parse_length, synthetic

KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s",
        "throughput_requests_per_s", "throughput_tokens_per_s", "goodput_requests_per_s", "ttft_p90_s",
        "queue_delay_p50_s", "kv_utilization_mean", "preemptions", "series")


def test_json_keys_and_units(run_cli):
    data = run_cli.json("serve", "llama3-8b", "--rate", "4", "--requests", "100", "--slo", "ttft=0.5,tpot=0.05")
    for key in KEYS:
        assert key in data, key
    assert data["requests"] == 100 and data["gpu"] == "H100-SXM" and data["scheduler"] == "vllm-v1"
    assert (data["options"]["max_batch_tokens"], data["options"]["max_seqs"]) == (8192, 1024)  # resolved for the card
    assert data["options"]["slo"] == {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": None}
    assert data["throughput_tokens_per_s"] == pytest.approx(100 * 128 / data["makespan_s"])
    assert all(isinstance(data[k], float) and math.isfinite(data[k]) for k in KEYS[:9])
    assert len(data["series"]) == 100 and 0 <= max(p["kv_utilization"] for p in data["series"]) <= 1


def test_trace_file(run_cli, tmp_path):
    """Three requests 100 s apart never meet: each TTFT is one prefill of its own prompt."""
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,512,4\n100,512,4\n200,512,4\n")
    data = run_cli.json("serve", "llama3-8b", "--trace", str(trace))
    assert data["requests"] == 3
    assert data["ttft_p50_s"] == pytest.approx(data["ttft_p99_s"], rel=1e-9)
    assert data["queue_delay_p99_s"] == 0


def test_csv_column_lengths(run_cli, tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt,other\n100,x\n200,y\n")
    data = run_cli.json("serve", "gpt2", "--rate", "1", "--requests", "20", "--prompt-len", f"csv:{lengths}:prompt")
    assert data["requests"] == 20
    mean_prompt = data["input_tokens_per_s"] * data["makespan_s"] / 20
    assert 100 <= mean_prompt <= 200 and mean_prompt not in (100, 200)  # both values drawn


def test_sweep(run_cli):
    data = run_cli.json("serve", "llama3-8b", "--sweep", "rate=2,50", "--requests", "200")
    low, high = data["sweep"]
    assert low["rate_per_s"] == 2 and high["rate_per_s"] == 50
    assert high["ttft_p99_s"] > low["ttft_p99_s"]


def test_sweep_csv_is_one_row_per_rate(run_cli):
    """--format csv of a sweep: one row per rate, the rate first, each number the JSON's."""
    import io

    pd = pytest.importorskip("pandas")
    args = ("serve", "llama3-8b", "--sweep", "rate=2,20,50", "--requests", "100", "--slo", "ttft_p99=0.05")
    code, text, err = run_cli(*args, "--format", "csv")
    assert code == 0, err
    frame = pd.read_csv(io.StringIO(text))
    data = run_cli.json(*args)
    assert list(frame.columns[:6]) == ["rate_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s"]
    assert list(frame["rate_per_s"]) == [2, 20, 50]
    assert list(frame["ttft_p99_s"]) == [p["ttft_p99_s"] for p in data["sweep"]]
    assert list(frame["slo.met"]) == [p["slo"]["met"] for p in data["sweep"]] == [True, True, False]


def test_sweep_table_prints_milliseconds(run_cli):
    args = ("serve", "llama3-8b", "--sweep", "rate=2,20", "--requests", "50")
    code, text, _ = run_cli(*args, "--format", "markdown")
    ttft = run_cli.json(*args)["sweep"][0]["ttft_p99_s"]
    assert code == 0 and "TTFT p99 (ms)" in text and f"{ttft * 1e3:.4g}" in text
    assert "goodput" not in text  # no --slo: nothing to count against


def test_plot_and_missing_matplotlib(run_cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    out = tmp_path / "cdf.png"
    code, stdout, err = run_cli("serve", "gpt2", "--rate", "2", "--requests", "50", "--plot", str(out), "--json")
    assert code == 0, err
    assert out.stat().st_size > 1000 and json.loads(stdout)["plot"] == str(out)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = run_cli("serve", "gpt2", "--rate", "2", "--requests", "50", "--plot", str(tmp_path / "x.png"))
    assert code == 2 and "science" in err


@pytest.mark.parametrize("args,message", [
    (["--rate", "-1"], "--rate"),
    ([], "exactly one of --rate"),
    (["--rate", "1", "--prompt-len", "normal:abc"], "--prompt-len"),
    (["--rate", "1", "--prompt-len", "zipf:1,2"], "unknown distribution"),
    (["--rate", "1", "--output-len", "0"], "--output-len"),
    (["--trace", "/nonexistent.csv"], "no such file"),
    (["--rate", "1", "--slo", "ttft=fast"], "--slo"),
    (["--rate", "1", "--slo", "latency=1"], "--slo"),
    (["--rate", "1", "--slo", "ttft_p95=1"], "ttft_p95"),
    (["--rate", "1", "--slo", "ttft_p99=0"], "positive"),
    (["--rate", "1", "--slo", "ttft_p99=1,ttft_p99=2"], "twice"),
    (["--rate", "1", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--rate", "1", "--prompt-len", "4000", "--kv-blocks", "10"], "KV blocks"),
    (["--rate", "1", "--burstiness", "0"], "--burstiness"),
    (["--rate", "1", "--tp", "3"], "divisible"),
    (["--sweep", "rate=a,b"], "--sweep"),
    (["--sweep", "rate=1,2", "--trace", "t.csv"], "does not combine"),
    (["--rate", "1", "--prefix-len", "600", "--prompt-len", "10", "--prefix-caching", "--scheduler", "static"],
     "--prefix-caching"),
])
def test_bad_input_exits_2(run_cli, args, message):
    requests = [] if "--trace" in args else ["--requests", "5"]  # a trace gives the requests (--requests is refused)
    code, out, err = run_cli("serve", "llama3-8b", *args, *requests)
    assert code == 2, (out, err)
    assert message in err and "Traceback" not in err


def test_bad_trace_column(run_cli, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_len,output_len\n0,1,1\n")
    code, _, err = run_cli("serve", "gpt2", "--trace", str(trace))
    assert code == 2 and "arrival_s" in err


def test_poisson_and_bursty_arrivals():
    """Gaps have mean 1/rate; a gamma of shape b has squared coefficient of variation 1/b."""
    fixed = parse_length("100", "p")
    for burst in (1.0, 0.25):
        w = synthetic(fixed, fixed, 5.0, 20000, seed=2, burstiness=burst)
        gaps = [b[0] - a[0] for a, b in zip(w.requests, w.requests[1:])]
        mean = statistics.fmean(gaps)
        assert mean == pytest.approx(0.2, rel=0.05)
        assert statistics.pvariance(gaps) / mean**2 == pytest.approx(1 / burst, rel=0.1)


def test_length_distributions():
    rng = random.Random(0)
    u = parse_length("uniform:10,20", "p")
    draws = [u.draw(rng) for _ in range(5000)]
    assert min(draws) == 10 and max(draws) == 20
    ln = parse_length("lognormal:5,0.5", "p")
    assert statistics.fmean(ln.draw(rng) for _ in range(20000)) == pytest.approx(math.exp(5 + 0.125), rel=0.03)
    n = parse_length("normal:100,10", "p")
    assert statistics.fmean(n.draw(rng) for _ in range(20000)) == pytest.approx(100, rel=0.01)


def test_efficiency_and_launch_cost_reach_the_iterations(run_cli):
    """Decode is memory-bound: halving the memory efficiencies (elementwise 0.89 -> 0.445 and the
    GEMMs' weight stream, which has its own efficiency, 0.78 -> 0.39) nearly doubles TPOT (host time off:
    it does not scale with the memory efficiency)."""
    args = ["serve", "llama3-8b", "--rate", "0.01", "--requests", "3", "--output-len", "8",
            "--iteration-overhead-us", "0", "--iteration-overhead-per-seq-us", "0"]
    base = run_cli.json(*args)["tpot_p50_s"]
    slow = run_cli.json(*args, "--efficiency", "memory=0.445", "--efficiency", "matmul_skinny=0.39")["tpot_p50_s"]
    assert 1.8 < slow / base <= 2.0
    assert run_cli.json(*args, "--launch-us", "20")["tpot_p50_s"] > base


def test_search_csv_is_one_row_per_layout(run_cli):
    import io

    pd = pytest.importorskip("pandas")
    args = ("serve", "gpt2", "--rate", "4", "--requests", "20", "--search", "--max-gpus", "3", "--slo", "ttft=0.5")
    code, text, err = run_cli(*args, "--format", "csv")
    assert code == 0, err
    frame = pd.read_csv(io.StringIO(text))
    layouts = run_cli.json(*args)["layouts"]
    assert list(frame["layout"]) == [r["layout"] for r in layouts] and set(frame["max_gpus"]) == {3}
