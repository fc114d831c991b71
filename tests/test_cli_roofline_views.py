"""`mlsys roofline op`, `roofline model --sweep`, the collectives table and the ceilings note, against the
JSON of the same call and, where the count is simple, by hand (a GEMM's FLOPs and minimum bytes)."""

from __future__ import annotations

import pytest

from .test_values_views import close, quantity, run_both, table


def test_matmul_op_table_by_hand(run_cli):
    data, views = run_both(run_cli, "roofline", "op", "matmul", "--m", "2048", "--n", "1024", "--k", "512")
    rows = {r["quantity"]: r for r in table(views, r"^matmul 2048x1024x512 \(bf16\) on H100-SXM$")}
    flops, nbytes = 2 * 2048 * 1024 * 512, 2 * (2048 * 512 + 512 * 1024 + 2048 * 1024)
    assert (data["flops"], data["bytes"]) == (flops, nbytes)
    assert close(rows["FLOPs"]["value"], flops, 4) and close(rows["FLOPs"]["readable"], flops)
    assert close(rows["bytes (minimum)"]["value"], nbytes, 4) and close(rows["bytes (minimum)"]["readable"], nbytes)
    assert close(rows["intensity (FLOP/byte)"]["value"], flops / nbytes, 4)
    for label, key in (("ridge point (FLOP/byte)", "ridge_flops_per_byte"), ("compute time", "compute_s"),
                       ("memory time", "memory_s"), ("fixed cost", "overhead_s"), ("predicted time", "predicted_s"),
                       ("naive roofline time (datasheet)", "roofline_s"),
                       ("achievable fraction of the roof", "achievable_fraction"),
                       ("attained FLOP/s", "attained_flops_per_s")):
        assert close(rows[label]["value"], data[key], 4), label
    for label, key in (("compute time", "compute_s"), ("memory time", "memory_s"), ("predicted time", "predicted_s")):
        assert close(rows[label]["readable"], data[key]), label
    assert rows["bound"]["value"] == data["bound"]
    assert rows["achievable fraction of the roof"]["readable"] == f"{100 * data['achievable_fraction']:.1f}%"
    assert rows["attained FLOP/s"]["readable"] == f"{data['attained_flops_per_s'] / 1e12:.4g} TFLOP/s"
    assert data["attained_flops_per_s"] == pytest.approx(flops / data["predicted_s"])
    assert data["roofline_s"] == pytest.approx(max(flops / 989.5e12, nbytes / 3.35e12))   # H100 datasheet roof
    t = data["tiling"]
    assert rows["tiling"]["value"] == f"{t['block_m']}x{t['block_n']} split {t['split']}"
    assert rows["tiling"]["readable"] == f"{t['units']} CTAs, {t['waves']} waves, {100 * t['wave_fill']:.0f}% busy"


def test_ceilings_note_follows_the_options(run_cli):
    data = run_cli.json("roofline", "op", "matmul", "--efficiency", "matmul=0.5", "--launch-us", "3", "--gap-us", "0.25")
    note = next(n for n in data["notes"] if n.startswith("Ceilings: "))
    assert note.startswith("Ceilings: H100-SXM datasheet; efficiency matmul 0.5, attention 0.61, memory 0.89; 132 SMs; ")
    assert "fixed cost 3 us per kernel; 0.25 us idle on the stream before each kernel" in note
    assert data["overhead_s"] == pytest.approx(3e-6)


def test_decode_sweep_table(run_cli):
    data, views = run_both(run_cli, "roofline", "model", "llama2-7b", "--phase", "decode", "--context", "1024",
                           "--tp", "2", "--sweep", "batch=1,8,64")
    rows = table(views, r"^llama2-7b decode on H100-SXM x2 \(TP\): batch sweep$")
    assert [quantity(r["batch"]) for r in rows] == [1, 8, 64] == [p["batch"] for p in data["sweep"]]
    for row, p in zip(rows, data["sweep"]):
        assert close(row["time per output token (ms)"], p["predicted_s"] * 1e3, 4)
        assert close(row["tokens/s"], p["tokens_per_s"], 4) and row["bound"] == p["bound"]
        assert close(row["MFU"], p["mfu"], 4) and close(row["MBU"], p["mbu"], 4)
        assert row["fits"] == ("yes" if p["fits"] else "no")
        assert p["tokens_per_s"] == pytest.approx(p["batch"] / p["predicted_s"])
    cross = data["notes"][0]
    assert cross == (f"The step turns compute-bound at batch {data['compute_bound_batch']}."
                     if data["compute_bound_batch"] else
                     "The step stays memory-bound for every batch up to 65536 (KV-cache reads grow with the batch).")


def test_collectives_table_with_tp(run_cli):
    data, views = run_both(run_cli, "roofline", "model", "llama2-7b", "--phase", "prefill", "--seq", "1024", "--tp", "2")
    rows = table(views, r"^collectives \(tensor parallel")
    assert len(rows) == len(data["comm"]) >= 1
    total = data["predicted_s"]
    for row, c in zip(rows, data["comm"]):
        assert row["collective"] == c["name"] and quantity(row["count"]) == c["count"]
        assert close(row["size"], c["size_bytes"], 4) and close(row["each (us)"], c["predicted_s"] * 1e6, 4)
        assert close(row["total (ms)"], c["total_s"] * 1e3, 4) and close(row["exposed (ms)"], c["exposed_s"] * 1e3, 4)
        assert row["share"] == f"{100 * c['exposed_s'] / total:.1f}%"
    ar = data["comm"][0]
    assert ar["size_bytes"] == 1024 * 4096 * 2 and ar["count"] == 2 * 32   # one per attention and MLP block
    summary = {r["quantity"]: r for r in table(views, r"^llama2-7b prefill on H100-SXM x2 \(TP\): batch 1, seq 1024, bf16$")}
    comm_total = sum(c["total_s"] for c in data["comm"])
    assert close(summary["communication (exposed / total)"]["readable"].split(" / ")[1], comm_total)
    assert comm_total == pytest.approx(data["totals"]["comm_s"])
    assert data["totals"]["weight_bytes"] == 6_738_415_616   # 2 bytes a parameter over tp 2
    assert close(summary["weights per GPU"]["value"], 6_738_415_616, 4)
    assert close(summary["KV cache per GPU"]["value"], 1024 * 32 * 2 * 2048 * 2, 4)   # seq x layers x K,V x kv/tp x bf16


def test_train_summary_has_each_pass(run_cli):
    data, views = run_both(run_cli, "roofline", "model", "llama2-7b", "--phase", "train", "--seq", "1024")
    summary = {r["quantity"]: r for r in table(views, r"^llama2-7b train on H100-SXM: batch 1, seq 1024, bf16$")}
    passes = [summary[f"{name} kernels"] for name in ("forward", "backward", "recompute", "optimizer")]
    assert quantity(passes[2]["value"]) == 0   # no recomputation asked
    assert quantity(passes[1]["value"]) > quantity(passes[0]["value"]) > 0
    assert close(summary["training step"]["value"], data["predicted_s"], 4)
    kernels = table(views, r"^kernels \(count = runs per step")
    assert any(r["op"].endswith(" (bac)") for r in kernels) and any(r["op"].endswith(" (for)") for r in kernels)
