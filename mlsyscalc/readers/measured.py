"""`--measured DIR` folders (`mlsys report`): every benchmark-rows file under DIR, checked.

DIR must be a folder. Every `*.jsonl` and `*.csv` below it is read as benchmark rows (readers.rows):
a file whose records are not rows (NCCL rows, memory records, results of other tools) is skipped,
a rows file with a malformed record is an error naming the file, line and key. At most MAX_FILES
files are read. The parsed folder is cached by the files' paths, sizes and modification times, so
the report's check and its measured section read it once.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..errors import MlsysError
from .files import Line
from .rows import NotRows, read_row_records

MAX_FILES = 10_000


def rows_files(folder: str | Path) -> list[Path]:
    path = Path(folder)
    if not path.is_dir():
        raise MlsysError(f"--measured {folder}: no such folder")
    files = sorted([*path.glob("**/*.jsonl"), *path.glob("**/*.csv")])
    if len(files) > MAX_FILES:
        raise MlsysError(f"--measured {folder}: {len(files):,} files; at most {MAX_FILES:,} are read")
    return files


def measured_records(folder: str | Path) -> tuple[tuple[Path, tuple[Line, ...]], ...]:
    """(file, its records) for every rows file under folder, in path order."""
    files = rows_files(folder)
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return _read(stamp)


@lru_cache(maxsize=4)
def _read(stamp: tuple[tuple[str, int, int], ...]) -> tuple[tuple[Path, tuple[Line, ...]], ...]:
    out = []
    for name, _, _ in stamp:
        try:
            out.append((Path(name), tuple(read_row_records(name, "--measured"))))
        except NotRows:
            continue
    return tuple(out)
