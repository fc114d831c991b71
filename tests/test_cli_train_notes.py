"""`mlsys train`'s communication and pipeline tables and the notes under them, against the JSON of the
same call: what was assumed hidden (traffic less its exposed part), the ZeRO-3 caveat, the kernel notes
of a non-default attention core or dtype, and the stages' ends."""

from __future__ import annotations

import pytest

from .test_values_views import close, quantity, run_both, table

TRAIN = ("train", "llama2-7b", "--gpus", "16", "--tp", "2", "--pp", "2", "--global-batch", "64")


def test_communication_and_pipeline_tables(run_cli):
    data, views = run_both(run_cli, *TRAIN, "--zero", "3", "--overlap", "dp,tp")
    comm = {r["dimension"]: r for r in table(views, "^communication per step$")}
    totals = {d: t for d, t in data["comm_total_s"].items() if t}
    assert set(comm) == set(totals) == {"tp", "dp", "pp"}
    for dim, total in totals.items():
        assert close(comm[dim]["total s"], total, 4) and close(comm[dim]["exposed s"], data["breakdown"][f"{dim}_comm_s"], 4)
    assert quantity(comm["dp"]["exposed s"]) == 0 and quantity(comm["pp"]["exposed s"]) == pytest.approx(totals["pp"],
                                                                                                          rel=1e-3)
    stages = table(views, r"^pipeline stages, one micro-batch \(stage \d is the slowest\)$")
    assert [(r["stage"], r["layers"], r["ends"]) for r in stages] == [("0", "16", "embedding"), ("1", "16", "head")]
    for row, stage in zip(stages, data["pipeline"]["stages"]):
        assert close(row["forward s"], stage["forward_s"], 4) and close(row["backward s"], stage["backward_s"], 4)
    hidden = {d: t - data["breakdown"][f"{d}_comm_s"] for d, t in totals.items()}
    line = "assumed hidden behind compute: " + ", ".join(f"{d} {v:.3g} of {totals[d]:.3g} s"
                                                        for d, v in hidden.items() if v > 0)
    assert line in data["notes"] and "pp " not in line
    assert any(n.startswith("ZeRO-3's parameter gathers are priced as prefetched") for n in data["notes"])
    assert "overlap: dp, tp (docs/train.md" in " ".join(data["notes"])


def test_notes_without_overlap_and_per_kernel_choice(run_cli):
    plain = run_cli.json(*TRAIN, "--overlap", "none")
    assert not any(n.startswith(("assumed hidden", "ZeRO-3's")) for n in plain["notes"])
    assert any(n.startswith("overlap: none (") for n in plain["notes"])
    zero1 = run_cli.json(*TRAIN, "--zero", "1", "--overlap", "dp")
    assert any(n.startswith("assumed hidden") for n in zero1["notes"])
    assert not any(n.startswith("ZeRO-3's") for n in zero1["notes"])   # the caveat is ZeRO-3's only
    flash2 = run_cli.json(*TRAIN, "--attention", "flash2")
    assert any(n.startswith("attention flash2: FlashAttention-2's generation") for n in flash2["notes"])
    unfused = run_cli.json(*TRAIN, "--attention", "unfused")
    assert any(n.startswith("attention unfused: Megatron-LM's S x S kernels") for n in unfused["notes"])
    fp8 = run_cli.json(*TRAIN, "--dtype", "fp8")
    assert any(n.startswith("fp8: linear GEMMs at efficiency matmul_fp8") for n in fp8["notes"])
    mx = run_cli.json(*TRAIN, "--dtype", "mxfp8", "--gpu", "b200")
    assert any(n.startswith("mxfp8: Transformer Engine's block-scaled recipe") for n in mx["notes"])
    assert not any(n.startswith(("fp8:", "attention ")) for n in plain["notes"])


def test_step_parts_add_up_and_shares(run_cli):
    data, views = run_both(run_cli, *TRAIN)
    parts = {r["part"]: r for r in table(views, r"^llama2-7b on 16 x H100-SXM")}
    total = data["step_time_s"]
    for part, value in data["breakdown"].items():
        assert parts[part]["share"] == f"{100 * value / total:.1f}%", part
    assert parts["step_time_s"]["share"] == "100.0%" and close(parts["step_time_s"]["seconds"], total, 4)
    rates = {r[""]: r["value"] for r in table(views, "^rates$")}
    assert close(rates["model TFLOP/s per GPU"], data["tflops_per_gpu"] / 1e12, 4)
    assert close(rates["memory per GPU"], data["memory_bytes_per_gpu"], 4) and rates["fits"] == "yes"
    assert close(rates["usable per GPU"], data["usable_bytes"], 4)
    assert data["tokens_per_s"] == pytest.approx(64 * data["seq"] / total)
