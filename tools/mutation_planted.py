"""Hand-planted bugs outside calc/ and specs/: in the CLI views, the report writer, the bench summaries,
the file readers and the unit formatters. Each is a realistic edit a reviewer could miss (a column
showing its neighbour's key, GB for GiB, a count from the wrong option, a check that no longer fires),
written by hand, not generated; `tools/mutation.py` plants the operator-level ones.

Every bug is one exact text replacement (`old` must occur once in `path`). It is applied to a scratch
copy of the repository (tools/mutation.py's `prepare_copy`) and the area's test files (mutation.py's
OUTSIDE_TESTS) run against it,
one file at a time, until one fails (killed) or all pass (survived); the same forked runner as
tools/mutation.py, so a bug costs its tests' time.

    python tools/mutation_planted.py --out reports/mutation/planted_outside.jsonl
    python tools/mutation_planted.py --without tests/test_values_views.py ... --out FILE   # the suite before
    python tools/mutation_planted.py --report --out reports/mutation/planted_outside.jsonl
    python tools/mutation_planted.py --bugs FILE --shard K/N --scratch DIR_K --out FILE_K   # N processes, then join

A set kept as data (`--bugs FILE`: a JSON list of {path, old, new, what, witness}) replaces BUGS. Its
witness is a shell line run in the scratch copy (`mlsys` and `python` there run the copy's package; $W
is an empty folder, the same path on every run) whose output, exit status included, must change when
the bug is applied. `--check` proves that for every bug before any scoring: `old` occurs once, the
planted file still compiles (an edit that breaks the import is a crash, not a bug), the bug's test files resolve, the witness's output is the same on two clean runs and differs with the bug
(an edit whose output does not change is not a bug):

    python tools/mutation_planted.py --bugs tools/planted/fresh.json --check
    python tools/mutation_planted.py --bugs tools/planted/fresh.json --out reports/mutation/planted_fresh_main.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import ROOT, _warm_imports, prepare_copy, run_tests, tests_for  # noqa: E402  (tools/mutation.py)

@dataclass(frozen=True)
class Bug:
    path: str
    old: str
    new: str
    what: str  # what a user would see
    witness: str = ""  # a shell line whose output the bug changes (--bugs files; --check runs it)


def load_bugs(path: Path) -> list[Bug]:
    """The bugs of a JSON file: a list of objects with path, old, new, what and witness (all strings)."""
    try:
        items = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--bugs {path}: cannot read it ({exc})") from None
    if not isinstance(items, list):
        raise SystemExit(f"--bugs {path}: expected a JSON list of bugs")
    keys = ("path", "old", "new", "what", "witness")
    bugs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or sorted(item) != sorted(keys) or not all(
                isinstance(item[k], str) and (item[k] or k == "new") for k in keys):
            raise SystemExit(f"--bugs {path} item {i}: needs exactly the strings {', '.join(keys)}, "
                             "none empty but `new` (a deletion)")
        bugs.append(Bug(**item))
    whats = [b.what for b in bugs]
    if len(set(whats)) != len(whats):
        raise SystemExit(f"--bugs {path}: two bugs share a `what` ({sorted({w for w in whats if whats.count(w) > 1})[0]!r})")
    return bugs


BUGS = [
    # ---- cli/: the views users read ----
    Bug("mlsyscalc/cli/serve_views.py", 'for q in (50, 90, 99)),\n             fmt_seconds(m[f"{key}_mean_s"])',
        'for q in (50, 90, 90)),\n             fmt_seconds(m[f"{key}_mean_s"])', "serve table: the p99 column shows p90"),
    Bug("mlsyscalc/cli/serve_views.py", '["throughput (output tokens/s)", m["throughput_tokens_per_s"], ""]',
        '["throughput (output tokens/s)", m["throughput_requests_per_s"], ""]', "serve: tokens/s row shows requests/s"),
    Bug("mlsyscalc/cli/serve_views.py", "f\"{100 * m['slo_attainment']:.1f}% attain\"",
        "f\"{100 * m['kv_utilization_mean']:.1f}% attain\"", "serve: SLO attainment shows KV utilisation"),
    Bug("mlsyscalc/cli/serve_views.py", '["KV blocks", kv.blocks, f"{fmt_bytes(kv.block_bytes)} each"]',
        '["KV blocks", kv.blocks, f"{fmt_bytes(kv.block_bytes / 16)} each"]', "serve: KV block size per token"),
    Bug("mlsyscalc/cli/serve_views.py", 'keys = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s",',
        'keys = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s",',
        "serve sweep: the ttft_p99_s column holds p90"),
    Bug("mlsyscalc/cli/serve_views.py", '["decode busy fraction", p["decode_busy_fraction"]]',
        '["decode busy fraction", p["prefill_busy_fraction"]]', "disagg: decode busy shows prefill's"),
    Bug("mlsyscalc/cli/serve_views.py", 'base.metrics["goodput_requests_per_s"] / base.options.tp',
        'base.metrics["goodput_requests_per_s"]', "search: colocated goodput per GPU not divided by tp"),
    Bug("mlsyscalc/cli/serve_views.py", 'fmt_seconds(v["draft_s"]), fmt_seconds(v["verify_s"])',
        'fmt_seconds(v["verify_s"]), fmt_seconds(v["draft_s"])', "speculative: draft and verify columns swapped"),
    Bug("mlsyscalc/cli/train.py", 'rows = [[k, v, f"{100 * v / total:.1f}%"] for k, v in step.breakdown.items()]',
        'rows = [[k, v, f"{100 * v / step.breakdown[\'compute_s\']:.1f}%"] for k, v in step.breakdown.items()]',
        "train: shares of compute time, not of the step"),
    Bug("mlsyscalc/cli/train.py", '["model TFLOP/s per GPU", step.tflops_per_gpu / 1e12]',
        '["model TFLOP/s per GPU", step.tflops_per_gpu / 1e9]', "train: TFLOP/s shown in GFLOP/s"),
    Bug("mlsyscalc/cli/train.py", '["MFU", step.mfu], ["HFU", step.hfu]', '["MFU", step.hfu], ["HFU", step.hfu]',
        "train: MFU row shows HFU"),
    Bug("mlsyscalc/cli/train.py", 'comm = [[d, t, step.breakdown[f"{d}_comm_s"]]', 'comm = [[d, t, t]',
        "train: exposed communication shows the total"),
    Bug("mlsyscalc/cli/plan.py", 'rows.append([rank, lay["tp"], lay["pp"], _split(lay), lay["dp"], lay["cp"],',
        'rows.append([rank, lay["tp"], lay["pp"], _split(lay), lay["cp"], lay["dp"],', "plan: dp and cp columns swapped"),
    Bug("mlsyscalc/cli/plan.py", '{result.searched:,} layouts timed, {result.feasible:,} fit',
        '{result.feasible:,} layouts timed, {result.searched:,} fit', "plan title: searched and feasible swapped"),
    Bug("mlsyscalc/cli/plan.py", 'c["mfu"], fmt_bytes(c["memory_bytes_per_gpu"]),',
        'c["hfu"], fmt_bytes(c["memory_bytes_per_gpu"]),', "plan: MFU column shows HFU"),
    Bug("mlsyscalc/cli/roofline_views.py", '["MFU (of datasheet peak)", r.mfu, f"{100 * r.mfu:.1f}%"]',
        '["MFU (of datasheet peak)", r.mfu, f"{100 * r.mbu:.1f}%"]', "roofline: MFU readable shows MBU"),
    Bug("mlsyscalc/cli/roofline_views.py", '["weights per GPU", r.weight_bytes, fmt_bytes(r.weight_bytes)]',
        '["weights per GPU", r.weight_bytes, fmt_bytes(r.kv_cache_bytes)]', "roofline: weights show the KV cache"),
    Bug("mlsyscalc/cli/memory.py", 'return f"{value / 1e9:,.2f} GB"', 'return f"{value / 2**30:,.2f} GB"',
        "memory: the GB column in GiB"),
    Bug("mlsyscalc/cli/memory.py", 'rows.append(["total", total, fmt_bytes(total), _gb(total), "100.0%"])',
        'rows.append(["total", total, fmt_bytes(total), _gb(total), f"{100 * total / max(parts.values()):.1f}%"])',
        "memory: the total's share of the largest part"),
    Bug("mlsyscalc/cli/serve.py", 'values[key.strip() + "_s"] = seconds = float(value)',
        'values[("tpot" if key.strip() == "ttft" else "ttft") + "_s"] = seconds = float(value)',
        "serve --slo: ttft and tpot swapped"),
    Bug("mlsyscalc/cli/serve.py", 'items, cap = values.split(","), serve_limits.MAX_SIMULATIONS',
        'items, cap = values.split(",")[1:] or values.split(","), serve_limits.MAX_SIMULATIONS',
        "serve --sweep: the first rate dropped"),
    Bug("mlsyscalc/cli/serve.py", 'if not policy.chunk_budget:\n        unused["chunk"]',
        'if policy.chunk_budget:\n        unused["chunk"]', "serve: --chunk refused with sarathi, allowed elsewhere"),
    Bug("mlsyscalc/cli/serve.py", 'for name, other in (("rate", "sweep"), ("disagg", "search")):',
        'for name, other in (("disagg", "search"),):', "serve: --rate with --sweep silently ignored again"),
    Bug("mlsyscalc/cli/render.py", '        return f"{value:.4g}"\n    return str(value)',
        '        return f"{value:.2g}"\n    return str(value)', "tables: floats to 2 significant digits"),
    Bug("mlsyscalc/cli/render.py", 'if value < 0 and key.endswith(_UNSIGNED_ENDINGS)',
        'if value < -1 and key.endswith(_UNSIGNED_ENDINGS)', "results: small negative sizes printed"),
    Bug("mlsyscalc/cli/options.py", 'flag = next((p.opts[0] for p in ctx.command.params if p.name == name), name)',
        'flag = name', "options that do not apply: named by the Python name, not the flag"),
    Bug("mlsyscalc/cli/main.py", 'click.echo(f"error: {exc}", err=True)\n            ctx.exit(2)',
        'click.echo(f"error: {exc}", err=True)\n            ctx.exit(1)', "bad input exits 1"),
    Bug("mlsyscalc/cli/bench_comm.py", '    if from_rows:\n        reject_unused(', '    if not from_rows:\n        reject_unused(',
        "bench comm --from: run options silently ignored"),
    # ---- report/ ----
    Bug("mlsyscalc/report/model_report.py", "return _three_digits(nbytes / 2**30)", "return _three_digits(nbytes / 1e9)",
        "report: GiB computed as GB (+7.4%)"),
    Bug("mlsyscalc/report/model_report.py", '"pct": lambda v: f"{100 * v:.1f}%"', '"pct": lambda v: f"{v:.1f}%"',
        "report: percentages of 1"),
    Bug("mlsyscalc/report/model_report.py", '"ms": lambda v: _three_digits(v * 1e3)', '"ms": lambda v: _three_digits(v * 1e6)',
        "report: ms columns in us"),
    Bug("mlsyscalc/report/model_report_infer.py", 'f"Prefill of {o.seq:,}-token prompts', 'f"Prefill of {o.context:,}-token prompts',
        "report: prefill sentence counts the context"),
    Bug("mlsyscalc/report/model_report_infer.py", '("ttft_p99_s", "TTFT p99", "ms")', '("ttft_p90_s", "TTFT p99", "ms")',
        "report: serving TTFT p99 column holds p90"),
    Bug("mlsyscalc/report/model_report_infer.py", 'sect.q(c, "kv_cache_bytes", "GiB"), sect.q(c, "total_bytes", "GiB")',
        'sect.q(c, "total_bytes", "GiB"), sect.q(c, "total_bytes", "GiB")', "report: KV column shows the total"),
    Bug("mlsyscalc/report/model_report_sections.py", 'f"FLOPs of one sequence of {ctx.options.seq:,} tokens "',
        'f"FLOPs of one sequence of {ctx.options.context:,} tokens "', "report: FLOPs sentence counts the context"),
    Bug("mlsyscalc/report/model_report_sections.py", 'f"Per-GPU training memory in GiB, micro-batch {o.micro_batch} x',
        'f"Per-GPU training memory in GiB, micro-batch {o.global_batch} x', "report: memory sentence's micro-batch"),
    Bug("mlsyscalc/report/model_report_more.py", '"" if r.prediction_error is None else f"{100 * r.prediction_error:+.1f}%"',
        '"" if r.prediction_error is None else f"{-100 * r.prediction_error:+.1f}%"', "report: measured error sign flipped"),
    Bug("mlsyscalc/report/model_report_build.py", "if options.tp:\n        check_tp(spec, options.tp)",
        "if options.tp and options.pp:\n        check_tp(spec, options.tp)", "report: --tp over the heads unchecked"),
    # ---- bench/ ----
    Bug("mlsyscalc/bench/model_report.py", "peak / 2**30 if peak else None", "peak / 1e9 if peak else None",
        "bench model: peak_GiB in GB"),
    Bug("mlsyscalc/bench/rows.py", "return amount / (ms * 1e-3) / unit", "return amount / (ms * 1e-6) / unit",
        "rows: rates 1000x too large"),
    Bug("mlsyscalc/bench/rows.py", 'row.ok = data.get("ok") in (True, "True", "true", 1, "1")',
        'row.ok = data.get("ok") in (True, "True", 1)', "rows: a CSV's lowercase true reads as not ok"),
    # ---- readers ----
    Bug("mlsyscalc/readers/trace.py", 'schema.integer(r, "prompt_len", where, maximum=MAX_REQUEST_TOKENS, text=text),\n'
        '                    schema.integer(r, "output_len"',
        'schema.integer(r, "output_len", where, maximum=MAX_REQUEST_TOKENS, text=text),\n'
        '                    schema.integer(r, "prompt_len"', "trace: prompt and output lengths swapped"),
    Bug("mlsyscalc/readers/files.py", "    return text.removeprefix(BOM)", "    return text",
        "readers: a byte-order mark kept in the first column name"),
    Bug("mlsyscalc/readers/files.py", "        start = reader.line_num + 1\n", "        start = reader.line_num\n",
        "CSV: line numbers one short after the first row"),
    Bug("mlsyscalc/readers/files.py", "            found = nonfinite_path(item, f\"{path}[{i}]\")\n            if found:",
        "            found = None\n            if found:", "JSON: NaN inside a list accepted"),
    Bug("mlsyscalc/readers/schema.py", "    if minimum is not None and value < minimum:", "    if minimum is not None and value < minimum - 1:",
        "schema: a number just below its minimum accepted"),
    Bug("mlsyscalc/readers/rows.py", 'schema.number(record, key, where, required=False, minimum=None if key in SIGNED_FIELDS else 0, text=text)',
        'schema.number(record, key, where, required=False, minimum=None, text=text)', "rows: negative times accepted"),
    Bug("mlsyscalc/readers/measured.py", "        except NotRows:\n", "        except MlsysError:\n",
        "--measured: a malformed rows file silently skipped"),
    Bug("mlsyscalc/readers/model_rows.py", '    schema.number(record, "median_ms", where, above=0, text=text)\n', "",
        "model rows: a row without a time accepted for the fit"),
    # ---- units ----
    Bug("mlsyscalc/units.py", '((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))',
        '((1024**4, "TiB"), (1000**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"))', "fmt_bytes: GiB from 10^9 bytes"),
    Bug("mlsyscalc/units.py", '    if v >= 1e-3:\n        return f"{significant(value * 1e3)} ms"',
        '    if v >= 1e-2:\n        return f"{significant(value * 1e3)} ms"', "fmt_seconds: 1-10 ms shown in us"),
]


def run(bugs: list[Bug], out: Path, without: list[str], scratch: Path, rerun_survived: bool = False,
        budget_s: float | None = None) -> None:
    started = time.monotonic()
    prepare_copy(scratch)
    _warm_imports()
    skip = {Path(w).name for w in without}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    baselines: dict[tuple[str, ...], float] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    done = {(r["path"], r["what"], tuple(r["without"])): r["status"] for r in rows}  # the latest row wins
    for bug in bugs:
        if budget_s is not None and time.monotonic() - started > budget_s:
            print(f"budget of {budget_s:g} s spent: the rest is left for a rerun (it resumes)", flush=True)
            break
        previous = done.get((bug.path, bug.what, tuple(sorted(skip))))
        if previous is not None and not (rerun_survived and previous == "survived"):
            continue  # a rerun resumes (--rerun-survived: only the survivors run again, after new tests)
        tests = [t for t in dict.fromkeys(tests_for(bug.path)) if t not in skip]
        if tuple(tests) not in baselines:
            t0 = time.monotonic()
            state = run_tests(scratch, tests, 1200)[0]
            if state != "survived":
                raise SystemExit(f"{tests}: the tests fail without a bug ({state})")
            baselines[tuple(tests)] = time.monotonic() - t0
        target = scratch / bug.path
        original = target.read_text()
        if original.count(bug.old) != 1:
            raise SystemExit(f"{bug.path}: the text of {bug.what!r} occurs {original.count(bug.old)} times")
        target.write_text(original.replace(bug.old, bug.new))
        t1 = time.monotonic()
        try:
            status, killers = run_tests(scratch, tests, 3 * baselines[tuple(tests)] + 20)
        finally:
            target.write_text(original)
        row = {"path": bug.path, "what": bug.what, "status": status, "killer": killers[:1],
               "seconds": round(time.monotonic() - t1, 2), "commit": commit, "without": sorted(skip)}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{status:9s} {bug.path}: {bug.what}", flush=True)


def area(path: str) -> str:
    """The area a bug's path counts in: cli, report, calc (calc/ and specs/) or other (bench, readers, units)."""
    part = path.split("/")[1] if path.count("/") > 1 else ""
    return {"specs": "calc", "cli": "cli", "report": "report", "calc": "calc"}.get(part, "other")


def interleave(bugs: list[Bug]) -> list[Bug]:
    """The bugs area by area in turn, each area in its own order."""
    queues: dict[str, list[Bug]] = {}
    for bug in bugs:
        queues.setdefault(area(bug.path), []).append(bug)
    out: list[Bug] = []
    while any(queues.values()):
        for queue in queues.values():
            if queue:
                out.append(queue.pop(0))
    return out


WITNESS_TIMEOUT_S = 300


def _witness_bin(scratch: Path) -> Path:
    """A folder for PATH whose `mlsys` and `python` run the scratch copy's package with this interpreter."""
    folder = scratch / ".witness_bin"
    folder.mkdir(exist_ok=True)
    (folder / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (folder / "mlsys").write_text(
        f'#!/bin/sh\nexec {sys.executable} -c "import sys, mlsyscalc; '
        f"assert mlsyscalc.__file__.startswith({str(scratch)!r}), mlsyscalc.__file__; "
        f'from mlsyscalc.cli.main import main; sys.argv[0] = \'mlsys\'; main()" "$@"\n')
    for name in ("python", "mlsys"):
        (folder / name).chmod(0o755)
    return folder


def run_witness(scratch: Path, line: str) -> str:
    """The witness's exit status, stdout and stderr, run by bash in the scratch copy with $W an empty folder."""
    folder = scratch / ".witness"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    env = {**os.environ, "PATH": f"{_witness_bin(scratch)}:{os.environ.get('PATH', '')}", "PYTHONPATH": str(scratch),
           "W": str(folder), "COLUMNS": "120", "MPLBACKEND": "Agg", "CUDA_VISIBLE_DEVICES": "", "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run(["bash", "-c", line], cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=WITNESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "timeout"
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def _compiles(source: str, path: str) -> bool:
    try:
        compile(source, path, "exec")
    except SyntaxError:
        return False
    return True


def check(bugs: list[Bug], scratch: Path, out: Path | None = None) -> int:
    """Every bug: its text once in the worktree, test files that resolve, a witness that is stable without the
    bug and changes with it. Prints one line per bug and returns the number that fail."""
    prepare_copy(scratch)
    baselines: dict[str, str] = {}
    failed = 0
    rows = []
    for bug in bugs:
        problem = ""
        source = (ROOT / bug.path).read_text() if (ROOT / bug.path).is_file() else ""
        count = source.count(bug.old)
        try:
            tests = [t for t in dict.fromkeys(tests_for(bug.path))]
            missing = [t for t in tests if not (ROOT / "tests" / t).exists()]
        except (KeyError, StopIteration):
            tests, missing = [], []
            problem = "no test files map to this path (tools/mutation.py TESTS / OUTSIDE_TESTS)"
        if count != 1:
            problem = f"`old` occurs {count} times"
        elif bug.old == bug.new:
            problem = "`new` equals `old`"
        elif bug.path.endswith(".py") and not _compiles(source.replace(bug.old, bug.new), bug.path):
            problem = "the planted file is not valid Python (a crash at import, not a bug)"
        elif not problem and len(missing) == len(tests):
            problem = "none of its test files exists"
        elif not bug.witness:
            problem = "no witness"
        before = after = ""
        if not problem:
            if bug.witness not in baselines:
                first, second = run_witness(scratch, bug.witness), run_witness(scratch, bug.witness)
                baselines[bug.witness] = first if first == second else ""
            before = baselines[bug.witness]
            if not before or before == "timeout":
                problem = "the witness is not reproducible without the bug" if not before else "the witness times out"
        if not problem:
            target = scratch / bug.path
            original = target.read_text()
            target.write_text(original.replace(bug.old, bug.new))
            try:
                after = run_witness(scratch, bug.witness)
            finally:
                target.write_text(original)
            if after == before:
                problem = "the witness's output does not change (an equivalent edit)"
        failed += bool(problem)
        rows.append({"path": bug.path, "what": bug.what, "ok": not problem, "problem": problem,
                     "tests": len(tests) - len(missing), "witness_status": before.split("\n", 1)[0],
                     "planted_status": after.split("\n", 1)[0]})
        print(f"{'ok' if not problem else 'FAIL':4s} {bug.path}: {bug.what}" + (f"  <- {problem}" if problem else ""),
              flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(bugs) - failed} of {len(bugs)} bugs pass the check", flush=True)
    return failed


def report(out: Path) -> str:
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    latest = {(r["path"], r["what"]): r for r in rows}
    by_area: dict[str, list[dict]] = {}
    for r in latest.values():
        by_area.setdefault(r["path"].split("/")[1] if r["path"].count("/") > 1 else Path(r["path"]).name, []).append(r)
    lines = ["| area | bugs | caught | survived |", "| --- | ---: | ---: | ---: |"]
    for area, members in sorted(by_area.items()):
        caught = sum(m["status"] in ("killed", "timeout") for m in members)
        lines.append(f"| {area} | {len(members)} | {caught} | {len(members) - caught} |")
    caught = sum(r["status"] in ("killed", "timeout") for r in latest.values())
    lines.append(f"| **all** | {len(latest)} | {caught} | {len(latest) - caught} |")
    lines += [f"- survived: `{r['path']}`: {r['what']}" for r in latest.values() if r["status"] not in ("killed", "timeout")]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports/mutation/planted_outside.jsonl")
    parser.add_argument("--without", nargs="*", default=[], help="test files left out (the suite before they existed)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/mlsys_planted"))
    parser.add_argument("--only-existing", action="store_true", help="only bugs whose file exists on main")
    parser.add_argument("--rerun-survived", action="store_true", help="run the survivors of --out again")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--bugs", type=Path, default=None,
                        help="a JSON list of {path, old, new, what, witness} to plant instead of BUGS")
    parser.add_argument("--check", action="store_true",
                        help="check every bug (its text once, its witness's output changed by it) and run no tests")
    parser.add_argument("--check-out", type=Path, default=None, help="with --check: one JSON line per bug")
    parser.add_argument("--interleave", action="store_true",
                        help="plant the areas in turn (cli, report, calc and specs, the rest), so a budget samples each")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no bug after this many seconds (a rerun with the same --out resumes)")
    parser.add_argument("--shard", metavar="K/N", help="only every Nth bug of the set from the Kth (parallel runs, each "
                        "with its own --scratch and --out)")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only the bugs whose `what` contains TEXT (repeatable)")
    opts = parser.parse_args()
    if opts.report:
        print(report(opts.out))
        return
    bugs = BUGS if opts.bugs is None else load_bugs(opts.bugs)
    if opts.only:
        bugs = [b for b in bugs if any(text in b.what for text in opts.only)]
    if opts.interleave:
        bugs = interleave(bugs)
    if opts.shard:
        k, n = (int(x) for x in opts.shard.split("/"))
        bugs = bugs[k::n]
    if opts.check:
        raise SystemExit(1 if check(bugs, opts.scratch, opts.check_out) else 0)
    if opts.only_existing:
        bugs = [b for b in bugs if subprocess.run(["git", "cat-file", "-e", f"main:{b.path}"], cwd=ROOT).returncode == 0]
    run(bugs, opts.out, opts.without, opts.scratch, opts.rerun_survived, opts.budget_s)


if __name__ == "__main__":
    main()
