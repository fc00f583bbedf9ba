"""Live progress on a terminal: one status line (contestant, stage, case i/n, repeats, elapsed).

Silent when the stream is not a terminal (CI logs stay clean) unless forced.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Any, TextIO

__all__ = ["ProgressLine"]


class ProgressLine:
    """Rewrites a single line in place; :meth:`done` clears it."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.contestant = ""
        self.case = ""
        self._started = time.monotonic()
        self._shown = False

    def start(self, contestant: str) -> None:
        self.contestant = contestant
        self.case = ""
        self._started = time.monotonic()

    def __call__(self, stage: str, event: dict[str, Any]) -> None:
        """Take a worker's progress event (see :mod:`evaluator.protocol`)."""
        what = event.get("event")
        if what in ("case", "warmup"):
            where = f"{event['index'] + 1}/{event['count']} " if "count" in event and "index" in event else ""
            self.case = f"{'warm-up ' if what == 'warmup' else ''}{where}{event.get('label', '')}"
            self._show(stage, "")
        elif what == "repeat":
            self._show(stage, f"repeat {event['repeat']}, case {event['elapsed_s']:.1f} s")

    def _show(self, stage: str, detail: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self._started
        text = f"{self.contestant} · {stage} · {self.case}" + (f" · {detail}" if detail else "") + f" · {elapsed:.0f} s"
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self.stream.write("\r" + text[:width].ljust(width))
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self.enabled and self._shown:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + " " * width + "\r")
            self.stream.flush()
            self._shown = False
