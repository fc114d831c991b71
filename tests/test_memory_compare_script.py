"""scripts/validate/memory_compare.py: every rank of a measured row against `train_memory`'s stage (values by hand in
tests/test_memory_schedule.py and reports/train/memory.md)."""

from __future__ import annotations

import json

from .conftest import load_script

MODEL = {"base": "llama2-7b", "overrides": {"hidden_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 20,
                                           "num_key_value_heads": 20, "intermediate_size": 6912}}
GIB = 2**30


def test_ranks_map_to_stages_and_equal_ranks_group(tmp_path):
    mc = load_script("validate/memory_compare")
    gpipe = {"case": "pp-gpipe", "model": MODEL, "gpus": 4, "dp": 1, "tp": 1, "pp": 4, "vp": 1, "micro_batch": 1,
             "micro_batches": 8, "seq": 2048, "peak_bytes_per_rank": [23365833728, 22208467456, 22208467456,
                                                                      26901479936]}
    fsdp = gpipe | {"case": "fsdp", "dp": 4, "pp": 1, "micro_batch": 2, "micro_batches": 1,
                    "peak_bytes_per_rank": [22915579904] * 4}
    lines = mc.compare([gpipe, fsdp], "torch")
    assert [line[1] for line in lines] == ["0", "1", "2", "3", "0,1,2,3"]
    # GPipe's last stage: 26,483,182,592 bytes by hand (reports/train/memory.md), 8 micro-batches in flight
    last = lines[3]
    assert last[3] == f"{26_483_182_592 / GIB:.3f}" and last[5:7] == ["backward", 8]
    assert last[4] == f"{100 * (26_483_182_592 / 26901479936 - 1):+.1f}%"
    # FSDP2: 22,980,854,272 bytes, no gradients at the peak, fp32 parameter shards as weights
    assert lines[4][3] == f"{22_980_854_272 / GIB:.3f}" and lines[4][8] == "0.00"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(gpipe) + "\n")
    assert "| pp-gpipe | 3 |" in mc.table(rows, "torch")
