"""How far to trust a time prediction: each command's error on runs it was not developed on, for
model_specs/intervals.json (what `mlsys train`, `plan`, `serve` and `roofline --impl torch` print beside a time).

    python scripts/validate/intervals.py            # writes model_specs/intervals.json

For every source the error of a run is e = predicted / measured - 1, and the printed range is where the measured
time lies relative to the prediction, 1 / (1 + e) - 1, at its 10th and 90th percentiles over the runs (80% of
them), with the median. Sources:
- train (and plan, which prices with it), and train_moe (the MoE runs among them, what train and plan print for a
  model with routed experts): the committed predictions of the held-out published runs
  (reports/train/heldout_dgxc/predictions.json, reports/train/llm_foundry_fitset/predictions_held_out.json,
  reports/train/heldout_public/predictions.json, reports/train/heldout_public_rest/predictions.json,
  reports/train/heldout_bridge_mlperf6/predictions.json, reports/train/heldout_moe26/predictions.json), scored
  against their runs files (scripts/validate/train_published.py --score reads the same).
- serve TTFT and TPOT (p50 at the runs' concurrency): the held-out NVIDIA NIM sweep (set `nim-dli` of
  reports/serving/published_nim.json) against the committed predictions of its default variant
  (reports/serving/predictions_nim.json), and the held-out vLLM 0.11 runs (reports/serving/published_vllm.json
  against predictions_vllm.json).
- roofline with --impl torch, per phase: the whole-model steps of reports/models/h100*.jsonl of the models held
  out of its calibration, replayed from CUDA graphs, against today's uncalibrated prediction (H100 SXM datasheet).
  Several efficiency classes were read off rows of these files, so this range is optimistic; the page says so.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/
OUT = ROOT / "model_specs" / "intervals.json"
COVERAGE = 0.8
MODELS_HELD_OUT = ("falcon-40b", "falcon-7b", "gemma2-9b", "gpt2-xl", "llama2-13b", "llama3-70b", "llama3-8b",
                   "mistral-7b", "opt-350m", "opt-6.7b", "phi-2", "phi3-mini", "qwen2.5-0.5b")  # reports/models README


def spread(errors: list[float], source: str, note: str) -> dict[str, Any]:
    """The measured time relative to the prediction, 1 / (1 + e) - 1: its 10th, 50th and 90th percentiles."""
    rel = sorted(1.0 / (1.0 + e) - 1.0 for e in errors)
    q = statistics.quantiles(rel, n=10, method="inclusive")
    return {"runs": len(rel), "low": q[0], "median": statistics.median(rel), "high": q[-1], "coverage": COVERAGE,
            "source": source, "note": note}


# (runs file, committed predictions, the runs' split that was held out; None: every run)
TRAIN_SETS = (("reports/train/heldout_dgxc/runs.json", "reports/train/heldout_dgxc/predictions.json", None),
              ("reports/train/llm_foundry_fitset/runs.json", "reports/train/llm_foundry_fitset/predictions_held_out.json",
               "held_out"),
              ("reports/train/heldout_public/runs.json", "reports/train/heldout_public/predictions.json", None),
              ("reports/train/heldout_public_rest/runs.json", "reports/train/heldout_public_rest/predictions.json", None),
              ("reports/train/heldout_bridge_mlperf6/runs.json", "reports/train/heldout_bridge_mlperf6/predictions.json", None),
              ("reports/train/heldout_moe26/runs.json", "reports/train/heldout_moe26/predictions.json", None))


def train_errors() -> tuple[list[float], list[float], str]:
    """Every held-out run's error, the MoE runs' errors (their model has routed experts), and the sources."""
    import tempfile

    import train_published as tp

    from mlsyscalc.specs.lookup import load_model

    errors, moe, sources = [], [], []
    with tempfile.TemporaryDirectory() as scratch:   # a run given as a config is written here to be loaded
        for runs_file, preds_file, split in TRAIN_SETS:
            runs = [r for r in json.loads((ROOT / runs_file).read_text())["runs"] if split in (None, r.get("split"))]
            preds = json.loads((ROOT / preds_file).read_text())
            for run, row in zip(runs, tp.score(runs, preds)):
                if "error" in row:
                    errors.append(row["error"])
                    if load_model(tp.model_ref(run, Path(scratch))).moe is not None:
                        moe.append(row["error"])
            sources.append(f"{preds_file} (made at {preds['commit'][:7]})")
    return errors, moe, "; ".join(sources)


def serve_errors(metric: str) -> list[float]:
    """The held-out serving runs' errors of `metric` (ttft_s or itl_s): the NIM set nim-dli and the vLLM 0.11
    set (whose TPOT is the same (last - first token) / (output - 1) as genai-perf's inter-token latency)."""
    out = []
    for name, keep, vllm_metric in (("nim", "nim-dli", metric), ("vllm", "vllm-gpustack", {"itl_s": "tpot_s"}.get(metric, metric))):
        cases = json.loads((ROOT / f"reports/serving/published_{name}.json").read_text())["cases"]
        preds = json.loads((ROOT / f"reports/serving/predictions_{name}.json").read_text())["predictions"]
        m = metric if name == "nim" else vllm_metric
        out += [preds[c["id"]]["default"][m] / c["measured"][m] - 1 for c in cases
                if c["set"] == keep and c["id"] in preds and c["measured"].get(m)
                and m in preds[c["id"]]["default"]]
    return out


def roofline_errors() -> dict[str, list[float]]:
    from mlsyscalc.bench.cases.model import roofline_options
    from mlsyscalc.bench.model_calibrate import load_cases
    from mlsyscalc.bench.rows import ResultStore
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import predict_model

    rows = [r for path in sorted((ROOT / "reports/models").glob("h100*.jsonl")) for r in ResultStore(path).rows()]
    # the latest measurement of each key, whatever the files are called (a file's name no longer orders them)
    latest = {r.key: r for r in sorted(rows, key=lambda r: str(r.measured_at or ""))}
    base = load_ceilings("H100-SXM")
    out: dict[str, list[float]] = {}
    for c in load_cases(list(latest.values()), set(MODELS_HELD_OUT)):
        if not c.held_out or not c.case.graphs or c.case.tp > 1 or c.case.dp > 1:
            continue
        predicted = predict_model(c.spec, base, roofline_options(c.case)).time_s
        out.setdefault(c.case.phase, []).append(predicted / (c.row.median_ms * 1e-3) - 1)
    return out


def main() -> None:
    errors, moe, source = train_errors()
    intervals = {"train": spread(errors, source, "published runs held out of the model's development, committed "
                                                 "predictions scored after"),
                 "train_moe": spread(moe, source, "the MoE runs among them (routed experts), which the rest would "
                                                  "understate; few runs")}
    for metric, key in (("ttft_s", "serve_ttft"), ("itl_s", "serve_tpot")):
        intervals[key] = spread(serve_errors(metric), "reports/serving/predictions_nim.json, set nim-dli; "
                                "reports/serving/predictions_vllm.json, set vllm-gpustack",
                                "NVIDIA NIM concurrency sweeps and published vLLM 0.11 runs held out of the serving "
                                "defaults, committed before scoring")
    for phase, errs in roofline_errors().items():
        intervals[f"roofline_torch_{phase}"] = spread(
            errs, "reports/models/h100*.jsonl, the held-out models' CUDA-graph steps (H100 80GB HBM3)",
            "models held out of the calibration; some efficiency classes were read off these files' rows, so the "
            "range is optimistic")
    OUT.write_text(json.dumps({"about": __doc__.strip().splitlines()[0], "command": "python scripts/validate/intervals.py",
                               "intervals": intervals}, indent=1) + "\n")
    for k, v in intervals.items():
        print(f"{k}: {v['runs']} runs, measured {100 * v['low']:+.0f}% / {100 * v['high']:+.0f}% of the prediction "
              f"(median {100 * v['median']:+.0f}%)")


if __name__ == "__main__":
    main()
