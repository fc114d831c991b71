"""The pooled held-out sets priced again at this commit, beside their committed predictions: an IN-SAMPLE page.

    python scripts/validate/train_rescore.py reports/train/heldout_rescored.md

The three held-out sets (HELDOUT) were predicted and committed before they were scored (docs/train.md, "Held-out
protocol"); their scored pages and predictions files stay as they are. This page prices every run of them again with
`mlsys train` at HEAD (the tree must be clean, so the page names the code that priced it) and sets each run's error
beside its committed prediction's. Anything changed in the model after a set was scored was made with those errors in
view, so every "after" number here is in-sample.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

import train_published as tp  # noqa: E402

HELDOUT = (  # set name, runs file, split, committed predictions
    ("dgxc-benchmarking v24.11.1", "reports/train/heldout_dgxc/runs.json", None,
     "reports/train/heldout_dgxc/predictions.json"),
    ("public (NeMo, Megatron-LM, torchtitan, MLPerf)", "reports/train/heldout_public/runs.json", None,
     "reports/train/heldout_public/predictions.json"),
    ("llm-foundry held-out rows", "reports/train/llm_foundry_fitset/runs.json", "held_out",
     "reports/train/llm_foundry_fitset/predictions_held_out.json"),
)


def stats(errors: list[float]) -> dict[str, float]:
    return {"runs": len(errors), "median_abs": statistics.median(abs(e) for e in errors),
            "worst": max(abs(e) for e in errors), "signed": statistics.median(errors),
            "within_10": sum(abs(e) <= 0.10 for e in errors), "within_25": sum(abs(e) <= 0.25 for e in errors)}


def rescore(runner: tp.Runner) -> dict[str, Any]:
    """Every held-out run: published, committed prediction (before) and this commit's (after), with their errors."""
    head, dirty = tp.git_state()
    if dirty:
        raise SystemExit("train_rescore: commit first (tracked files differ from HEAD), so that "
                         "the page names the code that priced it")
    rows, commits = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for name, runs_path, split, pred_path in HELDOUT:
            runs = [r for r in json.loads((tp.ROOT / runs_path).read_text())["runs"] if split in (None, r.get("split"))]
            predictions = json.loads((tp.ROOT / pred_path).read_text())
            commits[name] = predictions["commit"]
            before = {p["name"]: p.get("predicted") for p in predictions["predictions"]}
            for run in runs:
                metric, published = tp.published_target(run)
                after = tp.PREDICTED[metric](runner(tp.train_args(run, tp.model_ref(run, Path(folder)))))
                row = {"set": name, "name": run["name"], "group": run["group"], "metric": metric,
                       "published": published, "after": after, "after_error": after / published - 1}
                if before.get(run["name"]) is not None:
                    row |= {"before": before[run["name"]], "before_error": before[run["name"]] / published - 1}
                rows.append(row)
    return {"commit": head, "prediction_commits": commits, "rows": rows}


def _cells(s: dict[str, float]) -> list[str]:
    return [f"{100 * s['median_abs']:.1f}%", f"{100 * s['worst']:.1f}%", f"{100 * s['signed']:+.1f}%",
            f"{s['within_10']}", f"{s['within_25']}"]


def _summary(rows: list[dict[str, Any]], key: str) -> list[list[Any]]:
    out = []
    for label, keep in [(g, lambda r, g=g: r[key] == g) for g in dict.fromkeys(r[key] for r in rows)] + [
            ("pooled", lambda r: True)]:
        kept = [r for r in rows if keep(r)]
        before = [r["before_error"] for r in kept if "before_error" in r]
        after = [r["after_error"] for r in kept]
        out.append([label, len(kept), *(_cells(stats(before)) if before else ["-"] * 5), *_cells(stats(after))])
    return out


def render(result: dict[str, Any]) -> str:
    from mlsyscalc.report.markdown import markdown_table

    rows = result["rows"]
    heads = ["runs", "before: median |error|", "worst", "median signed", "within 10%", "within 25%",
             "after (in-sample): median |error|", "worst", "median signed", "within 10%", "within 25%"]
    commits = "; ".join(f"{name}: `{c}`" for name, c in result["prediction_commits"].items())
    runs = [[r["name"], r["set"].split(" ")[0], tp._fmt(r["published"], r["metric"]),
             tp._fmt(r["before"], r["metric"]) if "before" in r else "-",
             f"{100 * r['before_error']:+.1f}%" if "before_error" in r else "-",
             tp._fmt(r["after"], r["metric"]), f"{100 * r['after_error']:+.1f}%"] for r in rows]
    return "\n".join([
        "# The held-out training runs priced again: IN-SAMPLE", "",
        f"After: every run priced by `mlsys train` at commit `{result['commit']}`. Before: the predictions committed "
        f"before each set was scored ({commits}; their pages: reports/train/heldout_dgxc/scored.md, "
        "reports/train/heldout_public/scored.md, reports/train/llm_foundry_fitset/scored_held_out.md). The model "
        "changes between the two were made after these errors were seen, so the after columns are in-sample: they "
        "say what the changes do on these runs, not how well the model predicts runs it has not seen. error = "
        "(predicted - published) / published (negative: predicted too fast).", "",
        "## By set", "", *markdown_table(["set", *heads], _summary(rows, "set")), "",
        "## By group", "", *markdown_table(["group", *heads], _summary(rows, "group")), "",
        "## Runs", "",
        *markdown_table(["run", "set", "compared", "before", "error", "after", "error"], runs, "llrrrrr"), "",
        "Regenerate: `python scripts/validate/train_rescore.py reports/train/heldout_rescored.md` "
        "(on a clean tree)", ""])


def main(out: str, runner: tp.Runner | None = None) -> dict[str, Any]:
    result = rescore(runner or tp.cli_runner())
    Path(out).write_text(render(result))
    return result


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/validate/train_rescore.py PAGE.md")
    main(sys.argv[1])
