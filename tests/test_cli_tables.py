"""The tables tests/test_values_views.py does not read: params, flops, gpus, models, memory infer, the
collectives, comm step and clusters, and serve's SLO table. Each cell against the JSON key it shows,
and the quantities that identify a bug (a share of the wrong total, GB for GiB, a column of another
dtype) against numbers worked out here from the model's config.
"""

from __future__ import annotations

import pytest

from .test_values_views import close, quantity, run_both, table

COUNT = {"": 1.0, "k": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}   # units.fmt_count's suffixes (B = billion)
GIB = 2**30


def count(cell: str) -> float:
    value, _, suffix = cell.partition(" ")
    return float(value) * COUNT[suffix]


def test_params_tables(run_cli):
    data, views = run_both(run_cli, "params", "mixtral-8x7b")
    summary = {r["count"]: r for r in table(views, "^mixtral-8x7b: parameters$")}
    for label, key in (("total", "total_params"), ("active per token", "active_params"),
                       ("embedding", "embedding_params"), ("lm_head (0 if tied)", "lm_head_params"),
                       ("non-embedding", "non_embedding_params")):
        assert quantity(summary[label]["params"]) == data[key], label
        assert count(summary[label]["approx"]) == pytest.approx(data[key], rel=5e-3), label
    assert data["embedding_params"] == data["lm_head_params"] == 32000 * 4096   # untied: vocab x hidden, twice
    assert data["non_embedding_params"] == data["total_params"] - data["embedding_params"]
    parts = {r["part"]: r for r in table(views, "^breakdown$")}
    assert list(parts) == [*data["breakdown"], "total"]
    for part, value in data["breakdown"].items():
        assert quantity(parts[part]["params"]) == value
        assert parts[part]["share"] == f"{100 * value / data['total_params']:.2f}%", part
    assert parts["attention"]["share"] == "2.87%"   # 32 x (2 x 4096^2 + 2 x 4096 x 1024) / 46.7e9
    assert data["breakdown"]["attention"] == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert parts["total"]["share"] == "100.00%" and quantity(parts["total"]["params"]) == data["total_params"]


def test_flops_tables(run_cli):
    data, views = run_both(run_cli, "flops", "llama2-7b", "--batch", "2", "--seq", "512")
    totals = {r["quantity"]: r for r in table(views, r"^llama2-7b: prefill, batch 2, 512 tokens$")}
    for label, key in (("forward", "forward_flops"), ("backward (2x forward)", "backward_flops"),
                       ("training step (3x forward)", "train_step_flops"),
                       ("training step, full recompute (4x)", "train_step_recompute_flops"),
                       ("forward per token", "flops_per_token"), ("approx. training 6N*T", "approx_6n_flops"),
                       ("approx. training (6N + 12*L*S*d_attn)*T", "approx_6n_attn_flops")):
        assert close(totals[label]["FLOPs"], data[key], 4), label
        assert close(totals[label]["approx"], data[key]), label
    assert data["backward_flops"] == 2 * data["forward_flops"] and data["train_step_flops"] == 3 * data["forward_flops"]
    assert data["train_step_recompute_flops"] == 4 * data["forward_flops"]
    assert data["flops_per_token"] == data["forward_flops"] / 1024
    parts = {r["part"]: r for r in table(views, "^forward breakdown$")}
    for part, value in data["breakdown"].items():
        assert parts[part]["share"] == f"{100 * value / data['forward_flops']:.1f}%", part
    decode = run_cli.json("flops", "llama2-7b", "--phase", "decode", "--batch", "4", "--context", "100")
    assert (decode["seq"], decode["kv_len"], decode["tokens"]) == (1, 101, 4)


def test_gpus_table_columns_are_the_datasheet(run_cli):
    data, views = run_both(run_cli, "gpus")
    rows = {r["name"]: r for r in table(views, "^built-in GPUs$")}
    assert len(rows) == len(data["gpus"]) > 5
    for gpu in data["gpus"]:
        row = rows[gpu["name"]]
        for dtype in ("fp32", "tf32", "bf16", "fp8", "int8", "fp4"):
            column = f"{dtype} {'TOP/s' if dtype == 'int8' else 'TFLOP/s'}"
            peak = gpu["peak_flops"].get(dtype)
            assert (row[column] == "") if peak is None else close(row[column], peak / 1e12, 4), (gpu["name"], dtype)
        assert close(row["memory GB"], gpu["memory_bytes"] / 1e9, 4)
        assert close(row["HBM GB/s"], gpu["memory_bandwidth_Bps"] / 1e9, 4)
        assert (row["L2 MB"] == "") if gpu["l2_bytes"] is None else close(row["L2 MB"], gpu["l2_bytes"] / 1e6, 4)
        assert quantity(row["SMs"]) == gpu["sm_count"]
        nvlink = gpu["nvlink_Bps"]
        assert (row["NVLink GB/s"] == "") if nvlink is None else close(row["NVLink GB/s"], nvlink / 1e9, 4)
    h100 = rows["H100-SXM"]
    assert (h100["bf16 TFLOP/s"], h100["fp8 TFLOP/s"], h100["int8 TOP/s"], h100["SMs"]) == ("989.5", "1979", "1979", "132")


def test_models_list_and_show(run_cli):
    data, views = run_both(run_cli, "models")
    rows = {r["name"]: r for r in table(views, "^built-in models$")}
    for model in data["models"]:
        assert count(rows[model["name"]]["params"]) == pytest.approx(model["total_params"], rel=5e-3)
        assert rows[model["name"]]["type"] == model["model_type"]
        assert rows[model["name"]]["aliases"] == ", ".join(model["aliases"])
    assert (rows["llama2-7b"]["layers"], rows["llama2-7b"]["hidden"], rows["llama2-7b"]["heads/kv"]) == ("32", "4,096",
                                                                                                         "32/32")
    assert rows["mixtral-8x7b"]["heads/kv"] == "32/8"
    spec, shown = run_both(run_cli, "models", "show", "gemma2-9b")
    fields = {r["field"]: r["value"] for r in table(views=shown, pattern=r"\(normalised\)$")}
    assert fields["num_heads"] == "16" and fields["num_kv_heads"] == "8" and fields["head_dim"] == "256"
    assert spec["head_dim"] == 256 and spec["hidden_size"] == 3584
    assert fields["kv_dim"] == f"{spec['kv_dim']:,}" == "2,048"
    types = spec["layer_types"]
    assert len(types) == 42 and fields["layer_types"] == ", ".join(
        f"{types.count(kind)} x {kind}" for kind in dict.fromkeys(types))


def test_memory_infer_tables_by_hand(run_cli):
    data, views = run_both(run_cli, "memory", "infer", "llama2-7b", "--gpu", "h100", "--batch", "8", "--context", "4096")
    kv = 8 * 4096 * 32 * 2 * 4096 * 2   # tokens x layers x (K, V) x hidden x bf16
    weights = 6_738_415_616 * 2
    assert (data["kv_cache_bytes"], data["weights_bytes"]) == (kv, weights)
    parts = {r["part"]: r for r in table(views, "^llama2-7b: inference, batch 8 x 4096 tokens")}
    for part, key in (("weights", "weights_bytes"), ("kv_cache", "kv_cache_bytes"), ("activations", "activations_bytes"),
                      ("total", "total_bytes")):
        assert quantity(parts[part]["bytes"]) == data[key], part
        assert close(parts[part]["KiB..TiB (2^10..)"], data[key], 4), part
        assert quantity(parts[part]["GB (10^9)"]) == pytest.approx(data[key], abs=0.006e9), part
        assert parts[part]["share"] == f"{100 * data[key] / data['total_bytes']:.1f}%", part
    assert parts["kv_cache"]["KiB..TiB (2^10..)"] == "16 GiB" and parts["kv_cache"]["GB (10^9)"] == "17.18 GB"
    detail = {r["part"]: r for r in table(views, "^detail$")}
    for key, value in data["detail"].items():
        assert quantity(detail[key.removesuffix("_bytes")]["bytes"]) == value, key
    fit = {r[""]: r for r in table(views, "^H100-SXM: fits$")}
    for label, key in (("GPU memory", "capacity_bytes"), ("reserve (10%)", "reserve_bytes"), ("usable", "usable_bytes"),
                       ("needed", "total_bytes"), ("headroom", "headroom_bytes")):
        assert quantity(fit[label]["bytes"]) == data[key], label
    assert data["usable_bytes"] == data["capacity_bytes"] - data["reserve_bytes"]
    assert data["headroom_bytes"] == data["usable_bytes"] - data["total_bytes"]
    assert data["reserve_bytes"] == int(0.1 * data["capacity_bytes"])
    elements = {r["key"]: r["bytes"] for r in table(views, "^bytes per element")}
    assert (elements["weight"], elements["kv"], elements["logits"]) == ("2", "2", "4")
    over = run_both(run_cli, "memory", "infer", "llama2-7b", "--gpu", "h100", "--batch", "64", "--context", "4096")[1]
    assert "H100-SXM: does NOT fit" in over


def test_collective_tables(run_cli):
    data, views = run_both(run_cli, "comm", "all-reduce", "--size", "1GiB", "--gpus", "16", "--nodes", "2",
                           "--cluster", "dgx-h100")
    summary = {r["quantity"]: r for r in table(views, r"^all-reduce of 1 GiB over 16 GPUs on 2 node\(s\)")}
    for label, key in (("time", "time_s"), ("latency (steps x alpha)", "latency_s"),
                       ("transfer (bytes x beta)", "transfer_s"), ("buffer ((1 + 1/p) message bytes / C)", "buffer_s"),
                       ("host wait (call overhead - device time)", "host_wait_s"),
                       ("bytes sent per GPU", "bytes_per_gpu"), ("algbw (GB/s)", "algbw_GBps"),
                       ("busbw (GB/s)", "busbw_GBps")):
        assert close(summary[label]["value"], data[key], 4), label
    assert summary["busbw (GB/s)"]["approx"] == f"{data['busbw_GBps']:.1f} GB/s"
    assert summary["algbw (GB/s)"]["approx"] == f"{data['algbw_GBps']:.1f} GB/s"
    assert data["algbw_GBps"] == pytest.approx(GIB / data["time_s"] / 1e9)
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 2 * 15 / 16)   # nccl-tests: 2(p-1)/p
    assert data["busbw_factor"] == pytest.approx(2 * 15 / 16)
    phases = table(views, "^phases$")
    assert len(phases) == len(data["phases"]) >= 1
    assert data["phases"][0]["steps"] == 2 * 15   # ring: 2(p - 1) steps
    for row, phase in zip(phases, data["phases"]):
        assert (row["phase"], row["link"]) == (phase["name"], phase["link"])
        assert quantity(row["gpus"]) == phase["gpus"] and quantity(row["steps"]) == phase["steps"]
        assert close(row["bytes per GPU"], phase["bytes_per_gpu"], 4) and close(row["time"], phase["time_s"])


def test_comm_step_tables(run_cli):
    data, views = run_both(run_cli, "comm", "step", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "4", "--grad-accum",
                           "8", "--cluster", "dgx-h100", "--overlap", "dp")
    rows = table(views, r"^llama2-7b on 16 GPUs \(2 node\(s\) of hgx-h100\): dp 4 tp 2 pp 2 ep 1 etp 2 cp 1, ZeRO-0, "
                        r"micro-batch 1 x 2048, m=8$")
    assert [r["dim"] for r in rows] == [x["dim"] for x in data["rows"]] == ["dp", "tp", "pp"]
    for row, x in zip(rows, data["rows"]):
        assert row["collective"] == x["collective"] and row["rule"] == x["rule"]
        assert quantity(row["group"]) == x["group_size"] and quantity(row["nodes"]) == x["nodes"]
        assert quantity(row["calls"]) == x["calls"]
        assert close(row["message"], x["message_bytes"], 4) and close(row["bytes/GPU"], x["bytes_per_gpu"], 4)
        assert close(row["time"], x["time_s"]) and row["overlapped"] == ("yes" if x["overlapped"] else "")
    assert [r["overlapped"] for r in rows] == ["yes", "", ""]
    tp = data["rows"][1]
    assert tp["message_bytes"] == 2048 * 4096 * 2 and tp["calls"] == 8 * 16 * 4   # m x layers/stage x 4
    totals = {r["quantity"]: r for r in table(views, "^totals$")}
    for label, key in (("bytes sent per GPU", "total_bytes_per_gpu"), ("communication time", "total_time_s"),
                       ("exposed (not overlapped)", "exposed_time_s"), ("pipeline bubble, share of step", "bubble_fraction")):
        assert close(totals[label]["value"], data[key], 4), label
    assert data["bubble_fraction"] == pytest.approx(1 / 9) and totals["pipeline bubble, share of step"]["approx"] == "11.1%"
    assert data["exposed_time_s"] == pytest.approx(data["total_time_s"] - data["rows"][0]["time_s"])
    assert (data["global_batch"], data["tokens_per_step"]) == (32, 32 * 2048)


def test_clusters_table(run_cli):
    data, views = run_both(run_cli, "comm", "clusters")
    rows = {r["name"]: r for r in table(views, "^clusters$")}
    for spec in data["clusters"]:
        row = rows[spec["name"]]
        assert row["gpu"] == spec["gpu"] and quantity(row["gpus/node"]) == spec["gpus_per_node"]
        assert close(row["intra GB/s"], spec["intra_node"]["bandwidth_GBps"], 4)
        assert close(row["intra us"], spec["intra_node"]["latency_us"], 4)
        inter = spec.get("inter_node")
        if inter:
            assert close(row["inter GB/s"], inter["bandwidth_GBps"], 4) and close(row["inter us"], inter["latency_us"], 4)
        else:
            assert row["inter GB/s"] == row["inter us"] == ""
        assert row["measured"] == ("yes" if spec["measured"] else "")


def test_serve_slo_table(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", "--requests", "40", "--rate", "20", "--prompt-len",
                           "uniform:64,2048", "--slo", "ttft_p90=0.05,tpot_p50=1.0")
    rows = table(views, "^SLO targets$")
    terms = {(t["metric"], t["percentile"]): t for t in data["slo"]["terms"]}
    assert [r["target"] for r in rows] == ["TTFT p90", "TPOT p50"]
    ttft, tpot = terms[("ttft", 90)], terms[("tpot", 50)]
    assert (rows[0]["limit"], rows[1]["limit"]) == ("50 ms", "1 s")
    assert close(rows[0]["simulated"], data["ttft_p90_s"]) and close(rows[1]["simulated"], data["tpot_p50_s"])
    assert ttft["value_s"] == data["ttft_p90_s"] and tpot["value_s"] == data["tpot_p50_s"]
    assert rows[0]["verdict"] == ("met" if data["ttft_p90_s"] <= 0.05 else "MISSED") == "MISSED"
    assert rows[1]["verdict"] == "met"


def test_link_overrides_in_their_units(run_cli):
    """--bandwidth in GB/s and --latency in us per step: a ring all-reduce of 1 GiB on 8 GPUs by hand."""
    data = run_cli.json("comm", "all-reduce", "--size", "1GiB", "--gpus", "8", "--bandwidth", "100", "--latency", "5")
    sent = 2 * 7 / 8 * GIB
    assert data["latency_s"] == pytest.approx(14 * 5e-6) and data["transfer_s"] == pytest.approx(sent / 100e9)
    assert data["time_s"] == pytest.approx(14 * 5e-6 + sent / 100e9) and data["bytes_per_gpu"] == sent
    assert data["phases"][0]["link"].endswith("(overridden)") and data["phases"][0]["step_latency_s"] == pytest.approx(5e-6)
    inter = run_cli.json("comm", "all-gather", "--size", "64MiB", "--gpus", "16", "--nodes", "2", "--algo", "ring",
                         "--inter-bandwidth", "10", "--inter-latency", "20")
    slow = run_cli.json("comm", "all-gather", "--size", "64MiB", "--gpus", "16", "--nodes", "2", "--algo", "ring",
                        "--inter-bandwidth", "5", "--inter-latency", "20")
    assert slow["transfer_s"] == pytest.approx(2 * inter["transfer_s"], rel=0.02)   # the ring runs at the slow link
