"""Rename files of reports/, experiments/ and scripts/ by what they hold, and rewrite every reference to them.

    python tools/refile_paths.py move              # git mv each file still at its old path
    python tools/refile_paths.py refs [PATHS]      # rewrite references in PATHS (default: the whole tree)
    python tools/refile_paths.py check             # exit 1 while an old path or an old name is still referenced

Both steps are idempotent; `refs` exists for trees that gain text written against the old names after the
move (a branch merged later): run `move`, then `refs`, then `check`.

What `refs` rewrites, in the text files of the tree (code, docs, recipes, pages): a repository path
`reports/mutation/seed2211.jsonl` wherever it appears, and the bare file name `seed2211.jsonl` where it is
the whole name (not a part of `x_seed2211.jsonl`) and no other file of the tree has that name. A file's
bare name is read as written beside the file, so it becomes the new path relative to the old folder
(`runs/h200x4-host-probe/call1_rows.jsonl` in reports/train/README.md).

What it leaves alone: measured rows and other data (.jsonl, .json, .log, .txt, .csv under reports/ and
experiments/: their content is what was measured, including the commands they quote), what a line says after
"made at <commit>" (the first command it quotes there: what committed predictions were made with), the paths listed in
FROZEN (edited elsewhere; they move later), and Python imports of moved scripts (each moved script puts its
new folder and scripts/ on sys.path; tests load them through tests.conftest.load_script("validate/NAME")).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_M = "reports/mutation/"
_PROBE4 = "reports/train/runs/h200x4-host-probe/"
_PROBE2 = "reports/train/runs/h200x2-host-probe/"
_V = "scripts/validate/"

# old path -> new path. Mutation result files: <family>_<sites>[_seed<N>][_<kind>].jsonl, where family is
# classic or fresh (tools/mutation.py --kinds), sites the set drawn (stride, every module, one area, the
# population, the discovery or held-out draw, the fresh family's train or holdout half), the seed the draw's
# (the rows carry it), and kind plan (drawn, not run), survivors, retest (survivors or single-test kills
# run again against later tests) or none (results). The files stay in one folder: tools/mutation_population.py
# reads reports/mutation/*.jsonl.
MOVES: dict[str, str] = {
    # mutation: classic family
    _M + "results.jsonl": _M + "classic_core_stride.jsonl",
    _M + "fresh.jsonl": _M + "classic_core_stride_offset10.jsonl",
    _M + "seed2211.jsonl": _M + "classic_all_seed2211.jsonl",
    _M + "seed7919.jsonl": _M + "classic_all_seed7919.jsonl",
    _M + "seed104729.jsonl": _M + "classic_all_seed104729.jsonl",
    _M + "seed31337.jsonl": _M + "classic_serve_scaling_seed31337.jsonl",
    _M + "heldout_plan.jsonl": _M + "classic_heldout_seed20261126_plan.jsonl",
    _M + "heldout.jsonl": _M + "classic_heldout_seed20261126.jsonl",
    _M + "heldout_after.jsonl": _M + "classic_heldout_seed20261126_retest.jsonl",
    _M + "discovery.jsonl": _M + "classic_discovery_seed1.jsonl",
    _M + "discovery_serve.jsonl": _M + "classic_discovery_serve_seed1.jsonl",
    _M + "discovery_rerun.jsonl": _M + "classic_discovery_seed1_retest.jsonl",
    _M + "heldout2_plan.jsonl": _M + "classic_heldout_seed20261127_plan.jsonl",
    _M + "heldout2.jsonl": _M + "classic_heldout_seed20261127.jsonl",
    _M + "discovery2_plan.jsonl": _M + "classic_discovery_seed2_plan.jsonl",
    _M + "discovery2.jsonl": _M + "classic_discovery_seed2.jsonl",
    _M + "discovery2_survivors.jsonl": _M + "classic_discovery_seed2_survivors.jsonl",
    _M + "discovery2_rerun.jsonl": _M + "classic_discovery_seed2_retest.jsonl",
    _M + "population_plan.jsonl": _M + "classic_population_plan.jsonl",
    _M + "unkilled_plan.jsonl": _M + "classic_population_not_killed_plan.jsonl",
    _M + "unkilled.jsonl": _M + "classic_population_not_killed.jsonl",
    _M + "unkilled_rest_plan.jsonl": _M + "classic_population_not_killed_part2_plan.jsonl",
    _M + "unkilled_rest.jsonl": _M + "classic_population_not_killed_part2.jsonl",
    _M + "unkilled_survivors.jsonl": _M + "classic_population_not_killed_survivors.jsonl",
    _M + "population_rerun_plan.jsonl": _M + "classic_population_survivors_retest_plan.jsonl",
    _M + "population_rerun.jsonl": _M + "classic_population_survivors_retest.jsonl",
    _M + "population_rest_plan.jsonl": _M + "classic_population_not_run_plan.jsonl",
    _M + "population_rest.jsonl": _M + "classic_population_not_run.jsonl",
    _M + "single_rerun_classic_plan.jsonl": _M + "classic_single_test_kills_retest_plan.jsonl",
    _M + "single_classic.jsonl": _M + "classic_single_test_kills_retest.jsonl",
    # mutation: fresh family (dropped terms, look-alike fields, swapped arguments)
    _M + "fresh_train_plan.jsonl": _M + "fresh_train_half_seed5501_plan.jsonl",
    _M + "fresh_train.jsonl": _M + "fresh_train_half_seed5501.jsonl",
    _M + "fresh_holdout_plan.jsonl": _M + "fresh_holdout_half_seed20261127_plan.jsonl",
    _M + "fresh_holdout.jsonl": _M + "fresh_holdout_half_seed20261127.jsonl",
    _M + "fresh_kinds_heldout_plan.jsonl": _M + "fresh_heldout_seed20261128_plan.jsonl",
    _M + "fresh_kinds_heldout.jsonl": _M + "fresh_heldout_seed20261128.jsonl",
    _M + "single_rerun_fresh_plan.jsonl": _M + "fresh_single_test_kills_retest_plan.jsonl",
    _M + "single_fresh.jsonl": _M + "fresh_single_test_kills_retest.jsonl",
    # mutation: planted bugs outside calc/ (tools/mutation_planted.py)
    _M + "planted_outside_before.jsonl": _M + "planted_outside_existing_tests.jsonl",
    _M + "planted_outside_merged.jsonl": _M + "planted_outside_on_main.jsonl",
    # kernel spot checks
    "reports/checks/spot_h100_0c3d9fb.jsonl": "reports/checks/spot_h100.jsonl",
    # measured training steps with the host probe (scripts/device_train_probe.sh): calls of one recipe, in order
    "reports/train/measured_rows_h200x4_probe.jsonl": _PROBE4 + "call1_rows.jsonl",
    "reports/train/measured_h200x4_probe_log.txt": _PROBE4 + "call1_log.txt",
    "reports/train/measured_rows_h200x4_heldout_08b4f3d.jsonl": _PROBE4 + "call2_rows.jsonl",
    "reports/train/measured_h200x4_heldout_08b4f3d_log.txt": _PROBE4 + "call2_log.txt",
    "reports/train/measured_rows_h200x4_heldout_bdde02a.jsonl": _PROBE4 + "call3_rows.jsonl",
    "reports/train/measured_h200x4_heldout_bdde02a_log.txt": _PROBE4 + "call3_log.txt",
    "reports/train/measured_rows_h200x4_heldout_14c2ca5.jsonl": _PROBE4 + "call4_rows.jsonl",
    "reports/train/measured_h200x4_heldout_14c2ca5_log.txt": _PROBE4 + "call4_log.txt",
    "reports/train/measured_rows_h200x4_heldout_2b9bb48.jsonl": _PROBE4 + "call5_rows.jsonl",
    "reports/train/measured_h200x4_heldout_2b9bb48_log.txt": _PROBE4 + "call5_log.txt",
    "reports/train/measured_rows_h200x4_heldout_b60861a.jsonl": _PROBE4 + "call6_rows.jsonl",
    "reports/train/measured_h200x4_heldout_b60861a_log.txt": _PROBE4 + "call6_log.txt",
    "reports/train/measured_rows_h200x4_heldout_e095a16.jsonl": _PROBE4 + "call7_rows.jsonl",
    "reports/train/measured_h200x4_heldout_e095a16_log.txt": _PROBE4 + "call7_log.txt",
    "reports/train/measured_rows_h200x2_probe.jsonl": _PROBE2 + "call1_rows.jsonl",
    "reports/train/measured_h200x2_probe_log.txt": _PROBE2 + "call1_log.txt",
    "reports/train/measured_rows_h200x2_heldout_2efbeea.jsonl": _PROBE2 + "call2_rows.jsonl",
    "reports/train/measured_h200x2_heldout_2efbeea_log.txt": _PROBE2 + "call2_log.txt",
    "reports/train/measured_rows_h200x2_heldout_72a0281.jsonl": _PROBE2 + "call3_rows.jsonl",
    "reports/train/measured_h200x2_heldout_72a0281_log.txt": _PROBE2 + "call3_log.txt",
    # whole-model rows of one check each: named by what the check measured, not by the commit it checked
    "reports/models/h100_heldout_3a24da3.jsonl": "reports/models/h100_torch_impl_host.jsonl",
    "reports/models/h100_heldout_6c5fc77.jsonl": "reports/models/h100_floor_host_heldout.jsonl",
    "reports/models/h100_heldout_2f5bb4e.jsonl": "reports/models/h100_memory_remeasured.jsonl",
    "reports/models/h200_heldout_d37b054.jsonl": "reports/models/h200_paged_decode_b64.jsonl",
    "reports/models/h200_heldout_11228ae.jsonl": "reports/models/h200_weight_only_quant.jsonl",
    **{f"reports/models/h200_heldout_11228ae/{name}": f"reports/models/h200_weight_only_quant/{name}" for name in (
        "alloc.log", "alloc2.log", "alloc3.log", "gpu_tests.log", "log.md", "log2.md", "log3.md")},
    # kernel probes: named by the probe's section (and its variant list), not by the device call
    "experiments/data/probe_flush_gemv7.jsonl": "experiments/data/probe_flush.jsonl",
    "experiments/data/probe_gemv_gemv7.jsonl": "experiments/data/probe_gemv.jsonl",
    "experiments/data/probe_kinds_cc.jsonl": "experiments/data/probe_kinds.jsonl",
    "experiments/data/probe_stream_stream.jsonl": "experiments/data/probe_stream.jsonl",
    "experiments/data/probe_persist_run1.jsonl": "experiments/data/probe_persist_9_fields.jsonl",
    "experiments/data/probe_persist_run2.jsonl": "experiments/data/probe_persist_11_fields.jsonl",
    # validation harnesses: what scores a calculator against ground truth (scripts/validate/README.md)
    **{f"scripts/{name}.py": f"{_V}{name}.py" for name in (
        "comm_shared", "comm_transfer", "eight_gpu_plan", "fsdp_memory", "ground_truth_cases", "ground_truth_hf",
        "hardware_published", "memory_compare", "models_error_terms", "predict_8gpu", "score_8gpu",
        "score_8gpu_comm", "score_8gpu_train", "serve_replay", "serve_replay_report", "train_compare",
        "train_published", "train_rescore", "intervals", "serve_published", "serve_published_nim",
        "serve_published_nim_rescore", "serve_published_trtllm09", "fused_heldout")},
    # the published runs' readers move as one folder
    **{f"scripts/published_runs/{name}.py": f"{_V}published_runs/{name}.py" for name in (
        "dgxc_heldout", "encode_stated_options", "llm_foundry_fitset", "public_heldout")},
}

# edited elsewhere: never rewritten here (their references move when they do)
FROZEN = ("reports/mutation/outside_seed5151_plan.jsonl",)
TEXT = (".py", ".md", ".sh", ".toml", ".json", ".txt", ".yml", ".yaml", ".cfg", ".ini")
DATA = (".jsonl", ".json", ".log", ".txt", ".csv")
DATA_ROOTS = ("reports/", "experiments/data/", "model_specs/")
# a page quoting the command its committed predictions were made with ("made at commit abc1234 by `python ...`")
# keeps that command as it ran: refs and check read each line only up to this
MADE_AT = re.compile(r"\bmade at (?:commit )?`?[0-9a-f]{7,40}\b`?")


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def rewritable(path: str) -> bool:
    if path.startswith(FROZEN) or path == "tools/refile_paths.py":
        return False
    if path.startswith(DATA_ROOTS) and path.endswith(DATA):
        return False
    name = Path(path).name
    return path.endswith(TEXT) or name in ("run", "Makefile") or path.startswith(".ci/")


def move() -> int:
    for old, new in MOVES.items():
        src, dst = ROOT / old, ROOT / new
        if dst.exists() and not src.exists():
            continue
        if dst.exists():
            print(f"both {old} and {new} exist: merge them by hand", file=sys.stderr)
            return 1
        dst.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    return 0


def patterns(files: list[str]) -> list[tuple[re.Pattern[str], str]]:
    """(pattern, replacement) for each move: its path, and its bare name where the tree has no other file of it."""
    names: dict[str, int] = {}
    for path in files:
        if path not in MOVES and path not in MOVES.values():
            names[Path(path).name] = names.get(Path(path).name, 0) + 1
    out = []
    for old, new in MOVES.items():
        out.append((re.compile(r"(?<![\w-])" + re.escape(old) + r"(?![\w-])"), new))
    for old, new in MOVES.items():
        base = Path(old).name
        if base == Path(new).name or names.get(base, 0) > 0:
            continue
        # a bare name is read as written beside the file: the new path relative to the old folder
        out.append((re.compile(r"(?<![\w/.-])" + re.escape(base) + r"(?![\w-])"),
                    os.path.relpath(new, Path(old).parent)))
    return out


def _pieces(line: str) -> list[tuple[str, bool]]:
    """A line as (text, may be rewritten) pieces: after "made at <commit>" the first quoted command (to its closing
    backtick, else to the line's end) is what ran then and is kept."""
    made = MADE_AT.search(line)
    if not made:
        return [(line, True)]
    open_ = line.find("`", made.end())
    close = line.find("`", open_ + 1) if open_ >= 0 else -1
    end = len(line) if open_ < 0 or close < 0 else close + 1
    return [(line[:made.start()], True), (line[made.start():end], False), *_pieces(line[end:])]


def _rewrite(line: str, pats: list[tuple[re.Pattern[str], str]]) -> str:
    out = []
    for text, current in _pieces(line):
        for pat, repl in pats if current else ():
            text = pat.sub(repl, text)
        out.append(text)
    return "".join(out)


def refs(paths: list[str]) -> int:
    files = tracked()
    pats = patterns(files)
    targets = paths or [p for p in files if rewritable(p)]
    changed = 0
    for path in targets:
        full = ROOT / path
        if not full.is_file():
            continue
        try:
            text = full.read_text()
        except UnicodeDecodeError:
            continue
        new = "".join(_rewrite(line, pats) for line in text.splitlines(keepends=True))
        if new != text:
            full.write_text(new)
            changed += 1
            print(path)
    print(f"{changed} files rewritten", file=sys.stderr)
    return 0


def check() -> int:
    files = tracked()
    stale = []
    old = re.compile(r"(?<![\w-])(" + "|".join(re.escape(o) for o in sorted(MOVES, key=len, reverse=True)) + r")(?![\w-])")
    for path in (p for p in files if rewritable(p)):
        try:
            text = (ROOT / path).read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        current = "\n".join(t for line in text.splitlines() for t, ok in _pieces(line) if ok)
        stale += [f"{path}: {name}" for name in sorted(set(old.findall(current)))]
    for line in stale:
        print(line)
    return 1 if stale else 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("move", "refs", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "move":
        return move()
    if argv[0] == "check":
        return check()
    return refs(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
