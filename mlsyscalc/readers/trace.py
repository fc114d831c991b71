"""Serving traces (`mlsys serve --trace FILE`) and length columns (`--prompt-len csv:FILE:COLUMN`).

A trace is a CSV file with the columns arrival_s, prompt_len, output_len (others are ignored), or a
JSON Lines file (.jsonl) of objects with those keys: arrival_s a finite number >= 0 (seconds),
prompt_len and output_len whole numbers >= 1 and at most MAX_REQUEST_TOKENS, at most `max_rows`
requests. A length column holds whole numbers >= 1 in one named column of a CSV file.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import MlsysError
from ..validate import MAX_DIM
from . import schema
from .files import Line, read_csv, read_jsonl

TRACE_COLUMNS = ("arrival_s", "prompt_len", "output_len")
MAX_REQUEST_TOKENS = MAX_DIM  # a prompt or an output: the widest context any config may declare


def _records(path: str, what: str, max_rows: int) -> tuple[list[Line], bool]:
    """(records, from_csv): every data row of the file, at most max_rows of them."""
    if Path(path).suffix.lower() in (".jsonl", ".ndjson"):
        rows, text = read_jsonl(path, what), False
    else:
        _, rows = read_csv(path, what)
        text = True
    if not rows:
        raise MlsysError(f"{what}: {path} has no data rows")
    if len(rows) > max_rows:
        raise MlsysError(f"{what}: {path} has {len(rows):,} rows; at most {max_rows:,} requests are simulated")
    return rows, text


def read_trace(path: str, max_rows: int, what: str = "--trace") -> list[tuple[float, int, int]]:
    """(arrival_s, prompt_len, output_len) of every row, in file order."""
    rows, text = _records(path, what, max_rows)
    missing = [c for c in TRACE_COLUMNS if c not in rows[0].record]
    if missing:
        found = ", ".join(map(str, rows[0].record)) or "none"
        raise MlsysError(f"{what}: {path} has no column {missing[0]!r} (needs {', '.join(TRACE_COLUMNS)}; found {found})")
    out = []
    for line in rows:
        r, where = line.record, f"{what} {line.where}"
        out.append((schema.number(r, "arrival_s", where, minimum=0, text=text),
                    schema.integer(r, "prompt_len", where, maximum=MAX_REQUEST_TOKENS, text=text),
                    schema.integer(r, "output_len", where, maximum=MAX_REQUEST_TOKENS, text=text)))
    return out


def read_length_column(path: str, column: str, what: str, max_rows: int) -> tuple[int, ...]:
    """The whole numbers >= 1 of one CSV column (an empirical length distribution)."""
    rows, text = _records(path, what, max_rows)
    if column not in rows[0].record:
        raise MlsysError(f"{what}: {path} has no column {column!r} (columns: {', '.join(map(str, rows[0].record))})")
    return tuple(schema.integer(line.record, column, f"{what} {line.where}", maximum=MAX_REQUEST_TOKENS, text=text)
                 for line in rows)
