"""`mlsys serve --max-rate` and `--min-gpus` views: every probe row against its JSON point (seconds shown in
ms), the order of the rows, the title's answer and targets, and the answers' own consistency (the rate
found meets the SLO, the next one misses; no probe with fewer GPUs meets it)."""

from __future__ import annotations

from .test_values_views import close, quantity, run_both, table

CELLS = {"TTFT p50 (ms)": "ttft_p50_s", "TTFT p99 (ms)": "ttft_p99_s", "TPOT p50 (ms)": "tpot_p50_s",
         "TPOT p99 (ms)": "tpot_p99_s", "e2e p99 (ms)": "e2e_p99_s"}


def _same_cells(row: dict, point: dict) -> None:
    for column, key in CELLS.items():
        assert close(row[column], point[key] * 1e3, 4), column
    assert close(row["requests/s"], point["throughput_requests_per_s"], 4)
    assert close(row["goodput (req/s)"], point["goodput_requests_per_s"], 4)
    assert row["meets SLO"] == ("yes" if point["meets_slo"] else "no")


def test_max_rate_view(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", "--requests", "40", "--max-rate", "--slo", "ttft_p99=0.5",
                           "--prompt-len", "1024")
    best = data["max_rate_requests_per_s"]
    rows = table(views, rf"^llama2-7b on H100-SXM \([a-z0-9-]+, tp 1\): at most {best:.4g} requests/s within "
                        r"TTFT p99 <= 500 ms$")
    points = data["points"]
    assert [p["rate_requests_per_s"] for p in points] == sorted(p["rate_requests_per_s"] for p in points)
    assert len(rows) == len(points) >= 3
    for row, point in zip(rows, points):
        assert close(row["rate (req/s)"], point["rate_requests_per_s"], 4) and row["probe"] == point["stage"]
        _same_cells(row, point)
    by_rate = {p["rate_requests_per_s"]: p for p in points}
    assert by_rate[best]["meets_slo"] and best < data["next_rate_requests_per_s"]
    assert data["at_max_rate"]["ttft_p99_s"] <= 0.5
    assert data["notes"][0].startswith(f"{data['next_rate_requests_per_s']:.4g} requests/s misses: ")
    assert data["notes"][2] == f"{data['requests_per_point']:,} requests per probe (burstiness 1, seed 0)."
    assert data["requests_per_point"] == 40


def test_min_gpus_view(run_cli):
    data, views = run_both(run_cli, "serve", "llama2-7b", "--requests", "40", "--rate", "20", "--min-gpus", "--slo",
                           "ttft_p99=0.3,tpot_p99=0.05", "--max-gpus", "8")
    layout = data["layout"]
    assert layout["gpus"] == layout["replicas"] * layout["tp"] == data["min_gpus"]
    rows = table(views, rf"^llama2-7b on H100-SXM: {layout['gpus']} GPUs \({layout['replicas']} x tp {layout['tp']}\) "
                        r"serve .* within TTFT p99 <= 300 ms, TPOT p99 <= 50 ms$")
    points = data["points"]
    assert [(p["tp"], p["replicas"]) for p in points] == sorted((p["tp"], p["replicas"]) for p in points)
    for row, point in zip(rows, points):
        assert (quantity(row["replicas"]), quantity(row["tp"]), quantity(row["GPUs"])) == (
            point["replicas"], point["tp"], point["gpus"])
        _same_cells(row, point)
    assert not any(p["meets_slo"] and p["gpus"] < data["min_gpus"] for p in points)
    assert any(p["meets_slo"] and p["gpus"] == data["min_gpus"] for p in points)
    assert data["max_gpus"] == 8 and data["simulations"] == len(points)
