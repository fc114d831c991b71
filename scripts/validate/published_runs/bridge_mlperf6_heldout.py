"""Writes reports/train/heldout_bridge_mlperf6/runs.json: held-out published runs of Megatron-Bridge's newer releases.

    python scripts/validate/published_runs/bridge_mlperf6_heldout.py                      # from the stored page
    python scripts/validate/published_runs/bridge_mlperf6_heldout.py --mirror DIR         # re-read the page from a git mirror

The inclusion rule is reports/train/heldout_bridge_mlperf6/RULE.md (committed before any table or log was read).
The DGX-H100 pre-training rows of the 25.11 and 26.02 tables of Megatron-Bridge's docs/performance-summary.md at
BRIDGE_COMMIT are parsed from the stored copy of the page (megatron_bridge_performance_summary.md, byte for byte the
file at that commit; --mirror checks it against the git object first). Every row is a candidate; the rows RULE.md
(e) leaves out (a layout an existing set holds) are listed in `left_out`, with the MLPerf submissions that were
left out. Layouts come from the release's perf configs (LAYOUT). Nothing here runs `mlsys train`/`plan` or
predicts anything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from public_heldout import layout, measurement_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
OUT_DIR = ROOT / "reports" / "train" / "heldout_bridge_mlperf6"
RULE_FILE = OUT_DIR / "RULE.md"
PAGE_FILE = OUT_DIR / "megatron_bridge_performance_summary.md"
COLLECTED = "2026-12-03"
HELD_OUT = "held out: collected 2026-12-03 (reports/train/heldout_bridge_mlperf6), before any prediction of it was made"

BRIDGE_REPO, BRIDGE_PATH = "github.com/NVIDIA-NeMo/Megatron-Bridge", "docs/performance-summary.md"
BRIDGE_COMMIT = "df0289c180dd20ff26933455c7a0a11084f6a36f"  # 2026-02-23 "26.02 perf summary"
RELEASE_TAGS = {"25.11": ("v0.2.0", "7af9601c9da746d21481194356295bfe23df3737"),
                "26.02": ("v0.3.0", "21b02e0cfb2f8ff907e0d8baee0c5205876c6812")}
MLPERF51_COMMIT = "441d65f4445cd59687466533fd9f55399136e7a4"
MLPERF60_FORK, MLPERF60_COMMIT = "Richardyu114/training_results_v6.0", "eabf23a07b2a0c60a289ff871dc3a46fff0d0421"
EXISTING = ("heldout_public", "heldout_public_rest", "heldout_dgxc", "llm_foundry_fitset")
MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b", "GPT OSS 120B": "gpt-oss-120b",
          "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b"}
CORE = ("tp", "pp", "cp", "vp", "ep", "dp", "micro_batch", "global_batch", "seq", "dtype")


# ---------------------------------------------------------------------------------------------- the page
def page_text(mirror: Path | None) -> str:
    """The page at BRIDGE_COMMIT: the stored copy, checked against the mirror's git object when one is given."""
    text = PAGE_FILE.read_text()
    if mirror is not None:
        repo = mirror / "NVIDIA-NeMo+Megatron-Bridge" / "repo"
        live = subprocess.run(["git", "-C", str(repo), "show", f"{BRIDGE_COMMIT}:{BRIDGE_PATH}"], capture_output=True,
                              text=True, check=True).stdout
        if live != text:
            raise SystemExit(f"{PAGE_FILE} differs from {BRIDGE_PATH} at {BRIDGE_COMMIT}")
    return text


def h100_rows(text: str) -> list[dict[str, Any]]:
    """Every row of every 'System: DGX-H100' pre-training table of a release other than 25.09, with its release."""
    rows, release, system, header = [], None, None, None
    for line in text.splitlines():
        if line.startswith("## ") and "NeMo Container" in line:
            release = line.split()[1]
        elif line.startswith("#### System:"):
            system, header = line.split(":", 1)[1].strip(), None
        elif line.startswith("|") and system == "DGX-H100" and release != "25.09":  # 25.09: heldout_public's
            cells = [c.strip() for c in line.strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(cells[0]) <= set("-"):
                rows.append({"release": release, **dict(zip(header, cells))})
    return rows


def _int(cell: str) -> int:
    return 1 if cell == "n/a" else int(cell)


# ---------------------------------------------------------------------------------------------- layouts
def _cfg(release: str, path: str, name: str) -> str:
    tag, commit = RELEASE_TAGS[release]
    return f"{BRIDGE_REPO} {path} {name} at {tag} ({commit[:8]})"


def _preset(release: str, at_2511: tuple[str, str], at_2602: tuple[str, str]) -> str:
    """The perf preset a release's row was run with: (path, name) at v0.2.0 for 25.11, else at v0.3.0 (renamed there)."""
    return _cfg(release, *(at_2511 if release == "25.11" else at_2602))


FP8_WHY = {"fp8_recipe": "current: the table's FP8-CS (Transformer Engine current scaling, the fp8_cs preset of "
                         "scripts/performance/utils/helpers.py get_precision_config)",
           "fp8_params": "true: fp8_param_gather True in bf16_with_fp8_current_scaling_mixed "
                         "(src/megatron/bridge/training/mixed_precision.py, the same at v0.2.0 and v0.3.0); that the "
                         "perf scripts keep it for these rows is not printed"}
COMMON_WHY = {"zero": "1: the recipe's use_distributed_optimizer True (FSDP 0 in the table), encoded as published_runs.json "
                      "encodes Megatron's distributed optimizer",
              "attention": "flash: Megatron-Bridge leaves Transformer Engine's default backend (cuDNN fused attention on H100), "
                           "as published_runs.json prices its 25.11 rows"}
LOSS_NOTE = ("The perf scripts set cross_entropy_fusion_impl 'te' for every recipe (utils/helpers.py at v0.2.0, "
             "utils/overrides.py at v0.3.0): --loss fused. ")
QWEN_NOTE = ("set_qwen3_common_configs: no recomputation, moe_router_fusion, moe_router_force_load_balancing (token dropless "
             "with balanced experts, which is what top-k pricing assumes), bias_activation_fusion. " + LOSS_NOTE)
OSS_NOTE = ("GPT-OSS 120B (36 layers, 128 experts, 4 a token, alternating sliding-window / full attention; built-in gpt-oss-120b). "
            "gpt_oss_llm_pretrain.py sets moe_router_fusion and moe_router_force_load_balancing (token dropless, balanced). "
            + LOSS_NOTE)


def layout_for(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], list[str], str, str]:
    """(layout, assumed_why, not_priced, layout_from, notes) of a table row, read from its release's perf configs."""
    rel, model = row["release"], MODELS[row["Model"]]
    tp, pp, cp, vp, ep = (_int(row[k]) for k in ("TP", "PP", "CP", "VP", "EP"))
    gpus, gbs, mbs, seq = int(row["#-GPUs"]), int(row["GBS"]), int(row["MBS"]), int(row["Sequence Length"])
    fp8 = row["Precision"].startswith("FP8")
    lay = layout(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), vp=vp, micro_batch=mbs, global_batch=gbs, seq=seq,
                 dtype="fp8" if fp8 else "bf16", **({"fp8_recipe": "current", "fp8_params": True} if fp8 else {}))
    lay["attention"] = "flash"
    if ep > 1:
        lay["ep"] = ep
    why, not_priced = dict(COMMON_WHY) | (FP8_WHY if fp8 else {}), []
    if model == "qwen3-235b-a22b":
        src = _preset(rel, ("scripts/performance/configs/qwen3/workload_base_configs.py", "QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG"),
                      ("scripts/performance/configs/qwen/qwen3_workload_base_configs.py", "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2"))
        src += ", with qwen3_llm_pretrain.py and src/megatron/bridge/recipes/qwen/qwen3_moe.py (qwen3_235b_a22b_pretrain_config)"
        lay |= {"etp": 1, "sp": True, "overlap": "dp,tp,pp,ep", "loss": "fused",
                "account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
        why |= {"sp": "true: the recipe's sequence_parallel True (TP 2); the perf config does not change it",
                "overlap": "dp,tp,pp,ep: overlap_grad_reduce / overlap_param_gather, CommOverlapConfig(tp_comm_overlap=True), "
                           "the pipeline's p2p overlap, and moe_a2a_overlap=True in the perf config (the expert all-to-all "
                           "overlapped with the other micro-batch's compute); how much each hides is not published"}
        notes = ("Qwen3-235B-A22B (94 layers, 128 experts, 8 a token; built-in qwen3-235b-a22b). The recipe counts the embedding and "
                 "the loss as layers of the split (94 + 2 = 96 slots over PP 8 x VP 4 = 32 chunks, 3 each). ETP 1. " + QWEN_NOTE)
    elif model == "qwen3-30b-a3b":
        src = (_cfg(rel, "scripts/performance/configs/qwen/qwen3_workload_base_configs.py", "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1")
               + ", with qwen3_llm_pretrain.py and src/megatron/bridge/recipes/qwen/qwen3_moe.py (qwen3_30b_a3b_pretrain_config)")
        lay |= {"sp": False, "overlap": "dp,pp,ep", "loss": "fused"}
        why |= {"overlap": "dp,pp,ep: overlap_grad_reduce / overlap_param_gather, the pipeline's p2p overlap, and "
                           "moe_a2a_overlap=True in the perf config; TP is 1; how much each hides is not published"}
        not_priced.append("the DeepEP dispatcher (moe_flex_dispatcher_backend 'deepep' in the 26.02 perf config); mlsys train "
                          "prices an all-to-all over NCCL")
        notes = "Qwen3-30B-A3B (48 layers, 128 experts, 8 a token; built-in qwen3-30b-a3b). ETP 1. " + QWEN_NOTE
    elif model == "gpt-oss-120b":
        src = _preset(rel, ("scripts/performance/configs/gpt_oss/workload_base_configs.py", "GPT_OSS_120B_H100_BF16_BASE_CONFIG"),
                      ("scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py", "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"))
        src += ", with gpt_oss_llm_pretrain.py and src/megatron/bridge/recipes/gpt_oss/gpt_oss.py"
        lay |= {"sp": False, "overlap": "dp,pp", "loss": "fused"}
        why |= {"overlap": "dp,pp: overlap_grad_reduce / overlap_param_gather and the pipeline's p2p overlap; TP is 1 and the "
                           "H100 preset sets no moe_a2a_overlap (the expert all-to-all stays exposed); how much each hides is not published",
                "recompute": "none: the preset's recompute_modules ['layernorm', 'moe_act'] recompute the norms and the experts' "
                             "activation only, which none of mlsys train's --recompute choices is (selective is the attention core)",
                }
        not_priced.append("recomputation of the layer norms and the MoE activation (recompute_modules ['layernorm', 'moe_act'])")
        notes = OSS_NOTE
        if rel == "25.11":
            why["micro_batch"] = ("4: the table's MBS; the v0.2.0 preset gives micro_batch_size 1 (the table is taken, as "
                                  "heldout_public does where a table and a config disagree)")
            why["vp"] = "1: the table's VP 1 (no interleaving); the preset sets none"
            notes += ("The table's GA 2 is GBS / (GPUs x MBS) = 512 / (64 x 4), not GBS / (DP x MBS) = 8 with DP 16 "
                      "(64 / PP 4); DP 16 is used. ")
        else:
            why["vp"] = "1: the table prints n/a (no interleaving)"
    elif model.startswith("llama"):  # only to test clause (e): every Llama row of these tables is already a run elsewhere
        lay |= {"sp": tp > 1, "zero": 3 if row["FSDP"] == "1" else 1}
        src, notes = "the table only (clause (e) check)", ""
    else:
        raise KeyError(model)
    lay |= {"recompute": "none"}
    lay = {k: lay[k] for k in sorted(lay, key=lambda k: (k not in CORE, k))}
    notes = (f"DGX-H100 (8 x H100 SXM, NVLink 4, 8 x 400 Gb/s IB a node): hgx-h100. The {rel} table of the page at "
             f"{BRIDGE_COMMIT[:7]}: GPUs {gpus}, GBS {gbs}, MBS {mbs}, seq {seq}, FSDP {row['FSDP']}, TP {tp}, PP {pp}, CP {cp}, "
             f"VP {row['VP']}, EP {row['EP']}, GA {row['GA']}; DP {lay['dp']} = {gpus} / (TP x PP x CP). " + notes
             + "The page: MoE benchmarks force-balance the token distribution among experts and are token-dropless.")
    return lay, why, not_priced, src, notes


CORRECTIONS = {  # (release, model): the value the source printed later, where the row at BRIDGE_COMMIT was a misprint
    ("26.02", "Qwen3_30B_a3B"): {
        "value": 5113, "corrected_at": "cfeddcd9445817a85ff58549d407fa700b1f8ace",
        "why": "the page's 2026-03-21 commit ('2602_perf_table_reorder and patch container data') prints 5113 tokens/s/GPU "
               "for this row where df0289c printed 2557, the row's 118 TFLOP/s unchanged; 118 TFLOP/s at 5113 is 23.1 MFLOP "
               "a token, the ratio of every other row of the model (26.02.01: 208 TFLOP/s at 9058), so 2557 was a misprint "
               "by 2x. Found 2026-12-04, after this set was scored; scored against 5113 since then"},
}


def run_for(row: dict[str, Any]) -> dict[str, Any]:
    rel, model = row["release"], MODELS[row["Model"]]
    lay, why, not_priced, src, notes = layout_for(row)
    gpus, prec = int(row["#-GPUs"]), row["Precision"]
    corrected = {}
    if (rel, row["Model"]) in CORRECTIONS:  # the source's own later correction of the row, scored instead of the misprint
        corrected = CORRECTIONS[rel, row["Model"]] | {"as_first_printed": int(row["Tokens / sec / GPU"])}
    table = (f"{rel} NeMo Container, Pre-Training Performance, System: DGX-H100, row {row['Model']} {prec} (GPUs {gpus}, "
             f"GBS {row['GBS']}), column 'Tokens / sec / GPU'")
    key = f"NVIDIA-NeMo/Megatron-Bridge {BRIDGE_PATH}@{BRIDGE_COMMIT[:7]}|{rel} DGX-H100|{row['Model']}|{gpus}|{lay['dtype']}|{row['GBS']}"
    return {
        "name": f"{row['Model'].replace('_', ' ')}, {gpus} H100, {prec} (NeMo {rel}, Megatron-Bridge)",
        "group": f"bridge-{rel}-h100", "gpu": "H100-SXM", "model": model, "cluster": "hgx-h100", "gpus": gpus, "layout": lay,
        "assumed": sorted(why), "assumed_why": why,
        "published": {"metric": "tokens_per_s_per_gpu", "value": corrected.get("value", int(row["Tokens / sec / GPU"]))},
        "also_published": {"model_tflops_per_gpu": int(row["Model TFLOP / sec / GPU"]), "ga": int(row["GA"]),
                           "note": "the same row's Model TFLOP/sec/GPU and GA (not for scoring)"} | corrected,
        "measurement": True,
        "flop_convention": (f"none needed: tokens/s/GPU, compared as the step time it implies "
                            f"({row['GBS']} x {row['Sequence Length']} / (value x {gpus}) s)"),
        "citation": {"paper": "NVIDIA Megatron-Bridge, Performance summary (github.com/NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md)",
                     "table": table, "repo": BRIDGE_REPO, "path": BRIDGE_PATH, "commit": BRIDGE_COMMIT,
                     "url": f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{BRIDGE_COMMIT}/{BRIDGE_PATH}", "layout_from": src},
        "notes": notes, "not_priced": not_priced, "held_out": HELD_OUT,
        "selection": {"family": "B", "key": key, "sha256": hashlib.sha256(key.encode()).hexdigest(), "row": f"{row['Model']} {prec}"},
    }


# ---------------------------------------------------------------------------------------------- existing sets
def core_key(run: dict[str, Any]) -> str:
    """RULE.md (e) read strictly: model, GPU, GPU count and the stated layout fields (assumed options left out)."""
    lay = run["layout"]
    return json.dumps([run.get("model") or run.get("config"), run.get("gpu", "H100-SXM"), run["gpus"],
                       [lay.get(k, 1 if k in ("cp", "ep", "vp") else None) for k in CORE]], sort_keys=True)


def existing_runs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name in EXISTING:
        out += [(name, r) for r in json.loads((ROOT / "reports/train" / name / "runs.json").read_text())["runs"]]
    return out + [("published_runs.json", r) for r in json.loads((ROOT / "reports/train/published_runs.json").read_text())["runs"]]


def repeats(run: dict[str, Any], existing: list[tuple[str, dict[str, Any]]]) -> str | None:
    for name, r in existing:
        if ("gpu" in r and measurement_key(r) == measurement_key(run)) or core_key(r) == core_key(run):
            return f"{name}: {r['name']}"
    return None


MLPERF_LEFT_OUT = [  # (what, clause, why); no log of these was opened
    (f"mlcommons/training_results_v5.1@{MLPERF51_COMMIT[:7]} | Nebius/results/nebius_h200_n64/llama31_405b", "(e)",
     "config_DGXH200_64x8x144xtp4pp8cp2.sh gives TP 4, PP 8, VP 8, CP 2, MBS 1 on 512 H200 (DP 8, GBS 8 x MINIBS 144 = 1152): "
     "the layout of heldout_public_rest's v5.0 Nebius n64 run"),
    (f"mlcommons/training_results_v5.1@{MLPERF51_COMMIT[:7]} | Nebius/results/nebius_h200_n128/llama31_405b", "(e)",
     "config_DGXH200_128x8x72xtp4pp8cp2.sh gives TP 4, PP 8, VP 8, CP 2, MBS 1 on 1,024 H200 (DP 16, GBS 16 x MINIBS 72 = 1152): "
     "the layout of heldout_public's v5.0 Nebius n128 run"),
    (f"mlcommons/training_results_v5.1@{MLPERF51_COMMIT[:7]} | Cisco hpf_n8 / hpf_n16, HPE HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09 "
     "(llama31_8b)", "(e)", "already runs of heldout_public"),
    (f"mlcommons/training_results_v5.1@{MLPERF51_COMMIT[:7]} | every other H100 / H200 submission", "(a)",
     "llama2_70b_lora (fine-tuning), retinanet, dlrm_dcnv2, rgat and flux1 are not pre-training of a model mlsys train prices; "
     "Dell's XE7745 is H200 NVL (a PCIe card), out by (b)"),
    (f"{MLPERF60_FORK}@{MLPERF60_COMMIT[:7]} | Cisco Zeus_8xH100_SXM_80GB, Zeus_16xH100_SXM_80GB (llama31_8b, gpt_oss_20b), "
     "2xC885A_M8-8xH200-SXM-141GB (llama31_8b)", "not read",
     "candidates by their folders (Zeus_8xH100 llama31_8b: config_DGXH100_8x8x36xtp8pp8cp2.sh sets TP 2, PP 1, CP 1, MBS 1, "
     "MINIBS 1 on 8 nodes, GBS 32 in the log), but the fork cannot be mirrored here and each submission has 10 result files of "
     "about 470,000 characters, too many to page through the stored-file reader before the set was closed. Only the first "
     "16,000 characters of Zeus_8xH100_SXM_80GB/llama31_8b/result_1.txt were opened (to size the logs); no median was taken. "
     "They are left for a later set with a mirror of the fork"),
    (f"{MLPERF60_FORK}@{MLPERF60_COMMIT[:7]} and jkjung-avt/training_results_v6.0 | the other v6.0 submissions", "(b)",
     "GB200, GB300, B200, B300, GH200, MI3xx, H200 NVL; the jkjung-avt fork holds Inventec's own Blackwell work only"),
]


def build(mirror: Path | None) -> dict[str, Any]:
    existing = existing_runs()
    runs: list[dict[str, Any]] = []
    left_out: list[dict[str, str]] = []
    seen: dict[str, str] = {}
    for row in sorted(h100_rows(page_text(mirror)), key=lambda r: r["release"]):  # earliest release first, RULE.md (f)
        run = run_for(row)
        what = f"{BRIDGE_REPO} {BRIDGE_PATH}@{BRIDGE_COMMIT[:7]} | {row['release']} DGX-H100 | {row['Model']} {row['Precision']} {row['#-GPUs']} GPUs GBS {row['GBS']}"
        if (hit := repeats(run, existing)) is not None:
            left_out.append({"what": what, "clause": "(e)", "why": f"the same model, GPU, GPU count and layout as {hit}"})
        elif core_key(run) in seen:
            left_out.append({"what": what, "clause": "(f)", "why": f"the layout of {seen[core_key(run)]}, an earlier release"})
        else:
            seen[core_key(run)] = run["name"]
            runs.append(run)
    left_out += [{"what": w, "clause": c, "why": y} for w, c, y in MLPERF_LEFT_OUT]
    runs.sort(key=lambda r: r["selection"]["sha256"])
    return {
        "collected": COLLECTED,
        "rule": RULE_FILE.read_text(),
        "about": ("Held-out published training runs for scripts/validate/train_published.py (reports/train/heldout_bridge_mlperf6): "
                  "Megatron-Bridge's 25.11 and 26.02 DGX-H100 pre-training rows at df0289c not in any existing set, collected "
                  "2026-12-03 before any prediction was made for them. Same schema as reports/train/heldout_public_rest/runs.json."),
        "selection": {"drawn_from": f"{BRIDGE_REPO} {BRIDGE_PATH}@{BRIDGE_COMMIT[:7]} (DGX-H100 tables of 25.11 and 26.02); "
                                    f"mlcommons/training_results_v5.1@{MLPERF51_COMMIT[:7]}; {MLPERF60_FORK}@{MLPERF60_COMMIT[:7]}",
                      "cap": "none applied: fewer than 40 rows qualified",
                      "counts": {"B": len(runs), "M": 0}},
        "left_out": left_out,
        "runs": runs,
    }


def write_set(build_set: Any, doc: str, out_file: Path) -> None:
    """The writers' command line: --mirror (re-read the sources' git objects) and --out; writes the set's runs.json."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--mirror", type=Path, help="folder holding the sources' mirrors (owner+name/repo, git directories)")
    ap.add_argument("--out", type=Path, default=out_file)
    args = ap.parse_args()
    data = build_set(args.mirror)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(data['runs'])} runs, {len(data['left_out'])} left out -> {args.out}")


def main() -> None:
    write_set(build, __doc__, OUT_DIR / "runs.json")


if __name__ == "__main__":
    main()
