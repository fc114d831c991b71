"""`mlsys serve` against TensorRT-LLM 0.9.0's static-batch benchmark sweeps, scored only after predicting.

    python scripts/validate/serve_published_trtllm09.py cases CSV   # the source CSV -> published_trtllm09.json
    python scripts/validate/serve_published_trtllm09.py predict     # published_trtllm09.json -> predictions_trtllm09.json
    python scripts/validate/serve_published_trtllm09.py score       # both files -> published_trtllm09.md

The held-out protocol of scripts/validate/serve_published_nim.py: `predict` refuses a dirty tree and writes every
prediction with the commit that made it; that file is committed before `score` is first run, and `score`
never recomputes a prediction.

The set: NVIDIA Deep Learning Institute course data ('Sizing LLM inference systems', dataset/
trt_llm_0_9_0_dli.csv): TensorRT-LLM 0.9.0 benchmark runs, one row per (model, GPU, GPUs, precision,
batch size, input/output lengths): a static batch of B requests of fixed lengths run together (context
phase of all B prompts, then B sequences decoding in lockstep), its 1st-token latency and its
token-to-token latency ((latency - 1st token) / (output - 1)). Method, fixed before scoring (see METHOD).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]  # validate/
from serve_scoring import error_stats, run_steps, write_page, write_predictions  # noqa: E402

from mlsyscalc.calc.roofline.ops import resolve_ceilings  # noqa: E402
from mlsyscalc.calc.serve.iteration import kv_blocks  # noqa: E402
from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost, simulate  # noqa: E402
from mlsyscalc.calc.serve.workload import from_trace  # noqa: E402
from mlsyscalc.report.markdown import markdown_table  # noqa: E402
from mlsyscalc.specs.lookup import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "reports" / "serving" / "published_trtllm09.json"
PREDICTIONS = ROOT / "reports" / "serving" / "predictions_trtllm09.json"
PAGE = ROOT / "reports" / "serving" / "published_trtllm09.md"
METRICS = ("ttft_s", "itl_s")
SOURCE = ("github.com/wbing520/ai-performance-engineering code/ch11_inference/inference_gpu_cluster_sizing/dataset/"
          "trt_llm_0_9_0_dli.csv (commit 5a4d0c37a3231b2ff8a268df7f129be259c48a48), the course copy of NVIDIA DLI's "
          "'Sizing LLM inference systems' dataset of TensorRT-LLM 0.9.0 benchmark runs")
MODELS = {"LLaMA v2 7B": "llama2-7b", "LLaMA v2 13B": "llama2-13b", "LLaMA v2 70B": "llama2-70b",
          "Mistral 7B": "mistral-7b", "Mixtral 8x7B": "mixtral-8x7b"}
GPUS = {"H100 80GB HBM3": "H100-SXM", "H200 141GB HBM3": "H200", "A100-SXM4-80GB": "A100-80GB-SXM"}
METHOD = (
    "Method, fixed before scoring. Cases: every row of the CSV with both a 1st-token latency and a token-to-token "
    "latency, on an H100 80GB HBM3 (H100-SXM), H200 141GB HBM3 (H200) or A100-SXM4-80GB (A100-80GB-SXM), of a model "
    "mlsyscalc has a spec for (LLaMA v2 7B/13B/70B as llama2-*, Mistral 7B, Mixtral 8x7B); GPT-J 6B and Falcon 180B "
    "(no spec) and GH200, H100 NVL, L40 and L40S rows are left out. A row is simulated as the benchmark ran it: B "
    "requests of its input and output lengths at t = 0 on `--scheduler static` (one batch: the context phase of all "
    "B prompts, then B decodes a step), TP = its GPUs, KV blocks enough for the batch (the run fitted), 'FP8' rows "
    "with fp8 weights and GEMMs and a 16-bit KV cache, 'Mixed' rows fp16; the default host time. Two variants, both "
    "predicted before scoring: `trtllm09`, the engine terms of TensorRT-LLM 0.9 (`--max-decode-splits 1`: decode "
    "attention without multi-block mode, its default then; `--all-reduce custom` where the row says 'Enable Custom "
    "All Reduce: Yes', else nccl); `split`, the same with the serving defaults' kernels (FlashAttention's split rule, "
    "custom all-reduce). Predicted: TTFT = the batch's first-token time, ITL = (last - first token) / (output - 1). "
    "Errors: predicted / measured - 1, per variant, metric and batch band (1, 2-15, >= 16): cases, median |error|, "
    "worst |error|, median signed error.")


def build_cases(src: Path) -> tuple[list[dict], dict[str, int]]:
    cases: list[dict] = []
    dropped: dict[str, int] = {}
    for n, r in enumerate(csv.DictReader(src.open())):
        ttft, itl = r["1st Token Latency (ms)"], r["Token-to-token Latency (ms)"]
        if not (ttft and itl):
            continue
        why = ("no spec" if r["Model"] not in MODELS else "GPU out of scope" if r["GPU"] not in GPUS else "")
        if why:
            dropped[f"{r['Model']} on {r['GPU']} ({why})"] = dropped.get(f"{r['Model']} on {r['GPU']} ({why})", 0) + 1
            continue
        isl, osl = (int(x) for x in r["Input/Output Lengths"].split(","))
        require_lengths = (float(r["Input Token Length"]), float(r["Output Token Length"]))
        assert require_lengths == (isl, osl), f"row {n}: lengths disagree"
        cases.append({"id": f"trtllm09-{n}", "model": MODELS[r["Model"]], "gpu": GPUS[r["GPU"]],
                      "tp": int(r["Tensor Model Parallel Size"]), "precision": r["Precision"],
                      "custom_all_reduce": r["Enable Custom All Reduce"] == "Yes", "batch": int(r["Batch Size"]),
                      "prompt_len": isl, "output_len": osl,
                      "measured": {"ttft_s": float(ttft) / 1e3, "itl_s": float(itl) / 1e3}})
    return cases, dropped


def options(case: dict, variant: str) -> ServeOptions:
    fp8 = case["precision"] == "FP8"
    b, isl, osl = case["batch"], case["prompt_len"], case["output_len"]
    unsplit = variant == "trtllm09"
    return ServeOptions(scheduler="static", tp=case["tp"], dtype="fp8" if fp8 else "fp16", kv_dtype="fp16",
                        max_seqs=b, max_batch_tokens=b * isl, kv_blocks=b * kv_blocks(isl + osl, 16) + 1,
                        max_decode_splits=1 if unsplit else 64,
                        all_reduce="custom" if case["custom_all_reduce"] or not unsplit else "nccl")


def predict_case(case: dict, variant: str) -> dict[str, float]:
    spec = load_model(case["model"])
    ceil = resolve_ceilings(case["gpu"])
    opts = options(case, variant)
    b = case["batch"]
    work = from_trace([(0.0, case["prompt_len"], case["output_len"])] * b, case["id"])
    lat = simulate(spec, ceil, work, opts, iteration_cost(spec, ceil, opts.resolved(ceil.gpu))).latencies
    return {"ttft_s": statistics.fmean(lat["ttft"]),
            "itl_s": statistics.fmean(lat["tpot"]) if case["output_len"] > 1 else float("nan")}


VARIANTS = ("trtllm09", "split")


def predict() -> None:
    cases = json.loads(CASES.read_text())["cases"]
    out = {c["id"]: {v: predict_case(c, v) for v in VARIANTS} for c in cases}
    write_predictions(PREDICTIONS, list(VARIANTS), out, ("mlsyscalc", "model_specs", "scripts"))


def _band(b: int) -> str:
    return "1" if b == 1 else (">= 16" if b >= 16 else "2-15")


def score() -> None:
    data, pred = json.loads(CASES.read_text()), json.loads(PREDICTIONS.read_text())
    groups: dict[tuple[str, str, str], list[float]] = {}
    by_gpu: dict[tuple[str, str, str, str], list[float]] = {}
    for c in data["cases"]:
        for v in VARIANTS:
            for m in METRICS:
                got, want = pred["predictions"][c["id"]][v][m], c["measured"][m]
                if got != got or want <= 0:
                    continue
                e = got / want - 1
                for band in (_band(c["batch"]), "all"):
                    groups.setdefault((v, m, band), []).append(e)
                by_gpu.setdefault((v, m, c["gpu"], c["precision"]), []).append(e)
    lines = ["# `mlsys serve` against TensorRT-LLM 0.9.0's static-batch sweeps (held out)", "",
             f"Generated by `python scripts/validate/serve_published_trtllm09.py score` from `reports/serving/published_trtllm09.json` "
             f"(cases) and `reports/serving/predictions_trtllm09.json` (made at commit {pred['commit'][:10]} and committed "
             "before this page was first generated).", "", f"Source: {data['source']}.", "",
             f"Cases: {len(data['cases'])}; left out: "
             + "; ".join(f"{k}: {n}" for k, n in sorted(data["dropped"].items())) + ".", "", data["method"], ""]
    lines += markdown_table(["variant", "metric", "batch", "cases", "median |error|", "worst |error|", "median signed"],
                            [[v, m, band, *error_stats(e)] for (v, m, band), e in sorted(groups.items())], "lllrrrr")
    lines += ["", "By GPU and precision (all batch sizes):", ""]
    lines += markdown_table(["variant", "metric", "GPU", "precision", "cases", "median |error|", "worst |error|",
                             "median signed"],
                            [[v, m, g, p, *error_stats(e)] for (v, m, g, p), e in sorted(by_gpu.items())], "llllrrrr")
    write_page(PAGE, lines, data)


def write_cases(src: Path) -> None:
    cases, dropped = build_cases(src)
    CASES.write_text(json.dumps({"source": SOURCE, "method": METHOD, "dropped": dropped, "cases": cases},
                                indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {CASES} (left out: {sum(dropped.values())})")


def main() -> None:
    run_steps(__doc__.splitlines()[0], "cases: the source CSV", write_cases, predict, score)


if __name__ == "__main__":
    main()
