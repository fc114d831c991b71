"""Every measured page in reports/ from its rows: `mlsys bench report ROWS_DIR [--out REPORTS_DIR]`.

ROWS_DIR has the layout of reports/: one folder per family holding `rows.jsonl` (matmul and quant
also `ceilings.json`, the same card's `mlsys bench ceilings`). Each family's rows are copied into
REPORTS_DIR/<family>/ (nothing to copy when ROWS_DIR is reports/ itself) and its page is written
there from them; the page names the command that made it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from ..errors import require
from . import attention, comm, fused, kernels, memory


@dataclass(frozen=True)
class Page:
    family: str                            # folder under ROWS_DIR and REPORTS_DIR
    write: Callable[[Path, str], Path]     # (folder, command) -> the page written
    data: tuple[str, ...] = ("rows.jsonl",)


PAGES = (
    Page("matmul", partial(kernels.write, "matmul"), ("rows.jsonl", "ceilings.json")),
    Page("quant", partial(kernels.write, "quant"), ("rows.jsonl", "ceilings.json")),
    Page("attention", attention.write),
    Page("fused", fused.write, ("rows.jsonl", "ceilings.json")),
    Page("comm", comm.write),
    Page("memory", memory.write),
)
FAMILIES = tuple(page.family for page in PAGES)


def regenerate(rows_dir: Path, out_dir: Path | None = None, families: tuple[str, ...] = FAMILIES) -> list[Path]:
    """Copy each family's rows into out_dir and write its page; the pages written, in PAGES order."""
    out_dir = out_dir or rows_dir
    found = [p for p in PAGES if p.family in families and (rows_dir / p.family / "rows.jsonl").exists()]
    require(bool(found), f"no <family>/rows.jsonl under {rows_dir} (families: {', '.join(families)})")
    written = []
    for page in found:
        src, dest = rows_dir / page.family, out_dir / page.family
        dest.mkdir(parents=True, exist_ok=True)
        for name in page.data:
            if (src / name).exists() and (src / name).resolve() != (dest / name).resolve():
                shutil.copy(src / name, dest / name)
        command = f"mlsys bench report {rows_dir}" + (f" --out {out_dir}" if out_dir != rows_dir else "")
        written.append(page.write(dest, command))
    return written
