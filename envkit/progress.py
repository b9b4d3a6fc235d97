"""Plain progress lines for long commands whose output is not a terminal (piped, redirected, CI logs).

Progress bars (rich, tqdm) draw nothing useful into a pipe, so a long run looked silent. `ProgressLines`
prints one line such as ``SERO tasks: 12/32 (38%) 41 s elapsed, ~68 s left | rescued 9/12 roots`` to stderr,
flushed, at most every `every_s` seconds and at the end.

    >>> p = ProgressLines("demo", total=4, every_s=0.0, stream=__import__("sys").stdout, clock=iter(range(9)).__next__)
    >>> p.advance(2)
    demo: 2/4 (50%) 1 s elapsed, ~1 s left
    >>> p.advance(2, note="done")
    demo: 4/4 (100%) 2 s elapsed, ~0 s left | done
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default: stdout) is an interactive terminal."""
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressLines:
    """Throttled one-line progress reports (see the module docstring)."""

    def __init__(
        self,
        desc: str,
        total: int,
        done: int = 0,
        every_s: float = 10.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.desc, self.total, self.done, self.every_s = desc, total, done, every_s
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.start_done = done
        self.last = -float("inf")

    def advance(self, n: int = 1, note: str = "") -> None:
        """Count `n` more units; print a line when `every_s` has passed since the last one, or at the end."""
        self.done += n
        now = self.clock()
        if self.done >= self.total or now - self.last >= self.every_s:
            self.print(note, now)

    def print(self, note: str = "", now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self.last = now
        elapsed = now - self.start
        rate = (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0
        left = f", ~{(self.total - self.done) / rate:.0f} s left" if rate > 0 else ""
        pct = 100 * self.done / max(1, self.total)
        line = f"{self.desc}: {self.done}/{self.total} ({pct:.0f}%) {elapsed:.0f} s elapsed{left}"
        print(line + (f" | {note}" if note else ""), file=self.stream or sys.stderr, flush=True)
