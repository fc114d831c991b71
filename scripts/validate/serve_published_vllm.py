"""`mlsys serve` with every default against published vLLM V1 runs, scored only after predicting.

    python scripts/validate/serve_published_vllm.py cases FILE   # a collected cases file -> published_vllm.json
    python scripts/validate/serve_published_vllm.py predict      # published_vllm.json -> predictions_vllm.json
    python scripts/validate/serve_published_vllm.py score        # both files -> published_vllm.md

The held-out protocol of serve_published_nim.py: `predict` names the commit that made the predictions (and
refuses a dirty tree), the file is committed before `score` runs, and `score` never recomputes them.

Method (fixed before any prediction was made; published_vllm.json's "method" says the same): every kept
point of the source is a case. vLLM's `vllm bench serve` is simulated as it ran: with `--max-concurrency C`
a closed loop of C clients over the run's N prompts; without it (request rate inf) every prompt arriving at
once. Both are scored over all N requests, as `vllm bench serve` reports them: mean TTFT, mean TPOT
((last - first token) / (output - 1)). Lengths are the run's measured means (total tokens / requests,
rounded), the same for every request. `mlsys serve` runs with every default: vllm-v1 with vLLM V1's limits
for the card, the datasheet ceilings, the default host time, bf16 weights and KV cache, TP as published.
Errors: predicted / measured - 1, per set, metric and concurrency band (1, 2-15, >= 16).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]  # validate/
from serve_scoring import error_stats, replace_cases, run_steps, write_page, write_predictions  # noqa: E402

from mlsyscalc.calc.roofline.ops import resolve_ceilings  # noqa: E402
from mlsyscalc.calc.serve.simulator import ServeOptions, simulate  # noqa: E402
from mlsyscalc.calc.serve.workload import from_trace  # noqa: E402
from mlsyscalc.report.markdown import markdown_table  # noqa: E402
from mlsyscalc.specs.lookup import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "reports" / "serving" / "published_vllm.json"
PREDICTIONS = ROOT / "reports" / "serving" / "predictions_vllm.json"
PAGE = ROOT / "reports" / "serving" / "published_vllm.md"
METRICS = ("ttft_s", "tpot_s")
VARIANTS = {"default": {}}
MODELS = {"Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-32B": "qwen3-32b",
          "Qwen/Qwen3-14B": "reports/serving/specs/qwen3-14b.json"}
SET = "vllm-gpustack"


def _gpu(text: str) -> str:
    if text.startswith("H100"):
        return "H100-SXM"
    if text.startswith("A100"):
        return "A100-80GB-SXM"   # the Qwen3-14B page does not say 80GB; its Qwen3-32B sibling does
    raise ValueError(f"no card for {text!r}")


def build_cases(src: Path) -> list[dict]:
    """The vLLM points of the GPUStack Performance Lab pages in a collected file (SGLang, TensorRT-LLM, pages
    without the prompt length or the card, and non-standard models left out)."""
    cases = []
    for c in json.loads(src.read_text())["cases"]:
        if c["engine"] != "vllm" or not c["source_title"].startswith("GPUStack") or c["model"] not in MODELS:
            continue
        burst = "BURST" in (c.get("notes") or "")
        cases.append({
            "id": f"{SET}-{len(cases)}", "set": SET, "model": MODELS[c["model"]], "hf_model": c["model"],
            "gpu": _gpu(c["gpu"]), "gpu_as_published": c["gpu"], "tp": int(c["tp"]), "dtype": "bf16",
            "kv_dtype": "bf16", "engine": f"vllm {c['engine_version']}",
            "arrival": "all at once" if burst else "closed loop", "concurrency": int(c["concurrency"]),
            "requests": int(c["num_prompts"]), "prompt_len": round(float(c["input_tokens"])),
            "output_len": round(float(c["output_tokens"])), "flags": c["flags"],
            "source": {"url": c["source_url"], "title": c["source_title"], "quote": c["quote"]},
            "measured": {"ttft_s": float(c["ttft_ms"]) / 1e3, "tpot_s": float(c["tpot_ms"]) / 1e3},
            "stat": {"ttft": c["ttft_stat"], "tpot": c["tpot_stat"]}})
    return cases


def predict_case(case: dict) -> dict[str, float]:
    """The case's mean TTFT and TPOT (simulate's iteration_cost keeps each engine's cost between cases)."""
    model = case["model"]
    spec = load_model(str(ROOT / model) if model.endswith(".json") else model)
    ceil = resolve_ceilings(case["gpu"])
    opts = ServeOptions(tp=case["tp"], dtype=case["dtype"], kv_dtype=case["kv_dtype"])
    n = case["requests"]
    clients = 0 if case["arrival"] == "all at once" else case["concurrency"]
    work = from_trace([(0.0, case["prompt_len"], case["output_len"])] * n, case["id"], 0, clients)
    lat = simulate(spec, ceil, work, opts).latencies
    return {"ttft_s": statistics.fmean(lat["ttft"]),
            "tpot_s": statistics.fmean(lat["tpot"]) if case["output_len"] > 1 else float("nan")}


def predict() -> None:
    cases = json.loads(CASES.read_text())["cases"]
    out = {}
    for c in cases:
        try:
            out[c["id"]] = {"default": predict_case(c)}
        except Exception as exc:  # noqa: BLE001 - a case the calculator refuses is a committed outcome too
            out[c["id"]] = {"default": {"refused": f"{type(exc).__name__}: {exc}"[:300]}}
    write_predictions(PREDICTIONS, VARIANTS, out, ("mlsyscalc", "model_specs", "reports/serving/specs", "scripts"))


def score() -> None:
    data, pred = json.loads(CASES.read_text()), json.loads(PREDICTIONS.read_text())
    groups: dict[tuple[str, str, str], list[float]] = {}
    refused = []
    rows = []
    for c in data["cases"]:
        got_all = pred["predictions"][c["id"]]["default"]
        if "refused" in got_all:
            refused.append(c["id"])
            continue
        cells = []
        for m in METRICS:
            got, want = got_all[m], c["measured"][m]
            if got != got or want <= 0:
                cells.append("-")
                continue
            band = "1" if c["concurrency"] == 1 else (">= 16" if c["concurrency"] >= 16 else "2-15")
            for key in ((c["arrival"], m, band), (c["arrival"], m, "all"), ("every case", m, "all")):
                groups.setdefault(key, []).append(got / want - 1)
            cells.append(f"{got:.3g} / {want:.3g} ({got / want - 1:+.0%})")
        rows.append([c["model"].split("/")[-1].removesuffix(".json"), c["gpu"], c["arrival"], str(c["concurrency"]),
                     f"{c['prompt_len']} / {c['output_len']}", *cells])
    lines = ["# `mlsys serve` against published vLLM V1 runs", "",
             f"Generated by `python scripts/validate/serve_published_vllm.py score` from `reports/serving/published_vllm.json` "
             f"(cases, sources, method) and `reports/serving/predictions_vllm.json` (made at commit {pred['commit'][:10]} "
             "and committed before this page was first generated).", "",
             *[f"- **{k}**: {v}" for k, v in data["sets"].items()], "", data["method"], ""]
    table = [[a, m, band, *error_stats(e)] for (a, m, band), e in sorted(groups.items())]
    lines += markdown_table(["arrival", "metric", "concurrency", "cases", "median |error|", "worst |error|",
                             "median signed"], table, "lllrrrr")
    lines += ["", f"Cases the calculator refused: {', '.join(refused) or 'none'}.", "", "## Every case", ""]
    lines += markdown_table(["model", "GPU", "arrival", "clients", "prompt / output", "TTFT s predicted / measured",
                             "TPOT s predicted / measured"], rows, "lllrrrr")
    write_page(PAGE, lines, data)


def write_cases(src: Path) -> None:
    replace_cases(CASES, build_cases(src))


def main() -> None:
    run_steps(__doc__.splitlines()[0], "cases: the collected cases file", write_cases, predict, score)


if __name__ == "__main__":
    main()
