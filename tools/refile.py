"""File calc/'s flat modules into sub-packages by subject, and rewrite every reference to them.

    python tools/refile.py move              # git mv each module still at its old path
    python tools/refile.py imports [PATHS]   # rewrite references in PATHS (default: the whole tree)

Both steps are idempotent and each runs alone. `imports` exists for trees that gain code written
against the old names after the move (a branch merged later): it reads every reference, decides
whether it names an old module or a new one, and rewrites only the old ones.

What `imports` rewrites, in .py, .md, .sh, .toml and .json files:

- dotted names `mlsyscalc.calc.OLD...`, `calc.OLD...` (prose, `from ..calc.OLD import`), also in
  strings (`monkeypatch.setattr("mlsyscalc.calc.serve.simulate", ...)`) and `python -m` lines;
- `from mlsyscalc.calc import OLD` (one line): one import per name, `as OLD` where the leaf changed;
- paths `calc/OLD.py`;
- relative imports inside the moved modules: each is resolved from the module's old place and
  written again relative to its new place (re-leveled, never made absolute).

How a name is read. Five old modules became packages of the same name (train, serve, plan,
scaling, cost). `mlsyscalc.calc.train.X` names the new package when X is one of its submodules,
and the old module (so it becomes `mlsyscalc.calc.train.step.X`) otherwise; `check_names` refuses
a move map in which an old module defines a name equal to a submodule of its new package, so the
two readings never meet. A bare `mlsyscalc.calc.train` (and `from mlsyscalc.calc import train`)
is read as the old module in `import X` and `python -m X`, and as the package elsewhere (prose,
pyproject.toml's package list); new code names the package's submodules instead.

Hand fixes that a rerun does not need: pyproject.toml's package list (the new sub-packages) and
each sub-package's `__init__.py` face (`move` creates a bare one where none exists).

After a merge, run both steps (`move`, then `imports`). What they do not cover: a module a branch
added at the top of calc/ under a name not in MOVES (add a row, then rerun; tests/test_import_graph.py
fails while one is left), and a file found at both its old and its new path (`move` stops and names
it: merge the two by hand). Reports pages a branch added are indexed by `python tools/reports_index.py`.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALC = "mlsyscalc.calc"

# old module under mlsyscalc.calc -> its new dotted name under mlsyscalc.calc
MOVES: dict[str, str] = {
    # counts: sizes of a model (parameters, FLOPs, attention, saved activations)
    "layers": "counts.layers",
    "params": "counts.params",
    "flops": "counts.flops",
    "attention": "counts.attention",
    "activations": "counts.activations",
    # parallel: how a layout splits the model
    "memory_common": "parallel.shards",
    "tensor_parallel": "parallel.tensor_parallel",
    "pipeline_split": "parallel.pipeline_split",
    "expert_grid": "parallel.expert_grid",
    # comm: collectives and the traffic of a layout
    "comm_collectives": "comm.collectives",
    "comm_step": "comm.step",
    "train_comm": "comm.exposed",
    "roofline_comm": "comm.tp_rows",
    # roofline: op and model times, the ceilings they read
    "roofline_model": "roofline.model",
    "roofline_ops": "roofline.ops",
    "roofline_options": "roofline.options",
    "roofline_host": "roofline.host",
    "roofline_head": "roofline.head",
    "roofline_notes": "roofline.notes",
    "roofline_paged": "roofline.paged",
    "roofline_sweep": "roofline.sweep",
    "roofline_mem_efficient": "roofline.mem_efficient",
    "roofline_memory": "roofline.memory_bound",
    "roofline_torch": "roofline.torch_kernels",
    "roofline_torch_moe": "roofline.torch_moe",
    "roofline_train": "roofline.training",
    "fused_ops": "roofline.fused_ops",
    "cublas_split": "roofline.cublas_split",
    "steady": "roofline.steady",
    "calibration": "roofline.calibration",
    "calibration_fit": "roofline.calibration_fit",
    # precision: low-precision training recipes
    "train_fp8": "precision.fp8",
    "train_fp4": "precision.fp4",
    # memory: bytes per GPU
    "memory_infer": "memory.inference",
    "memory_train": "memory.training",
    "memory_schedule": "memory.schedule",
    "caching_allocator": "memory.caching_allocator",
    # train: one whole layout
    "train": "train.step",
    "train_attention": "train.attention_time",
    "train_host": "train.host",
    "train_options": "train.options",
    "train_parts": "train.parts",
    "train_probe": "train.probe",
    # plan: the search over layouts
    "plan": "plan.search",
    "plan_memory": "plan.memory",
    "plan_result": "plan.result",
    "plan_space": "plan.space",
    # serve: the serving simulation
    "serve": "serve.simulator",
    "serve_cost": "serve.iteration",
    "serve_disagg": "serve.disagg",
    "serve_engine": "serve.engine",
    "serve_limits": "serve.limits",
    "serve_metrics": "serve.metrics",
    "serve_spec": "serve.spec",
    "serve_static": "serve.static",
    "serve_workload": "serve.workload",
    "serve_slo": "serve.slo",
    "serve_capacity": "serve.capacity",
    "serve_min_gpus": "serve.min_gpus",
    "train_fit": "plan.fit",
    # scaling: scaling laws
    "scaling": "scaling.calculators",
    "scaling_fit": "scaling.fit",
    "scaling_fit_batch": "scaling.fit_batch",
    "scaling_laws": "scaling.laws",
    # cost: money
    "cost": "cost.gpu_hours",
    "compare": "cost.compare",
}

SUFFIXES = {".py", ".md", ".sh", ".toml", ".json"}
PACKAGES = {new.split(".")[0] for new in MOVES.values()}
SUBMODULES = {pkg: {new.split(".")[1] for new in MOVES.values() if new.startswith(pkg + ".")} for pkg in PACKAGES}
NEW_TO_OLD = {new: old for old, new in MOVES.items()}

DOTTED = re.compile(r"(?<![\w])calc\.(\w+)((?:\.\w+)*)")
IMPORTED = re.compile(r"\s+import\s+\(?\s*(\w+)")
IMPORTING = re.compile(r"(?:\bimport|-m)\s+(?:mlsyscalc\.|\.+)$")
PATH = re.compile(r"(?<![\w])calc/(\w+)\.py\b")
FROM_CALC = re.compile(r"^([ \t]*)from ((?:mlsyscalc\.|\.+)calc) import ([\w, ]+?)[ \t]*(?:#.*)?$", re.M)


def module_file(dotted_new: str) -> Path:
    return ROOT / "mlsyscalc" / "calc" / (dotted_new.replace(".", "/") + ".py")


# ---- move ---------------------------------------------------------------------------------------

def move() -> None:
    for old, new in MOVES.items():
        src, dst = module_file(old), module_file(new)
        if src.exists() and dst.exists():
            sys.exit(f"refile: both {src.relative_to(ROOT)} and {dst.relative_to(ROOT)} exist; merge them by hand")
        if not src.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        init = dst.parent / "__init__.py"
        if not init.exists():
            init.write_text(f'"""calc/{dst.parent.name}/."""\n')
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)
        print(f"moved calc/{old}.py -> calc/{new.replace('.', '/')}.py")


# ---- names --------------------------------------------------------------------------------------

def check_names() -> None:
    """An old module that became a package must define no name equal to one of its submodules."""
    for pkg in PACKAGES & MOVES.keys():
        for path in (module_file(pkg), module_file(MOVES[pkg])):
            if path.exists():
                clash = top_names(path) & SUBMODULES[pkg]
                if clash:
                    sys.exit(f"refile: {path.relative_to(ROOT)} defines {sorted(clash)}, also submodules of calc/{pkg}/")


def top_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def new_parts(parts: list[str], next_name: str | None = None) -> list[str] | None:
    """The new name of the calc-relative dotted `parts`, or None when it needs no change.

    `next_name` is the first name a `from ... import` takes from it, when it is the whole module.
    """
    head, rest = parts[0], parts[1:]
    if head in PACKAGES and head not in MOVES:
        return None
    if head in PACKAGES:
        first = rest[0] if rest else next_name
        if first in SUBMODULES[head]:
            return None
    if head not in MOVES:
        return None
    return MOVES[head].split(".") + rest


# ---- text rewrites ------------------------------------------------------------------------------

def rewrite_dotted(text: str) -> str:
    def swap(match: re.Match[str]) -> str:
        parts = [match.group(1)] + [p for p in match.group(2).split(".") if p]
        follow = IMPORTED.match(text, match.end())
        if len(parts) == 1 and parts[0] in PACKAGES and not follow and not IMPORTING.search(text[max(0, match.start() - 40):match.start()]):
            return match.group(0)  # a bare name outside `import X` / `python -m X` reads as the package
        moved = new_parts(parts, follow.group(1) if follow else None)
        return match.group(0) if moved is None else "calc." + ".".join(moved)
    return DOTTED.sub(swap, text)


def rewrite_paths(text: str) -> str:
    def swap(match: re.Match[str]) -> str:
        old = match.group(1)
        return f"calc/{MOVES[old].replace('.', '/')}.py" if old in MOVES else match.group(0)
    return PATH.sub(swap, text)


def rewrite_from_calc(text: str) -> str:
    """`from mlsyscalc.calc import a, b as c` -> one import per moved name, binding the same names."""
    def swap(match: re.Match[str]) -> str:
        indent, base = match.group(1), match.group(2)
        items = [item.split() for item in match.group(3).split(",")]
        if any(len(i) not in (1, 3) or (len(i) == 3 and i[1] != "as") for i in items):
            return match.group(0)
        if not any(i[0] in MOVES for i in items):
            return match.group(0)
        lines = []
        for item in items:
            name, bound = item[0], item[-1]
            if name not in MOVES:
                lines.append(f"{indent}from {base} import {' '.join(item)}")
                continue
            parent, leaf = MOVES[name].rsplit(".", 1)
            alias = "" if leaf == bound else f" as {bound}"
            lines.append(f"{indent}from {base}.{parent} import {leaf}{alias}")
        return "\n".join(lines)
    return FROM_CALC.sub(swap, text)


# ---- relative imports inside the moved modules ---------------------------------------------------

def exists(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def resolve(module: str, level: int, name: str | None) -> str:
    package = module.split(".")[:-1]
    package = package[: len(package) - (level - 1)]
    return ".".join(package + ([name] if name else []))


def valid_here(target: str, names: list[str], has_module: bool) -> bool:
    """Whether a relative import, resolved from the module's new place, names what exists there now."""
    if not has_module:
        return all(exists(f"{target}.{n}") for n in names)
    if not exists(target):
        return False
    parts = target.split(".")
    if parts[:2] == CALC.split(".") and len(parts) == 3 and parts[2] in MOVES:
        return all(n in SUBMODULES.get(parts[2], ()) for n in names)
    return True


def mapped(absolute: str, first: str | None = None) -> str:
    parts = absolute.split(".")
    if parts[:2] != CALC.split(".") or len(parts) < 3:
        return absolute
    moved = new_parts(parts[2:], first)
    return absolute if moved is None else ".".join([*CALC.split("."), *moved])


def relative(importer: str, target: str) -> str:
    package, parts = importer.split(".")[:-1], target.split(".")
    common = 0
    while common < min(len(package), len(parts)) and package[common] == parts[common]:
        common += 1
    return "." * (len(package) - common + 1) + ".".join(parts[common:])


def relative_package(importer: str, package: str) -> str:
    """`package` written relative to `importer`, for `from <it> import name`."""
    spelled = relative(importer, package + ".x")[:-1]
    return spelled if spelled.strip(".") == "" else spelled[:-1]


def rewrite_relative(path: Path, text: str) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    here = ".".join(rel.parts)
    calc_name = ".".join(rel.parts[2:])
    if rel.parts[:2] != ("mlsyscalc", "calc") or calc_name not in NEW_TO_OLD:
        return text
    before = f"{CALC}.{NEW_TO_OLD[calc_name]}"
    lines = text.splitlines(keepends=True)
    for node in sorted(_relative_imports(text), key=lambda n: -n.lineno):
        names = [a.name for a in node.names]
        if valid_here(resolve(here, node.level, node.module), names, node.module is not None):
            continue
        old_target = resolve(before, node.level, node.module)
        line = lines[node.lineno - 1]
        if node.module is not None:
            target = mapped(old_target, names[0])
            head = re.compile(r"from\s+\.+[\w.]*\s+import")
            lines[node.lineno - 1] = head.sub(f"from {relative(here, target)} import", line, count=1)
        else:
            if node.end_lineno != node.lineno:
                sys.exit(f"refile: {path.relative_to(ROOT)}:{node.lineno}: split `from . import` over lines by hand")
            indent = line[: len(line) - len(line.lstrip())]
            out = []
            for alias in node.names:
                target = mapped(f"{old_target}.{alias.name}")
                parent, leaf = target.rsplit(".", 1)
                bound = alias.asname or alias.name
                tail = "" if leaf == bound else f" as {bound}"
                out.append(f"{indent}from {relative_package(here, parent)} import {leaf}{tail}\n")
            lines[node.lineno - 1] = "".join(out)
    return "".join(lines)


def _relative_imports(text: str) -> list[ast.ImportFrom]:
    return [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom) and n.level]


# ---- the tree -----------------------------------------------------------------------------------

def tree_files(paths: list[str]) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout.split("\n")
    me = Path(__file__).resolve()
    files = {(ROOT / p).resolve() for p in listed if p}
    return sorted(f for f in files if f.suffix in SUFFIXES and f.is_file() and f != me)


def rewrite_file(path: Path) -> bool:
    text = path.read_text()
    new = text
    if path.suffix == ".py":
        new = rewrite_relative(path, new)
    new = rewrite_paths(rewrite_dotted(rewrite_from_calc(new)))
    if new == text:
        return False
    path.write_text(new)
    return True


def imports(paths: list[str]) -> None:
    check_names()
    changed = [p for p in tree_files(paths) if rewrite_file(p)]
    for path in changed:
        print(f"rewrote {path.relative_to(ROOT)}")
    print(f"{len(changed)} files rewritten")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("move", "imports"):
        sys.exit("usage: python tools/refile.py move | imports [PATHS...]")
    if argv[0] == "move":
        move()
    else:
        imports(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
