"""The answer lines (`--brief`, the bold lines above tables, JSON `answer`) of each command, from payloads
written here with round numbers, so that every figure of every line is known by hand.

A payload key read for its neighbour (p90 for p99, usable for total), a ratio the wrong way up, a
clause attached to the wrong branch or a unit with the wrong base changes a line these tests spell out.
"""

from __future__ import annotations

import pytest

from mlsyscalc.cli.answers import answer, lookup

GIB = 2**30


def test_params_total_and_active_share():
    assert answer("params", {"total_params": 6_738_415_616, "active_params": 6_738_415_616}) == [
        "params: 6.74G total (6,738,415,616)"]
    assert answer("params", {"total_params": 46_702_792_704, "active_params": 12_879_925_248}) == [
        "params: 46.7G total (46,702,792,704), 12.9G active per token (12,879,925,248, 28%)"]


def test_flops_forward_train_and_decode():
    d = {"forward_flops": 2_000_000_000_000, "flops_per_token": 4.0e9, "tokens": 500, "train_step_flops": 6e12}
    assert answer("flops", d) == ["forward 2 TFLOP (2,000,000,000,000) for 500 tokens, 4 GFLOP per token",
                                  "train step 6 TFLOP (forward + backward = 3 x forward)"]
    assert answer("flops", {**d, "phase": "decode"}) == [
        "forward 2 TFLOP (2,000,000,000,000) for 500 tokens, 4 GFLOP per token"]


def test_listing_answers_count_their_entries():
    assert answer("models", {"models": [{}, {}, {}]}) == [
        "3 built-in models (names and aliases below; `mlsys models show NAME` for one)"]
    assert answer("gpus", {"gpus": [{}, {}]}) == ["2 built-in GPUs (datasheet figures below; docs/hardware.md cites each)"]
    assert answer("comm clusters", {"clusters": [{}]}) == ["1 built-in clusters"]
    show = {"name": "m", "model_type": "mixtral", "num_layers": 32, "hidden_size": 4096, "num_heads": 32,
            "num_kv_heads": 8, "vocab_size": 32000}
    assert answer("models show", show) == ["m: mixtral, 32 layers, hidden 4,096, 32 heads (8 KV), vocab 32,000"]
    assert answer("models show", {**show, "moe": {"num_experts": 8, "experts_per_token": 2}}) == [
        "m: mixtral, 32 layers, hidden 4,096, 32 heads (8 KV), vocab 32,000, MoE 8 experts (2 a token)"]


def test_memory_fit_lines():
    fits = {"total_bytes": 48 * GIB, "usable_bytes": 64 * GIB, "fits": True, "gpu": "H100-SXM"}
    assert answer("memory train", fits) == ["fits: yes, 48 GiB per GPU of 64 GiB usable on H100-SXM (75%)"]
    peak = {**fits, "peak_bytes": 16 * GIB}  # the peak, when given, is what must fit
    assert answer("memory train", peak) == ["fits: yes, 16 GiB per GPU of 64 GiB usable on H100-SXM (25%)"]
    over = {"total_bytes": 96 * GIB, "usable_bytes": 64 * GIB, "fits": False, "gpu": "A100"}
    assert answer("memory train", over) == ["does not fit: needs 96 GiB per GPU, 1.5x the 64 GiB usable on A100"]
    assert answer("memory train", {"total_bytes": 1.5 * 2**40}) == ["needs 1.5 TiB per GPU (give --gpu for a fit check)"]
    assert answer("memory infer", {"total_bytes": 512 * 2**20, "usable_bytes": 64 * GIB, "fits": True, "gpu": "g"}) == [
        "fits: yes, 512 MiB per GPU of 64 GiB usable on g (0.8%)"]
    solved = {**fits, "solved_for": "batch", "max_value": 1234, "batch": 1234, "context": 8192}
    assert answer("memory infer", solved) == ["fits: yes, 48 GiB per GPU of 64 GiB usable on H100-SXM (75%)",
                                              "largest batch that fits: 1,234 (batch 1,234, context 8,192)"]


def test_roofline_op_by_bound():
    memory = {"name": "matmul", "shape": "1x4096x4096", "predicted_s": 12.5e-6, "bound": "memory",
              "intensity_flops_per_byte": 0.99951, "ridge_flops_per_byte": 295.2}
    assert answer("roofline op matmul", memory) == ["matmul 1x4096x4096: 12.5 us, memory-bound, 1 FLOP/byte (ridge 295)"]
    compute = {"name": "matmul", "predicted_s": 0.25, "bound": "compute", "attained_flops_per_s": 7.06e14, "gpu": "H100"}
    assert answer("roofline op", compute) == ["matmul: 250 ms, compute-bound, 706 TFLOP/s on H100"]


def test_roofline_model_single_and_sweep():
    d = {"phase": "decode", "predicted_s": 0.0125, "bound": "memory", "mfu": 0.012, "mbu": 0.85, "tokens_per_s": 80.0,
         "gpu": "H100-SXM"}
    assert answer("roofline model", d) == ["decode step (TPOT) 12.5 ms, memory-bound, MFU 1.2%, MBU 85%, 80 tok/s on H100-SXM"]
    assert answer("roofline model", {**d, "phase": "prefill"})[0].startswith("prefill (TTFT) 12.5 ms")
    assert answer("roofline model", {**d, "phase": "other"})[0].startswith("other 12.5 ms")
    sweep = {"phase": "decode", "sweep": [
        {"batch": 1, "predicted_s": 0.01, "tokens_per_s": 100.0, "bound": "memory", "mfu": 0.01},
        {"batch": 64, "predicted_s": 0.02, "tokens_per_s": 3200.0, "bound": "memory", "mfu": 0.2}]}
    assert answer("roofline model", sweep) == ["decode over batch 1..64: 10 ms -> 20 ms, 100 -> 3.2k tok/s"]


def test_comm_lines():
    d = {"collective": "all-reduce", "size_bytes": 2 * GIB, "gpus": 8, "time_s": 0.0125, "busbw_GBps": 343.6,
         "algbw_GBps": 196.3}
    assert answer("comm all-reduce", d) == ["all-reduce of 2 GiB on 8 GPUs: 12.5 ms, busbw 344 GB/s (algbw 196 GB/s)"]
    assert lookup("comm p2p") is lookup("comm all-reduce")
    step = {"total_bytes_per_gpu": 3 * GIB, "total_time_s": 1.5, "exposed_time_s": 0.25, "bubble_fraction": 0.125}
    assert answer("comm step", step) == ["3 GiB per GPU per step in 1.5 s of collectives, 250 ms exposed; bubble 12%"]


LAYOUT = {"tp": 2, "pp": 4, "dp": 8, "cp": 1, "ep": 1, "vp": 2, "micro_batch": 1, "zero": 1, "recompute": "full"}


def test_train_line_fit_and_layout():
    d = {"step_time_s": 11.8, "mfu": 0.634, "tokens_per_s": 81128.0, "memory_bytes_per_gpu": 48 * GIB, "fits": True,
         "usable_bytes": 64 * GIB, "layout": LAYOUT}
    assert answer("train", d) == ["step 11.8 s, MFU 63%, 81.1k tok/s, 48 GiB/GPU (fits)"]
    over = {**d, "fits": False, "memory_bytes_per_gpu": 80 * GIB}
    assert answer("train", over) == [
        "step 11.8 s, MFU 63%, 81.1k tok/s, 80 GiB/GPU (does not fit: 1.25x the 64 GiB usable)",
        "this layout (tp2 x pp4 x dp8 x vp2 (mb1, zero1, recompute full)) needs more memory than the GPU has: "
        "`mlsys plan` finds the fastest one that fits"]
    unchecked = {k: v for k, v in d.items() if k not in ("fits", "usable_bytes")}
    assert answer("train", unchecked) == ["step 11.8 s, MFU 63%, 81.1k tok/s, 48 GiB/GPU (no fit check)"]
    plain = {"tp": 1, "pp": 1, "dp": 64, "cp": 2, "ep": 1, "recompute": "none", "zero": 0}
    assert answer("train", {**over, "layout": plain})[1].startswith("this layout (dp64 x cp2) needs")


def test_plan_best_fitting_candidate():
    first = {"step_time_s": 2.5, "mfu": 0.5, "tokens_per_s": 2.5e5, "memory_bytes_per_gpu": 90 * GIB, "fits": False,
             "usable_bytes": 72 * GIB, "layout": {**LAYOUT, "tp": 8}}
    best = {"step_time_s": 3.0, "mfu": 0.42, "tokens_per_s": 2.0e5, "memory_bytes_per_gpu": 60 * GIB, "fits": True,
            "usable_bytes": 72 * GIB, "layout": {"tp": 4, "pp": 2, "dp": 8, "micro_batch": 2}}
    d = {"gpus": 64, "searched": 12345, "feasible": 678, "candidates": [first, best]}
    assert answer("plan", d) == ["best layout of 12,345 searched: tp4 x pp2 x dp8 (mb2)",
                                 "step 3 s, MFU 42%, 200k tok/s, 60 GiB/GPU (fits)"]
    assert answer("plan", {**d, "candidates": [first]}) == ["no layout of 64 GPUs fits (678 of 12,345 valid)"]


SERVE = {"ttft_p50_s": 0.05, "ttft_p90_s": 0.2, "ttft_p99_s": 0.8, "tpot_p50_s": 0.02, "tpot_p90_s": 0.03,
         "tpot_p99_s": 0.04, "throughput_requests_per_s": 12.5, "throughput_tokens_per_s": 2500.0}


def test_serve_latencies_and_throughput_without_slo():
    assert answer("serve", SERVE) == ["TTFT p50/p99 50 ms / 800 ms, TPOT p50/p99 20 ms / 40 ms",
                                      "throughput 12.5 req/s, 2.5k tok/s"]
    assert answer("serve", {**SERVE, "layout": "1P:3D"})[1] == "throughput 12.5 req/s, 2.5k tok/s on 1P:3D"


def test_serve_verdict_from_the_simulators_terms():
    terms = [{"metric": "ttft", "percentile": 99, "value_s": 0.8, "limit_s": 0.5, "met": False},
             {"metric": "tpot", "percentile": 90, "value_s": 0.03, "limit_s": 0.05, "met": True}]
    d = {**SERVE, "slo_attainment": 0.875, "slo": {"terms": terms}}
    assert answer("serve", d)[1] == "SLO missed: ttft p99 800 ms > 500 ms (88% of requests within); 12.5 req/s, 2.5k tok/s"
    held = {**d, "slo": {"terms": terms[1:]}}
    assert answer("serve", held)[1] == "SLO met (tpot p90) (88% of requests within); 12.5 req/s, 2.5k tok/s"


def test_serve_verdict_from_per_request_thresholds_reads_p99():
    d = {**SERVE, "options": {"slo": {"ttft_s": 1.0, "tpot_s": 0.035, "e2e_s": None}}}
    assert answer("serve", d)[1] == "SLO missed: tpot p99 40 ms > 35 ms; 12.5 req/s, 2.5k tok/s"
    ok = {**SERVE, "options": {"slo": {"ttft_s": 1.0, "tpot_s": 0.05}}, "slo_attainment": 0.9}
    assert answer("serve", ok)[1] == "SLO met at p99 (90% of requests within); 12.5 req/s, 2.5k tok/s"
    edge = {**SERVE, "options": {"slo": {"ttft_s": 0.8}}}  # at the limit is within it
    assert answer("serve", edge)[1] == "SLO met at p99; 12.5 req/s, 2.5k tok/s"


def test_serve_sweep_and_disaggregated_search():
    sweep = {"sweep": [{**SERVE, "rate_per_s": 2.0}, {**SERVE, "rate_per_s": 40.0, "ttft_p99_s": 3.2, "tpot_p99_s": 0.09}]}
    assert answer("serve", sweep) == ["rate 2 -> 40 req/s: TTFT p99 800 ms -> 3.2 s, TPOT p99 40 ms -> 90 ms"]
    best = {"best": {**SERVE, "layout": "2P:6D", "gpus": 8, "goodput_per_gpu_requests_per_s": 1.25}}
    assert answer("serve", best) == ["best split: 2P:6D on 8 GPUs, goodput 1.25 req/s per GPU",
                                     "TTFT p50/p99 50 ms / 800 ms, TPOT p50/p99 20 ms / 40 ms"]


def test_scaling_lines():
    assert answer("scaling optimal", {"compute_flops": 5.76e23, "params": 6.7e10, "tokens": 1.4e12,
                                      "tokens_per_param": 20.9, "loss": 1.93567}) == [
        "compute-optimal at 576 ZFLOP: 67G params on 1.4T tokens (20.9 tokens/param), loss 1.936"]
    assert answer("scaling loss", {"loss": 2.01234, "params": 7e9, "tokens": 2e12, "compute_flops": 8.4e22,
                                   "optimal_loss": 1.99876, "optimal_params": 2.6e10}) == [
        "loss 2.012 for 7G params on 2T tokens; the optimum at 84 ZFLOP reaches 1.999 (26G params)"]
    budget = {"compute_flops": 1e23, "gpu_hours": 70181.3, "wall_days": 3.655, "gpus": 800, "mfu": 0.4}
    assert answer("scaling budget", budget) == [
        "100 ZFLOP = 70.2k GPU-hours = 3.65 days on 800 GPUs at MFU 40%"]
    assert answer("scaling budget", {**budget, "gpus": 1, "cost": 140362.6}) == [
        "100 ZFLOP = 70.2k GPU-hours = 3.65 days on 1 GPU at MFU 40%, cost 140k"]
    rows = [{"params_ratio": 0.91}, {"params_ratio": 1.12}, {"params_ratio": None}]
    assert answer("scaling table", {"rows": rows, "law": "all"}) == [
        "3 rows of Chinchilla's tables recomputed by every law: params within 0.91-1.12x of the paper's"]
    assert answer("scaling table", {"rows": [{}], "law": "approach2"}) == [
        "1 rows of Chinchilla's tables recomputed by approach2"]
    fit = {"n_runs": 12, "E": 1.69, "A": 406.4, "alpha": 0.34, "B": 410.7, "beta": 0.28, "compute_flops": 1e21,
           "params": 2.5e9, "tokens": 6.7e10}
    assert answer("scaling fit", fit) == ["fit over 12 runs: L = 1.69 + 406.4/N^0.34 + 410.7/D^0.28",
                                          "optimum at 1 ZFLOP: 2.5G params on 67G tokens"]


def test_compare_fastest_cheapest_and_fit_only():
    cards = [{"card": "A100", "time_s": 3.0, "cost": {"cost_per_million_tokens": 2.5}},
             {"card": "H100", "time_s": 1.5, "cost": {"cost_per_million_tokens": 3.25}},
             {"card": "H200", "time_s": 1.25, "cost": {"cost_per_million_tokens": 2.75}},
             {"card": "L4", "time_s": 9.0, "cost": {"cost_per_million_tokens": 1.5}},
             {"card": "B200", "error": "no such dtype"}]
    assert answer("compare", {"cards": cards}) == ["fastest: H200 1.25 s, H100 1.5 s, A100 3 s",
                                                   "cheapest: L4 at 1.5 per million tokens"]
    fit_only = [{"card": "A100", "fits": False}, {"card": "H200", "fits": True}, {"card": "H100", "fits": True}]
    assert answer("compare", {"cards": fit_only}) == ["fits on 2 of 3 cards: H200, H100"]
    assert answer("compare", {"cards": fit_only[:1]}) == ["fits on 0 of 1 cards"]
    assert answer("compare", {"cards": cards[-1:]}) == ["no card could run this task (see the errors below)"]


def test_report_line_counts_ok_sections():
    d = {"markdown": "out/report.md", "sections": {"a": "ok", "b": "skipped: no GPU", "c": "ok"},
         "figures": ["f1.png", "f1.svg"], "elapsed_s": 2.5}
    assert answer("report", d) == ["wrote out/report.md (2 of 3 sections, 2 figure files) in 2.5 s"]


def test_lookup_takes_the_longest_group_and_a_missing_key_drops_the_line():
    assert lookup("roofline op attention") is lookup("roofline op") is not lookup("roofline model")
    assert lookup("bench rows") is None and answer("bench rows", {"rows": []}) == []
    assert answer("train", {"step_time_s": 1.0}) == []   # a payload without the keys loses the line, not the output


@pytest.mark.parametrize("args,first", [
    (["params", "llama2-7b"], "params: 6.74G total (6,738,415,616)"),
    (["comm", "all-reduce", "--size", "1GiB", "--gpus", "8", "--cluster", "dgx-h100"], "all-reduce of 1 GiB on 8 GPUs: "),
])
def test_brief_prints_the_answer_lines_only(run_cli, args, first):
    code, out, err = run_cli(*args, "--brief")
    assert code == 0, err
    assert out.startswith(first) and "|" not in out and "─" not in out
    data = run_cli.json(*args)
    assert out.splitlines() == data["answer"]
