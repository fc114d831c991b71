"""Text, JSON, JSON Lines and CSV files read one way, for every kind of input file.

A file is refused (MlsysError naming it) when it is missing, a folder, larger than MAX_FILE_BYTES,
not UTF-8, or malformed; a UTF-8 byte-order mark (what Excel writes) is dropped. JSON may not hold
NaN or an infinity (Python's json module would read `NaN`, `Infinity` and `1e400` as floats), and
the message names the key path of the first such value. JSON Lines keep their line numbers: each
non-blank line must be one JSON object. CSV rows must have as many fields as the header, and no
field may pass MAX_CSV_FIELD_CHARS characters.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import MlsysError

MAX_FILE_BYTES = 256 * 2**20  # any input file: 256 MiB (a million benchmark rows is ~1 GB; none is near)
MAX_CSV_FIELD_CHARS = 131_072  # Python's csv default: no number, name or length needs more
BOM = "\ufeff"


def read_text(path: str | Path | Any, what: str) -> str:
    """The file's text (UTF-8, a leading byte-order mark dropped); path may be a Traversable."""
    name = str(path)
    if isinstance(path, (str, Path)):
        file = Path(path).expanduser()
        if not file.exists():
            raise MlsysError(f"{what}: no such file {name!r}")
        if file.is_dir():
            raise MlsysError(f"{what}: {name} is a folder, not a file")
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise MlsysError(f"{what}: {name} holds {size:,} bytes; input files are read up to {MAX_FILE_BYTES:,}")
        path = file
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MlsysError(f"{what}: cannot read {name}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MlsysError(f"{what}: {name} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    return text.removeprefix(BOM)


def nonfinite_path(value: Any, path: str = "") -> str | None:
    """The key path ('a.b[2]') of the first NaN or infinite float inside value, else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path or "the value")
    if isinstance(value, dict):
        for key, item in value.items():
            found = nonfinite_path(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = nonfinite_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


def parse_json(text: str, where: str) -> Any:
    """JSON text -> value; malformed JSON or a NaN/infinite number is an MlsysError naming `where`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MlsysError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise MlsysError(f"{where}: JSON nested too deeply") from None
    bad = nonfinite_path(value)
    if bad:
        raise MlsysError(f"{where}: key {bad} is not a finite number (NaN, Infinity and 1e400 are refused)")
    return value


def read_json(path: str | Path | Any, what: str) -> Any:
    """A JSON file's value (any type; callers check the shape)."""
    return parse_json(read_text(path, what), f"{what} {path}")


@dataclass(frozen=True)
class Line:
    """One record of a JSON Lines or CSV file and where it came from (for messages)."""

    file: str
    number: int  # 1-based line of the file (a CSV record: the line it starts on)
    record: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.file} line {self.number}"


def read_jsonl(path: str | Path, what: str) -> list[Line]:
    """Every non-blank line of a JSON Lines file, each one JSON object."""
    text = read_text(path, what)
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{what} {path} line {number}"
        record = parse_json(raw, where)
        if not isinstance(record, dict):
            raise MlsysError(f"{where}: a row must be a JSON object, got {_kind(record)}")
        out.append(Line(str(path), number, record))
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", list: "a list", str: "a string"}.get(type(value), "a number")


def read_csv(path: str | Path, what: str) -> tuple[list[str], list[Line]]:
    """(header, rows) of a CSV file with a header line: columns stripped of spaces, blank lines skipped."""
    text = read_text(path, what)
    lines = iter(text.splitlines(keepends=True))
    reader = csv.reader(lines)
    try:
        header = [name.strip() for name in next(reader, [])]
        if not any(header):
            raise MlsysError(f"{what}: {path} has no header line")
        if "" in header:
            raise MlsysError(f"{what} {path} line 1: column {header.index('') + 1} has no name")
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            raise MlsysError(f"{what} {path} line 1: column {twice[0]!r} appears twice")
        rows = list(_records(reader, header, str(path), what))
    except csv.Error as exc:
        raise MlsysError(f"{what} {path} line {reader.line_num}: malformed CSV ({exc})") from None
    return header, rows


def _records(reader: Any, header: list[str], path: str, what: str) -> Iterator[Line]:
    start = reader.line_num + 1
    for fields in reader:
        if fields and any(f.strip() for f in fields):
            if len(fields) != len(header):
                raise MlsysError(f"{what} {path} line {start}: {len(fields)} fields, the header has {len(header)}")
            yield Line(path, start, dict(zip(header, fields)))
        start = reader.line_num + 1
