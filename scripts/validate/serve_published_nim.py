"""`mlsys serve` against NVIDIA NIM's published concurrency sweeps, scored only after predicting.

    python scripts/validate/serve_published_nim.py cases DIR   # DIR holds the three source CSVs -> published_nim.json
    python scripts/validate/serve_published_nim.py predict     # published_nim.json -> predictions_nim.json (no errors shown)
    python scripts/validate/serve_published_nim.py score       # both files -> published_nim.md

The held-out protocol: `predict` writes every prediction with the commit that made it (and refuses a dirty
tree), and that file is committed before `score` is ever run; `score` reads the committed predictions and
never recomputes them. A model change made after seeing the scores is in-sample: predict again, and the
page names the new commit beside the old numbers.

Method (fixed before scoring; published_nim.json's "method" says the same): every row is a case. A row is
simulated as its benchmark ran it: a closed loop of C clients (genai-perf --concurrency C) over N = 4C + 20
requests of the row's input and output lengths, scored over requests C..N-1 (after every client's first):
mean TTFT, mean TPOT (genai-perf's inter-token latency), output tokens/s = C x mean output / mean end-to-end.
NIM's TensorRT-LLM engine is simulated as `orca` (in-flight batching, whole context requests, KV reserved for
prompt + output: GUARANTEED_NO_EVICT) with max_batch_tokens 8192 (max_num_tokens) and max_seqs 256; the
`default` column is `mlsys serve` with every default (vllm-v1 and its per-card limits).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]  # validate/
from serve_scoring import error_stats, replace_cases, run_steps, write_page, write_predictions  # noqa: E402

from mlsyscalc.calc.roofline.ops import resolve_ceilings  # noqa: E402
from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost, simulate  # noqa: E402
from mlsyscalc.calc.serve.workload import from_trace  # noqa: E402
from mlsyscalc.report.markdown import markdown_table  # noqa: E402
from mlsyscalc.specs.lookup import load_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "reports" / "serving" / "published_nim.json"
PREDICTIONS = ROOT / "reports" / "serving" / "predictions_nim.json"
PAGE = ROOT / "reports" / "serving" / "published_nim.md"
METRICS = ("ttft_s", "itl_s", "output_tokens_per_s")
VARIANTS = {"trtllm": {"scheduler": "orca", "max_batch_tokens": 8192, "max_seqs": 256}, "default": {}}
DOCS_FILES = {"nim_llama3.1_8b_v1.8.0_1xH100_80GB.csv": "reports/serving/specs/llama3.1-8b.json",
              "nim_llama33_70b_v1.8.0_2xH100_fp8TP2.csv": "reports/serving/specs/llama3.3-70b.json"}
DLI_FILE = "nim.csv"
DLI_MODELS = {"meta-llama3-8b-instruct": "llama3-8b", "meta-llama3-70b-instruct": "llama3-70b"}
GPUS = {"H100_80G": "H100-SXM", "H100_80GB_HBM3": "H100-SXM", "A100-SXM4-80GB": "A100-80GB-SXM"}


def _case(set_name: str, n: int, model: str, gpu: str, tp: int, precision: str, conc: int, isl: int, osl: int,
          ttft_s: float, itl_s: float, tput: float) -> dict:
    dtype = precision.split()[0].lower()
    return {"id": f"{set_name}-{n}", "set": set_name, "model": model, "gpu": GPUS[gpu], "tp": tp, "dtype": dtype,
            "kv_dtype": "fp8" if dtype == "fp8" else dtype, "concurrency": conc, "prompt_len": isl, "output_len": osl,
            "measured": {"ttft_s": ttft_s, "itl_s": itl_s, "output_tokens_per_s": tput}}


def build_cases(src: Path) -> list[dict]:
    """The rows of the three source CSVs, unchanged but for units (ms and ns to s)."""
    cases = []
    for name, model in DOCS_FILES.items():
        for r in csv.DictReader((src / name).open()):
            count = int(r.get("hardware_count") or r["hardware count"])
            cases.append(_case("nim-docs", len(cases), model, r["hardware"], count, r["data_type"], int(r["concurrency"]),
                               int(r["input_tokens"]), int(r["output_tokens"]), float(r["TTFT_ms"]) / 1e3,
                               float(r["ITL_ms"]) / 1e3, float(r["Throughput_tokens_per_s"])))
    for r in csv.DictReader((src / DLI_FILE).open()):
        cases.append(_case("nim-dli", len(cases), DLI_MODELS[r["task_inputs-model"]], r["task_inputs-GPU"],
                           int(r["task_inputs-n_gpus"]), r["task_inputs-precision"], int(r["input_config-concurrency"]),
                           round(float(r["num_input_token-avg"])), round(float(r["num_output_token-avg"])),
                           float(r["time_to_first_token-avg"]) / 1e9, float(r["inter_token_latency-avg"]) / 1e9,
                           float(r["output_token_throughput-avg"])))
    return cases


def predict_case(case: dict, variant: dict, costs: dict) -> dict[str, float]:
    model = case["model"]
    spec = load_model(str(ROOT / model) if model.endswith(".json") else model)
    ceil = resolve_ceilings(case["gpu"])
    opts = ServeOptions(tp=case["tp"], dtype=case["dtype"], kv_dtype=case["kv_dtype"], **variant)
    key = (model, case["gpu"], case["tp"], case["dtype"], tuple(sorted(variant.items())))
    cost = costs.setdefault(key, iteration_cost(spec, ceil, opts))
    c = case["concurrency"]
    n = 4 * c + 20
    work = from_trace([(0.0, case["prompt_len"], case["output_len"])] * n, case["id"], 0, c)
    lat = simulate(spec, ceil, work, opts, cost).latencies
    scored = range(c, n)
    e2e = statistics.fmean(lat["e2e"][i] for i in scored)
    return {"ttft_s": statistics.fmean(lat["ttft"][i] for i in scored),
            "itl_s": statistics.fmean(lat["tpot"][i] for i in scored) if case["output_len"] > 1 else float("nan"),
            "output_tokens_per_s": c * case["output_len"] / e2e}


def predict() -> None:
    cases, costs = json.loads(CASES.read_text())["cases"], {}
    out = {c["id"]: {name: predict_case(c, v, costs) for name, v in VARIANTS.items()} for c in cases}
    write_predictions(PREDICTIONS, VARIANTS, out, ("mlsyscalc", "model_specs", "reports/serving/specs", "scripts"))


def score() -> None:
    data, pred = json.loads(CASES.read_text()), json.loads(PREDICTIONS.read_text())
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for c in data["cases"]:
        for variant in VARIANTS:
            for m in METRICS:
                got, want = pred["predictions"][c["id"]][variant][m], c["measured"][m]
                if got != got or want <= 0:  # NaN: a one-token output has no ITL
                    continue
                band = "1" if c["concurrency"] == 1 else (">= 16" if c["concurrency"] >= 16 else "2-15")
                for key in ((c["set"], variant, m, band), (c["set"], variant, m, "all")):
                    groups.setdefault(key, []).append(got / want - 1)
    lines = ["# `mlsys serve` against NVIDIA NIM's concurrency sweeps", "",
             f"Generated by `python scripts/validate/serve_published_nim.py score` from `reports/serving/published_nim.json` "
             f"(cases, sources, method) and `reports/serving/predictions_nim.json` (made at commit {pred['commit'][:10]} "
             "and committed before this page was first generated).", "",
             *[f"- **{k}**: {v}" for k, v in data["sets"].items()], "", data["method"], ""]
    rows = [[s, v, m, band, *error_stats(e)] for (s, v, m, band), e in sorted(groups.items())]
    lines += markdown_table(["set", "variant", "metric", "concurrency", "cases", "median |error|", "worst |error|",
                             "median signed"], rows, "llllrrrr")
    write_page(PAGE, lines, data)


def write_cases(src: Path) -> None:
    replace_cases(CASES, build_cases(src))


def main() -> None:
    run_steps(__doc__.splitlines()[0], "cases: the folder with the source CSVs", write_cases, predict, score)


if __name__ == "__main__":
    main()
