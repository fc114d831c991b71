"""Writes reports/train/heldout_dgxc/runs.json: the held-out published runs of NVIDIA/dgxc-benchmarking v24.11.1.

    python scripts/validate/published_runs/dgxc_heldout.py

The step times below are copied from the recipe READMEs at commit 35a9aecc8d5b (release v24.11.1) and
checked against that text when this file was written; the layouts come from the recipe YAML, configure.sh
and launch.sh of the same commit. Nothing here runs `mlsys` or predicts anything.
"""

from __future__ import annotations

import json
from pathlib import Path

COMMIT = "35a9aecc8d5b17d99d80f52f38c75ade0dbab7ae"
REPO = "github.com/NVIDIA/dgxc-benchmarking"
OUT = Path(__file__).resolve().parents[3] / "reports" / "train" / "heldout_dgxc" / "runs.json"

# (GPUs, BF16 step s, BF16 tokens/s, BF16 MFU %, FP8 step s, FP8 tokens/s, FP8 MFU %) per column of each table.
LLAMA_8B = [(8, 12.91, 81222, 59.37, 9.67, 108436, 39.63), (16, 13.00, 161319, 58.96, 9.73, 215535, 39.39),
            (32, 13.05, 321403, 58.73, 9.75, 430185, 39.31), (64, 13.08, 641331, 58.60, 9.80, 855980, 39.10),
            (128, 13.10, 1280704, 58.51, 9.82, 1708474, 39.02)]
LLAMA_70B = [(64, 14.72, 71235, 54.10, 11.01, 95239, 36.17), (128, 14.73, 142373, 54.06, 10.93, 191871, 36.43),
             (256, 14.8, 283399, 53.81, 11.16, 375834, 35.68), (512, 14.89, 563372, 53.48, 11.18, 750323, 35.62),
             (1024, 14.92, 1124478, 53.38, 11.28, 1487342, 35.30),
             (2048, 14.98, 2248957, 53.38, 11.39, 2945955, 34.96)]
# 405b adds the column's layers, GBS, PP and VP (the table's own rows; < 576 GPUs are layer-reduced proxies).
LLAMA_405B = [(32, 7, 126, 1, 1, 8.85, 116632, 58.63, 5.80, 178118, 44.77),
              (96, 21, 126, 3, 7, 8.75, 117965, 56.17, 5.71, 180674, 43.01),
              (192, 42, 252, 3, 7, 16.93, 121936, 57.25, 11.00, 187740, 44.07),
              (576, 126, 252, 9, 7, 17.20, 120022, 55.78, 11.24, 183664, 42.71),
              (1152, 126, 504, 9, 7, 17.52, 235660, 54.76, 11.31, 365055, 42.45),
              (2304, 126, 1008, 9, 7, 17.62, 468646, 54.45, 12.35, 668626, 38.87)]
GPT3_175B = [(128, 8.91, 58843, 49.93, 5.92, 88562, 37.56), (256, 8.95, 117159, 49.71, 5.96, 175936, 37.30),
             (512, 9.09, 230710, 48.94, 6.44, 325645, 34.52), (1024, 9.01, 465517, 49.38, 6.72, 624152, 33.09),
             (2048, 9.02, 930001, 49.32, 6.24, 1344328, 35.63)]


def llama(hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int) -> dict:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
            "intermediate_size": inter, "vocab_size": vocab, "max_position_embeddings": 8192,
            "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
            "attention_bias": False, "mlp_bias": False}


GPT3_CONFIG = {"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96, "n_inner": 49152,
               "vocab_size": 50688, "n_positions": 2048, "activation_function": "gelu", "tie_word_embeddings": True,
               "layer_norm_epsilon": 1e-05}

NEMO_COMMON = ("NVIDIA's Eos (DGX H100: 8 x H100 SXM 80 GB, NVLink 4, 8 x 400 Gb/s InfiniBand a node; the repository "
               "README's 'Infrastructure Reference'), priced as the built-in hgx-h100. The published number is "
               "'Training step time (seconds per step)', which the README says is the train_step_timing of the last "
               "logged step of a 50-step run (one step, not a mean). Optimizer: Apex distributed_fused_adam "
               "(optimizer state sharded over DP, overlap_grad_sync and overlap_param_sync on, grad_sync_dtype bf16): "
               "encoded as --zero 1. megatron_amp_O2, gradient_accumulation_fusion, Transformer Engine layers "
               "(transformer_engine: true, mcore_gpt: true).")
FP8_NOTE = ("FP8 rows: model.fp8=true, fp8_hybrid=true (E4M3 forward, E5M2 backward), fp8_amax_history_len 1024, "
            "amax_compute_algo max, i.e. Transformer Engine delayed scaling (--fp8-recipe delayed), and FP8 weights "
            "({}); every layer in FP8 (no bf16 first/last layers in this NeMo).")

RULE = ("Every H100 column (every GPU count, BF16 and FP8) of the 'Expected Performance' tables of NVIDIA/dgxc-benchmarking "
        "release v24.11.1 (commit 35a9aec) for its pre-training recipes whose model mlsys train can express: llama3.1 "
        "(README_8b.md, README_70b.md, README_405b.md, the 405b proxy columns with fewer layers included) and nemo_megatron "
        "(README_175b.md, GPT-3 175B). Chosen before any row was priced; no row dropped for its value. Out by the same rule: "
        "nemotron (Nemotron-4 15B/340B: squared-ReLU MLP with GQA, not a built-in family), grok1 (MoE outside the built-in "
        "families), maxtext and paxml (JAX/XLA, no --framework for them), hf-llama2 and hf-mistral (LoRA fine-tuning).")


def run(name: str, group: str, config: dict, gpus: int, layout: dict, step: float, tokens_s: float, mfu: float,
        table: str, path: str, notes: str, assumed: dict) -> dict:
    return {
        "name": name, "group": group, "gpu": "H100-SXM", "config": config, "cluster": "hgx-h100", "gpus": gpus,
        "layout": layout, "assumed": sorted(assumed), "assumed_why": assumed,
        "published": {"metric": "step_time_s", "value": step},
        "also_published": {"tokens_per_s": tokens_s, "mfu_percent": mfu,
                           "note": "the same table's derived rows: tokens/s = GBS x seq / step; MFU with the README's "
                                   "own FLOP formula (its Notes section) against 989 (BF16) or 1979 (FP8) TFLOP/s"},
        "measurement": True,
        "flop_convention": "none needed (seconds per step as published)",
        "citation": {"paper": f"NVIDIA DGX Cloud Benchmarking recipes ({REPO} {path} at {COMMIT[:7]}, release v24.11.1)",
                     "table": table, "repo": REPO, "path": path, "commit": COMMIT,
                     "url": f"https://{REPO}/blob/{COMMIT}/{path}"},
        "notes": notes,
        "held_out": "held out: collected 2026-12-02 (reports/train/heldout_dgxc), before any prediction of it was made",
    }


def build() -> list[dict]:
    runs = []
    # Llama 3.1 8B: TP 1, PP 1, CP 2, MBS 1, GA 32; GBS = 128 x GPUs / 8 (configure.sh).
    cfg8 = llama(4096, 32, 32, 8, 14336, 128256)
    for gpus, sb, tb, mb, sf, tf, mf in LLAMA_8B:
        for dtype, step, tok, mfu in (("bf16", sb, tb, mb), ("fp8", sf, tf, mf)):
            lay = {"tp": 1, "pp": 1, "cp": 2, "dp": gpus // 2, "vp": 1, "micro_batch": 1,
                   "global_batch": 128 * gpus // 8, "seq": 8192, "sp": False, "recompute": "none", "zero": 1,
                   "dtype": dtype, "attention": "flash", "framework": "megatron", "overlap": "dp,cp"}
            if dtype == "fp8":
                lay |= {"fp8_recipe": "delayed", "fp8_params": True}
            table = (f"README_8b.md, table 'Llama 3.1 8b 24.09 {dtype.upper()} (TP=1, PP=1, CP=2, MBS=1, GA=32)', "
                     f"column 'Throughput on {gpus}x H100 GPUs (GBS={128 * gpus // 8})', row 'Training step time (seconds per step)'")
            notes = ("Layout: llama3.1/llama3.1_8b.yaml (tensor/pipeline 1, context_parallel_size 2, micro_batch_size 1, "
                     "encoder_seq_length 8192, sequence_parallel false, ub_tp_comm_overlap false, no activations_checkpoint_*) "
                     "and configure.sh (GBS = 128 x GPUs / 8; tokenizer the Llama 3 tokenizer, vocabulary 128256, a multiple "
                     "of make_vocab_size_divisible_by 128 x TP 1, so no padding). Model: 32 layers, hidden 4096, FFN 14336, "
                     "32 heads, 8 query groups, RMSNorm, fast-swiglu, RoPE, untied output layer (the yaml). Attention: "
                     "configure.sh sets NVTE_FLASH_ATTN=0, NVTE_FUSED_ATTN=1 (Transformer Engine's cuDNN fused attention: "
                     "--attention flash). NeMo container 24.09 (nvcr.io/nvidia/nemo:24.09). " + NEMO_COMMON
                     + (" " + FP8_NOTE.format("configure.sh: +model.fp8_params=true") if dtype == "fp8" else "")
                     + " rope_theta is not set in the yaml; Llama 3.1's 500000 is written (it does not enter a step's time).")
            assumed = {"zero": "Apex distributed_fused_adam shards optimizer state (and reduce-scatters gradients) over DP; "
                               "encoded as ZeRO-1, as the Megatron distributed optimizer is elsewhere in the runs file",
                       "overlap": "dp from overlap_grad_sync/overlap_param_sync; cp from Transformer Engine's ring "
                                  "attention, which overlaps its p2p with attention compute (not a config switch)"}
            runs.append(run(f"Llama 3.1 8B, {gpus} H100, {dtype.upper()} (dgxc 24.11.1, NeMo 24.09)",
                            "dgxc-24.11.1-llama3.1-8b", cfg8, gpus, lay, step, tok, mfu, table,
                            "llama3.1/README_8b.md", notes, assumed))
    # Llama 3.1 70B: TP 4, PP 4, CP 2, VP 5, MBS 1, GA 64; GBS = 128 x GPUs / 64.
    cfg70 = llama(8192, 80, 64, 8, 28672, 128512)
    for gpus, sb, tb, mb, sf, tf, mf in LLAMA_70B:
        for dtype, step, tok, mfu in (("bf16", sb, tb, mb), ("fp8", sf, tf, mf)):
            lay = {"tp": 4, "pp": 4, "cp": 2, "dp": gpus // 32, "vp": 5, "micro_batch": 1,
                   "global_batch": 128 * gpus // 64, "seq": 8192, "sp": True, "recompute": "none", "zero": 1,
                   "dtype": dtype, "attention": "flash", "framework": "megatron", "overlap": "dp,cp,tp,pp"}
            if dtype == "fp8":
                lay |= {"fp8_recipe": "delayed", "fp8_params": True}
            table = (f"README_70b.md, table 'Llama 3.1 70b 24.09 {dtype.upper()} (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)', "
                     f"column 'Throughput on {gpus}x H100 GPUs (GBS={128 * gpus // 64})', row 'Training step time (seconds per step)'")
            notes = ("Layout: llama3.1/llama3.1_70b.yaml (tensor 4, pipeline 4, virtual pipeline 5, context parallel 2, "
                     "micro-batch 1, sequence 8192, sequence_parallel true, ub_tp_comm_overlap true with its "
                     "ub_tp_comm_overlap_cfg, overlap_p2p_comm true, defer_embedding_wgrad_compute true, no "
                     "activations_checkpoint_*) and configure.sh (GBS = 128 x GPUs / 64). 80 layers over 4 x 5 chunks, 4 a "
                     "chunk (no embedding/loss accounting in this NeMo). Model: hidden 8192, FFN 28672, 64 heads, 8 query "
                     "groups, RMSNorm, fast-swiglu, RoPE, untied output layer; the Llama 3 tokenizer's 128256 entries padded "
                     "by NeMo to a multiple of make_vocab_size_divisible_by 128 x TP 4 = 512: vocab_size 128512. Attention: "
                     "NVTE_FUSED_ATTN=1 (cuDNN, --attention flash). NeMo container 24.09. " + NEMO_COMMON
                     + (" " + FP8_NOTE.format("configure.sh: +model.fp8_params=true") if dtype == "fp8" else "")
                     + " The Megatron-Bridge rows already in published_runs.json carry --overlap dp,cp,tp (no pp); this "
                       "row's config also sets overlap_p2p_comm, hence pp.")
            assumed = {"zero": "Apex distributed_fused_adam, encoded as ZeRO-1",
                       "overlap": "tp from ub_tp_comm_overlap (userbuffers), pp from overlap_p2p_comm, dp from "
                                  "overlap_grad_sync/overlap_param_sync, cp from TE ring attention; how much each hides is not published",
                       "vocab_size": "128512: NeMo's padding of 128256 to a multiple of 512 (make_vocab_size_divisible_by x TP), not printed by the README"}
            runs.append(run(f"Llama 3.1 70B, {gpus} H100, {dtype.upper()} (dgxc 24.11.1, NeMo 24.09)",
                            "dgxc-24.11.1-llama3.1-70b", cfg70, gpus, lay, step, tok, mfu, table,
                            "llama3.1/README_70b.md", notes, assumed))
    # Llama 3.1 405B: TP 8, CP 2, MBS 1, GA 63; PP, VP, layers and GBS per column (configure.sh).
    for gpus, layers, gbs, pp, vp, sb, tb, mb, sf, tf, mf in LLAMA_405B:
        cfg = llama(16384, layers, 128, 16, 53248, 51200)
        dp = gpus // (8 * pp * 2)
        for dtype, step, tok, mfu in (("bf16", sb, tb, mb), ("fp8", sf, tf, mf)):
            lay = {"tp": 8, "pp": pp, "cp": 2, "dp": dp, "vp": vp, "micro_batch": 1, "global_batch": gbs,
                   "seq": 8192, "sp": True, "recompute": "none", "zero": 1, "dtype": dtype, "attention": "flash",
                   "framework": "megatron", "overlap": "dp,cp,tp,pp" if pp > 1 else "dp,cp,tp"}
            if dtype == "fp8":
                lay |= {"fp8_recipe": "delayed", "fp8_params": True}
            proxy = layers < 126
            table = (f"README_405b.md, table 'Llama 3.1 405b 24.09 {dtype.upper()} (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)', "
                     f"column 'Throughput on {gpus}x H100 GPUs' (its rows Layers {layers}, GBS {gbs}, PP {pp}, VP "
                     f"{vp if vp > 1 else 'n/a'}), row 'Training step time (seconds per step)'")
            notes = ("Layout: llama3.1/llama3.1_405b.yaml (tensor 8, pipeline 9, virtual pipeline 7, context parallel 2, "
                     "micro-batch 1, sequence 8192, sequence_parallel true, ub_tp_comm_overlap true, overlap_p2p_comm true, "
                     "defer_embedding_wgrad_compute true, no activations_checkpoint_*) with configure.sh's per-scale "
                     "overrides (GBS = 252 x GPUs / 576; 192 GPUs: 42 layers, PP 3, GBS 252; 96 GPUs: 21 layers, PP 3, GBS 126; "
                     "32 GPUs: 7 layers, PP 1, VP null, GBS 126, defer_embedding_wgrad_compute false; FP8: the userbuffers "
                     "proj_fprop/fc2_fprop fp8_buf on). The recipe's model is not exactly Llama 3.1 405B: the yaml has "
                     "num_query_groups 16 (Llama 3.1 405B has 8) and, with synthetic (mock) data, the GPT2BPETokenizer as a "
                     "proxy (README: 'Llama3.1 405B uses the GPT2BPETokenizer as a proxy'), 50257 entries padded to a multiple "
                     "of 128 x TP 8 = 1024: vocab_size 51200; hidden 16384, FFN 53248, 128 heads, RMSNorm, fast-swiglu, RoPE, "
                     "untied output layer. (The README's own FLOP note uses vocabulary 128256.) "
                     + ("Proxy scale: the README says proxy configs (< 576 GPUs) 'are not realistic and were created to allow "
                        f"fit of Llama model to smaller number of GPUs': {layers} layers. " if proxy else "")
                     + (f"{layers} layers over {pp} x {vp} chunks, {layers // (pp * vp)} a chunk. " if vp > 1 else "")
                     + "Attention: NVTE_FUSED_ATTN=1 (cuDNN, --attention flash). NeMo container 24.09. " + NEMO_COMMON
                     + (" " + FP8_NOTE.format("configure.sh: +model.fp8_params=true") if dtype == "fp8" else "")
                     + (" The table prints the BF16 step time of this column as '8.7  5'; its tokens/s (117965 = 126 x 8192 "
                        "/ 8.750) gives 8.75." if (gpus == 96 and dtype == "bf16") else ""))
            assumed = {"zero": "Apex distributed_fused_adam, encoded as ZeRO-1",
                       "overlap": "tp from ub_tp_comm_overlap, pp from overlap_p2p_comm (when PP > 1), dp from "
                                  "overlap_grad_sync/overlap_param_sync, cp from TE ring attention",
                       "vocab_size": "51200: the GPT2BPETokenizer's 50257 padded by NeMo to a multiple of 1024; the README's "
                                     "FLOP note says 128256 instead"}
            runs.append(run(f"Llama 3.1 405B{' proxy (' + str(layers) + ' layers)' if proxy else ''}, {gpus} H100, "
                            f"{dtype.upper()} (dgxc 24.11.1, NeMo 24.09)", "dgxc-24.11.1-llama3.1-405b", cfg, gpus, lay,
                            step, tok, mfu, table, "llama3.1/README_405b.md", notes, assumed))
    # GPT-3 175B: TP 4, PP 8, VP 12, MBS 1, seq 2048; GBS = 16 x nodes.
    for gpus, sb, tb, mb, sf, tf, mf in GPT3_175B:
        for dtype, step, tok, mfu in (("bf16", sb, tb, mb), ("fp8", sf, tf, mf)):
            lay = {"tp": 4, "pp": 8, "cp": 1, "dp": gpus // 32, "vp": 12, "micro_batch": 1, "global_batch": 2 * gpus,
                   "seq": 2048, "sp": True, "recompute": "none", "zero": 1, "dtype": dtype, "attention": "flash2",
                   "framework": "megatron", "overlap": "dp,cp,tp,pp"}
            if dtype == "fp8":
                lay |= {"fp8_recipe": "delayed", "fp8_params": True}
            table = (f"README_175b.md, table 'NeMo Megatron 24.11 {dtype.upper()} (TP=4,PP=8, MBS=1, VP=12, SEQ=2048)', "
                     f"column '{gpus}x H100 GPUs (GBS={2 * gpus})', row 'Training step time (seconds per step)'")
            notes = ("Layout: nemo_megatron/gpt3_175b_hydra.yaml (tensor 4, pipeline 8, virtual pipeline 12, context "
                     "parallel 1, micro-batch 1, sequence 2048, sequence_parallel true, ub_tp_comm_overlap true, "
                     "overlap_p2p_comm true, no activations_checkpoint_*, fsdp false) and launch.sh (GBS = 16 x nodes, "
                     "model.fp8 by DTYPE). 96 layers over 8 x 12 chunks, one a chunk. Model (the yaml, NeMo's GPT "
                     "defaults otherwise): hidden 12288, FFN 49152, 96 heads, learned absolute positions 2048, LayerNorm, "
                     "GELU, biases, shared input/output embedding; GPT2BPETokenizer's 50257 entries padded to a multiple of "
                     "128 x TP 4 = 512: vocab_size 50688 (the README's FLOP note uses 51200). hidden_dropout 0.1 and "
                     "attention_dropout 0.1 (dropout is on in this recipe). Attention: launch.sh sets NVTE_FUSED_ATTN=0 "
                     "(Transformer Engine then uses the flash-attn package, FlashAttention-2: --attention flash2). NeMo "
                     "container 24.05 (launch.sh FW_VERSION; the table's '24.11' is the recipe release). " + NEMO_COMMON
                     + (" " + FP8_NOTE.format("the yaml's fp8_params: true") if dtype == "fp8" else ""))
            assumed = {"zero": "Apex distributed_fused_adam, encoded as ZeRO-1",
                       "overlap": "tp from ub_tp_comm_overlap, pp from overlap_p2p_comm, dp from overlap_grad_sync/overlap_param_sync",
                       "attention": "flash2: NVTE_FUSED_ATTN=0 leaves Transformer Engine's flash-attn backend (FlashAttention-2 "
                                    "in the 24.05 container is assumed; the recipe does not print the backend)",
                       "vocab_size": "50688: NeMo's padding of 50257 to a multiple of 512, not printed by the README"}
            runs.append(run(f"GPT-3 175B, {gpus} H100, {dtype.upper()} (dgxc 24.11.1, NeMo 24.05)",
                            "dgxc-24.11.1-gpt3-175b", GPT3_CONFIG, gpus, lay, step, tok, mfu, table,
                            "nemo_megatron/README_175b.md", notes, assumed))
    return runs


ABOUT = ("Held-out published training runs for scripts/validate/train_published.py, collected 2026-12-02 before any prediction was "
         "made for them (the lead commits predictions first and scores afterwards). Same schema as "
         "reports/train/published_runs.json: each run has an HF-style `config`, the cluster (a built-in name), the GPU, "
         "the full layout (the fields train_published.py passes to mlsys train: tp, pp, dp, cp, vp, micro_batch, "
         "global_batch, seq, sp, recompute, zero, dtype, fp8_recipe, fp8_params, attention, framework, overlap), one "
         "published number (`published.metric`: step_time_s here, the README's 'Training step time (seconds per step)'), "
         "whether it is a measurement, its FLOP convention, the citation (repository, path, commit, table, column, row), "
         "`assumed` (layout fields the source does not state; `assumed_why` says what was written and why), `notes`, and "
         "`also_published` (the same column's tokens/s and MFU, for cross-checking, not for scoring). Inclusion rule: see `rule`.")


if __name__ == "__main__":
    runs = build()
    OUT.write_text(json.dumps({"collected": "2026-12-02", "rule": RULE, "about": ABOUT, "runs": runs}, indent=1) + "\n")
    print(f"{len(runs)} runs -> {OUT}")
