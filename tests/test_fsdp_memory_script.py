"""scripts/validate/fsdp_memory.py on the CPU: one FSDP2 rank (gloo) runs two AdamW steps of a tiny llama, and the sharded
states it holds are the ones `mlsys memory train --zero 3` predicts (fp32 parameters = master weights, the moments =
optimizer states). The peak comparison needs GPUs (reports/memory/fsdp.md)."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import torch

from mlsyscalc.specs.lookup import load_model

from .conftest import load_script

REPORTS = Path(__file__).resolve().parents[1] / "reports" / "memory"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp_sharded_states_match_the_zero3_prediction():
    dist = torch.distributed
    spec = replace(load_model("llama2-7b", {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                            "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 512}),
                   name="tiny llama")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        row = load_script("validate/fsdp_memory").run_case("tiny llama", 2, 32, False, "cpu", 1, spec)
    finally:
        dist.destroy_process_group()
    measured, predicted = row["measured"], row["predicted"]
    assert measured["params_fp32_bytes"] == predicted["detail_master_weights_bytes"] > 0
    assert measured["optimizer_moments_bytes"] == predicted["detail_optimizer_states_bytes"]
    assert measured["grads_fp32_bytes"] == measured["params_fp32_bytes"]
    states = sum(measured[k] for k in ("params_fp32_bytes", "grads_fp32_bytes", "optimizer_moments_bytes"))
    assert states == predicted["weights_bytes"] + predicted["gradients_bytes"] + predicted["optimizer_bytes"]


def test_fsdp_report_table_is_the_one_its_rows_give():
    table = load_script("validate/fsdp_memory").table(REPORTS / "fsdp_rows.jsonl")
    assert table.count("\n") == 5 and table in (REPORTS / "fsdp.md").read_text()
