"""Published results on the 2026 hardware against mlsys: predict first, commit, then score.

    python scripts/validate/hardware_published.py --predict   # writes reports/hardware/predictions.json (no published value read)
    git add reports/hardware/predictions.json && git commit ...
    python scripts/validate/hardware_published.py --score     # writes reports/hardware/published.md

--predict needs a clean checkout (the commit it records is the code that made the numbers) and reads only each case's
inputs from reports/hardware/published.json, never its `published` value. --score refuses predictions.json when it is
not committed or has changed since its commit.

Comparing like with like:
- train (`tokens_per_s_per_gpu`): compared as step times, the published one global batch x sequence / (rate x GPUs), as
  scripts/validate/train_published.py does; error = (predicted step - published step) / published step (negative: predicted
  faster). The step is `mlsys train` in-process with the case's layout on the case's cluster.
- serve (`output_tokens_per_s`): output tokens / makespan of the simulated run (`calc.serve.simulator.simulate`, all requests at
  once, datasheet ceilings); error = (predicted - published) / published.
- latency (`latency_s`): the simulated end of the batch's last request; error as serve.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "reports" / "hardware" / "published.json"
PREDICTIONS = ROOT / "reports" / "hardware" / "predictions.json"
OUT = ROOT / "reports" / "hardware" / "published.md"
GOAL = 0.15  # the goal: a B200 or GB200 published result within 15%


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def train_args(case: dict[str, Any]) -> list[str]:
    """`mlsys train` arguments of a training case (its layout on its cluster)."""
    lay = case["layout"]
    args = ["train", case["model"], "--cluster", case["cluster"], "--gpus", str(case["gpus"]), "--seq", str(lay["seq"]),
            "--global-batch", str(lay["global_batch"]), "--micro-batch", str(lay["micro_batch"])]
    for key in ("tp", "pp", "cp", "vp", "dp", "zero"):
        args += [f"--{key}", str(lay[key])]
    args += ["--recompute", lay["recompute"], "--dtype", lay["dtype"]]
    args += ["--fp8-recipe", lay["fp8_recipe"]] if "fp8_recipe" in lay else []
    args += ["--fp8-params"] if lay.get("fp8_params") else []
    args += ["--overlap", lay["overlap"]] if "overlap" in lay else []
    for flag in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        args += [f"--{flag.replace('_', '-')}"] if lay.get(flag) else []
    return args + ["--json"]


def predict_train(case: dict[str, Any]) -> dict[str, Any]:
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    args = train_args(case)
    result = CliRunner().invoke(cli, args)
    if result.exit_code:
        return {"error": (result.stderr or result.output).strip(), "command": "mlsys " + " ".join(args)}
    data = json.loads(result.stdout)
    return {"step_time_s": data["step_time_s"], "tokens_per_s_per_gpu": data["tokens_per_s"] / data["gpus"],
            "fits": data["fits"], "memory_bytes_per_gpu": data["memory_bytes_per_gpu"],
            "command": "mlsys " + " ".join(args)}


def predict_serve(case: dict[str, Any]) -> dict[str, Any]:
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
    from mlsyscalc.calc.serve.workload import from_trace
    from mlsyscalc.specs.lookup import load_model

    w = case["workload"]
    spec = load_model(case["model"], case.get("overrides") or None)
    work = from_trace([(0.0, w["prompt_len"], w["output_len"])] * w["requests"], case["id"])
    opts = ServeOptions(scheduler=case["scheduler"], max_seqs=case["max_seqs"], max_batch_tokens=case["max_batch_tokens"],
                        tp=case["tp"], dtype=case["dtype"], kv_dtype=case["kv_dtype"],
                        gpu_memory_utilization=case["gpu_memory_utilization"])
    m = simulate(spec, resolve_ceilings(case["gpu"]), work, opts).metrics
    return {"output_tokens_per_s": m["throughput_tokens_per_s"], "latency_s": m["e2e_p99_s"], "ttft_p50_s": m["ttft_p50_s"],
            "tpot_p50_s": m["tpot_p50_s"]}


def predict(cases: list[dict[str, Any]]) -> dict[str, Any]:
    out = []
    for case in cases:
        inputs = {k: v for k, v in case.items() if k != "published"}  # the published value is never read here
        numbers = predict_train(inputs) if case["kind"] == "train" else predict_serve(inputs)
        out.append({"id": case["id"], **numbers})
        print(f"{case['id']}: " + ", ".join(f"{k} {v:.4g}" for k, v in numbers.items() if isinstance(v, float)),
              file=sys.stderr)
    return {"about": "Predictions of reports/hardware/published.json's cases, made before they were scored (commit: the "
                     "code that made them; scripts/validate/hardware_published.py --predict).", "commit": _git("rev-parse", "HEAD"),
            "predictions": out}


def error(case: dict[str, Any], pred: dict[str, Any]) -> tuple[float, float, float] | None:
    """(published, predicted, relative error) in the compared quantity; None when the prediction failed."""
    if "error" in pred:
        return None
    metric, value = case["published"]["metric"], float(case["published"]["value"])
    if metric == "tokens_per_s_per_gpu":  # a step's tokens over the measured rate is the measured step time
        lay = case["layout"]
        published = lay["global_batch"] * lay["seq"] / (value * case["gpus"])
        return published, pred["step_time_s"], pred["step_time_s"] / published - 1
    return value, pred[metric], pred[metric] / value - 1


def summary(errors: list[float]) -> str:
    if not errors:
        return "0 | - | - | -"
    absolute = [abs(e) for e in errors]
    return (f"{len(errors)} | {100 * statistics.median(absolute):.1f}% | {100 * max(absolute):.1f}% | "
            f"{100 * statistics.median(errors):+.1f}%")


def score(cases: list[dict[str, Any]], made: dict[str, Any]) -> str:
    preds = {p["id"]: p for p in made["predictions"]}
    committed = _git("log", "-1", "--format=%H %cs", "--", str(PREDICTIONS.relative_to(ROOT)))
    lines = ["# Published results on the 2026 hardware against mlsys", "",
             f"Predictions: `reports/hardware/predictions.json`, made by the code at commit {made['commit'][:7]} and "
             f"committed in {committed[:7]} ({committed.split()[1]}) before this page was written by "
             "`python scripts/validate/hardware_published.py --score`. Every card here is priced at datasheet ceilings x the default "
             "efficiencies (no measured ceiling of these cards in this project). error = (predicted - published) / "
             "published of the compared quantity: step time for training (negative: predicted faster), output tokens/s "
             "for serving throughput, seconds for batch latency. Cases, citations and assumptions: "
             "`reports/hardware/published.json`.", "",
             "| case | compared | published | predicted | error | assumed | source |", "| :--- | :--- | ---: | ---: | ---: | :--- | :--- |"]
    groups: dict[str, list[float]] = {}
    for case in cases:
        got = error(case, preds[case["id"]])
        if got is None:
            lines.append(f"| {case['id']} | - | - | - | failed: {preds[case['id']]['error']} | | |")
            continue
        pub, pred, err = got
        quantity = "step s" if case["kind"] == "train" else case["published"]["metric"]
        groups.setdefault(case["group"], []).append(err)
        lines.append(f"| {case['id']} | {quantity} | {pub:.4g} | {pred:.4g} | {100 * err:+.1f}% | "
                     f"{'; '.join(case.get('assumed', []))} | {case['citation']['table']} |")
    everything = [e for errs in groups.values() for e in errs]
    blackwell = [e for g, errs in groups.items() if "b200" in g for e in errs]
    lines += ["", "## |error| by group", "", "| group | cases | median \\|error\\| | worst \\|error\\| | median signed error |",
              "| :--- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {g} | {summary(errs)} |" for g, errs in groups.items()]
    lines += [f"| B200 and GB200 | {summary(blackwell)} |", f"| all | {summary(everything)} |", "",
              f"Goal (a B200 or GB200 published result within {100 * GOAL:.0f}%): "
              f"{sum(abs(e) <= GOAL for e in blackwell)} of {len(blackwell)} B200/GB200 cases within it.", "",
              "## Sources", ""]
    lines += sorted({f"- {c['citation']['source']}" for c in cases})
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--predict", action="store_true")
    mode.add_argument("--score", action="store_true")
    args = parser.parse_args()
    cases = json.loads(CASES.read_text())["cases"]
    if args.predict:
        if _git("status", "--porcelain", "--", "mlsyscalc", "model_specs", "scripts", str(CASES.relative_to(ROOT))):
            sys.exit("commit the code and the cases first: the predictions record the commit that made them")
        PREDICTIONS.write_text(json.dumps(predict(cases), indent=1) + "\n")
        print(f"wrote {PREDICTIONS}; commit it before --score")
        return
    rel = str(PREDICTIONS.relative_to(ROOT))
    if not _git("ls-files", rel) or _git("status", "--porcelain", "--", rel):
        sys.exit(f"{rel} is not committed as it is: commit the predictions before scoring them")
    OUT.write_text(score(cases, json.loads(PREDICTIONS.read_text())))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
