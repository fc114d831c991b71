"""Writes reports/train/llm_foundry_fitset/runs.json from llm_foundry_5e85bd62_tables.md (a verbatim copy of llm-foundry's
MPT throughput tables) in the schema of reports/train/published_runs.json, with a deterministic fit / held_out split.

    python scripts/validate/published_runs/llm_foundry_fitset.py

Nothing here runs `mlsys train` or predicts anything. Rows already in reports/train/published_runs.json (the 128-GPU
rows of the large-scale H100 table and the 8-GPU sequence-2048 rows of the A100 80GB table) are left out.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "reports" / "train" / "llm_foundry_fitset"
COMMIT = "5e85bd62d4ec9e13353ca95877477602ab538e5b"
SOURCE = "github.com/mosaicml/llm-foundry scripts/train/benchmarking/README.md"

# MPT sizes: scripts/train/yamls/pretrain/mpt-<size>.yaml at 5e85bd62 (d_model, n_heads, n_layers; expansion 4,
# vocabulary 50368); MPTConfig's defaults otherwise: learned positions (max_seq_len = the row's sequence), biases,
# LayerNorm, GELU, tied embeddings.
SIZES = {"125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
         "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
         "70b": (8192, 64, 80)}
# The attention kernel: submit_benchmarks.py's attn_impl defaults to triton (llmfoundry/models/layers/flash_attn_triton.py,
# the Triton flash-attention of 2022: `--attention triton`); the large-scale table's sweep.py sets flash (flash-attn
# 2.4.2) for these sizes, priced with the table's own kind (flash2 on H100).
FLASH_ATTN_SIZES = {"h100-large": ("1b", "3b", "7b", "70b")}
TABLES = {  # heading -> (table id, cluster, attention with attn_impl flash, what the heading says of the links)
    "H100 80GB BF16 (Large Scale, >= 128 GPUs)": ("h100-large", "hgx-h100", "flash2", None),
    "H100 80GB BF16": ("h100", "hgx-h100", "flash2", None),
    "H100 80GB FP8": ("h100-fp8", "hgx-h100", "flash2", None),
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": ("a100-80gb", "dgx-a100", "flash", "1600 Gbps RoCE"),
    "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": (
        "a100-40gb", "reports/train/llm_foundry_fitset/clusters/mosaicml-a100-40gb.json", "flash", "1600 Gbps RoCE"),
}
GPU = {"h100_80gb": "H100-SXM", "a100_80gb": "A100-80GB-SXM", "a100_40gb": "A100-40GB-SXM"}
HELD_OUT_RULE = ("split: held_out when int(sha256(key).hexdigest(), 16) % 4 == 0, key = "
                 "'<table id>|<model>|<seq>|<gpus>|<micro-batch>|<grad accum>|<global batch>|<precision>' (about a quarter)")


def parse(text: str) -> list[tuple[str, dict]]:
    rows, heading, header = [], None, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading, header = line[3:].strip(), None
        elif line.startswith("|") and "---" not in line:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "Model":
                header = cells
            else:
                rows.append((heading, dict(zip(header, cells))))
    return rows


def config(size: str, seq: int) -> dict:
    d, heads, layers = SIZES[size]
    return {"model_type": "gpt2", "n_embd": d, "n_layer": layers, "n_head": heads, "n_inner": 4 * d,
            "vocab_size": 50368, "n_positions": seq, "activation_function": "gelu", "tie_word_embeddings": True,
            "layer_norm_epsilon": 1e-05}


def published_keys() -> set[tuple]:
    """(gpu, model size, GPUs, seq, micro-batch, global batch) of the llm-foundry rows already in published_runs.json."""
    keys = set()
    for r in json.loads((ROOT / "reports/train/published_runs.json").read_text())["runs"]:
        if r["group"].startswith("llm-foundry-mpt"):
            lay = r["layout"]
            gpu = "h100_80gb" if "h100" in r["group"] else "a100_80gb"
            size = r["name"].split(",")[0].split("-")[1]
            keys.add((gpu, size, r["gpus"], lay["seq"], lay["micro_batch"], lay["global_batch"]))
    return keys


def build() -> tuple[list[dict], list[str]]:
    text = (HERE / "llm_foundry_5e85bd62_tables.md").read_text()
    skip, runs, left = published_keys(), [], []
    for heading, row in parse(text):
        tid, cluster, attention, links = TABLES[heading]
        size, seq, gpus = row["Model"], int(row["SeqLen (T)"]), int(row["# GPUs"])
        attention = attention if size in FLASH_ATTN_SIZES.get(tid, ()) else "triton"
        mbs, ga, gbs = int(row["MicroBatchSize"]), int(row["GradAccum"]), int(row["GlobalBatchSize"])
        gpu, prec = row["GPU"], row["Precision"]
        if (gpu, size, gpus, seq, mbs, gbs) in skip:
            left.append(f"{tid} {size} seq {seq} {gpus} GPUs mbs {mbs} gbs {gbs}: already in published_runs.json")
            continue
        key = f"{tid}|{size}|{seq}|{gpus}|{mbs}|{ga}|{gbs}|{prec}"
        split = "held_out" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 4 == 0 else "fit"
        ac = row["Activation Checkpointing"] == "True"
        shard = row["Sharding Strategy"]
        lay = {"tp": 1, "pp": 1, "dp": gpus, "vp": 1, "micro_batch": mbs, "global_batch": gbs, "seq": seq,
               "sp": False, "recompute": "full" if ac else "none", "zero": {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}[shard],
               "dtype": "fp8" if prec == "amp_fp8" else "bf16", "attention": attention, "framework": "torch"}
        if prec == "amp_fp8":
            lay["fp8_recipe"] = "delayed"
        if row["MP Mode"] == "PURE":  # gradients reduced in bf16 (DEFAULT: fp32, the --framework torch FSDP default)
            lay["grad_reduce"] = "bf16"
        even = gbs == gpus * mbs * ga
        assumed = {"interconnect": "the links of MosaicML's H100 nodes are not given; priced as hgx-h100 (NVLink 4, "
                                   "8 x 400 Gb/s a node)"} if links is None else {}
        if not even:
            assumed["micro_batch"] = (f"GlobalBatchSize {gbs} is not GPUs x MicroBatchSize x GradAccum = "
                                      f"{gpus * mbs * ga}; Composer then runs uneven micro-batches (the README: 'a "
                                      "total batch size of 48, and a micro batch of 11, means ... 11, 11, 11, 11, 4'); "
                                      "the table's micro-batch is kept")
        if prec == "amp_fp8":
            assumed["fp8_recipe"] = ("Transformer Engine v0.10's default DelayedScaling (submit_benchmarks.py installs "
                                     "TE v0.10 and sets fc_type te for H100 FP8; no recipe is passed)")
        notes = (f"The row gives: model {size}, sequence {seq}, {gpus} GPUs of type {gpu}, micro-batch {mbs}, gradient "
                 f"accumulation {ga}, global batch {gbs}, precision {prec}, FSDP mixed precision {row['MP Mode']}, "
                 f"sharding {shard} (--zero {lay['zero']}), activation checkpointing {row['Activation Checkpointing']}"
                 f" ({'full: every block recomputed' if ac else 'none'}), activation CPU offload "
                 f"{row['Activation CPUOffload']}, NumParams {row['NumParams']}. Model: mpt-{size}.yaml at 5e85bd62 "
                 f"(d_model {SIZES[size][0]}, {SIZES[size][1]} heads, {SIZES[size][2]} layers, expansion 4, vocabulary "
                 "50368; learned positions of max_seq_len = the sequence, biases, LayerNorm, GELU, tied embeddings); "
                 "submit_benchmarks.py sets low_precision_layernorm and attn_impl (default triton: the Triton "
                 "flash-attention kernel of llmfoundry/models/layers/flash_attn_triton.py; the large-scale table's "
                 "sweep.py sets flash, flash-attn 2.4.2, for 1b, 3b, 7b, 70b), priced `--attention triton` (Dao 2023, "
                 "section 4.1: FlashAttention-2 1.3-1.5x faster in the forward, 2x in the backward) and flash-attn 2 as "
                 "FlashAttention-2's generation on H100 (flash2). "
                 "Composer on PyTorch 2.1 FSDP1 (--framework torch). Throughput is Composer's measured rate of a short "
                 "benchmark run (the README: 12 steps). "
                 + ("MP Mode PURE: parameters, gradients and their reduction in bf16 (no fp32 reduce: --grad-reduce "
                    "bf16). " if row["MP Mode"] == "PURE" else "MP Mode DEFAULT: bf16 compute, fp32 gradient reduction. ")
                 + (f"Heading: '{heading}'." if links else f"Heading: '{heading}' (no interconnect named)."))
        runs.append({
            "name": f"MPT-{size}, {gpus} x {gpu}, seq {seq}, mb {mbs} x ga {ga}, gbs {gbs}, {prec}, {shard}"
                    f"{', AC' if ac else ''} (llm-foundry)",
            "group": f"llm-foundry-{tid}", "gpu": GPU[gpu], "split": split, "split_key": key,
            "config": config(size, seq), "cluster": cluster, "gpus": gpus, "layout": lay,
            "assumed": sorted(assumed), "assumed_why": assumed,
            "published": {"metric": "tokens_per_s_per_gpu", "value": float(row["Throughput (T/s/GPU)"])},
            "also_published": {"mfu_percent": float(row["MFU"]), "hfu_percent": float(row["HFU"]),
                               "model_tflops_per_gpu": float(row["Model TFLOP"]),
                               "samples_per_s": float(row["Throughput (S/s)"]),
                               "tokens_per_s": float(row["Throughput (T/s)"]), "num_params": int(row["NumParams"])},
            "measurement": True,
            "flop_convention": (f"none needed: tokens/s/GPU, compared as the step time it implies ({gbs} x {seq} / "
                                f"(rate x {gpus}) s); the table's MFU/HFU (6N + attention; HFU 8N + attention with "
                                "checkpointing) are not used"),
            "citation": {"paper": "MosaicML llm-foundry, MPT Training Benchmarks (github.com/mosaicml/llm-foundry "
                                  "scripts/train/benchmarking/README.md, tables added in commit 5e85bd62, 2024-01-06)",
                         "table": f"table '{heading}', row {size} / seq {seq} / {gpus} GPUs / micro-batch {mbs} / "
                                  f"global batch {gbs}, column Throughput (T/s/GPU)",
                         "repo": "github.com/mosaicml/llm-foundry", "path": "scripts/train/benchmarking/README.md",
                         "commit": COMMIT,
                         "url": f"https://github.com/mosaicml/llm-foundry/blob/{COMMIT}/scripts/train/benchmarking/README.md"},
            "notes": notes,
            **({"held_out": "held out: the llm-foundry fit set's held_out part, collected 2026-12-02 before any "
                            "prediction of it was made"} if split == "held_out" else {}),
        })
    return runs, left


ABOUT = ("A large public set of measured training layouts of one stack (MosaicML Composer / llm-foundry, PyTorch FSDP, "
         "MPT models 125m-70b) on H100 80GB and A100 80GB/40GB, in the schema of reports/train/published_runs.json, for "
         "fitting `mlsys train` with a part kept out. It stands in for huggingface/bench_cluster, whose measured results "
         "are not in its repository (only the scripts that write them: bench_cluster/report.py's log_metrics.csv and "
         "*_global_summary.csv) and could not be reached here (no Hugging Face dataset or Space was readable). Every row of "
         "every table of llm-foundry's scripts/train/benchmarking/README.md at 5e85bd62 is a run, except the 11 already in "
         "published_runs.json. `split` says fit or held_out by a hash rule (`split_rule`); `split_key` is the hashed "
         "string. published.metric is tokens_per_s_per_gpu (the table's Throughput (T/s/GPU)); `also_published` keeps the "
         "row's other columns. No memory column exists in these tables.")


if __name__ == "__main__":
    runs, left = build()
    out = {"collected": "2026-12-02",
           "rule": "every row of every result table of llm-foundry scripts/train/benchmarking/README.md at 5e85bd62 "
                   "(H100 80GB BF16 large scale, H100 80GB BF16, H100 80GB FP8, A100 80GB, A100 40GB), less the rows "
                   "already in reports/train/published_runs.json",
           "split_rule": HELD_OUT_RULE, "left_out": left, "about": ABOUT, "runs": runs}
    (HERE / "runs.json").write_text(json.dumps(out, indent=1) + "\n")
    n = {s: sum(r["split"] == s for r in runs) for s in ("fit", "held_out")}
    print(f"{len(runs)} runs ({n}); {len(left)} left out -> {HERE / 'runs.json'}")
