"""The fused list's memory-bound ops against Vidur's public per-kernel profiles, scored only after predicting.

    python scripts/validate/fused_published_vidur.py cases VIDUR_GIT_DIR   # microsoft/vidur -> vidur_cases.json
    python scripts/validate/fused_published_vidur.py predict               # -> predictions.json (commit it)
    python scripts/validate/fused_published_vidur.py score                 # both -> scored.md

The rule (which files, tokens, ops, what a prediction is) is reports/fused/public/RULE.md, fixed before the set
was read. `predict` names the commit that made the predictions and refuses a dirty tree; `score` never
recomputes them. error = predicted / measured - 1 (negative: priced faster than the kernel ran).
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]  # validate/
from serve_scoring import error_stats, run_steps, write_page, write_predictions  # noqa: E402

from mlsyscalc.report.markdown import markdown_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "reports" / "fused" / "public"
CASES = DIR / "vidur_cases.json"
PREDICTIONS = DIR / "predictions.json"
PAGE = DIR / "scored.md"
COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
CARDS = {"a100": "A100-80GB-SXM", "h100": "H100-SXM"}
OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
TOKENS = tuple(2 ** i for i in range(13))  # 1 .. 4096
SEEN = ("h100", "meta-llama/Llama-2-7b-hf", 1, 4096)  # the one row read while the format was identified (RULE.md)
BANDS = ((1, 64, "1-64"), (128, 1024, "128-1024"), (2048, 4096, "2048-4096"))


def _row_name(op: str, gated: bool) -> str:
    """The fused list's row that prices one call of a Vidur op (RULE.md)."""
    if op.endswith("layernorm"):
        return "norm"
    return {"attn_rope": "rotary", "mlp_act": "mlp_act*up" if gated else "mlp_act", "add": "residual_add"}[op]


def _config(model: str, row: dict) -> dict:
    """The model as priced: phi-2 the built-in with the whole head rotated, every other a llama-type config of the
    file's own sizes."""
    if model.endswith("phi-2"):
        return {"builtin": "phi-2", "set": {"partial_rotary_factor": 1.0}}
    hidden, heads = int(row["n_embd"]), int(row["n_head"])
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "num_attention_heads": heads, "num_key_value_heads": int(row["n_kv_head"]),
            "intermediate_size": int(row["n_expanded_embd"]), "num_hidden_layers": 1,
            "vocab_size": int(row["vocab_size"]), "hidden_act": "silu", "rms_norm_eps": 1e-5,
            "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}


def build_cases(src: Path) -> tuple[list[dict], dict[str, dict]]:
    """Every case RULE.md names, from the mlp.csv files of microsoft/vidur at COMMIT in the git directory `src`, and
    each model's config as priced."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(src), *args], check=True, capture_output=True, text=True).stdout

    configs: dict[str, dict] = {}
    paths = [p for p in git("ls-tree", "-r", "--name-only", COMMIT, "data/profiling/compute").split()
             if p.endswith("/mlp.csv") and p.split("/")[3] in CARDS]
    cases = []
    for path in sorted(paths):
        card, model = path.split("/")[3], "/".join(path.split("/")[4:6])
        taken: set[tuple[int, int]] = set()
        for row in csv.DictReader(io.StringIO(git("show", f"{COMMIT}:{path}"))):
            tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
            if tokens not in TOKENS or (tokens, tp) in taken:
                continue
            taken.add((tokens, tp))
            gated = row["use_gated_mlp"] == "True"
            for op in OPS:
                value = row.get(f"time_stats.{op}.median", "")
                if not value:
                    continue  # phi-2 has no post-attention norm
                config = _config(model, row)
                assert configs.setdefault(model, config) == config, f"{path}: the sizes change between rows"
                cases.append({"id": f"{card}|{model}|tp{tp}|{tokens}|{op}", "card": card, "gpu": CARDS[card],
                              "model": model, "tp": tp, "tokens": tokens, "op": op, "row": _row_name(op, gated),
                              "measured_ms": float(value), "seen": (card, model, tp, tokens) == SEEN})
    return cases, configs


def _model_args(model: str, config: dict, folder: Path) -> list[str]:
    """`mlsys roofline model`'s model arguments: the built-in and its overrides, or the config written to folder."""
    if "builtin" in config:
        return [config["builtin"], *[a for k, v in config["set"].items() for a in ("--set", f"{k}={v}")]]
    path = folder / (model.replace("/", "_") + ".json")
    if not path.exists():
        path.write_text(json.dumps(config))
    return [str(path)]


def predict() -> None:
    import tempfile

    from train_published import cli_runner

    runner = cli_runner()
    data = json.loads(CASES.read_text())
    groups: dict[tuple, list[dict]] = {}
    for c in data["cases"]:   # one roofline call prices every op of a (card, model, TP, tokens)
        groups.setdefault((c["gpu"], c["model"], c["tp"], c["tokens"]), []).append(c)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        for (gpu, model, tp, tokens), members in groups.items():
            args = ["roofline", "model", *_model_args(model, data["configs"][model], Path(folder)), "--phase", "prefill",
                    "--batch", "1", "--seq", str(tokens), "--tp", str(tp), "--gpu", gpu, "--impl", "fused",
                    "--no-fit-check", "--json"]
            try:
                ops = {r["name"]: r for r in runner(args)["ops"]}
            except Exception as exc:  # noqa: BLE001 - a refused case is a committed outcome too
                for c in members:
                    out[c["id"]] = {"default": {"refused": f"{type(exc).__name__}: {exc}"[:300]}}
                continue
            for c in members:
                row = ops.get(c["row"])
                out[c["id"]] = {"default": ({"predicted_s": row["predicted_s"], "bytes": row["bytes"],
                                             "efficiency_class": row["efficiency_class"]} if row else
                                            {"refused": f"no {c['row']} row"})}
    write_predictions(PREDICTIONS, {"default": "mlsys roofline model --impl fused, datasheet, defaults"}, out,
                      ("mlsyscalc", "model_specs", "scripts"))


def _band(tokens: int) -> str:
    return next(name for lo, hi, name in BANDS if lo <= tokens <= hi)


def score() -> None:
    data, pred = json.loads(CASES.read_text()), json.loads(PREDICTIONS.read_text())
    groups: dict[tuple[str, str, str], list[float]] = {}
    refused, rates = [], {}
    for c in data["cases"]:
        got = pred["predictions"][c["id"]]["default"]
        if "refused" in got:
            refused.append(c["id"])
            continue
        err = got["predicted_s"] / (c["measured_ms"] * 1e-3) - 1
        for key in ((c["card"], c["op"], _band(c["tokens"])), (c["card"], c["op"], "all"), (c["card"], "every op", "all"),
                    ("both", "every op", "all")):
            groups.setdefault(key, []).append(err)
        if c["tokens"] >= 2048:  # the bandwidth the kernel reached on the fused list's bytes
            rates.setdefault((c["card"], c["op"]), []).append(got["bytes"] / (c["measured_ms"] * 1e-3))
    lines = ["# The fused list's memory-bound ops against Vidur's public kernel profiles", "",
             "Generated by `python scripts/validate/fused_published_vidur.py score` from "
             "`reports/fused/public/vidur_cases.json` (cases: RULE.md) and `reports/fused/public/predictions.json` "
             f"(made at commit {pred['commit'][:10]} and committed before this page was first generated). "
             "error = predicted / measured - 1 (negative: priced faster than the kernel ran).", ""]
    table = [[card, op, band, *error_stats(e)] for (card, op, band), e in sorted(groups.items())]
    lines += markdown_table(["card", "op", "tokens", "cases", "median |error|", "worst |error|", "median signed"],
                            table, "lllrrrr")
    lines += ["", "Bandwidth the profiled kernels reached at 2048-4096 tokens, on the fused list's bytes "
              "(median GB/s over the cases):", ""]
    lines += markdown_table(["card", "op", "cases", "median GB/s"],
                            [[card, op, str(len(v)), f"{statistics.median(v) / 1e9:.0f}"]
                             for (card, op), v in sorted(rates.items())], "llrr")
    lines += ["", f"Cases the calculator refused: {', '.join(refused) or 'none'}."]
    write_page(PAGE, lines, data)


def write_cases(src: Path) -> None:
    cases, configs = build_cases(src)
    CASES.write_text(json.dumps({"source": f"github.com/microsoft/vidur at {COMMIT}: data/profiling/compute/<card>/"
                                           "<model>/mlp.csv", "rule": "reports/fused/public/RULE.md",
                                 "configs": configs, "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {CASES}")


def main() -> None:
    run_steps(__doc__.splitlines()[0], "cases: the git directory of microsoft/vidur", write_cases, predict, score)


if __name__ == "__main__":
    main()
