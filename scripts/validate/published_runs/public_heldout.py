"""Writes reports/train/heldout_public/runs.json: a second held-out set of published training runs.

    python scripts/validate/published_runs/public_heldout.py                  # candidates, selection, runs.json
    python scripts/validate/published_runs/public_heldout.py --mlperf-mirror /work/.mirror   # re-read the MLPerf logs first
    python scripts/validate/published_runs/public_heldout.py --rest [--mlperf-mirror DIR]   # reports/train/heldout_public_rest

The inclusion rule is reports/train/heldout_public/RULE.md (written before any source was opened). This script
lists every row that qualified under it (CANDIDATES), keeps at most 20 a source family and 40 in all by the
sha256 of `source|table|model|gpus|precision|gbs` (no published number enters), and writes the kept rows
with their layouts. Numbers were copied from the cited files at the cited commits; the MLPerf step times are
the median train-step time of every logged step of every result file of the submission
(reports/train/heldout_public/mlperf_step_times.json, which --mlperf-mirror rewrites from local copies of the
mlcommons/training_results_v* repositories). Nothing here runs `mlsys train`/`plan` or predicts anything.

--rest writes the next held-out set from the same parsers: every candidate the cap left out (kept false) that still
meets RULE.md on a full reading of its source and was not quoted elsewhere in the repository (REST_LEFT_OUT), with
its own step-time file (reports/train/heldout_public_rest/mlperf_step_times.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
OUT_DIR = ROOT / "reports" / "train" / "heldout_public"
RULE_FILE = OUT_DIR / "RULE.md"
STEPS_FILE = OUT_DIR / "mlperf_step_times.json"
COLLECTED = "2026-12-02"
HELD_OUT = "held out: collected 2026-12-02 (reports/train/heldout_public), before any prediction of it was made"

# ---------------------------------------------------------------------------------------------- sources
NEMO_REPO, NEMO_PATH = "github.com/NVIDIA/NeMo", "docs/source/performance/performance_summary.md"
NEMO_COMMIT = "4c73f77670624bc1fd97ce444dea4e22ef5eb9c5"  # 2024-08-14 "24.07 perf (#10094)": first version of the table
NEMO_VBOOST = "3a8081fef634686881d7464c5b847212a16c5431"  # 2024-08-21 "24.07 vboost numbers (#10221)" (= tag v2.0.0)
NEMO_FINAL = "8e3d65dcfe3504689bfc5b6e67d502780aacad41"  # 2024-09-09 "24.07 perf numbers (#10253)" (= tag v2.1.0)
LAUNCHER_REPO, LAUNCHER_TAG = "github.com/NVIDIA/NeMo-Framework-Launcher", "24.07"
LAUNCHER_COMMIT = "8325688d8345a5513660f0f8390f0482a721c009"
MB_REPO, MB_PATH = "github.com/NVIDIA-NeMo/Megatron-Bridge", "docs/performance-summary.md"
MB_COMMIT = "fa0315ae2684693a666be9d247adf9baf1e30028"  # 2025-10-10 "update 25.09 performance summary (#916)"
MB_CONFIG_COMMIT = "684a68616597c8097b17e089f91f86383d9e7b74"  # branch r0.1.0 (the 25.09 release line)
MLM_REPO, MLM_COMMIT = "github.com/NVIDIA/Megatron-LM", "f2e5db402c44ae309aa6448bcb4ae87e8ae0f5f4"  # 2024-07-15
MLM_CORE_R080 = "baf94af3c667248865f23df73b9fb8e2395e6fd0"  # tag core_r0.8.0 (the table's 'Megatron-Core r0.8.0')
TT_REPO = "github.com/pytorch/torchtitan"
TT_BENCH_COMMIT = "820504e20d1149fbf0b98c567af24c4b0433b22d"  # benchmarks/ folder added (2025-06-13)
TT_RUN_COMMIT = "9dec370ad26b5f8e9a7333a0e36165018262644b"  # the 202412 page's torchtitan commit (its own table)
TT_ASYNC_COMMIT = "2887250bbd9103d0bc997ea2efb3a525b5e5dbc0"  # 2025-06-16 "[Async TP] Add new async TP benchmarks"
TT_H200_COMMIT = "cbccb387871a5e1f522c1e222c51ab88b03c0392"  # 2025-07-11 "[benchmark] add h200 bench"
TT_H200_RUN = "e7c0cae934df78d6e9c2835f42ff1f757dc3fddc"  # the H200 page's torchtitan commit
MLPERF_COMMITS = {"3.0": "63e326c400f5d8bb8c6070a9ab08332d4931152e", "3.1": "d06288b2bd675a9d88e0e6181f5bb5626b71ec19",
                  "4.0": "6fe954378efe4a1a1bd665550b18ff8f26018def", "4.1": "b87b9e396f771345d4ef122ba33456304f15228d",
                  "5.0": "0fdc28f013256aea84fa36fdaf1e0fa46094b18c", "5.1": "441d65f4445cd59687466533fd9f55399136e7a4"}

SRC_NEMO = f"NVIDIA/NeMo {NEMO_PATH}@{NEMO_COMMIT[:7]}"
SRC_MB = f"NVIDIA-NeMo/Megatron-Bridge {MB_PATH}@{MB_COMMIT[:7]}"
SRC_MLM = f"NVIDIA/Megatron-LM images/model_table.png@{MLM_COMMIT[:7]}"
SRC_TT = f"pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md@{TT_BENCH_COMMIT[:7]}"
SRC_TT_ASYNC = f"pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md@{TT_ASYNC_COMMIT[:7]}"
SRC_TT_H200 = f"pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md@{TT_H200_COMMIT[:7]}"
T_NEMO = "Pretraining, DGX-H100, NeMo 24.07"
T_MB = "25.09 NeMo Container, Pre-Training, DGX-H100"
T_MLM = "README 'Model table' (H100, Megatron-Core r0.8.0)"

# ---------------------------------------------------------------------------------------------- candidates
# Every row that qualified under RULE.md, with the key fields only (family, source, table, model, GPUs,
# precision, global batch) and the row label. Rows that failed a clause are in LEFT_OUT with the clause.
CANDIDATES: list[dict[str, Any]] = []


def _cand(family: str, source: str, table: str, model: str, gpus: int, precision: str, gbs: int, row: str) -> None:
    CANDIDATES.append(dict(family=family, source=source, table=table, model=model, gpus=gpus, precision=precision,
                           gbs=gbs, row=row))


for _m, _g, _b in [("GPT3-5B", 64, 2048), ("GPT3-20B", 64, 256), ("GPT3-175B", 128, 256), ("GPT3-175B", 512, 2048),
                   ("LLAMA2-7B", 8, 128), ("LLAMA2-13B", 16, 128), ("LLAMA2-70B", 64, 128), ("Nemotron-8B", 64, 256),
                   ("Nemotron-22B", 64, 256), ("Nemotron-340B", 128, 32)]:
    _cand("S1", SRC_NEMO, T_NEMO, _m, _g, "fp8", _b, _m)
_cand("S1", SRC_MB, T_MB, "LLAMA3_8B", 8, "fp8", 128, "LLAMA3_8B")
_cand("S1", SRC_MB, T_MB, "Qwen3_30B_a3B (tokendrop)", 16, "fp8", 512, "Qwen3_30B_a3B (tokendrop)")
for _m, _g, _b in [("1.7B", 48, 192), ("7.1B", 96, 192), ("16B", 192, 192), ("32B", 384, 192), ("70B", 768, 384),
                   ("119B", 1536, 768), ("177B", 2304, 1152), ("314B", 3072, 1536), ("462B", 6144, 3072)]:
    _cand("S2", SRC_MLM, T_MLM, _m, _g, "bf16", _b, _m)
_cand("S3", SRC_TT, "Table 1", "Llama 3.1 8B", 8, "bf16", 16, "FSDP + torch.compile")
_cand("S3", SRC_TT, "Table 1", "Llama 3.1 8B", 8, "fp8", 16, "FSDP + torch.compile + Float8")
for _r, _b in [("FSDP 8, CP 1", 8), ("FSDP 4, CP 2", 4), ("FSDP 2, CP 4", 2), ("FSDP 1, CP 8", 1)]:
    _cand("S3", SRC_TT, "Table 2", "Llama 3.1 8B", 8, "fp8", _b, _r)
_cand("S3", SRC_TT, "Table 3", "Llama 3.1 8B", 128, "bf16", 256, "FSDP + torch.compile")
_cand("S3", SRC_TT, "Table 3", "Llama 3.1 8B", 128, "fp8", 256, "FSDP + torch.compile + Float8")
_cand("S3", SRC_TT, "Table 4", "Llama 3.1 70B", 256, "fp8", 512, "2D")
_cand("S3", SRC_TT, "Table 4", "Llama 3.1 70B", 256, "fp8", 512, "2D + AsyncTP")
_cand("S3", SRC_TT, "Table 5", "Llama 3.1 405B", 512, "fp8", 256, "1F1B")
_cand("S3", SRC_TT, "Table 5", "Llama 3.1 405B", 512, "fp8", 256, "Interleaved 1F1B")
for _r, _b in [("FSDP 8, CP 1", 64), ("FSDP 4, CP 2", 32), ("FSDP 2, CP 4", 16), ("FSDP 1, CP 8", 8)]:
    _cand("S3", SRC_TT, "Table 6", "Llama 3.1 405B", 512, "fp8", _b, _r)
for _t, _m, _g, _b in [("Llama3 70b on 256 H100s", "Llama 3.1 70B", 256, 512), ("Llama3 8b on 64 H100s", "Llama 3.1 8B", 64, 96)]:
    for _q, _p in [("None (bfloat16)", "bf16"), ("float8 tensorwise", "fp8"), ("float8 rowwise", "fp8")]:
        for _col in ("Vanilla TP", "Async TP"):
            _cand("S3", SRC_TT_ASYNC, _t, _m, _g, _p, _b, f"{_q} / {_col}")
_cand("S3", SRC_TT_H200, "Results", "Llama 3.1 8B", 32, "fp8", 64, "NUM_NODES 4")
_cand("S3", SRC_TT_H200, "Results", "Llama 3.1 8B", 64, "fp8", 128, "NUM_NODES 8")
# MLPerf Training: every H100/H200/A100 submission of gpt3, llama31_405b and llama31_8b (systems/*.json
# accelerator), GPU count = nodes x accelerators a node, GBS from the log's global_batch_size, all FP8.
MLPERF = [  # (round, org, system, benchmark, GPUs, GBS)
    ("3.0", "NVIDIA", "dgxh100_n64_nemo", "gpt3", 512, 2048), ("3.0", "NVIDIA", "dgxh100_n96_nemo", "gpt3", 768, 3072),
    ("3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n192_ngc23.04_pytorch", "gpt3", 1536, 3072),
    ("3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n448_ngc23.04_pytorch", "gpt3", 3584, 2688),
    ("3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n96_ngc23.04_pytorch", "gpt3", 768, 3072),
    ("3.1", "Azure+NVIDIA", "ND_H100_v5_n1344_pytorch", "gpt3", 10752, 2688),
    ("3.1", "NVIDIA", "eos-dfw_n1024_ngc23.09_nemo", "gpt3", 8192, 4096),
    ("3.1", "NVIDIA", "eos-dfw_n1280_ngc23.09_nemo", "gpt3", 10240, 2560),
    ("3.1", "NVIDIA", "eos-dfw_n1344_ngc23.09_nemo", "gpt3", 10752, 2688),
    ("3.1", "NVIDIA", "eos-dfw_n512_ngc23.09_nemo", "gpt3", 4096, 2048),
    ("3.1", "NVIDIA", "eos-dfw_n768_ngc23.09_nemo", "gpt3", 6144, 3072),
    ("4.0", "NVIDIA", "eos-dfw_n1344_ngc24.04_nemo", "gpt3", 10752, 2688),
    ("4.0", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo", "gpt3", 11616, 2904),
    ("4.0", "NVIDIA", "eos_n64_ngc24.04_nemo", "gpt3", 512, 2304),
    ("4.0", "smc", "64xSMC-H100-SXM-80GB", "gpt3", 512, 2048),
    ("4.1", "NVIDIA", "eos_n32_ngc24.09_nemo", "gpt3", 256, 2048), ("4.1", "NVIDIA", "eos_n64_ngc24.09_nemo", "gpt3", 512, 2048),
    ("4.1", "Oracle", "1536xBM.GPU.H100.8", "gpt3", 1536, 3072), ("4.1", "Oracle", "3072xBM.GPU.H100.8", "gpt3", 3072, 3072),
    ("5.0", "NVIDIA", "eos-dfw_n1024_ngc25.01_nemo", "llama31_405b", 8192, 1536),
    ("5.0", "NVIDIA", "eos-dfw_n256_ngc25.01_nemo", "llama31_405b", 2048, 1152),
    ("5.0", "NVIDIA", "eos-dfw_n304_ngc25.01_nemo", "llama31_405b", 2432, 1216),
    ("5.0", "NVIDIA", "eos-dfw_n320_ngc25.01_nemo", "llama31_405b", 2560, 1120),
    ("5.0", "NVIDIA", "eos-dfw_n64_ngc25.01_nemo", "llama31_405b", 512, 1152),
    ("5.0", "Nebius", "nebius_soperator_8xH200_n128_ngc25.01_nemo", "llama31_405b", 1024, 1152),
    ("5.0", "Nebius", "nebius_soperator_8xH200_n64_ngc25.01_nemo", "llama31_405b", 512, 1152),
    ("5.1", "Cisco", "hpf_n16", "llama31_8b", 128, 64), ("5.1", "Cisco", "hpf_n8", "llama31_8b", 64, 64),
    ("5.1", "HPE", "HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09", "llama31_8b", 64, 32),
]
for _v, _o, _s, _bm, _g, _b in MLPERF:
    _cand("S5", f"mlcommons/training_results_v{_v}", f"{_o}/results/{_s}/{_bm}", _bm, _g, "fp8", _b, "median train_step_timing")

LEFT_OUT = [  # (what, clause of RULE.md, why)
    ("NeMo 24.07 LLAMA3-8B (8 GPUs, FP8, CP 2, GBS 128) and LLAMA3-70B (64 GPUs, FP8, TP 4 PP 4 CP 2 VP 5, GBS 128)", "(f)",
     "the same model, GPU, GPU count, precision, layout and GBS as the dgxc 24.11.1 8-GPU and 64-GPU FP8 rows of heldout/runs.json"),
    ("NeMo performance summaries of 24.09 .. 25.07 (docs.nvidia.com)", "-",
     "only the start of each page could be read here (the DGX-H100 tables lie below the GB200/B200 ones); no copy in a repository was found"),
    ("NeMo 24.07 long-sequence page (performance_long_sequence.md)", "(d)", "TFLOP/s per layout without the global batch"),
    ("NeMo 24.07 fine-tuning table (SFT, LoRA)", "(a)", "fine-tuning"),
    ("Megatron-Bridge 25.09 DGX-H100 LLAMA3_70B and LLAMA3.1_405B", "(f)",
     "same layout and GBS as the 25.11 rows in published_runs.json (FP8-CS, 64 GPUs GBS 128; 1,024 GPUs GBS 512)"),
    ("Megatron-Bridge 25.09 DGX-H100 DeepSeekV3 (dropless) and Qwen3_235B_a22B", "(d)",
     "the table prints no precision for these rows and the r0.1.0 perf configs give bf16 and FP8 entries with the same layout"),
    ("Megatron-Bridge 25.09 DGX-GB200 / DGX-B200 tables; 25.11 and later", "(b) / scope",
     "other GPUs; RULE.md S1 takes Megatron-Bridge versions before 25.11 only"),
    ("Megatron-LM README strong-scaling figure (GPT-3 175B, 96 .. 4,608 H100)", "(c)/(d)", "a plot without numbers per point or layouts"),
    ("Megatron-LM examples/llama/README.md FP8 table (Llama 3 8B / 70B / 405B)", "(e)/(f)",
     "NeMo's numbers republished, at layouts already in heldout/ (8B, CP 2) and published_runs.json (70B, 405B)"),
    ("DeepSpeed blogs (DeepCompile, Ulysses, ZeRO++, comm-opt) and Megatron-DeepSpeed READMEs", "(b)/(c)/(d)",
     "V100 runs, figures without numbers, TFLOP/s without the FLOP formula, or no model or batch per row"),
    ("Nemotron-4 340B / 15B technical reports (iteration time, MFU per batch-ramp stage)", "-",
     "the papers' tables could not be read here (only third-party quotes)"),
    ("MegaScale, OPT-175B, Llama 2", "-", "no readable table with a full layout"),
    ("MLPerf v3.1 eos_n64 / eos_n96 GPT-3", "(f)", "same layout and GBS as the v3.0 dgxh100_n64 / n96 submissions (earlier round kept)"),
    ("MLPerf v4.1 eos-dfw_n1452_ngc24.04 GPT-3", "(f)", "the v4.0 submission of the same system, container and layout"),
    ("MLPerf v4.0 smc-ac-power and smc-dc-power GPT-3", "(e)", "the same three result files as smc (identical logs): one measurement"),
    ("MLPerf v5.1 Nebius nebius_h200_n64 / n128 Llama 3.1 405B", "(f)", "same layout and GBS as the v5.0 Nebius H200 submissions"),
    ("MLPerf Llama 2 70B LoRA (all rounds)", "(a)", "fine-tuning"),
    ("MLPerf GB200 / B200 / B300 / MI3xx / Gaudi / TPU submissions", "(b)", "other accelerators"),
    ("NVIDIA/dgxc-benchmarking (every release)", "(e)", "excluded by the brief and RULE.md"),
]


def select(candidates: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """RULE.md's cap: at most 20 rows a family, then 40 in all, by sha256 of the key (row label breaks ties)."""
    for c in candidates:
        c["key"] = "|".join(str(c[k]) for k in ("source", "table", "model", "gpus", "precision", "gbs"))
        c["sha256"] = hashlib.sha256(c["key"].encode()).hexdigest()
        c["tiebreak"] = hashlib.sha256((c["key"] + "|" + c["row"]).encode()).hexdigest()
    order = lambda c: (c["sha256"], c["tiebreak"])  # noqa: E731
    kept: list[dict[str, Any]] = []
    for fam in ("S1", "S2", "S3", "S4", "S5"):
        kept += sorted((c for c in candidates if c["family"] == fam), key=order)[:20]
    chosen = sorted(kept, key=order)[:40]
    return chosen, [c for c in candidates if c not in chosen]


# ---------------------------------------------------------------------------------------------- configs
def gpt(hidden: int, layers: int, heads: int, vocab: int, positions: int, tied: bool = True) -> dict[str, Any]:
    return {"model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads, "n_inner": 4 * hidden,
            "vocab_size": vocab, "n_positions": positions, "activation_function": "gelu", "tie_word_embeddings": tied,
            "layer_norm_epsilon": 1e-05}


def nemotron(hidden: int, layers: int, heads: int, kv: int, ffn: int) -> dict[str, Any]:
    return {"model_type": "nemotron", "architectures": ["NemotronForCausalLM"], "hidden_size": hidden,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
            "intermediate_size": ffn, "hidden_act": "relu2", "vocab_size": 256000, "max_position_embeddings": 4096,
            "partial_rotary_factor": 0.5, "rope_theta": 10000, "norm_eps": 1e-05, "tie_word_embeddings": False,
            "attention_bias": False, "mlp_bias": False}


def layout(**kw: Any) -> dict[str, Any]:
    base = {"cp": 1, "vp": 1, "sp": False, "recompute": "none", "zero": 1, "framework": "megatron"}
    return base | kw


# ---------------------------------------------------------------------------------------------- S1: NeMo 24.07
NEMO_ROWS = {  # (model, GPUs): (tokens/s/GPU at 4c73f77, model TFLOP/s at 4c73f77, tokens/s/GPU at 3a8081f, at 8e3d65d)
    ("GPT3-5B", 64): (22521, 736, 23574, 23406), ("GPT3-20B", 64): (5851, 750, 5894, 5851),
    ("GPT3-175B", 128): (726, 782, 745, 716), ("GPT3-175B", 512): (782, 842, 832, 825),
    ("LLAMA2-7B", 8): (16847, 776, 16634, 16934), ("LLAMA2-13B", 16): (8646, 754, 8715, 8715),
    ("LLAMA2-70B", 64): (1707, 759, 1717, 1728), ("Nemotron-8B", 64): (12701, 653, 12507, 12507),
    ("Nemotron-22B", 64): (4256, 554, 4289, 4312), ("Nemotron-340B", 128): (322, 678, 328, 326),
}
NEMO_ASSUMED_WHY_COMMON = {
    "recompute": "the perf page gives TP/PP/CP/VP/MBS/GBS only; activations_checkpoint_* of the NeMo-Framework-Launcher 24.07 "
                 "training config of the model (the page does not name the scripts that produced it)",
    "zero": "launcher 24.07 config: distributed_fused_adam (optimizer state sharded over DP), encoded as ZeRO-1 as "
            "published_runs.json encodes Megatron's distributed optimizer",
    "overlap": "launcher 24.07 config: dp from overlap_grad_sync/overlap_param_sync, tp from ub_tp_comm_overlap, pp from "
               "overlap_p2p_comm (heldout/ convention; the Megatron-Bridge rows of published_runs.json carry no pp); how "
               "much each hides is not published",
    "attention": "flash2: launcher_scripts/conf/config.yaml at 24.07 sets NVTE_FUSED_ATTN: 0 ('Disable cudnn FA'), which leaves "
                 "Transformer Engine's flash-attn (FlashAttention-2) backend",
    "fp8_recipe": "delayed: the page says FP8; the launcher config's fp8_hybrid / fp8_amax_history_len / fp8_amax_compute_algo "
                  "(Transformer Engine delayed scaling) with the examples/training/*/h100/*_fp8 overrides",
    "fp8_params": "false: no fp8_params key in the 24.07 launcher configs",
    "sp": "sequence_parallel of the launcher 24.07 config",
}
NEMO_NOTE = ("Published number: the 'Tokens / sec / GPU' cell of the first version of the 24.07 table (NeMo commit 4c73f77, "
             "2024-08-14); the table was edited twice for the same container (3a8081f '24.07 vboost numbers', which is the "
             "text at tag v2.0.0, and 8e3d65d '24.07 perf numbers', the text at v2.1.0), and RULE.md (f) keeps the earliest "
             "version: the other two are in also_published. System DGX-H100 (8 x H100 SXM 80 GB, NVLink 4, 8 x 400 Gb/s IB "
             "a node): hgx-h100. Container NeMo 24.07 (NeMo 1.0 / Megatron-Core GPT with Transformer Engine layers). Layout: "
             "GPUs, GBS, MBS, sequence, TP, PP, CP, VP and FP8 are the table's; the rest is the NeMo-Framework-Launcher "
             "training config of the model at tag 24.07 (8325688) with the examples/training/<family>/h100/*_fp8 "
             "overrides (fp8, fp8_hybrid, grad_sync_dtype bf16), which the page does not cite; where the example script "
             "and the table disagree (GBS, MBS, VP) the table is taken.")


def nemo_run(model: str, cfg: dict[str, Any] | None, builtin: str | None, gpus: int, lay: dict[str, Any],
             conf: str, extra_assumed: dict[str, str], detail: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    tok, tflops, vboost, final = NEMO_ROWS[(model, gpus)]
    why = dict(NEMO_ASSUMED_WHY_COMMON) | extra_assumed
    run: dict[str, Any] = {"name": f"{model}, {gpus} H100, FP8 (NeMo 24.07 perf summary)", "group": "heldout2-nemo-24.07-h100",
                           "gpu": "H100-SXM"}
    run |= {"config": cfg} if cfg else {"model": builtin}
    run |= {"overrides": overrides} if overrides else {}
    run |= {"cluster": "hgx-h100", "gpus": gpus, "layout": lay, "assumed": sorted(why), "assumed_why": why,
            "published": {"metric": "tokens_per_s_per_gpu", "value": tok},
            "also_published": {"model_tflops_per_gpu": tflops, f"tokens_per_s_per_gpu_at_{NEMO_VBOOST[:7]}": vboost,
                               f"tokens_per_s_per_gpu_at_{NEMO_FINAL[:7]}": final,
                               "note": "the same cell in the two later versions of the 24.07 table, and the table's Model TFLOP/s (not for scoring)"},
            "measurement": True,
            "flop_convention": f"none needed: tokens/s/GPU, compared as the step time it implies ({lay['global_batch']} x {lay['seq']} / ({tok} x {gpus}) s)",
            "citation": {"paper": "NVIDIA NeMo Framework, Performance Benchmarks (github.com/NVIDIA/NeMo docs/source/performance/performance_summary.md; "
                                  "docs.nvidia.com/nemo-framework/user-guide/24.07/performance/performance_summary.html)",
                         "table": f"Pretraining (FP8, container NeMo 24.07, system DGX-H100), row {model}, column 'Tokens / sec / GPU'",
                         "repo": NEMO_REPO, "path": NEMO_PATH, "commit": NEMO_COMMIT,
                         "url": f"https://github.com/NVIDIA/NeMo/blob/{NEMO_COMMIT}/{NEMO_PATH}",
                         "layout_from": f"{LAUNCHER_REPO} {conf} at tag {LAUNCHER_TAG} ({LAUNCHER_COMMIT})"},
            "notes": NEMO_NOTE + " " + detail, "held_out": HELD_OUT}
    return run


def nemo_runs() -> dict[tuple[str, int], dict[str, Any]]:
    fp8 = {"dtype": "fp8", "fp8_recipe": "delayed", "fp8_params": False, "attention": "flash2"}
    gpt_vocab = "NeMo pads the GPT2BPETokenizer's 50257 entries to a multiple of make_vocab_size_divisible_by 128 x TP: {}; not printed by the page"
    r = {}
    r[("GPT3-5B", 64)] = nemo_run("GPT3-5B", gpt(4096, 24, 32, 50304, 2048), None, 64,
                            layout(tp=1, pp=1, dp=64, micro_batch=4, global_batch=2048, seq=2048, overlap="dp", dropout=0.1, **fp8),
                            "launcher_scripts/conf/training/gpt3/5b.yaml + examples/training/gpt/h100/5b_fp8_8node.sh",
                            {"vocab_size": gpt_vocab.format(50304), "dropout": "hidden_dropout 0.1 (and attention_dropout 0.1) in gpt3/5b.yaml"},
                            "Model (gpt3/5b.yaml, NeMo GPT defaults otherwise): 24 layers, hidden 4096, FFN 16384, 32 heads, learned "
                            "absolute positions 2048, LayerNorm, GELU, biases, shared input/output embedding. No TP, so no "
                            "sequence parallelism or userbuffers; no recomputation.")
    r[("GPT3-20B", 64)] = nemo_run("GPT3-20B", gpt(6144, 44, 48, 50432, 2048), None, 64,
                             layout(tp=2, pp=1, dp=32, sp=True, micro_batch=2, global_batch=256, seq=2048, overlap="dp,tp", dropout=0.1, **fp8),
                             "launcher_scripts/conf/training/gpt3/20b.yaml + examples/training/gpt/h100/20b_fp8_8node.sh",
                             {"vocab_size": gpt_vocab.format(50432), "dropout": "hidden_dropout 0.1 in gpt3/20b.yaml"},
                             "Model: 44 layers, hidden 6144, FFN 24576, 48 heads, learned positions, LayerNorm, GELU, biases, tied "
                             "embedding. 20b.yaml: sequence_parallel True, ub_tp_comm_overlap True; the example script's GBS 2048 "
                             "on 8 nodes differs from the table's 256 on 64 GPUs (the table is taken).")
    r[("GPT3-175B", 512)] = nemo_run("GPT3-175B", gpt(12288, 96, 96, 50688, 2048), None, 512,
                              layout(tp=4, pp=8, vp=6, dp=16, sp=True, micro_batch=2, global_batch=2048, seq=2048, overlap="dp,pp", dropout=0.1, **fp8),
                              "launcher_scripts/conf/training/gpt3/175b.yaml (+ examples/training/gpt/h100/175b_fp8_16node.sh)",
                              {"vocab_size": gpt_vocab.format(50688), "dropout": "hidden_dropout 0.1 in gpt3/175b.yaml",
                               "overlap": "dp,pp: 175b.yaml at 24.07 has overlap_grad_sync/overlap_param_sync and overlap_p2p_comm True "
                                          "and ub_tp_comm_overlap False (the dgxc recipe of the same model sets it True); not published for this run"},
                              "Model: 96 layers, hidden 12288, FFN 49152, 96 heads, learned positions, LayerNorm, GELU, biases, tied "
                              "embedding. The table's VP 6 and MBS 2 (the 16-node example script has VP 12, MBS 1): 96 layers over "
                              "8 x 6 chunks, 2 a chunk. The page links its Model TFLOP/s cell of this row to mlcommons.org.")
    r[("GPT3-175B", 128)] = nemo_run("GPT3-175B", gpt(12288, 96, 96, 50688, 2048), None, 128,
                                     layout(tp=4, pp=8, vp=6, dp=4, sp=True, micro_batch=1, global_batch=256, seq=2048, overlap="dp,pp", dropout=0.1, **fp8),
                                     "launcher_scripts/conf/training/gpt3/175b.yaml + examples/training/gpt/h100/175b_fp8_16node.sh",
                                     dict(r[("GPT3-175B", 512)]["assumed_why"]),
                                     "Model as the 512-GPU row (gpt3/175b.yaml). The 16-node (128-GPU) example script sets GBS 256, "
                                     "MBS 1, TP 4, PP 8 as the table does, but VP 12; the table's VP 6 is taken: 96 layers over 8 x 6 "
                                     "chunks, 2 a chunk. DP 4, so 64 micro-batches a step.")
    llama_vocab = ("32256: NeMo pads the Llama 2 SentencePiece vocabulary (32000) to a multiple of make_vocab_size_divisible_by "
                   "128 x TP 4 = 512; not printed by the page")
    r[("LLAMA2-70B", 64)] = nemo_run("LLAMA2-70B", None, "llama2-70b", 64,
                                     layout(tp=4, pp=4, vp=20, dp=4, sp=True, micro_batch=1, global_batch=128, seq=4096, overlap="dp,tp,pp", **fp8),
                                     "launcher_scripts/conf/training/llama/llama2_70b.yaml + examples/training/llama/h100/llama2_70b_fp8.sh",
                                     {"vocab_size": llama_vocab,
                                      "fp8_recipe": "delayed: llama2_70b.yaml fp8_amax_history_len 1, most_recent, with the example "
                                                    "script's fp8 True / fp8_hybrid True; the page says FP8"},
                                     "Model: built-in llama2-70b (80 layers, hidden 8192, FFN 28672, 64 heads, 8 query groups, RMSNorm, "
                                     "SwiGLU, RoPE, untied output layer) with the vocabulary padded for TP 4. llama2_70b.yaml: no "
                                     "recomputation (block, 0 layers), sequence_parallel true, ub_tp_comm_overlap true "
                                     "(ub_cfg_h100_h8192_tp4_mbs1_seqlen4096), overlap_p2p_comm true, distributed_fused_adam with "
                                     "overlap_grad_sync / overlap_param_sync; no cross_entropy_loss_fusion key. The example script runs "
                                     "8 nodes (64 GPUs) at GBS 128, as the table. 80 layers over 4 x 20 chunks, 1 a chunk.",
                                     overrides={"vocab_size": 32256})
    r[("LLAMA2-7B", 8)] = nemo_run("LLAMA2-7B", None, "llama2-7b", 8,
                              layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=128, seq=4096, overlap="dp", **fp8),
                              "launcher_scripts/conf/training/llama/llama2_7b.yaml + examples/training/llama/h100/llama2_7b_fp8.sh", {},
                              "Model: built-in llama2-7b (32 layers, hidden 4096, FFN 11008, 32 heads, vocabulary 32000, already a "
                              "multiple of 128). llama2_7b.yaml: activations_checkpoint_method block with 0 layers (no recomputation), "
                              "sequence_parallel false, ub_tp_comm_overlap False, use_flash_attention true; fp8_amax_history_len 1024, max.")
    r[("LLAMA2-13B", 16)] = nemo_run("LLAMA2-13B", None, "llama2-13b", 16,
                               layout(tp=1, pp=4, vp=10, dp=4, micro_batch=1, global_batch=128, seq=4096, overlap="dp,pp", **fp8),
                               "launcher_scripts/conf/training/llama/llama2_13b.yaml + examples/training/llama/h100/llama2_13b_fp8.sh", {},
                               "Model: built-in llama2-13b (40 layers, hidden 5120, FFN 13824, 40 heads). 40 layers over 4 x 10 "
                               "chunks, 1 a chunk. llama2_13b.yaml: no recomputation (block, 0 layers), overlap_p2p_comm true, "
                               "fp8_amax_history_len 1, most_recent (still delayed scaling).")
    r[("Nemotron-8B", 64)] = nemo_run("Nemotron-8B", nemotron(4096, 32, 32, 32, 16384), None, 64,
                                layout(tp=2, pp=1, dp=32, sp=True, micro_batch=4, global_batch=256, seq=4096, overlap="dp,tp", loss="fused", **fp8),
                                "launcher_scripts/conf/training/nemotron/nemotron_8b.yaml + examples/training/nemotron/h100/nemotron_8b_fp8.sh",
                                {"loss": "fused: cross_entropy_loss_fusion true in nemotron_8b.yaml"},
                                "Model (nemotron_8b.yaml, 'nemotron3-8B'): 32 layers, hidden 4096, FFN 16384, 32 heads with "
                                "num_query_groups null (multi-head), squared-ReLU MLP without gate, LayerNorm1p, RoPE on half of "
                                "each head (rotary_percentage 0.5), no biases, untied output layer, SentencePiece vocabulary of "
                                "256000 (a multiple of 128 x TP). ub_tp_comm_overlap true, sequence_parallel true.")
    r[("Nemotron-22B", 64)] = nemo_run("Nemotron-22B", nemotron(6144, 40, 48, 48, 24576), None, 64,
                                 layout(tp=2, pp=4, vp=10, dp=8, sp=True, micro_batch=2, global_batch=256, seq=4096, overlap="dp,tp,pp", loss="fused", **fp8),
                                 "launcher_scripts/conf/training/nemotron/nemotron_22b.yaml + examples/training/nemotron/h100/nemotron_22b_fp8.sh",
                                 {"loss": "fused: cross_entropy_loss_fusion true in nemotron_22b.yaml"},
                                 "Model (nemotron_22b.yaml, 'nemotron3-22B'): 40 layers, hidden 6144, FFN 24576, 48 heads, "
                                 "multi-head, squared-ReLU, LayerNorm1p, half-rotary RoPE, no biases, untied, vocabulary 256000. "
                                 "40 layers over 4 x 10 chunks. ub_tp_comm_overlap True, overlap_p2p_comm True.")
    r[("Nemotron-340B", 128)] = nemo_run("Nemotron-340B", nemotron(18432, 96, 96, 8, 73728), None, 128,
                                  layout(tp=8, pp=8, vp=12, dp=2, sp=True, recompute="selective", micro_batch=1, global_batch=32, seq=4096, overlap="dp", **fp8),
                                  "launcher_scripts/conf/training/nemotron/nemotron_340b.yaml (no H100 FP8 example script at 24.07)",
                                  {"overlap": "dp only: nemotron_340b.yaml at 24.07 has ub_tp_comm_overlap False and overlap_p2p_comm False; "
                                              "the run's own settings are not published",
                                   "recompute": "selective: activations_checkpoint_granularity selective in nemotron_340b.yaml (the page gives none)",
                                   "fp8_recipe": "delayed: nemotron_340b.yaml has fp8 False with fp8_hybrid True, history 1024, max; the page says FP8"},
                                  "Model (nemotron_340b.yaml, 'nemotron4-340B'): 96 layers, hidden 18432, FFN 73728, 96 heads, 8 "
                                  "query groups, squared-ReLU, LayerNorm1p, half-rotary RoPE, no biases, untied, vocabulary 256000. "
                                  "96 layers over 8 x 12 chunks, 1 a chunk. GBS 32 on 128 GPUs (DP 2): 16 micro-batches a step.")
    return r


# ---------------------------------------------------------------------------------------------- S1: Megatron-Bridge 25.09
def mb_runs() -> dict[str, dict[str, Any]]:
    why = {
        "fp8_recipe": "current: the 25.09 table prints no precision; the r0.1.0 perf matrix gives this layout (FSDP, CP 1) only "
                      "for fp8_ds and fp8_cs (bf16 has CP 2 and no FSDP); the 25.11 table labels the same 8B H100 row FP8-CS",
        "zero": "3: use_megatron_fsdp true in the perf matrix, and set_megatron_fsdp_overrides (scripts/performance/utils/helpers.py "
                "at r0.1.0) sets data_parallel_sharding_strategy optim_grads_params (parameters, gradients and optimizer "
                "state sharded): Megatron FSDP priced as ZeRO-3 with --framework megatron",
        "attention": "flash: Megatron-Bridge leaves Transformer Engine's default backend (cuDNN fused attention on H100), as "
                     "published_runs.json prices its 25.11 rows",
        "overlap": "dp: the recipe's overlap_grad_reduce / overlap_param_gather (no TP, PP or CP)",
    }
    run: dict[str, Any] = {"name": "Llama 3 8B, 8 H100, FP8, Megatron FSDP (NeMo 25.09, Megatron-Bridge)", "group": "heldout2-megatron-bridge-25.09-h100",
                           "gpu": "H100-SXM", "model": "llama3-8b", "cluster": "hgx-h100", "gpus": 8,
                           "layout": layout(tp=1, pp=1, dp=8, zero=3, micro_batch=1, global_batch=128, seq=8192, dtype="fp8", fp8_recipe="current",
                                            fp8_params=True, attention="flash", overlap="dp", loss="fused"),
                           "assumed": sorted(why), "assumed_why": why,
                           "published": {"metric": "tokens_per_s_per_gpu", "value": 14079},
                           "also_published": {"model_tflops_per_gpu": 725, "ga": 16, "note": "the same row's Model TFLOP/sec/GPU and GA (not for scoring)"},
                           "measurement": True,
                           "flop_convention": "none needed: tokens/s/GPU, compared as the step time it implies (128 x 8192 / (14079 x 8) s)",
                           "citation": {"paper": "NVIDIA Megatron-Bridge, Performance summary (github.com/NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md)",
                                        "table": "25.09 NeMo Container, Pre-Training Performance, System: DGX-H100, row LLAMA3_8B (GPUs 8, GBS 128, MBS 1, "
                                                 "seq 8192, FSDP 1, TP 1, PP 1, CP 1, VP n/a, EP 1, GA 16), column 'Tokens / sec / GPU'",
                                        "repo": MB_REPO, "path": MB_PATH, "commit": MB_COMMIT,
                                        "url": f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{MB_COMMIT}/{MB_PATH}",
                                        "layout_from": f"{MB_REPO} scripts/performance/configs/llama3/llama3_8b_llm_pretrain.yaml (perf_matrix h100 "
                                                       f"num_gpus_8), scripts/performance/run_script.py, scripts/performance/utils/helpers.py at "
                                                       f"branch r0.1.0 ({MB_CONFIG_COMMIT})"},
                           "notes": "DGX-H100 (8 x H100 SXM, NVLink 4, 8 x 400 Gb/s IB): hgx-h100, one node. The table's first version "
                                    "(fa0315a, 2025-10-10; the 25.09 section was re-added unchanged on 2025-12-09). Perf matrix h100 "
                                    "num_gpus_8: seq 8192, MBS 1, GBS 128, TP 1, PP 1, EP 1; fp8_ds / fp8_cs: CP 1, use_megatron_fsdp true, "
                                    "keep_fp8_transpose_cache_when_using_custom_fsdp true, nccl_ub true; no cuda graphs. run_script.py: "
                                    "gradient_accumulation_fusion off for the 8B under Megatron FSDP, rope fusion on; the llama3_8b recipe "
                                    "sets no recomputation; cross_entropy_loss_fusion True (GPTModelProvider default) with "
                                    "cross_entropy_fusion_impl 'te' (--loss fused). FP8 weights: fp8_param_gather True in both FP8 presets "
                                    "(--fp8-params).",
                           "held_out": HELD_OUT}
    qwhy = {
        "dtype": "fp8 (current scaling): the 25.09 table prints no precision for this row; its MBS 2 is the fp8_cs entry of "
                 "the r0.1.0 perf matrix (h100 num_gpus_16: bf16 has MBS 1, and there is no fp8_ds entry)",
        "fp8_recipe": "current: the fp8_cs preset (bf16_with_fp8_current_scaling_mixed, first/last BF16 layers switched off by "
                      "scripts/performance/utils/helpers.py get_precision_config)",
        "fp8_params": "true: fp8_param_gather True in bf16_with_fp8_current_scaling_mixed (src/megatron/bridge/training/mixed_precision.py at r0.1.0)",
        "zero": "1: the qwen3_30b_a3b recipe's use_distributed_optimizer True (fsdp false in the perf matrix), encoded as "
                "published_runs.json encodes Megatron's distributed optimizer",
        "vp": "24: the table's VP; the r0.1.0 perf matrix gives 12 for h100 num_gpus_16 (the table is taken: 48 layers over 2 x 24 chunks, 1 a chunk)",
        "attention": why["attention"],
        "overlap": "dp,pp: overlap_grad_reduce / overlap_param_gather True in the recipe and the pipeline's p2p overlap; "
                   "tp_comm_overlap is asked for but TP is 1; overlap_moe_expert_parallel_comm is not set for Qwen3 (the "
                   "expert-parallel all-to-all stays exposed)",
        "recompute": "none: the perf config sets recompute_granularity null (the recipe's default is full, uniform, 1 layer)",
    }
    qwen = {"name": "Qwen3-30B-A3B, 16 H100, FP8, token drop (NeMo 25.09, Megatron-Bridge)", "group": "heldout2-megatron-bridge-25.09-h100",
            "gpu": "H100-SXM", "model": "qwen3-30b-a3b", "cluster": "hgx-h100", "gpus": 16,
            "layout": layout(tp=1, pp=2, vp=24, dp=8, ep=8, micro_batch=2, global_batch=512, seq=4096, dtype="fp8", fp8_recipe="current",
                             fp8_params=True, attention="flash", overlap="dp,pp", loss="fused"),
            "assumed": sorted(qwhy), "assumed_why": qwhy,
            "published": {"metric": "tokens_per_s_per_gpu", "value": 10494},
            "also_published": {"model_tflops_per_gpu": 241, "ga": 32, "note": "the same row's Model TFLOP/sec/GPU and GA (not for scoring)"},
            "measurement": True,
            "flop_convention": "none needed: tokens/s/GPU, compared as the step time it implies (512 x 4096 / (10494 x 16) s)",
            "citation": {"paper": run["citation"]["paper"],
                         "table": "25.09 NeMo Container, Pre-Training Performance, System: DGX-H100, row Qwen3_30B_a3B (tokendrop) (GPUs 16, "
                                  "GBS 512, MBS 2, seq 4096, FSDP 0, TP 1, PP 2, CP 1, VP 24, EP 8, GA 32), column 'Tokens / sec / GPU'",
                         "repo": MB_REPO, "path": MB_PATH, "commit": MB_COMMIT,
                         "url": run["citation"]["url"],
                         "layout_from": f"{MB_REPO} scripts/performance/configs/qwen3/qwen3_30b_a3b_llm_pretrain.yaml (perf_matrix h100 "
                                        f"num_gpus_16), scripts/performance/run_script.py, scripts/performance/utils/helpers.py, "
                                        f"src/megatron/bridge/recipes/qwen/qwen3_30b_a3b.py and src/megatron/bridge/training/utils/"
                                        f"moe_token_drop.py at branch r0.1.0 ({MB_CONFIG_COMMIT})"},
            "notes": "DGX-H100 (8 x H100 SXM, NVLink 4, 8 x 400 Gb/s IB): hgx-h100, two nodes. The table's first version "
                     "(fa0315a, 2025-10-10). Model: built-in qwen3-30b-a3b (48 layers, 128 routed experts, 8 a token, "
                     "vocabulary 151936, a multiple of 128). Perf matrix h100 num_gpus_16: seq 4096, GBS 512, TP 1, PP 2, "
                     "CP 1, VP 12, EP 8, ETP 1, no FSDP, no CUDA graphs; fp8_cs MBS 2. run_script.py applies token drop "
                     "(apply_moe_token_drop: expert capacity factor 1.0, inputs padded to capacity) and CommOverlapConfig("
                     "tp_comm_overlap=True); moe_router_fusion and cross_entropy_fusion_impl 'te' (--loss fused). DP 8 = 16 / "
                     "(TP x PP); the table's GA 32 = 512 / (8 x 2).",
            "not_priced": ["token drop with capacity factor 1.0 and padding to capacity (mlsys train prices top-k routing with "
                           "balanced experts, which gives each expert the same token count)"],
            "held_out": HELD_OUT}
    return {"LLAMA3_8B": run, "Qwen3_30B_a3B (tokendrop)": qwen}


# ---------------------------------------------------------------------------------------------- S2: Megatron-LM README
MLM_TABLE = {  # model: (heads, hidden, layers, TP, PP, DP, GPUs, batch, TFLOP/s per GPU, MFU %, aggregate PFLOP/s)
    "1.7B": (16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 41, 19.6), "7.1B": (32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 47, 44.7),
    "16B": (48, 6144, 32, 4, 1, 48, 192, 192, 489.1, 49, 93.9), "32B": (56, 7168, 48, 8, 1, 48, 384, 192, 459.6, 46, 176.5),
    "70B": (64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 42, 322.3), "119B": (80, 10240, 92, 8, 4, 48, 1536, 768, 420.5, 43, 645.9),
    "177B": (96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 44, 997.2), "314B": (128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4, 48, 1457.4),
    "462B": (144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 47, 2825.6),
}
MLM_SEQ, MLM_VOCAB = 4096, 131072


def megatron_r080_flops(batch: int, seq: int, layers: int, hidden: int, heads: int, vocab: int) -> float:
    """num_floating_point_operations of megatron/training/training.py at core_r0.8.0 for MHA, 4h MLP, no MoE."""
    return 12 * batch * seq * layers * hidden * hidden * ((1 + 1 + seq / hidden) + 4 + vocab / (2 * layers * hidden))


def mlm_runs() -> dict[str, dict[str, Any]]:
    out = {}
    for model, (heads, h, layers, tp, pp, dp, gpus, batch, tflops, mfu, agg) in MLM_TABLE.items():
        flops = megatron_r080_flops(batch, MLM_SEQ, layers, h, heads, MLM_VOCAB)
        step = flops / (tflops * 1e12 * gpus)
        why = {
            "micro_batch": "1: the table gives the global batch only",
            "vp": "1 (no interleaving): not given",
            "recompute": "none: not given",
            "dtype": "bf16: the table prints no precision; its MFU column equals TFLOP/s over 989 (the H100 SXM dense BF16 peak): "
                     "408.8 / 0.41 = 997, 459.9 / 0.47 = 979",
            "zero": "1: the README's --overlap-param-gather requires Megatron's distributed optimizer",
            "sp": "true: --tp-comm-overlap requires sequence parallelism (TP > 1 rows)",
            "overlap": "dp,tp,pp: the README names --overlap-grad-reduce --overlap-param-gather, --tp-comm-overlap and PP overlap "
                       "(enabled by default)",
            "attention": "flash: Transformer Engine's default backend assumed (not given)",
            "config": "GPT with LayerNorm, GELU 4h MLP, multi-head attention, learned absolute positions and an untied output "
                      "layer (Megatron-LM's GPT defaults but --untie-embeddings-and-output-weights): the table gives heads, "
                      "hidden size and layers only; untied embeddings are what reproduce its model sizes (1.7B = 12 L h^2 + 2 V h "
                      "= 1.75B; tied would be 1.48B; 462B: 461.4B untied). SwiGLU with FFN 8h/3 would give the same sizes and FLOPs",
            "interconnect": "hgx-h100 (8 x 400 Gb/s a node): the README says H100 GPUs, not the cluster",
        }
        lay = layout(tp=tp, pp=pp, dp=dp, sp=tp > 1, micro_batch=1, global_batch=batch, seq=MLM_SEQ, dtype="bf16",
                     attention="flash", overlap=",".join(["dp"] + ["tp"] * (tp > 1) + ["pp"] * (pp > 1)))
        out[model] = {
            "name": f"GPT {model}, {gpus} H100, BF16 (Megatron-LM README weak scaling)", "group": "heldout2-megatron-lm-readme-h100",
            "gpu": "H100-SXM", "config": gpt(h, layers, heads, MLM_VOCAB, MLM_SEQ, tied=False), "cluster": "hgx-h100", "gpus": gpus,
            "layout": lay, "assumed": sorted(why), "assumed_why": why,
            "published": {"metric": "step_time_s", "value": round(step, 4),
                          "derived_from": {"metric": "model_tflops_per_gpu", "value": tflops,
                                           "flop_formula": "megatron-core-r0.8.0",
                                           "flop_per_step": flops}},
            "also_published": {"mfu_percent": mfu, "aggregate_pflops": agg, "tflops_per_gpu": tflops},
            "measurement": True,
            "flop_convention": ("the table's 'Per-GPU teraFLOP/s' with Megatron-LM's own FLOP count at core_r0.8.0 "
                                "(num_floating_point_operations, megatron/training/training.py: 12 B s L h^2 ((1 + g/a + s/h) + "
                                "(f/h) x 1 + V / (2 L h)) with g = a, f = 4h; no recomputation counted, attention over the full "
                                "s x s): the step time it implies = FLOPs / (TFLOP/s x GPUs), written as published.value; "
                                "scripts/validate/train_published.py has no 'megatron-core-r0.8.0' entry in FLOP_FORMULAS, so the "
                                "step time is given directly"),
            "citation": {"paper": "NVIDIA Megatron-LM README, 'Training Speed and Scalability' / 'Performance Benchmarking' (model table image)",
                         "table": f"images/model_table.png, row '{model}' (heads {heads}, hidden {h}, layers {layers}, TP {tp}, PP {pp}, "
                                  f"DP {dp}, GPUs {gpus}, batch {batch}), column 'Per-GPU teraFLOP/s'",
                         "repo": MLM_REPO, "path": "images/model_table.png (README.md)", "commit": MLM_COMMIT,
                         "url": f"https://github.com/NVIDIA/Megatron-LM/blob/{MLM_COMMIT}/images/model_table.png",
                         "formula_from": f"{MLM_REPO} megatron/training/training.py at core_r0.8.0 ({MLM_CORE_R080})"},
            "notes": ("The README (f2e5db4, 2024-07-15, 'New scaling figures on H100 GPUs'; unchanged at d98e8a6): GPT models of "
                      "2B to 462B parameters, vocabulary 131,072, sequence 4096, up to 6144 H100 GPUs, DP/TP/PP overlap, "
                      "throughputs measured end to end (data loading, optimizer, communication, logging), not trained to "
                      "convergence; the weak-scaling figure says Megatron-Core r0.8.0. The table is an image; its cells were "
                      "read from the PNG. Layers split evenly over the stages "
                      f"({layers} / {pp} = {layers // pp})."),
            "held_out": HELD_OUT}
    return out


# ---------------------------------------------------------------------------------------------- S3: torchtitan
TT_COMMON_WHY = {
    "gpu": "the page's H100 is a 96 GB HBM2e part (2.4 TB/s) at a 500 W power limit, priced as the 700 W H100 SXM of hgx-h100 "
           "(as published_runs.json's torchtitan rows)",
    "attention": "flash2: torchtitan calls F.scaled_dot_product_attention(is_causal=True) with no backend pinned; cuDNN is last "
                 "in SDPA's order from torch 2.5.1 (pytorch PR 138522), so the FLASH backend (FlashAttention-2) runs (the "
                 "reasoning published_runs.json uses for the same page)",
    "zero": "3: FSDP2 (fully_shard) shards parameters, gradients and optimizer state over the FSDP (x CP) ranks",
    "fp8_recipe": "current: torchao Float8Linear with dynamic tensorwise scaling (an amax of the tensor at every cast); the "
                  "calculator has no rowwise or torchao recipe",
}
TT_NOT_PRICED_COMPILE = "torch.compile (inductor fusions) is not an option of mlsys train; the row is priced as eager PyTorch"


def tt_run(name: str, group: str, model: str, gpus: int, lay: dict[str, Any], value: float, why: dict[str, str],
           citation: dict[str, Any], notes: str, not_priced: list[str], cluster: str = "hgx-h100", gpu: str = "H100-SXM") -> dict[str, Any]:
    why = {k: v for k, v in why.items() if not (k == "fp8_recipe" and lay["dtype"] != "fp8")}
    return {"name": name, "group": group, "gpu": gpu, "model": model, "cluster": cluster, "gpus": gpus,
            "layout": layout(framework="torch", attention="flash2", zero=3) | lay, "assumed": sorted(why), "assumed_why": why,
            "published": {"metric": "tokens_per_s_per_gpu", "value": value}, "measurement": True,
            "flop_convention": f"none needed: tokens/s/GPU, compared as the step time it implies ({lay['global_batch']} x {lay['seq']} / ({value} x {gpus}) s)",
            "citation": citation, "notes": notes, "not_priced": not_priced, "held_out": HELD_OUT}


def tt_cite(table: str, row: str, col: str = "TPS/GPU") -> dict[str, Any]:
    path = "benchmarks/llama3_h100_202412_torchtitan.md"
    return {"paper": "torchtitan team, Llama 3 H100 benchmarks, end of 2024 (github.com/pytorch/torchtitan "
                     f"{path}; torch 1963fc8, torchao eab345c, torchtitan 9dec370)",
            "table": f"{table}, row '{row}', column '{col}'", "repo": TT_REPO, "path": path, "commit": TT_BENCH_COMMIT,
            "url": f"https://github.com/pytorch/torchtitan/blob/{TT_BENCH_COMMIT}/{path}",
            "layout_from": f"{TT_REPO} train_configs/llama3_{{8b,70b,405b}}.toml, torchtitan/config_manager.py, "
                           f"torchtitan/parallelisms/pipeline_llama.py and pipelining_utils.py at {TT_RUN_COMMIT}"}


TT_HW = ("Hardware (the page): Grand Teton hosts of 8 H100 (96 GB HBM2e, 500 W) on NVLink, 400 Gb/s RDMA a GPU between "
         "hosts (hgx-h100's 50 GB/s a GPU). TPS/GPU read at the 90th iteration (logged every 10).")


def torchtitan_runs() -> dict[tuple[str, str], dict[str, Any]]:
    r: dict[tuple[str, str], dict[str, Any]] = {}
    g = "heldout2-torchtitan-h100-202412"
    sel_why = TT_COMMON_WHY | {"recompute": "selective: torchtitan's op-level SAC (selective_ac_option 'op', llama3_8b.toml) "
                                            "recomputes every second matmul and keeps the attention output: between mlsys's "
                                            "selective (attention core only) and full"}
    full_why = TT_COMMON_WHY
    for table, gpus, row, dtype, tps in (("Table 1", 8, "FSDP + torch.compile", "bf16", 6667),
                                          ("Table 1", 8, "FSDP + torch.compile + Float8", "fp8", 8532),
                                          ("Table 3", 128, "FSDP + torch.compile", "bf16", 6514),
                                          ("Table 3", 128, "FSDP + torch.compile + Float8", "fp8", 8380)):
        lay = dict(tp=1, pp=1, dp=gpus, micro_batch=2, global_batch=2 * gpus, seq=8192, recompute="selective", dtype=dtype)
        why = dict(sel_why)
        if dtype == "fp8":
            lay |= {"fp8_recipe": "current", "fp8_params": False}
            why["fp8_params"] = "false: enable_fsdp_float8_all_gather is not set in llama3_8b.toml at 9dec370 (default false); the page does not say"
        first = ("Table 1's other rows; its FSDP row (5,762) is in published_runs.json. " if table == "Table 1" else
                 "Table 3's other rows; its FSDP row is in published_runs.json. ")
        r[(table, row)] = tt_run(f"Llama 3.1 8B, {gpus} H100, {row} (torchtitan)", g, "llama3-8b", gpus, lay, tps, why,
                                 tt_cite(f"{table} (1D parallelism, FSDP, Llama 3.1 8B, {gpus} GPUs, local batch 2, global batch "
                                         f"{2 * gpus}, selective AC)", row),
                                 first + "Sequence 8192 from llama3_8b.toml at 9dec370. Llama 3.1 8B has Llama 3 8B's shape "
                                 "(built-in llama3-8b). " + TT_HW,
                                 [TT_NOT_PRICED_COMPILE])
    for fsdp, cp, seq, tps in ((8, 1, 32768, 3890), (4, 2, 65536, 2540), (2, 4, 131072, 1071), (1, 8, 262144, 548)):
        row = f"FSDP {fsdp}, CP {cp}"
        ov = "dp,cp" if cp > 1 else "dp"
        lay = dict(tp=1, pp=1, dp=fsdp, cp=cp, micro_batch=1, global_batch=fsdp, seq=seq, recompute="full", dtype="fp8",
                   fp8_recipe="current", fp8_params=False, overlap=ov)
        why = full_why | {"fp8_params": "false: enable_fsdp_float8_all_gather not set in llama3_8b.toml at 9dec370",
                          "overlap": (f"{ov}: FSDP2's prefetched all-gathers and reduce-scatters"
                                      + (" and the ring-attention exchange of torch's context_parallel" if cp > 1 else "")
                                      + ", as mlsys's default")}
        r[("Table 2", row)] = tt_run(f"Llama 3.1 8B, 8 H100, FSDP {fsdp} x CP {cp}, seq {seq}, Float8 (torchtitan)", g, "llama3-8b", 8,
                                     lay, tps, why,
                                     tt_cite("Table 2 (FSDP + CP + torch.compile + Float8, Llama 3.1 8B, 8 GPUs, local batch 1, full AC)",
                                             f"{row}, sequence {seq}"),
                                     f"Global batch = local batch 1 x FSDP {fsdp} (the CP ranks share a sequence). " + TT_HW,
                                     [TT_NOT_PRICED_COMPILE, f"sequence {seq} with the model's 8192-position RoPE config (torchtitan does not rescale)"])
    for row, tps, ov in (("2D", 829, "dp,cp"), ("2D + AsyncTP", 876, "dp,cp,tp")):
        lay = dict(tp=8, pp=1, dp=32, sp=True, micro_batch=16, global_batch=512, seq=8192, recompute="full", dtype="fp8",
                   fp8_recipe="current", fp8_params=True, overlap=ov)
        why = full_why | {"fp8_params": "true: enable_fsdp_float8_all_gather as in the page's 405B config (llama3_405b.toml); "
                                        "llama3_70b.toml at 9dec370 has float8 off and the page does not give the flags",
                          "micro_batch": "16: the local batch, one micro-batch (torchtitan had no gradient accumulation at 9dec370)",
                          "overlap": ("dp,cp,tp: AsyncTP (micro-pipelined all-gather/reduce-scatter with the matmuls)" if "Async" in row
                                      else "dp,cp: FSDP2 prefetch; TP collectives exposed (vanilla TP)")}
        r[("Table 4", row)] = tt_run(f"Llama 3.1 70B, 256 H100, FSDP 32 x TP 8, Float8, {row} (torchtitan)", g, "llama3.1-70b", 256, lay, tps, why,
                                     tt_cite("Table 4 (2D parallelism FSDP + TP + torch.compile + Float8, Llama 3.1 70B, 256 GPUs, FSDP 32, TP 8, local batch 16, global batch 512, full AC)", row),
                                     "Sequence 8192 (llama3_70b.toml at 9dec370). TP with sequence parallelism on the norms "
                                     "(torchtitan's TP plan). " + TT_HW,
                                     [TT_NOT_PRICED_COMPILE] + (["AsyncTP (symmetric-memory micro-pipelining) priced as --overlap tp"] if "Async" in row else []))
    for row, tps, vp in (("1F1B", 100, 1), ("Interleaved 1F1B", 128, 2)):
        lay = dict(tp=8, pp=8, dp=8, vp=vp, sp=True, micro_batch=4, global_batch=256, seq=8192, recompute="full", dtype="fp8",
                   fp8_recipe="current", fp8_params=True, overlap="dp,cp,tp",
                   account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
        why = full_why | {"micro_batch": "4: pipeline_parallel_microbatches defaults to the PP degree (8) at 9dec370, so the "
                                         "local batch 32 runs as 8 micro-batches of 4",
                          "pipeline_split": ("torchtitan's generate_split_points at 9dec370 (no split points in llama3_405b.toml): "
                                             + ("8 stages of 15, 16 x 6, 15 layers" if vp == 1 else
                                                "16 stages (2 a rank for the multi-stage schedule) of 7, 8 x 14, 7 layers")
                                             + "; --account-for-embedding/loss-in-pipeline-split gives the same decoder-layer counts"),
                          "overlap": "dp,cp,tp: the table's AsyncTP (enable_async_tensor_parallel in llama3_405b.toml)"}
        r[("Table 5", row)] = tt_run(f"Llama 3.1 405B, 512 H100, FSDP 8 x TP 8 x PP 8, {row}, Float8 (torchtitan)", g, "llama3.1-405b", 512, lay, tps, why,
                                     tt_cite("Table 5 (3D parallelism + torch.compile + Float8 + AsyncTP, Llama 3.1 405B, 512 GPUs, FSDP 8, TP 8, PP 8, local batch 32, global batch 256, full AC)", row),
                                     "Sequence 8192 (llama3_405b.toml at 9dec370: compile, enable_float8_linear, "
                                     "enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp, "
                                     "enable_async_tensor_parallel, full AC). " + TT_HW,
                                     [TT_NOT_PRICED_COMPILE, "AsyncTP priced as --overlap tp"],)
        r[("Table 5", row)]["layout"]["schedule"] = "1f1b"
    for row, tps, fsdp, cp, seq in (("FSDP 8, CP 1", 76, 8, 1, 32768), ("FSDP 4, CP 2", 47, 4, 2, 65536), ("FSDP 2, CP 4", 31, 2, 4, 131072),
                                    ("FSDP 1, CP 8", 16, 1, 8, 262144)):
        lay = dict(tp=8, pp=8, dp=fsdp, cp=cp, sp=True, micro_batch=1, global_batch=8 * fsdp, seq=seq, recompute="full", dtype="fp8",
                   fp8_recipe="current", fp8_params=True, overlap="dp,cp,tp", schedule="1f1b",
                   account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
        why = full_why | {"micro_batch": "1: local batch 8 over the default 8 micro-batches (= PP degree)",
                          "pipeline_split": "generate_split_points: 15, 16 x 6, 15 layers over the 8 stages (same counts as "
                                            "--account-for-embedding/loss-in-pipeline-split)",
                          "overlap": "dp,cp,tp: the table's AsyncTP; CP ring exchange as mlsys's default"}
        r[("Table 6", row)] = tt_run(f"Llama 3.1 405B, 512 H100, TP 8 x PP 8 x {row}, seq {seq}, Float8 (torchtitan)", g, "llama3.1-405b", 512, lay, tps, why,
                                     tt_cite("Table 6 (4D parallelism FSDP + TP + PP + CP + torch.compile + Float8 + AsyncTP + 1F1B, Llama 3.1 405B, 512 GPUs, TP 8, PP 8, local batch 8, full AC)", f"{row}, sequence {seq}"),
                                     f"Global batch = local batch 8 x FSDP {fsdp}. " + TT_HW,
                                     [TT_NOT_PRICED_COMPILE, "AsyncTP priced as --overlap tp",
                                      f"sequence {seq} with the model's 8192-position RoPE config"])
    # The H200 page (Trainy on WhiteFiber)
    path = "benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"
    for nodes, tps in ((4, 10938), (8, 10753)):
        gpus = 8 * nodes
        lay = dict(tp=1, pp=1, dp=gpus, micro_batch=2, global_batch=2 * gpus, seq=8192, recompute="selective", dtype="fp8",
                   fp8_recipe="current", fp8_params=True)
        why = {k: v for k, v in TT_COMMON_WHY.items() if k != "gpu"} | {
            "recompute": "selective: llama3_8b.toml at e7c0cae, activation_checkpoint mode selective, selective_ac_option 'op'",
            "attention": "flash2: SDPA with no backend pinned in the NGC 25.05 PyTorch (2.8.0a0); cuDNN last in SDPA's order (assumed, not read for this build)",
            "interconnect": "hgx-h200: 8 H200 on NVLink a host, 400 Gb/s (ConnectX-7) a GPU between hosts, as the page says"}
        r[("Results", f"NUM_NODES {nodes}")] = tt_run(
            f"Llama 3.1 8B, {gpus} H200, FSDP, Float8 (torchtitan, Trainy on WhiteFiber)", "heldout2-torchtitan-h200-trainy",
            "llama3-8b", gpus, lay, tps, why,
            {"paper": "Trainy team, torchtitan Llama 3.1 8B on H200 (WhiteFiber), June 2025 (github.com/pytorch/torchtitan " + path + ")",
             "table": f"Results, row NUM_NODES {nodes}, column 'TPS/GPU'", "repo": TT_REPO, "path": path, "commit": TT_H200_COMMIT,
             "url": f"https://github.com/pytorch/torchtitan/blob/{TT_H200_COMMIT}/{path}",
             "layout_from": f"the page's torchrun command and torchtitan/models/llama3/train_configs/llama3_8b.toml at {TT_H200_RUN}"},
            "Command: --training.local_batch_size=2 --training.compile --model.converters=float8 "
            "--float8.enable_fsdp_float8_all_gather --float8.precompute_float8_dynamic_scale_for_fsdp "
            "--float8.force_recompute_fp8_weight_in_bwd, FSDP over all GPUs (data_parallel_shard_degree -1). TPS and "
            "memory 'arbitrarily sampled at the 100th iteration'. torch 2.8.0a0+5228986c39 (NGC 25.05), torchao 0afa4c1.",
            [TT_NOT_PRICED_COMPILE, "force_recompute_fp8_weight_in_bwd (FP8 weights re-cast in the backward)"],
            cluster="hgx-h200", gpu="H200")
    return r


# ---------------------------------------------------------------------------------------------- S5: MLPerf
GPT3_MLPERF_CONFIG = gpt(12288, 96, 96, 50688, 2048)
V30_ATTENTION = ("flash2: the v3.0 config_common.sh sets no NVTE_FUSED_ATTN (nor NVTE_FLASH_ATTN); Transformer Engine 1.x in "
                 "these containers prefers the flash-attn package (FlashAttention-2) when it is installed")
V31_ATTENTION = ("flash2: the v3.1 config_common.sh sets no NVTE_FUSED_ATTN (its NVTE_FLASH_ATTN=0 line is commented out); "
                 "Transformer Engine 1.x in these containers prefers the flash-attn package (FlashAttention-2) when it is installed")
MLPERF_ROWS: dict[tuple[str, str, str], dict[str, Any]] = {  # (round, org, system): layout pieces read from the submission's config_*.sh (+ config_common, custom.yaml)
    ("3.0", "NVIDIA", "dgxh100_n96_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_96x8x128x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo (MLPerf v3.0, 23.04-era)"),
    ("3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n448_ngc23.04_pytorch"): dict(cfg="NVIDIA_CoreWeave/benchmarks/gpt3/implementations/pytorch/config_DGXH100_448x8x24x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NGC 23.04 PyTorch + NeMo Megatron"),
    ("3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n96_ngc23.04_pytorch"): dict(cfg="NVIDIA_CoreWeave/benchmarks/gpt3/implementations/pytorch/config_DGXH100_96x8x128x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NGC 23.04 PyTorch + NeMo Megatron"),
    ("3.1", "Azure+NVIDIA", "ND_H100_v5_n1344_pytorch"): dict(cfg="Azure+NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_1344x8x8x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NGC 23.09 PyTorch + NeMo"),
    ("3.1", "NVIDIA", "eos-dfw_n1024_ngc23.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_1024x8x16x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo 23.09"),
    ("3.1", "NVIDIA", "eos-dfw_n1344_ngc23.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_1344x8x8x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo 23.09"),
    ("3.1", "NVIDIA", "eos-dfw_n512_ngc23.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_512x8x16x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo 23.09"),
    ("4.1", "NVIDIA", "eos_n32_ngc24.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/eos_n32_ngc24.09_nemo/config_DGXH100_32x8x256x4x8_mbs2.sh", tp=4, pp=8, vp=6, mbs=2, fp8_params=True, container="NeMo 24.09"),
    ("4.1", "NVIDIA", "eos_n64_ngc24.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/eos_n64_ngc24.09_nemo/config_DGXH100_64x8x128x4x8_mbs2.sh", tp=4, pp=8, vp=6, mbs=2, fp8_params=True, container="NeMo 24.09"),
    ("4.1", "Oracle", "1536xBM.GPU.H100.8"): dict(cfg="Oracle/benchmarks/gpt3/DGXH100_128x8x64x4x8_mbs2/config_DGXH100_192x8x64x4x8_mbs2.sh", tp=4, pp=8, vp=4, mbs=2, fp8_params=True, container="NGC 24.04 PyTorch + NeMo"),
    ("5.0", "NVIDIA", "eos-dfw_n256_ngc25.01_nemo"): dict(cfg="NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n256_ngc25.01_nemo/config_DGXH100_256x8x72xtp8pp8cp2.sh", tp=8, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
    ("5.0", "NVIDIA", "eos-dfw_n304_ngc25.01_nemo"): dict(cfg="NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n304_ngc25.01_nemo/config_DGXH100_304x8x64xtp8pp8cp2.sh", tp=8, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
    ("5.0", "Nebius", "nebius_soperator_8xH200_n128_ngc25.01_nemo"): dict(cfg="Nebius/benchmarks/llama31_405b/implementations/nebius_soperator_8xH200_n128_ngc25.01_nemo/config_DGXH200_128x8x72xtp4pp8cp2.sh", tp=4, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
    ("5.1", "Cisco", "hpf_n16"): dict(cfg="Cisco/benchmarks/llama31_8b/implementations/nemo/config_DGXH100_16x8x1xtp2pp1cp1.sh", tp=2, pp=1, vp=1, cp=1, mbs=1, fp8_params=True, container="NeMo (MLPerf v5.1 reference implementation)"),
    ("5.1", "Cisco", "hpf_n8"): dict(cfg="Cisco/benchmarks/llama31_8b/implementations/nemo/config_DGXH100_8x8x1xtp1pp1cp1.sh", tp=1, pp=1, vp=1, cp=1, mbs=1, fp8_params=True, container="NeMo (MLPerf v5.1 reference implementation)"),
    ("5.1", "HPE", "HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09"): dict(cfg="HPE/benchmarks/llama3_8b/implementations/nemo-x86_64/config_XD670_8x8x1xtp1pp1cp2_8b.sh", tp=1, pp=1, vp=1, cp=2, mbs=1, fp8_params=True, container="NVIDIA 25.08/25.09 NeMo"),
    # the rest of the qualifying submissions (reports/train/heldout_public_rest)
    ("3.0", "NVIDIA", "dgxh100_n64_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_64x8x128x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo (MLPerf v3.0, 23.04-era)",
        why={"attention": V30_ATTENTION}),
    ("3.0", "NVIDIA_CoreWeave", "coreweave_hgxh100_n192_ngc23.04_pytorch"): dict(cfg="NVIDIA_CoreWeave/benchmarks/gpt3/implementations/pytorch/config_DGXH100_192x8x64x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NGC 23.04 PyTorch + NeMo Megatron",
        why={"attention": V30_ATTENTION}),
    ("3.1", "NVIDIA", "eos-dfw_n768_ngc23.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_768x8x16x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo 23.09",
        why={"attention": V31_ATTENTION}),
    ("3.1", "NVIDIA", "eos-dfw_n1280_ngc23.09_nemo"): dict(cfg="NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_1280x8x8x4x8_mbs1.sh", tp=4, pp=8, vp=12, mbs=1, fp8_params=False, container="NeMo 23.09",
        why={"attention": V31_ATTENTION}),
    ("4.0", "smc", "64xSMC-H100-SXM-80GB"): dict(cfg="smc/benchmarks/gpt3/implementations/nemo/config_SMCH100_64x8x128x4x8.sh", tp=4, pp=8, vp=12, mbs=2, fp8_params=True, container="NeMo (MLPerf v4.0, NVIDIA's implementation)",
                                                why={"vp": "12: INTERLEAVED_PIPELINE is not set by the smc configs; conf/custom.yaml defaults it to 12",
                                                     "interconnect": "hgx-h100: smc's systems JSON gives 8 H100 SXM on NVLink 4 and InfiniBand NDR a node, not the NIC count; 8 x 400 Gb/s assumed"}),
    ("4.1", "Oracle", "3072xBM.GPU.H100.8"): dict(cfg="Oracle/benchmarks/gpt3/DGXH100_384x8x32x4x8_mbs2/config_DGXH100_384x8x32x4x8_mbs2.sh", tp=4, pp=8, vp=4, mbs=2, fp8_params=True, container="NGC 24.04 PyTorch + NeMo"),
    ("5.0", "NVIDIA", "eos-dfw_n1024_ngc25.01_nemo"): dict(cfg="NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n1024_ngc25.01_nemo/config_DGXH100_1024x8x24xtp8pp8cp2.sh", tp=8, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
    ("5.0", "NVIDIA", "eos-dfw_n320_ngc25.01_nemo"): dict(cfg="NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n320_ngc25.01_nemo/config_DGXH100_320x8x56xtp8pp8cp2.sh", tp=8, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
    ("5.0", "NVIDIA", "eos-dfw_n64_ngc25.01_nemo"): dict(cfg="NVIDIA/benchmarks/llama31_405b/implementations/eos-dfw_n64_ngc25.01_nemo/config_DGXH100_64x8x288xtp8pp8cp2.sh", tp=8, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
    ("5.0", "Nebius", "nebius_soperator_8xH200_n64_ngc25.01_nemo"): dict(cfg="Nebius/benchmarks/llama31_405b/implementations/nebius_soperator_8xH200_n64_ngc25.01_nemo/config_DGXH200_64x8x144xtp4pp8cp2.sh", tp=4, pp=8, vp=8, cp=2, mbs=1, fp8_params=True, container="NeMo 25.01"),
}


def mlperf_steps(mirror: Path | None, rows: list[tuple[str, str, str]], steps_file: Path) -> dict[str, Any]:
    """Median per-step time of every logged step of every result file of `rows`; from the mirrors if given, else steps_file."""
    if mirror is None:
        return json.loads(steps_file.read_text())["submissions"]
    out = {}
    for v, org, sysn in (key for key in MLPERF_ROWS if key in rows):  # the table's order
        bm = next(b for vv, o, s, b, *_ in MLPERF if (vv, o, s) == (v, org, sysn))
        repo = mirror / f"mlcommons+training_results_v{v}" / "repo"
        d = f"{org}/results/{sysn}/{bm}"
        names = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", MLPERF_COMMITS[v], d + "/"], capture_output=True,
                               text=True, check=True).stdout.split()
        allv, per, incs, gbs = [], {}, set(), None
        for f in sorted(n for n in names if re.search(r"/result_[^/]*\.txt$", n)):
            txt = subprocess.run(["git", "-C", str(repo), "show", f"{MLPERF_COMMITS[v]}:{f}"], capture_output=True, text=True,
                                 check=True).stdout
            vals, steps = [], []
            for line in txt.split("\n"):
                m = '"tracked_stats"' in line and re.search(r'"(train_step_timing(?: in s)?|train_step_time)": ([0-9.eE+-]+)', line)
                if m:
                    vals.append(float(m[2]))
                    s = re.search(r'"step": ([0-9.]+)', line)
                    steps.append(float(s[1]) if s else None)
            m = re.search(r'"key": "global_batch_size", "value": ([0-9.]+)', txt)
            gbs = float(m[1]) if m else gbs
            incs |= {b - a for a, b in zip(steps, steps[1:]) if a is not None and b is not None}
            per[f.split("/")[-1]] = dict(n=len(vals), median=statistics.median(vals), first=vals[0])
            allv += vals
        srt = sorted(allv)
        out[f"v{v}/{d}"] = dict(commit=MLPERF_COMMITS[v], files=len(per), n=len(allv), median=statistics.median(allv),
                                mean=statistics.fmean(allv), p10=srt[len(srt) // 10], p90=srt[len(srt) * 9 // 10], min=srt[0], max=srt[-1],
                                gbs=gbs, step_increments=sorted(incs)[:5], per_file=per)
    return out


def mlperf_runs(steps: dict[str, Any], steps_file: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {}
    for (v, org, sysn), c in MLPERF_ROWS.items():
        bm, gpus, gbs = next((b, g, gb) for vv, o, s, b, g, gb in MLPERF if (vv, o, s) == (v, org, sysn))
        if f"v{v}/{org}/results/{sysn}/{bm}" not in steps:
            continue
        st = steps[f"v{v}/{org}/results/{sysn}/{bm}"]
        cp = c.get("cp", 1)
        dp = gpus // (c["tp"] * c["pp"] * cp)
        h200 = "H200" in sysn
        seq = 2048 if bm == "gpt3" else 8192
        ga = gbs // (dp * c["mbs"])
        commit = MLPERF_COMMITS[v]
        why: dict[str, str] = {"zero": "1: USE_DIST_OPTIMIZER=True (Megatron's distributed optimizer), encoded as published_runs.json does"}
        run: dict[str, Any] = {"gpu": "H200" if h200 else "H100-SXM", "cluster": "hgx-h200" if h200 else "hgx-h100", "gpus": gpus}
        lay = layout(tp=c["tp"], pp=c["pp"], cp=cp, dp=dp, vp=c["vp"], micro_batch=c["mbs"], global_batch=gbs, seq=seq,
                     dtype="fp8", fp8_recipe="delayed", fp8_params=c["fp8_params"])
        not_priced: list[str] = list(c.get("not_priced", []))
        if bm == "gpt3":
            run["config"] = GPT3_MLPERF_CONFIG
            run["name"] = f"GPT-3 175B, {gpus} H100, FP8 (MLPerf Training v{v}, {org} {sysn})"
            run["group"] = f"heldout2-mlperf-v{v}-gpt3"
            lay |= {"sp": True, "attention": "flash2", "overlap": "dp,tp,pp"}
            why |= {"vocab_size": "50688: the benchmark's C4 SentencePiece vocabulary of 50257 (the reference's PassThroughVocabulary(size=50257)) "
                                  "padded by NeMo to a multiple of make_vocab_size_divisible_by 128 x TP 4; not printed by the logs",
                    "attention": "flash2: NVTE_FUSED_ATTN is not set (its line is commented out in config_common.sh); Transformer Engine "
                                 "1.x in these containers prefers the flash-attn package (FlashAttention-2) when it is installed",
                    "overlap": "dp,tp,pp: OVERLAP_GRAD_SYNC / OVERLAP_PARAM_SYNC default True, TP_COMM_OVERLAP=True (userbuffers, "
                               "tp_overlap/h100tp4pp8mbs*.yaml), OVERLAP_P2P_COMM default True; how much each hides is not published"}
            model_note = ("Model: the MLPerf GPT-3 175B (conf/megatron_gpt_config*.yaml of the implementation): 96 layers, hidden "
                          "12288, FFN 49152, 96 heads, learned absolute positions 2048, LayerNorm1p, GELU, biases, shared "
                          "input/output embedding, dropout 0; sequence 2048. ")
        else:
            big = bm == "llama31_405b"
            run["model"] = "llama3.1-405b" if big else "llama3.1-8b"
            if big:
                run["overrides"] = {"vocab_size": 32768}
                why["vocab_size"] = "32768: the benchmark replaces Llama 3.1's tokenizer with Mixtral 8x22B's (README 'Model details'); its size is not printed"
            run["name"] = f"Llama 3.1 {'405B' if big else '8B'}, {gpus} {'H200' if h200 else 'H100'}, FP8 (MLPerf Training v{v}, {org} {sysn})"
            run["group"] = f"heldout2-mlperf-v{v}-{bm}"
            ov = ["dp"] + (["cp"] if cp > 1 else []) + (["tp"] if c["tp"] > 1 else []) + (["pp"] if c["pp"] > 1 else [])
            lay |= {"sp": c["tp"] > 1, "attention": "flash", "overlap": ",".join(ov), "loss": "fused"}
            if big:
                lay |= {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
            why |= {"attention": "flash: Transformer Engine's default backend in the 25.x containers (cuDNN fused attention on Hopper "
                                 "assumed; NVTE_FUSED_ATTN is not set)",
                    "overlap": f"{','.join(ov)}: OVERLAP_GRAD_REDUCE / OVERLAP_PARAM_GATHER True"
                               + (", TP_COMM_OVERLAP=True (userbuffers)" if c["tp"] > 1 else "")
                               + (", the pipeline's p2p overlap (Megatron default with interleaving)" if c["pp"] > 1 else "")
                               + (", context-parallel ring exchange" if cp > 1 else "") + "; how much each hides is not published"}
            model_note = (("Model: Llama 3.1 405B (126 layers; built-in llama3.1-405b) with the Mixtral 8x22B tokenizer; "
                           "sequence 8192; ASYM_PP_EMBED / ASYM_PP_LOSS: the embedding and the loss count as a layer of the "
                           "split (126 + 2 = 128 slots over 8 x 8 chunks, 2 each). " if big else
                           "Model: Llama 3.1 8B (built-in llama3.1-8b, its own tokenizer), sequence 8192. ")
                          + "FP8 delayed scaling (FP8_RECIPE default 'delayed', amax history 1, most_recent), FP8 weights "
                            "(FP8_PARAMS=True), CROSS_ENTROPY_LOSS_FUSION default True (--loss fused). ")
            if sysn.startswith("HPE"):
                not_priced += ["FP8 attention (FP8_DPA=True, config_common_fp8attn.sh)", "full-iteration CUDA graphs (config_common_cg.sh)"]
        if c["fp8_params"] is False:
            why["fp8_params"] = "false: no FP8_PARAMS in this round's configs"
        why["fp8_recipe"] = "delayed: FP8=True, FP8_HYBRID / FP8_AMAX_HISTORY / FP8_AMAX_ALGO (Transformer Engine delayed scaling)"
        why |= c.get("why", {})
        run["layout"] = lay
        run["assumed"] = sorted(why)
        run["assumed_why"] = why
        run["published"] = {"metric": "step_time_s", "value": round(st["median"], 4)}
        run["also_published"] = {k: st[k] for k in ("n", "files", "mean", "p10", "p90", "min", "max")} | {
            "per_file_median": {f: round(p["median"], 4) for f, p in st["per_file"].items()},
            "note": f"statistics of every logged train-step time of the submission's result files ({steps_file.relative_to(ROOT)}); not for scoring"}
        run["measurement"] = True
        run["flop_convention"] = "none needed: seconds per step, the median of the logged per-step times"
        sub = f"{org}/results/{sysn}/{bm}"
        run["citation"] = {"paper": f"MLCommons, MLPerf Training v{v} results (github.com/mlcommons/training_results_v{v}), {org} submission {sysn}",
                           "table": f"{sub}/result_*.txt, MLLOG 'tracked_stats' train step time of every logged step ({st['n']} lines in {st['files']} runs); "
                                    f"global_batch_size {gbs} and gradient_accumulation_steps {ga} from the same logs",
                           "repo": f"github.com/mlcommons/training_results_v{v}", "path": sub, "commit": commit,
                           "url": f"https://github.com/mlcommons/training_results_v{v}/tree/{commit}/{sub}",
                           "layout_from": f"{c['cfg']} (with the config_common*.sh it sources and conf/custom.yaml defaults); systems/{sysn}.json"}
        run["notes"] = (model_note + f"Layout from {c['cfg'].split('/')[-1]}: TP {c['tp']}, PP {c['pp']}, VP {c['vp']}, CP {cp}, "
                        f"MBS {c['mbs']}; DP {dp} = {gpus} / (TP x PP x CP); "
                        + (f"{c['minibs']}. " if "minibs" in c else
                           f"the logged GBS {gbs} = DP x MINIBS and GA {ga} = GBS / (DP x MBS) agree with the config. ")
                        + f"No activation recomputation (ACT_CKPT_* null). Container: "
                        f"{c['container']}. System (systems/{sysn}.json): 8 x {'H200 SXM 141 GB' if h200 else 'H100 SXM 80 GB'} on "
                        f"NVLink 4 a node with 8 x 400 Gb/s NICs (InfiniBand NDR, or RoCE for Oracle, Ethernet for Cisco): "
                        f"{run['cluster']}. The MLPerf logs time every step of a converging run from a checkpoint, evaluation excluded; "
                        f"the published number here is their median (rule in reports/train/heldout_public/README.md).")
        run["not_priced"] = not_priced
        run["held_out"] = HELD_OUT
        out[(v, org, sysn)] = run
    return out


# ---------------------------------------------------------------------------------------------- assemble
def mlperf_row(c: dict[str, Any]) -> tuple[str, str, str]:
    """(round, org, system) of an S5 candidate."""
    org, _, sysn, _ = c["table"].split("/")
    return c["source"].rsplit("_v", 1)[1], org, sysn


def runs_for(cands: list[dict[str, Any]], steps: dict[str, Any], steps_file: Path) -> list[dict[str, Any]]:
    """The runs of the candidates, in the order of the families, sources, tables, GPU counts and rows."""
    nemo, mb, mlm, tt, ml = nemo_runs(), mb_runs(), mlm_runs(), torchtitan_runs(), mlperf_runs(steps, steps_file)
    runs = []
    for c in sorted(cands, key=lambda c: (c["family"], c["source"], c["table"], c["gpus"], c["row"])):
        if c["source"] == SRC_NEMO:
            run = nemo[(c["model"], c["gpus"])]
        elif c["source"] == SRC_MB:
            run = mb[c["model"]]
        elif c["source"] == SRC_MLM:
            run = mlm[c["model"]]
        elif c["family"] == "S3":
            run = tt[(c["table"], c["row"])]
        else:
            run = ml[mlperf_row(c)]
        run = dict(run)
        run["selection"] = {"family": c["family"], "key": c["key"], "sha256": c["sha256"], "row": c["row"]}
        runs.append(run)
    return runs


def build(mirror: Path | None) -> dict[str, Any]:
    chosen, dropped = select(CANDIDATES)
    steps = mlperf_steps(mirror, [mlperf_row(c) for c in chosen if c["family"] == "S5"], STEPS_FILE)
    runs = runs_for(chosen, steps, STEPS_FILE)
    if mirror is not None:
        STEPS_FILE.write_text(json.dumps({"about": json.loads(STEPS_FILE.read_text())["about"], "submissions": steps}, indent=1) + "\n")
    return {
        "collected": COLLECTED,
        "rule": RULE_FILE.read_text(),
        "about": ("Second held-out set of published training runs for scripts/validate/train_published.py (reports/train/heldout_public), collected "
                  "2026-12-02 before any prediction was made for them. Schema of reports/train/published_runs.json plus, on the "
                  "file, `collected`, `rule` (RULE.md verbatim), `selection` (every qualifying candidate, its key and sha256, and "
                  "what the cap left out) and `left_out` (rows out by a clause of the rule), and on each run `gpu`, "
                  "`assumed_why`, `also_published` (cross-checks, not for scoring), `not_priced` (features of the run that "
                  "mlsys train has no option for), `selection` and `held_out`. Layout fields: those train_published.py "
                  "passes (tp, pp, dp, cp, ep, vp, micro_batch, global_batch, seq, sp, recompute, zero, dtype, fp8_recipe, "
                  "fp8_params, attention, framework, overlap, the pipeline split fields, schedule) plus `dropout` where the "
                  "recipe sets hidden dropout > 0 and `loss: fused` where it enables cross-entropy loss fusion (mlsys train "
                  "has --dropout and --loss; train_published.py does not pass them yet)."),
        "selection": {"candidates": [{k: c[k] for k in ("family", "key", "sha256", "row")} | {"kept": c in chosen}
                                     for c in sorted(CANDIDATES, key=lambda c: (c["family"], c["sha256"], c["tiebreak"]))],
                      "counts": {f: {"qualifying": sum(c["family"] == f for c in CANDIDATES),
                                     "kept": sum(c["family"] == f for c in chosen)} for f in ("S1", "S2", "S3", "S4", "S5")}},
        "left_out": [{"what": w, "clause": k, "why": y} for w, k, y in LEFT_OUT],
        "runs": runs,
    }


# ---------------------------------------------------------------------------------------------- the rest (--rest)
REST_DIR = ROOT / "reports" / "train" / "heldout_public_rest"
REST_STEPS_FILE = REST_DIR / "mlperf_step_times.json"
REST_COLLECTED = "2026-12-03"
REST_HELD_OUT = ("held out: a qualifying row of reports/train/heldout_public left out by RULE.md's cap (selection kept false, "
                 "its number not screened then), collected 2026-12-03 (reports/train/heldout_public_rest) before any "
                 "prediction of it was made")
_NO_STEP_LOG = ("the result logs carry no per-step time (no tracked_stats train_step_timing lines: only block_start / "
                "block_stop around the evaluations; LOG_METRICS=OFF in the n1344 / n1452 configs), so the set's MLPerf "
                "number (the median logged train-step time, fixed in reports/train/heldout_public/README.md) does not exist")
REST_LEFT_OUT: dict[tuple[str, ...], tuple[str, str]] = {  # (source, table) or (source, table, row): (clause, why) a capped candidate is not in the rest set
    (SRC_TT_ASYNC, "Llama3 70b on 256 H100s"): ("held out", "not held out any more: all six rows' TPS/GPU are quoted in "
                                                "reports/train/heldout_public/tp_overlap_evidence.md (A1-A3), which was read "
                                                "while mlsys train's TP-overlap residue (calc/comm/exposed.py) was chosen"),
    (SRC_TT_ASYNC, "Llama3 8b on 64 H100s"): ("held out", "not held out any more: all six rows' TPS/GPU are quoted in "
                                              "reports/train/heldout_public/tp_overlap_evidence.md (A4-A6), which was read "
                                              "while mlsys train's TP-overlap residue was chosen"),
    **{("mlcommons/training_results_v4.0", f"NVIDIA/results/{sysn}/gpt3"): ("(c)", _NO_STEP_LOG)
       for sysn in ("eos-dfw_n1344_ngc24.04_nemo", "eos-dfw_n1452_ngc24.04_nemo", "eos_n64_ngc24.04_nemo")},
}
REST_STEPS_ABOUT = ("Per-step times read from the MLPerf Training result logs (result_*.txt) of the 10 MLPerf submissions of "
                    "reports/train/heldout_public_rest, by scripts/validate/published_runs/public_heldout.py --rest --mlperf-mirror, "
                    "with the rule and fields of reports/train/heldout_public/mlperf_step_times.json (every tracked_stats "
                    "line carrying 'train_step_timing', 'train_step_timing in s' or 'train_step_time' of every result file "
                    "counts; per_file: count, median and first value of each run; step_increments: the distinct differences "
                    "between consecutive logged 'step' values).")


def rest_why_out(c: dict[str, Any]) -> tuple[str, str] | None:
    return REST_LEFT_OUT.get((c["source"], c["table"], c["row"])) or REST_LEFT_OUT.get((c["source"], c["table"]))


def measurement_key(run: dict[str, Any]) -> str:
    """RULE.md (f)'s identity of a measurement: model, GPU, GPU count and the layout (precision and global batch in it)."""
    model = run.get("model") or run["config"]
    return json.dumps([model, run.get("overrides"), run["gpu"], run["gpus"], run["layout"]], sort_keys=True)


def build_rest(mirror: Path | None) -> dict[str, Any]:
    """The capped-out candidates of heldout_public that still qualify: the next held-out set, same schema."""
    chosen, dropped = select(CANDIDATES)
    rest = [c for c in dropped if rest_why_out(c) is None]
    steps = mlperf_steps(mirror, [mlperf_row(c) for c in rest if c["family"] == "S5"], REST_STEPS_FILE)
    runs = runs_for(rest, steps, REST_STEPS_FILE)
    seen = {measurement_key(r) for r in runs_for(chosen, mlperf_steps(None, [], STEPS_FILE), STEPS_FILE)}
    for run in runs:
        if measurement_key(run) in seen:  # RULE.md (f): a repeat of a heldout_public run is one measurement
            raise SystemExit(f"public_heldout --rest: {run['name']} repeats a run of heldout_public")
        run |= {"group": run["group"].replace("heldout2-", "rest-", 1), "held_out": REST_HELD_OUT}
    if mirror is not None:
        REST_DIR.mkdir(parents=True, exist_ok=True)
        REST_STEPS_FILE.write_text(json.dumps({"about": REST_STEPS_ABOUT, "submissions": steps}, indent=1) + "\n")
    order = sorted(dropped, key=lambda c: (c["family"], c["sha256"], c["tiebreak"]))
    families = ("S1", "S2", "S3", "S4", "S5")
    return {
        "collected": REST_COLLECTED,
        "rule": RULE_FILE.read_text(),
        "about": ("Third held-out set of published training runs for scripts/validate/train_published.py (reports/train/heldout_public_rest): "
                  "the candidates of reports/train/heldout_public/runs.json that RULE.md's cap left out (selection kept false), "
                  "re-read in full against clauses (a)-(f), collected 2026-12-03 before any prediction was made for them. "
                  "Same schema as reports/train/heldout_public/runs.json; `selection.candidates` lists the 40 capped rows, "
                  "`kept` saying which are runs here, and `left_out` says why the others are not. Layout fields: those "
                  "train_published.py passes (tp, pp, dp, cp, ep, vp, micro_batch, global_batch, seq, sp, recompute, zero, "
                  "dtype, fp8_recipe, fp8_params, attention, framework, overlap, the pipeline split fields, schedule, dropout, "
                  "loss)."),
        "selection": {"drawn_from": "reports/train/heldout_public/runs.json selection.candidates with kept false (RULE.md's cap)",
                      "candidates": [{k: c[k] for k in ("family", "key", "sha256", "row")} | {"kept": c in rest} for c in order],
                      "counts": {f: {"capped": sum(c["family"] == f for c in dropped), "kept": sum(c["family"] == f for c in rest)}
                                 for f in families}},
        "left_out": [{"what": f"{c['source']} | {c['table']} | {c['row']}", "clause": why[0], "why": why[1]}
                     for c in order if (why := rest_why_out(c)) is not None],
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlperf-mirror", type=Path, help="folder holding mlcommons+training_results_v*/repo git directories")
    ap.add_argument("--rest", action="store_true",
                    help="write reports/train/heldout_public_rest/runs.json: the candidates the cap left out that still qualify")
    ap.add_argument("--out", type=Path, help="default: runs.json of reports/train/heldout_public (or _rest with --rest)")
    args = ap.parse_args()
    data = build_rest(args.mlperf_mirror) if args.rest else build(args.mlperf_mirror)
    args.out = args.out or (REST_DIR if args.rest else OUT_DIR) / "runs.json"
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(data['runs'])} runs -> {args.out}; counts {data['selection']['counts']}")


if __name__ == "__main__":
    main()
