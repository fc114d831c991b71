"""Progress for commands that can take over a second: one rich bar on stderr, only on a terminal.

Two ways to use it, both drawing nothing when stderr is a pipe, a file or a test's buffer (so
stdout and captured stderr stay exactly as they were), and nothing once the work is done (the
bar is transient):

    with progress("report", total=7) as step:    # a context manager: call it as each step starts
        step("training")                         # the bar shows "report: training  1/7" (one done)

    for rate in progress("serve", rates):        # an iterable wrapper: one step per item
        ...

rich is imported only when a bar is drawn, so commands stay import-light.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")


def _terminal() -> bool:
    return sys.stderr.isatty()


def rich_bar() -> Any:
    """The bar every command draws (description, bar, done/total, time) on the stderr console; transient."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .render import console

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console(stderr=True), transient=True)


class progress(Generic[T]):  # noqa: N801 - used like a function: `with progress(...)`, `for x in progress(...)`
    """A progress bar on stderr: `description`, then `total` steps (the length of `items` when given)."""

    def __init__(self, description: str, items: Iterable[T] | None = None, total: int | None = None,
                 label: Callable[[T], str] = str):
        self.description, self.items, self.label = description, items, label
        self.total = total if total is not None or items is None else _length(items)
        self._bar: Any = None
        self._task: Any = None
        self._steps = 0  # steps started

    def __enter__(self) -> progress[T]:
        if _terminal():
            self._bar = rich_bar()
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __call__(self, label: str = "") -> None:
        """A step starts (the one before it, if any, is done); label names it."""
        if self._bar is not None:
            text = f"{self.description}: {label}" if label else self.description
            self._bar.update(self._task, advance=1 if self._steps else 0, description=text)
        self._steps += 1

    def __iter__(self) -> Iterator[T]:
        if self.items is None:
            raise TypeError("progress(description) without items is a context manager, not an iterable")
        with self:
            for item in self.items:
                self(self.label(item))
                yield item


def _length(items: Iterable[Any]) -> int | None:
    try:
        return len(items)  # type: ignore[arg-type]
    except TypeError:
        return None
