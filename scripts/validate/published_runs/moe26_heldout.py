"""Writes reports/train/heldout_moe26/runs.json: held-out published runs of 2026 (Megatron-Bridge after 26.02, ...).

    python scripts/validate/published_runs/moe26_heldout.py                  # from the stored pages
    python scripts/validate/published_runs/moe26_heldout.py --mirror DIR     # first check them against a git mirror

The inclusion rule is reports/train/heldout_moe26/RULE.md (committed before any table of the sources was read). Source
B: every DGX-H100 / DGX-H200 pre-training row of a Megatron-Bridge release after 26.02 in docs/performance-summary.md
and docs/performance-summary-archive.md at PAGE_COMMIT (stored byte for byte beside runs.json). A row is a run unless
RULE.md (a) (a model mlsys train cannot express), (e) (a layout an existing set holds) or (f) (the layout of an
earlier release's row) leaves it out; each one left out is listed in `left_out` with its clause. Sources A and P are
are read by `automodel_rows` (AutoModel's page at AUTOMODEL_COMMIT, stored beside runs.json) and
`P_LEFT_OUT`. Nothing here runs `mlsys train`/`plan` or predicts anything.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bridge_mlperf6_heldout import COMMON_WHY, CORE, FP8_WHY, QWEN_NOTE, core_key, write_set  # noqa: E402
from public_heldout import layout, measurement_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT_DIR = ROOT / "reports" / "train" / "heldout_moe26"
RULE_FILE = OUT_DIR / "RULE.md"
COLLECTED = "2026-12-04"
HELD_OUT = "held out: collected 2026-12-04 (reports/train/heldout_moe26), before any prediction of it was made"

BRIDGE_REPO = "github.com/NVIDIA-NeMo/Megatron-Bridge"
PAGE_COMMIT = "4ab94dfad36641cabdeb96452b21bf676aac4772"  # 2026-08-11 "docs: update performance summary for 26.08"
PAGES = {"docs/performance-summary.md": OUT_DIR / "megatron_bridge_performance_summary.md",
         "docs/performance-summary-archive.md": OUT_DIR / "megatron_bridge_performance_summary_archive.md"}
SEEN_RELEASES = ("25.09", "25.11", "26.02")  # read by heldout_public and heldout_bridge_mlperf6
RELEASE_ORDER = ("26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08")
# the Megatron-Bridge tag a release's perf configs are read at: the release tag published just before its table
RELEASE_TAGS = {"26.04": ("v0.4.0", "0fbfe7d3e970fbd75c1281d71cee586ce1f3df5e")}
EXISTING = ("heldout_public", "heldout_public_rest", "heldout_dgxc", "heldout_bridge_mlperf6", "llm_foundry_fitset")
MODELS = {"LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b", "GPT OSS 120B": "gpt-oss-120b",
          "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b", "DeepSeekV3": "deepseek-v3"}
NOT_EXPRESSIBLE = {  # RULE.md (a): models of the tables mlsys train has no spec for and no override can make
    "Nemotron_3_Nano": "Nemotron 3 Nano is a hybrid of Mamba-2, attention and MoE layers; mlsys train prices transformer "
                       "layers only and no built-in's config plus overrides expresses a Mamba-2 layer",
}
SYSTEMS = {"DGX-H100": ("H100-SXM", "hgx-h100"), "DGX-H200": ("H200-SXM", "hgx-h200")}


# ---------------------------------------------------------------------------------------------- the pages
def page_texts(mirror: Path | None) -> dict[str, str]:
    """The two pages at PAGE_COMMIT: the stored copies, each checked against the mirror's git object when one is given."""
    return {path: stored_page(file, mirror, "NVIDIA-NeMo+Megatron-Bridge", PAGE_COMMIT, path) for path, file in PAGES.items()}


def stored_page(file: Path, mirror: Path | None, repo: str, commit: str, path: str) -> str:
    """A stored copy of a source page, checked byte for byte against the mirror's git object when a mirror is given."""
    text = file.read_text()
    if mirror is not None:
        live = subprocess.run(["git", "-C", str(mirror / repo / "repo"), "show", f"{commit}:{path}"], capture_output=True,
                              text=True, check=True).stdout
        if live != text:
            raise SystemExit(f"{file} differs from {path} at {commit}")
    return text


def pretraining_rows(path: str, text: str) -> list[dict[str, Any]]:
    """Every row of a 'Pre-Training Performance' table of a release after 26.02, any system, with release and model."""
    rows: list[dict[str, Any]] = []
    release = section = model = header = None
    for line in text.splitlines():
        if line.startswith("## ") and "NeMo Container" in line:
            release, section = line.split()[1], None
        elif line.startswith("### "):
            section = line[4:].strip()
        elif line.startswith("#### Model:"):
            model, header = line.split(":", 1)[1].strip(), None
        elif line.startswith("|") and section == "Pre-Training Performance" and release not in SEEN_RELEASES + (None,):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(cells[0]) <= set("-"):
                rows.append({"release": release, "Model": model, "page": path, **dict(zip(header, cells))})
    return rows


def candidate_rows(texts: dict[str, str]) -> list[dict[str, Any]]:
    """Every H100 / H200 pre-training row of the two pages, earliest release first (RULE.md (f))."""
    rows = [r for path, text in texts.items() for r in pretraining_rows(path, text) if r["System"] in SYSTEMS]
    unknown = {r["release"] for r in rows} - set(RELEASE_ORDER)
    if unknown:
        raise SystemExit(f"moe26_heldout: releases {sorted(unknown)} are not in RELEASE_ORDER")
    return sorted(rows, key=lambda r: RELEASE_ORDER.index(r["release"]))


def _int(cell: str) -> int:
    return 1 if cell == "n/a" else int(cell)


# ---------------------------------------------------------------------------------------------- layouts
def stated_layout(row: dict[str, Any]) -> dict[str, Any]:
    """The layout the row's cells state (TP, PP, CP, VP, EP, FSDP, batches, precision), before any recipe is read."""
    tp, pp, cp, vp, ep = (_int(row[k]) for k in ("TP", "PP", "CP", "VP", "EP"))
    gpus = int(row["#-GPUs"])
    fp8 = row["Precision"].startswith("FP8")
    lay = layout(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), vp=vp, micro_batch=int(row["MBS"]),
                 global_batch=int(row["GBS"]), seq=int(row["Sequence Length"]), dtype="fp8" if fp8 else "bf16",
                 **({"fp8_recipe": "current", "fp8_params": True} if fp8 else {}))
    if ep > 1:
        lay["ep"] = ep
    if row.get("FSDP", "0") not in ("0", "n/a"):
        lay["zero"] = 3
    return lay


def recipe_layout(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], list[str], str, str]:
    """(layout, assumed_why, not_priced, layout_from, notes) of a qualifying row, read from its release's perf configs."""
    rel, model = row["release"], MODELS[row["Model"]]
    lay = stated_layout(row) | {"attention": "flash"}
    why = dict(COMMON_WHY) | (FP8_WHY if lay["dtype"] == "fp8" else {})
    if (model, rel) != ("qwen3-30b-a3b", "26.04"):
        raise KeyError(f"no recipe reading for {model} {rel}")
    tag, commit = RELEASE_TAGS[rel]
    src = (f"{BRIDGE_REPO} scripts/performance/configs/qwen/qwen3_workload_base_configs.py "
           f"QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 at {tag} ({commit[:8]}), with qwen3_llm_pretrain.py "
           "(qwen3_30b_a3b_pretrain_config_h100) and src/megatron/bridge/recipes/qwen/qwen3_moe.py")
    lay |= {"etp": 1, "sp": False, "overlap": "dp", "loss": "fused", "recompute": "none"}
    why |= {"overlap": "dp: overlap_grad_reduce / overlap_param_gather of the recipe; TP and PP are 1 and the preset sets "
                       "moe_a2a_overlap=False (the expert all-to-all stays exposed); how much the gradient reduce hides "
                       "is not published"}
    not_priced = ["the HybridEP dispatcher (moe_flex_dispatcher_backend 'hybridep', moe_token_dispatcher_type 'flex' in "
                  "the perf config); mlsys train prices an all-to-all over NCCL"]
    notes = ("Qwen3-30B-A3B (48 layers, 128 experts, 8 a token; built-in qwen3-30b-a3b). EP 16 over two nodes: the "
             "expert all-to-all crosses InfiniBand. ETP 1 (BASE_QWEN3_30B_A3B_CONFIG). " + QWEN_NOTE)
    lay = {k: lay[k] for k in sorted(lay, key=lambda k: (k not in CORE, k))}
    notes = (f"DGX-H100 (8 x H100 SXM, NVLink 4, 8 x 400 Gb/s IB a node): hgx-h100. The {rel} table of "
             f"{row['page']} at {PAGE_COMMIT[:9]}: GPUs {row['#-GPUs']}, GBS {row['GBS']}, MBS {row['MBS']}, seq "
             f"{row['Sequence Length']}, FSDP {row.get('FSDP', 'not printed')}, TP {row['TP']}, PP {row['PP']}, CP {row['CP']}, "
             f"VP {row['VP']}, EP {row['EP']}; DP {lay['dp']} = GPUs / (TP x PP x CP). " + notes
             + "The page: MoE benchmarks force-balance the token distribution among experts and are token-dropless.")
    return lay, why, not_priced, src, notes


def selection_key(row: dict[str, Any]) -> str:
    return (f"NVIDIA-NeMo/Megatron-Bridge {row['page']}@{PAGE_COMMIT[:9]}|{row['release']} {row['System']}|{row['Model']}|"
            f"{row['#-GPUs']}|{stated_layout(row)['dtype']}|{row['GBS']}")


def run_for(row: dict[str, Any]) -> dict[str, Any]:
    rel, gpus, prec = row["release"], int(row["#-GPUs"]), row["Precision"]
    gpu, cluster = SYSTEMS[row["System"]]
    lay, why, not_priced, src, notes = recipe_layout(row)
    table = (f"{rel} NeMo Container, Pre-Training Performance, Model: {row['Model']}, row {row['System']} {prec} "
             f"(GPUs {gpus}, GBS {row['GBS']}), column 'Tokens / sec / GPU'")
    key = selection_key(row)
    return {
        "name": f"{row['Model'].replace('_', ' ')}, {gpus} {gpu.split('-')[0]}, {prec} (NeMo {rel}, Megatron-Bridge)",
        "group": f"bridge-{rel}-{gpu.split('-')[0].lower()}", "gpu": gpu, "model": MODELS[row["Model"]],
        "cluster": cluster, "gpus": gpus, "layout": lay, "assumed": sorted(why), "assumed_why": why,
        "published": {"metric": "tokens_per_s_per_gpu", "value": int(row["Tokens / sec / GPU"])},
        "also_published": {"model_tflops_per_gpu": int(row["Model TFLOP / sec / GPU"]),
                           "note": "the same row's Model TFLOP/sec/GPU (not for scoring)"},
        "measurement": True,
        "flop_convention": (f"none needed: tokens/s/GPU, compared as the step time it implies "
                            f"({row['GBS']} x {row['Sequence Length']} / (value x {gpus}) s)"),
        "citation": {"paper": f"NVIDIA Megatron-Bridge, Performance summary ({BRIDGE_REPO} {row['page']})",
                     "table": table, "repo": BRIDGE_REPO, "path": row["page"], "commit": PAGE_COMMIT,
                     "url": f"https://{BRIDGE_REPO}/blob/{PAGE_COMMIT}/{row['page']}", "layout_from": src},
        "notes": notes, "not_priced": not_priced, "held_out": HELD_OUT,
        "selection": {"family": "B", "key": key, "sha256": hashlib.sha256(key.encode()).hexdigest(),
                      "row": f"{row['Model']} {prec}"},
    }


# ---------------------------------------------------------------------------------------------- existing sets
def existing_runs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name in EXISTING:
        out += [(name, r) for r in json.loads((ROOT / "reports/train" / name / "runs.json").read_text())["runs"]]
    return out + [("published_runs.json", r) for r in json.loads((ROOT / "reports/train/published_runs.json").read_text())["runs"]]


def stated_key(model: str, gpu: str, gpus: int, lay: dict[str, Any]) -> str:
    return core_key({"model": model, "gpu": gpu, "gpus": gpus, "layout": lay})


def repeats(model: str, gpu: str, gpus: int, lay: dict[str, Any], existing: list[tuple[str, dict[str, Any]]]) -> str | None:
    """RULE.md (e) on the stated fields (assumed options left out), and on public_heldout's whole-layout key."""
    key = stated_key(model, gpu, gpus, lay)
    for name, r in existing:
        if core_key(r) == key or ("gpu" in r and measurement_key(r) == measurement_key(
                {"model": model, "gpu": gpu, "gpus": gpus, "layout": lay})):
            return f"{name}: {r['name']}"
    return None


# ---------------------------------------------------------------------------------------------- source A: NeMo AutoModel
AUTOMODEL_REPO, AUTOMODEL_PATH = "github.com/NVIDIA-NeMo/Automodel", "docs/performance-summary.mdx"
AUTOMODEL_COMMIT = "36044ad3d139363fb6c73c24af2e7c6b65ec52f6"  # 2026-08-22, the newest snapshot; the page last changed at cb97654
AUTOMODEL_FILE = OUT_DIR / "automodel_performance_summary.mdx"
AUTOMODEL_MODELS = {"Qwen3 MoE 30B": "qwen3-30b-a3b", "GPT-OSS 20B": "gpt-oss-20b", "GPT-OSS 120B": "gpt-oss-120b",
                    "Llama3 70B": "llama3.1-70b", "DeepSeek V3 671B": "deepseek-v3"}
AUTOMODEL_OUT = {  # RULE.md (a) and (d) for the table's other rows
    "Nemotron V3": ("(a)", "Nemotron 3 (Nano, Super, Ultra) is a hybrid of Mamba-2, attention and MoE layers; no built-in's "
                           "config plus overrides expresses a Mamba-2 layer"),
    "Kimi K2": ("(a)", "no built-in spec, and the table gives no config (the recipe loads moonshotai/Kimi-K2 from the hub)"),
    "DeepSeek V3 671B": ("(d)", "PP 4 x VP 8 = 32 pipeline stages for DeepSeek-V3's 61 decoder layers: torch pipelining's "
                                "uneven split (layers_per_stage in the recipe), which mlsys train cannot express (its splits "
                                "are even over pp x vp, or Megatron-LM's first/last-stage and embedding/loss options)"),
}
RECIPE_DIR = "examples/benchmark/configs"
# Per row: the recipe read, at the earliest commit at or after the row's last edit whose recipe agrees with the table on
# every field both give (GBS, LBS, PP, EP where the table gives one), and what it says beyond the table.
AUTOMODEL_RECIPES: dict[str, dict[str, Any]] = {
    "Qwen3 MoE 30B": {
        "row_commit": "8d9bfb90e3d8a45d45ab1a9f12ece42b9d1bb6a9", "commit": "8d9bfb90e3d8a45d45ab1a9f12ece42b9d1bb6a9",
        "path": f"{RECIPE_DIR}/qwen3_moe_30b_te_deepep.yaml", "ep_from_table": True, "recompute": "full",
        "attention": ("flash", "flash: the recipe's backend attn 'te' (Transformer Engine's DotProductAttention, cuDNN fused "
                               "attention on H100)"),
        "read": "GBS 512, local batch 4, TP 1, PP 1, CP 1, EP 8, fsdp2, activation_checkpointing true, attn/linear/rms_norm "
                "te, fake_balanced_gate true, MaskedCrossEntropy fp32_upcast false, Adam",
    },
    "GPT-OSS 20B": {
        "row_commit": "89e3a9fdd604bc3e70240f2fe4c6a9e1ce76cbd0", "commit": "89e3a9fdd604bc3e70240f2fe4c6a9e1ce76cbd0",
        "path": f"{RECIPE_DIR}/gptoss_20b_te_deepep.yaml", "ep": 8, "recompute": "full",
        "attention": ("flash2", "flash2: the recipe's backend attn 'flex' (PyTorch FlexAttention, Triton-generated kernels "
                                "for GPT-OSS's sliding window and sinks), taken as one of FlashAttention-2's generation; "
                                "its rate relative to flash2 on H100 is not measured here"),
        "read": "GBS 256, local batch 2, TP 1, PP 1, CP 1, EP 8 (the table prints '-'), fsdp2, activation_checkpointing "
                "true, attn flex, linear/rms_norm te, fake_balanced_gate true, MaskedCrossEntropy fp32_upcast false, Adam",
    },
    "GPT-OSS 120B": {
        "row_commit": "89e3a9fdd604bc3e70240f2fe4c6a9e1ce76cbd0", "commit": "2c236e081e49e97ddaff4202a8556a30a664a362",
        "path": f"{RECIPE_DIR}/gptoss_120b_te_deepep.yaml", "ep": 64, "recompute": "none",
        "attention": ("flash2", "flash2: the recipe's backend attn 'flex' (PyTorch FlexAttention), as for GPT-OSS 20B"),
        "read": "GBS 512, local batch 2, TP 1, PP 1, CP 1, EP 64 (the table prints '-'), fsdp2, activation_checkpointing "
                "false, attn flex, linear/rms_norm te, fake_balanced_gate true, MaskedCrossEntropy fp32_upcast false, "
                "Adam. At the row's own commit 89e3a9f the recipe gave GBS 256, PP 2, EP 16 (not the table's GBS 512, "
                "PP 1); 2c236e0 (2025-10-08) is the first that agrees",
    },
    "Llama3 70B": {
        "row_commit": "2013a4dd6e932c4e4f48ca6b4a3fc295cdd64e33", "commit": "2013a4dd6e932c4e4f48ca6b4a3fc295cdd64e33",
        "path": "examples/llm_pretrain/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml", "recompute": "full",
        "attention": ("flash2", "flash2: the recipe's attn_implementation 'sdpa' (PyTorch SDPA, no backend pinned), as "
                                "heldout_public prices torchtitan's SDPA"),
        "read": "meta-llama/Llama-3.1-70B, 8 nodes, GBS 128, local batch 1, TP 1, CP 2, PP 1, fsdp2 (dp 32), "
                "activation_checkpointing true, enable_fsdp2_prefetch true, enable_compile true, attn sdpa, rms_norm "
                "torch_fp32, MaskedCrossEntropy, TE FusedAdam",
    },
}


def automodel_rows(text: str) -> list[dict[str, Any]]:
    """The rows of the page's 'Pre-Training Performance' table (System: DGX-H100, BF16)."""
    rows: list[dict[str, Any]] = []
    section, header = None, None
    for line in text.splitlines():
        if line.startswith("## "):
            section, header = line[3:].strip(), None
        elif line.startswith("|") and section == "Pre-Training Performance":
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(cells[0]) <= set("-:"):
                rows.append(dict(zip(header, cells)))
    return rows


def automodel_run(row: dict[str, Any]) -> dict[str, Any]:
    name, rec = row["Model"], AUTOMODEL_RECIPES[row["Model"]]
    gpus, gbs, mbs, seq = int(row["#GPUs"]), int(row["GBS"]), int(row["MBS"]), int(row["Seq Length"])
    tp, pp, cp = int(row["TP"]), int(row["PP"]), int(row["CP"])
    ep = int(row["EP"]) if rec.get("ep_from_table") else rec.get("ep")
    lay = layout(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), micro_batch=mbs, global_batch=gbs, seq=seq, dtype="bf16",
                 zero=3, framework="torch", recompute=rec["recompute"], sp=False, attention=rec["attention"][0])
    if ep:
        lay |= {"ep": ep, "etp": 1}
    lay = {k: lay[k] for k in sorted(lay, key=lambda k: (k not in CORE, k))}
    why = {"attention": rec["attention"][1],
           "zero": f"3: fsdp2 (fully_shard) over the FSDP {row['FSDP']} ranks of the table (dp x cp)"}
    if ep and not rec.get("ep_from_table"):
        why["ep"] = f"{ep}: the recipe's ep_size; the table prints '-' while naming DeepEP among the row's kernels"
    model = AUTOMODEL_MODELS[name]
    if model == "llama3.1-70b":
        why["model"] = "llama3.1-70b: the table says 'Llama3 70B'; the recipe loads meta-llama/Llama-3.1-70B"
    not_priced = ([f"the {'DeepEP' if 'DeepEP' in row['Kernel Optimizations'] else ''} dispatcher (the row's kernels: "
                   f"{row['Kernel Optimizations']}); mlsys train prices an all-to-all over NCCL"] if ep else [])
    if model == "llama3.1-70b":
        not_priced = ["torch.compile of the model (enable_compile) and FSDP2 weight prefetch (enable_fsdp2_prefetch); mlsys "
                      "train's torch framework prices eager kernels"]
    src = (f"{AUTOMODEL_REPO} {rec['path']} at {rec['commit'][:9]} (the row last changed at {rec['row_commit'][:9]}): "
           + rec["read"])
    table = (f"Pre-Training Performance, System: DGX-H100, Precision: BF16, row {name} (GPUs {gpus}, GBS {gbs}), column "
             "'Time per Global Step (s)'")
    key = f"NVIDIA-NeMo/Automodel {AUTOMODEL_PATH}@{AUTOMODEL_COMMIT[:9]}|DGX-H100|{name}|{gpus}|bf16|{gbs}"
    notes = (f"DGX-H100 (8 x H100 SXM, NVLink 4, 8 x 400 Gb/s IB a node): hgx-h100. NeMo AutoModel (PyTorch, FSDP2) "
             f"pre-training benchmark: GPUs {gpus}, GBS {gbs}, MBS {mbs}, LBS {row['LBS']}, GA {row['GA']}, seq {seq}, TP "
             f"{tp}, PP {pp}, CP {cp}, EP {row['EP']}, VP {row['VP']}, FSDP {row['FSDP']}; kernels "
             f"{row['Kernel Optimizations']}. Mock data; the MoE recipes set fake_balanced_gate (tokens spread evenly over "
             "the experts, which top-k pricing assumes).")
    return {
        "name": f"{name}, {gpus} H100, BF16 (NeMo AutoModel)", "group": "automodel-h100", "gpu": "H100-SXM", "model": model,
        "cluster": "hgx-h100", "gpus": gpus, "layout": lay, "assumed": sorted(why), "assumed_why": why,
        "published": {"metric": "step_time_s", "value": float(row["Time per Global Step (s)"])},
        "also_published": {"model_tflops_per_gpu": float(row["Model TFLOPs/sec/GPU"]),
                           "tokens_per_s_per_gpu": float(row["Tokens/sec/GPU"].replace(",", "")),
                           "note": "the same row's Model TFLOPs/sec/GPU and Tokens/sec/GPU (not for scoring)"},
        "measurement": True, "flop_convention": "none needed: the table's time per global step",
        "citation": {"paper": f"NVIDIA NeMo AutoModel, Performance Summary ({AUTOMODEL_REPO} {AUTOMODEL_PATH}; "
                              "docs.nvidia.com/nemo/automodel/latest/performance-summary.html)",
                     "table": table, "repo": AUTOMODEL_REPO, "path": AUTOMODEL_PATH, "commit": AUTOMODEL_COMMIT,
                     "url": f"https://{AUTOMODEL_REPO}/blob/{AUTOMODEL_COMMIT}/{AUTOMODEL_PATH}", "layout_from": src},
        "notes": notes, "not_priced": not_priced, "held_out": HELD_OUT,
        "selection": {"family": "A", "key": key, "sha256": hashlib.sha256(key.encode()).hexdigest(), "row": name},
    }


def automodel_text(mirror: Path | None) -> str:
    return stored_page(AUTOMODEL_FILE, mirror, "NVIDIA-NeMo+Automodel", AUTOMODEL_COMMIT, AUTOMODEL_PATH)


P_LEFT_OUT = {
    "what": "Liu et al. 2025, MoE Parallel Folding, arXiv 2504.14960 (source P): Tables 2-5, 101 rows on DGX H100 (Eos)",
    "clause": "(c) (d)",
    "why": "read from a markdown conversion of the paper in the stored-file index (the stored arxiv.org/html/2504.14960v2 "
           "page returns its beginning only; the conversion's repository is not shown, and its version is probably v2, "
           "not certainly). (c): the paper gives MFU's denominator (989.5 TFLOP/s BF16) but not how a model FLOP is "
           "counted, so no row's measurement can be turned into a step time without assuming a formula. (d): no row "
           "states the micro batch or VP, no recipe is given, and Table 4's rows print no layout. Every row fails both; "
           "the benchmarks also drop tokens (capacity factor 1), which top-k pricing does not model",
}


def build(mirror: Path | None) -> dict[str, Any]:
    existing = existing_runs()
    runs: list[dict[str, Any]] = []
    left_out: list[dict[str, str]] = []
    seen: dict[str, str] = {}
    for row in candidate_rows(page_texts(mirror)):
        gpu = SYSTEMS[row["System"]][0]
        what = (f"{BRIDGE_REPO} {row['page']}@{PAGE_COMMIT[:9]} | {row['release']} {row['System']} | {row['Model']} "
                f"{row['Precision']} {row['#-GPUs']} GPUs GBS {row['GBS']}")
        if row["Model"] in NOT_EXPRESSIBLE:
            left_out.append({"what": what, "clause": "(a)", "why": NOT_EXPRESSIBLE[row["Model"]]})
            continue
        model, lay = MODELS[row["Model"]], stated_layout(row)
        key = stated_key(model, gpu, int(row["#-GPUs"]), lay)
        if (hit := repeats(model, gpu, int(row["#-GPUs"]), lay, existing)) is not None:
            left_out.append({"what": what, "clause": "(e)", "why": f"the same model, GPU, GPU count and layout as {hit}"})
        elif key in seen:
            left_out.append({"what": what, "clause": "(f)", "why": f"the layout of {seen[key]}, an earlier release"})
        else:
            run = run_for(row)
            seen[key] = run["name"]
            runs.append(run)
    for row in automodel_rows(automodel_text(mirror)):
        what = f"{AUTOMODEL_REPO} {AUTOMODEL_PATH}@{AUTOMODEL_COMMIT[:9]} | DGX-H100 BF16 | {row['Model']} {row['#GPUs']} GPUs"
        out = next((v for k, v in AUTOMODEL_OUT.items() if row["Model"].startswith(k)), None)
        if out is not None:
            left_out.append({"what": what, "clause": out[0], "why": out[1]})
            continue
        run = automodel_run(row)
        key = stated_key(run["model"], run["gpu"], run["gpus"], run["layout"])
        if (hit := repeats(run["model"], run["gpu"], run["gpus"], run["layout"], existing)) is not None:
            left_out.append({"what": what, "clause": "(e)", "why": f"the same model, GPU, GPU count and layout as {hit}"})
        elif key in seen:
            left_out.append({"what": what, "clause": "(f)", "why": f"the layout of {seen[key]}"})
        else:
            seen[key] = run["name"]
            runs.append(run)
    left_out.append(P_LEFT_OUT)
    runs.sort(key=lambda r: r["selection"]["sha256"])
    return {
        "collected": COLLECTED,
        "rule": RULE_FILE.read_text(),
        "about": ("Held-out published training runs for scripts/validate/train_published.py (reports/train/heldout_moe26): "
                  f"Megatron-Bridge's H100 / H200 pre-training rows of the releases after 26.02 at {PAGE_COMMIT[:9]} and NeMo "
                  f"AutoModel's DGX-H100 pre-training rows at {AUTOMODEL_COMMIT[:9]} not in any existing set, collected "
                  "2026-12-04 before any prediction was made for them. Same schema as "
                  "reports/train/heldout_bridge_mlperf6/runs.json."),
        "selection": {"drawn_from": f"B: {BRIDGE_REPO} docs/performance-summary.md and docs/performance-summary-archive.md "
                                    f"@{PAGE_COMMIT[:9]} (releases {', '.join(RELEASE_ORDER)}); A: {AUTOMODEL_REPO} "
                                    f"{AUTOMODEL_PATH}@{AUTOMODEL_COMMIT[:9]}; P: arXiv 2504.14960 (no row qualifies)",
                      "cap": "none applied: fewer than 40 rows qualified",
                      "counts": {f: sum(r["selection"]["family"] == f for r in runs) for f in ("B", "A", "P")}},
        "left_out": left_out,
        "runs": runs,
    }


def main() -> None:
    write_set(build, __doc__, OUT_DIR / "runs.json")


if __name__ == "__main__":
    main()
