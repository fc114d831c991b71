"""The public face of a calc/ sub-package: its names, each fetched from its module on first use.

A sub-package's `__init__` says which of its modules holds each public name. The module is
imported only when the name is asked for, so importing one calculator never drags in its
neighbours (calculator commands must answer in well under half a second) and a face can list
names whose modules import numpy without every `mlsys params` paying for it.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Sequence


def face(package: str, held: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and `__all__` of `package`, whose module `m` holds the names `held[m]`."""
    where = {name: module for module, names in held.items() for name in names}

    def get(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def names() -> list[str]:
        return sorted(where)

    return get, names, sorted(where)
