"""Published training runs against `mlsys train` and `mlsys plan`: reports/train/published.md.

    python scripts/validate/train_published.py [--runs reports/train/published_runs.json]
                                      [--out reports/train/published.md] [--no-plan] [--only GROUP]
    python scripts/validate/train_published.py --runs RUNS --predict PREDICTIONS.json   # held-out sets: predict first,
    python scripts/validate/train_published.py --runs RUNS --score PREDICTIONS.json --out PAGE.md   # commit, then score
    python scripts/validate/train_rescore.py reports/train/heldout_rescored.md   # in-sample, after changes

Each run of the runs file (paper, table, layout, one published number) goes through `mlsys train`
in-process (click's CliRunner, --json); the page lists predicted against published, the error
(predicted - published) / published, the mean and median |error| per group and overall, and the
citation. With plans on, `mlsys plan --top 1` searches the same GPUs, sequence and global batch: its
best layout must never be slower, by the model's own reckoning, than the layout the paper used.

Comparing like with like:
- step_time_s: the iteration time as published (no FLOP convention involved).
- hardware_tflops_per_gpu with a `flop_formula`: the paper's own FLOP count of one step divided by its
  TFLOP/s and GPUs is the step time it measured; that is compared with `step_time_s`, so no FLOP
  convention of ours enters (Narayanan et al. 2021, eq. 3: 96 B s l h^2 (1 + s / 6h + V / 16 l h)).
- hardware_tflops_per_gpu without one: predicted = tflops_per_gpu x hfu / mfu.
- tokens_per_s_per_gpu: compared as the step time it implies (global batch x sequence / (rate x GPUs)).
- model_tflops_per_gpu, mfu: model FLOPs only; predicted = tflops_per_gpu, mfu (our convention: causal
  attention halved; the paper's may differ, which the runs file says).
`tflops_per_gpu` in `mlsys train` JSON is in FLOP/s (base units).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from mlsyscalc.calc.plan.space import TORCH_EXCLUDED

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

Runner = Callable[[list[str]], dict[str, Any]]  # CLI arguments -> the command's JSON (raises on failure)

PREDICTED = {  # published metric -> how to read the same quantity from `mlsys train` JSON
    "step_time_s": lambda r: r["step_time_s"],
    "hardware_tflops_per_gpu": lambda r: r["tflops_per_gpu"] / 1e12 * r["hfu"] / r["mfu"],
    "model_tflops_per_gpu": lambda r: r["tflops_per_gpu"] / 1e12,
    "mfu": lambda r: r["mfu"],
    "tokens_per_s_per_gpu": lambda r: r["tokens_per_s"] / r["gpus"],
}


def narayanan_eq3_flops(run: dict[str, Any]) -> float:
    """FLOPs of one step as Narayanan et al. 2021 count them (eq. 3, full recomputation included)."""
    c, lay = run["config"], run["layout"]
    layers, h = c.get("n_layer", c.get("num_hidden_layers")), c.get("n_embd", c.get("hidden_size"))
    b, s, v = lay["global_batch"], lay["seq"], c["vocab_size"]
    return 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


FLOP_FORMULAS = {"narayanan2021-eq3": narayanan_eq3_flops}


def published_target(run: dict[str, Any]) -> tuple[str, float]:
    """(metric compared, published value): a TFLOP/s with the paper's FLOP formula becomes its step time."""
    metric, value = run["published"]["metric"], float(run["published"]["value"])
    if metric == "tokens_per_s_per_gpu":  # a step's tokens over the measured rate is the measured step time
        lay = run["layout"]
        return "step_time_s", lay["global_batch"] * lay["seq"] / (value * run["gpus"])
    formula = run.get("flop_formula")
    if formula:
        return "step_time_s", FLOP_FORMULAS[formula](run) / (value * 1e12 * run["gpus"])
    return metric, value
UNITS = {"step_time_s": "s", "hardware_tflops_per_gpu": "TFLOP/s", "model_tflops_per_gpu": "TFLOP/s", "mfu": "",
         "tokens_per_s_per_gpu": "tokens/s"}


def cli_runner() -> Runner:
    """`mlsys ARGS --json` in this process; a non-zero exit raises with the command's stderr line."""
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    runner = CliRunner()

    def run(args: list[str]) -> dict[str, Any]:
        result = runner.invoke(cli, [*args, "--json"], catch_exceptions=False)
        if result.exit_code != 0:
            raise RuntimeError((result.stderr or result.stdout).strip().splitlines()[-1])
        return json.loads(result.stdout)
    return run


def builtin_config(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The HF config of a built-in model (model_specs/models/NAME.json) with `overrides` applied."""
    data = json.loads((ROOT / "model_specs/models" / f"{name}.json").read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")} | overrides


def model_ref(run: dict[str, Any], folder: Path) -> str:
    """A built-in name, or the run's config (HF-style, or a built-in's with `overrides`) written to folder."""
    if "model" in run and not run.get("overrides"):
        return run["model"]
    config = run["config"] if "config" in run else builtin_config(run["model"], run["overrides"])
    path = folder / ("".join(c if c.isalnum() else "_" for c in run["name"]) + ".json")
    path.write_text(json.dumps(config))
    return str(path)


def cluster_ref(run: dict[str, Any]) -> str:
    """A built-in cluster name, or a cluster JSON file given relative to the repository (reports/train/clusters)."""
    return str(ROOT / run["cluster"]) if run["cluster"].endswith(".json") else run["cluster"]


def train_args(run: dict[str, Any], model: str) -> list[str]:
    lay = run["layout"]
    args = ["train", model, "--gpus", str(run["gpus"]), "--cluster", cluster_ref(run), "--seq", str(lay["seq"]),
            "--global-batch", str(lay["global_batch"]), "--micro-batch", str(lay["micro_batch"])]
    for key in ("tp", "pp", "dp", "cp", "vp", "zero"):
        if key in lay:
            args += [f"--{key}", str(lay[key])]
    args += ["--sp" if lay.get("sp") else "--no-sp", "--recompute", lay["recompute"], "--dtype", lay["dtype"]]
    return (args + framework_args(lay) + attention_args(lay) + split_args(lay) + overlap_args(lay) + fp8_args(lay)
            + (["--ep", str(lay["ep"])] if "ep" in lay else [])
            + (["--etp", str(lay["etp"])] if "etp" in lay else [])
            + (["--schedule", lay["schedule"]] if "schedule" in lay else [])
            + (["--dropout", str(lay["dropout"])] if lay.get("dropout") else [])
            + (["--loss", lay["loss"]] if "loss" in lay else [])
            + (["--grad-reduce", lay["grad_reduce"]] if "grad_reduce" in lay else []))


def overlap_args(lay: dict[str, Any]) -> list[str]:
    """--overlap and --comm-sms of the run (what hides behind compute, the SMs its communication holds), if named."""
    return ((["--overlap", lay["overlap"]] if "overlap" in lay else [])
            + (["--comm-sms", str(lay["comm_sms"])] if "comm_sms" in lay else []))


SPLIT_COUNTS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
SPLIT_FLAGS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def split_args(lay: dict[str, Any]) -> list[str]:
    """Megatron-LM's uneven pipeline options the layout names (the layers the run's stages held)."""
    counts = [a for k in SPLIT_COUNTS if k in lay for a in (f"--{k.replace('_', '-')}", str(lay[k]))]
    return counts + [f"--{k.replace('_', '-')}" for k in SPLIT_FLAGS if lay.get(k)]


def fp8_args(lay: dict[str, Any]) -> list[str]:
    """Transformer Engine's FP8 recipe and FP8 parameters of the run, if the layout names them (train and plan)."""
    return ((["--fp8-recipe", lay["fp8_recipe"]] if "fp8_recipe" in lay else [])
            + (["--fp8-params"] if lay.get("fp8_params") else []))


def framework_args(lay: dict[str, Any]) -> list[str]:
    """--framework of the run (torch for plain-PyTorch training code: its kernels, host and memory rules), if named."""
    return ["--framework", lay["framework"]] if "framework" in lay else []


def attention_args(lay: dict[str, Any]) -> list[str]:
    """--attention of the run (Megatron-LM's unfused core before flash attention), if the layout names it."""
    return ["--attention", lay["attention"]] if "attention" in lay else []


def plan_args(run: dict[str, Any], model: str) -> list[str]:
    lay = run["layout"]
    return ["plan", model, "--gpus", str(run["gpus"]), "--cluster", cluster_ref(run), "--seq", str(lay["seq"]),
            "--global-batch", str(lay["global_batch"]), "--dtype", lay["dtype"], "--top", "1", *attention_args(lay),
            *overlap_args(lay), *fp8_args(lay), *framework_args(lay)]


def evaluate(run: dict[str, Any], runner: Runner, folder: Path, plan: bool) -> dict[str, Any]:
    """One table row: published, predicted, error; the plan's best step time beside the paper layout's."""
    metric, published = published_target(run)
    row: dict[str, Any] = {"name": run["name"], "group": run["group"], "metric": metric, "published": published,
                           "as_published": f"{run['published']['value']} ({run['published']['metric']})",
                           "measurement": run["measurement"], "citation": run["citation"], "assumed": run.get("assumed", []),
                           "held_out": bool(run.get("held_out"))}
    model = model_ref(run, folder)
    try:
        result = runner(train_args(run, model))
    except Exception as exc:  # a layout the calculator refuses is a row with its reason, not a crash
        return row | {"failure": f"train: {exc}"}
    predicted = PREDICTED[metric](result)
    row |= {"predicted": predicted, "error": (predicted - published) / published, "fits": result.get("fits"),
            "paper_layout_step_time_s": result["step_time_s"]}
    lay = run["layout"]
    excluded, values, _ = TORCH_EXCLUDED["zero"]  # the ZeRO stages `mlsys plan --framework torch` leaves out
    if lay.get("framework") == "torch" and excluded(lay.get("zero", 0)):
        row["outside_search"] = f"the paper's ZeRO-{lay['zero']} is outside --framework torch's search (not {values})"
    if plan:
        try:
            best = runner(plan_args(run, model))["candidates"][0]
            row |= {"plan_step_time_s": best["step_time_s"], "plan_layout": best["layout"],
                    "plan_not_worse": best["step_time_s"] <= result["step_time_s"] * (1 + 1e-9)}
        except Exception as exc:
            row["plan_failure"] = f"plan: {exc}"
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per group, 'all' and 'held out' (runs priced once, after the model was fixed): mean, median, max |error|."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if "error" in r:
            groups.setdefault(r["group"], []).append(abs(r["error"]))
    groups["all"] = [e for g in list(groups.values()) for e in g]
    held_out = [abs(r["error"]) for r in rows if "error" in r and r.get("held_out")]
    if held_out:
        groups["held out"] = held_out
    return {g: {"runs": len(e), "mean_abs_error": statistics.fmean(e), "median_abs_error": statistics.median(e),
                "max_abs_error": max(e)} for g, e in groups.items()}


def _fmt(value: float, metric: str) -> str:
    return f"{100 * value:.1f}%" if metric == "mfu" else f"{value:.3g} {UNITS[metric]}"


def _plan_cell(r: dict[str, Any]) -> str:
    if "plan_failure" in r:
        return r["plan_failure"]
    if "plan_step_time_s" not in r:
        return "-"
    verdict = "ok" if r["plan_not_worse"] else "WORSE"
    if not r["plan_not_worse"] and r.get("fits") is False:  # the search drops layouts over memory
        verdict = "paper layout over memory by the model, so not searched"
    elif not r["plan_not_worse"] and r.get("outside_search"):
        verdict = r["outside_search"]
    return f"{r['plan_step_time_s']:.3g} s vs {r['paper_layout_step_time_s']:.3g} s ({verdict}); {_plan_layout(r)}"


PLAN_AXES = (("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"), ("vp", "vp"), ("micro_batch", "mb"),
             ("zero", "ZeRO"), ("recompute", "recompute"))


def _plan_layout(r: dict[str, Any]) -> str:
    """The plan's best layout, short: its axes and, for an uneven pipeline, Megatron-LM's split options."""
    from mlsyscalc.calc.parallel.pipeline_split import split_text

    lay = r.get("plan_layout", {})
    split = split_text(lay)
    axes = [f"{name} {lay[key]}" + (f" ({split})" if key == "pp" and split else "")
            for key, name in PLAN_AXES if key in lay]
    return "plan: " + ", ".join(axes)


def render(rows: list[dict[str, Any]], summary: dict[str, dict[str, float]], command: str, provenance: str = "") -> str:
    from mlsyscalc.report.markdown import markdown_table

    table = [[r["name"] + (" (held out)" if r.get("held_out") else ""), r["as_published"],
              _fmt(r["published"], r["metric"]),
              _fmt(r["predicted"], r["metric"]) if "predicted" in r else r.get("failure", "-"),
              f"{100 * r['error']:+.1f}%" if "error" in r else "-", ", ".join(r["assumed"]) or "-",
              _plan_cell(r), f"{r['citation']['paper'].split(',')[0]}, {r['citation']['table'].split(' (')[0]}"]
             for r in rows]
    stats = [[g, s["runs"], f"{100 * s['mean_abs_error']:.1f}%", f"{100 * s['median_abs_error']:.1f}%",
              f"{100 * s['max_abs_error']:.1f}%"] for g, s in summary.items()]
    papers = sorted({f"- {r['citation']['paper']}: {r['citation']['table']}" for r in rows})
    lines = ["# `mlsys train` against published training runs", "", *([provenance, ""] if provenance else []),
             "error = (predicted - published) / published. A TFLOP/s figure is compared as the step time the "
             "paper's own FLOP formula gives it (so no FLOP convention of ours enters). Every published number is a measurement unless "
             "the runs file says otherwise; `assumed` lists layout fields the paper does not give; (held out): "
             "a run added after the model was fixed and priced once, nothing changed to fit it. plan: the "
             "best step time `mlsys plan --top 1` finds for the same GPUs, sequence and global batch, against "
             "the paper's layout, both by the model's own reckoning (WORSE would be a search bug), and the plan's "
             "layout (an uneven pipeline names Megatron-LM's split options: first N / last N = "
             "--decoder-first/last-pipeline-num-layers, emb / loss = --account-for-embedding/loss-in-pipeline-split).",
             "",
             *markdown_table(["run", "as published", "compared", "predicted", "error", "assumed", "plan vs paper layout",
                              "source"], table, "llrrrlll"), "",
             "## |error| by group", "",
             *markdown_table(["group", "runs", "mean", "median", "max"], stats), "",
             "## Sources", "", *papers, "",
             f"Regenerate: `{command}`", ""]
    return "\n".join(lines)


def compared_metric(run: dict[str, Any]) -> str:
    """The quantity a run is compared in (published_target's metric), read without its published value."""
    metric = run["published"]["metric"]
    return "step_time_s" if metric == "tokens_per_s_per_gpu" or run.get("flop_formula") else metric


def git_state() -> tuple[str, bool]:
    """(HEAD, whether tracked files differ from it)."""
    import subprocess

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--"], capture_output=True).returncode != 0
    return head, dirty


def predict(runs: list[dict[str, Any]], runner: Runner, runs_path: str, split: str | None = None) -> dict[str, Any]:
    """Every run's prediction with the commit that made it, reading no published value (the held-out protocol:
    predictions are committed before the set is scored; docs/train.md, "Held-out protocol")."""
    head, dirty = git_state()
    if dirty:
        raise SystemExit("train_published --predict: commit first (tracked files differ from HEAD), so that the "
                         "predictions name the code that made them")
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for run in runs:
            entry: dict[str, Any] = {"name": run["name"], "metric": compared_metric(run)}
            try:
                result = runner(train_args(run, model_ref(run, Path(folder))))
            except Exception as exc:  # a refused layout is a prediction of its own: the reason
                entry["failure"] = f"train: {exc}"
            else:
                entry |= {"predicted": PREDICTED[entry["metric"]](result), "step_time_s": result["step_time_s"],
                          "mfu": result["mfu"], "fits": result["fits"], "breakdown": result["breakdown"]}
            out.append(entry)
            print(f"{run['name']}: {entry.get('predicted', entry.get('failure'))}", file=sys.stderr, flush=True)
    return {"commit": head, "runs_file": str(Path(runs_path).resolve().relative_to(ROOT)),
            "command": f"python scripts/validate/train_published.py --runs {Path(runs_path).resolve().relative_to(ROOT)}"
                       + (f" --split {split}" if split else "") + " --predict PREDICTIONS.json", "predictions": out}


def committed(path: Path) -> bool:
    import subprocess

    rel = str(path.resolve().relative_to(ROOT))
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--error-unmatch", rel], capture_output=True)
    changed = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", rel], capture_output=True)
    return tracked.returncode == 0 and changed.returncode == 0


def score(runs: list[dict[str, Any]], predictions: dict[str, Any]) -> list[dict[str, Any]]:
    """Each run's committed prediction against its published number: error = (predicted - published) / published."""
    by_name = {p["name"]: p for p in predictions["predictions"]}
    rows = []
    for run in runs:
        metric, published = published_target(run)
        p = by_name.get(run["name"], {"failure": "no prediction"})
        row: dict[str, Any] = {"name": run["name"], "group": run["group"], "metric": metric, "published": published,
                               "as_published": f"{run['published']['value']} ({run['published']['metric']})",
                               "measurement": run["measurement"], "citation": run["citation"],
                               "assumed": run.get("assumed", []), "held_out": True}
        if "predicted" in p:
            row |= {"predicted": p["predicted"], "error": (p["predicted"] - published) / published}
        else:
            row["failure"] = p.get("failure", "no prediction")
        rows.append(row)
    return rows


def signed_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per group and over all: runs, median and worst |error|, median signed error (negative: predicted fast)."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if "error" in r:
            groups.setdefault(r["group"], []).append(r["error"])
    groups["all"] = [e for g in list(groups.values()) for e in g]
    return {g: {"runs": len(e), "median_abs_error": statistics.median(abs(x) for x in e),
                "max_abs_error": max(abs(x) for x in e), "median_signed_error": statistics.median(e),
                "within_25": sum(abs(x) <= 0.25 for x in e), "within_10": sum(abs(x) <= 0.10 for x in e)}
            for g, e in groups.items() if e}


def render_scored(rows: list[dict[str, Any]], predictions: dict[str, Any], predictions_path: str) -> str:
    from mlsyscalc.report.markdown import markdown_table

    table = [[r["name"], r["as_published"], _fmt(r["published"], r["metric"]),
              _fmt(r["predicted"], r["metric"]) if "predicted" in r else r.get("failure", "-"),
              f"{100 * r['error']:+.1f}%" if "error" in r else "-", ", ".join(r["assumed"]) or "-"] for r in rows]
    summary = signed_summary(rows)
    stats = [[g, s["runs"], f"{100 * s['median_abs_error']:.1f}%", f"{100 * s['max_abs_error']:.1f}%",
              f"{100 * s['median_signed_error']:+.1f}%", s["within_10"], s["within_25"]] for g, s in summary.items()]
    return "\n".join([
        "# `mlsys train` on held-out published runs, scored after the predictions were committed", "",
        f"Predictions: `{predictions_path}`, made at commit `{predictions['commit']}` by `{predictions['command']}` "
        "and committed before this page was written; every run was priced once. error = (predicted - published) / "
        "published (negative: the prediction is faster than the run).", "",
        *markdown_table(["run", "as published", "compared", "predicted", "error", "assumed"], table, "llrrrl"), "",
        "## Errors by group", "",
        *markdown_table(["group", "runs", "median |error|", "worst |error|", "median signed", "within 10%",
                         "within 25%"], stats), "",
        f"Regenerate: `python scripts/validate/train_published.py --runs {predictions['runs_file']}"
        + (" --split held_out" if "--split held_out" in predictions["command"] else "")
        + f" --score {predictions_path} --out PAGE.md`", ""])


def main(argv: list[str] | None = None, runner: Runner | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=str(ROOT / "reports/train/published_runs.json"))
    parser.add_argument("--out", default=str(ROOT / "reports/train/published.md"))
    parser.add_argument("--no-plan", action="store_true", help="skip the `mlsys plan` comparison")
    parser.add_argument("--only", help="only the runs of this group")
    parser.add_argument("--split", help="only the runs whose `split` is this (fit or held_out: the llm-foundry set)")
    parser.add_argument("--provenance", default="", help="a line under the title: the code state that computed it")
    parser.add_argument("--predict", metavar="FILE", help="write every run's prediction and the commit, score nothing")
    parser.add_argument("--score", metavar="FILE", help="score the committed predictions FILE against the runs")
    args = parser.parse_args(argv)
    runs = [r for r in json.loads(Path(args.runs).read_text())["runs"]
            if args.only in (None, r["group"]) and args.split in (None, r.get("split"))]
    if args.score:
        if not committed(Path(args.score)):
            raise SystemExit(f"train_published --score: {args.score} is not committed as it stands; commit the "
                             "predictions before scoring them")
        predictions = json.loads(Path(args.score).read_text())
        rows = score(runs, predictions)
        Path(args.out).write_text(render_scored(rows, predictions, str(Path(args.score).resolve().relative_to(ROOT))))
        return rows
    runner = runner or cli_runner()
    if args.predict:
        Path(args.predict).write_text(json.dumps(predict(runs, runner, args.runs, args.split), indent=1) + "\n")
        return []
    with tempfile.TemporaryDirectory() as folder:
        rows = []
        for run in runs:
            rows.append(evaluate(run, runner, Path(folder), not args.no_plan))
            print(f"{run['name']}: {rows[-1].get('error', rows[-1].get('failure'))}", file=sys.stderr, flush=True)
    summary = summarize(rows)
    command = "python scripts/validate/train_published.py" + (" --no-plan" if args.no_plan else "")
    Path(args.out).write_text(render(rows, summary, command, args.provenance))
    return rows


if __name__ == "__main__":
    main()
