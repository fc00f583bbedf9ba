"""What a run shows while it runs, on stderr.

On a terminal, one status line rewritten in place (contestant, stage, case i/n, repeats, elapsed,
an estimate of the stage's time left) that keeps ticking while the worker is silent. Off a
terminal (CI logs, pipes) carriage returns would be noise, so one plain line per finished case
and stage instead. Either way, a reader that goes away (``qrbench ... 2>&1 | head``) stops the run
as Ctrl-C does (:class:`OutputClosed`), so what was measured is saved as interrupted.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, TextIO

from evaluator.cli_args import OutputClosed
from evaluator.report.tables import first_line
from evaluator.report.units import format_ns
from evaluator.results import REFUSED, RUNNING, RunResult, StageResult

__all__ = ["Feedback", "PlainLog", "ProgressLine", "feedback", "use_color"]


def use_color(stream: TextIO) -> bool:
    """Color only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def _rule_name(message: str) -> str:
    """``rule NAME`` for a hardening rule's message (``[rule NAME] ...``), else its first line."""
    line = first_line(message)
    return line[1:line.index("]")] if line.startswith("[rule ") and "]" in line else line


class Feedback:
    """The interface the CLI drives: ``start`` a contestant, progress events (``__call__``), result
    snapshots (``update``), and ``done``. Writes that hit a closed pipe raise :class:`OutputClosed`."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.contestant = ""

    def start(self, contestant: str) -> None:
        self.contestant = contestant

    def __call__(self, stage: str, event: dict[str, Any]) -> None:
        """A progress event of the worker or the parent (see :mod:`evaluator.protocol`)."""

    def update(self, run: RunResult) -> None:
        """The run as saved so far (after each finished case and stage)."""

    def done(self, run: RunResult | None = None) -> None:
        """The contestant's run ended (``run`` is None when it was stopped before it had one)."""

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            raise OutputClosed("the output was closed") from None


class ProgressLine(Feedback):
    """Rewrites a single line in place; ``done`` clears it. Silent unless enabled (a terminal)."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 clock: Any = time.monotonic) -> None:
        super().__init__(stream)
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._clock = clock
        self.stage = ""
        self.case = ""
        self.detail = ""
        self._started = clock()
        self._first_case: float | None = None  # when the stage's first timed case began
        self._pace: tuple[float, int, int] | None = None  # (time, index, count) of the latest case event
        self._shown = False

    def start(self, contestant: str) -> None:
        super().start(contestant)
        self.stage = self.case = self.detail = ""
        self._started = self._clock()

    def __call__(self, stage: str, event: dict[str, Any]) -> None:
        now = self._clock()
        if stage != self.stage:
            self.stage, self.case, self.detail = stage, "", ""
            self._first_case = self._pace = None
        what = event.get("event")
        if what in ("case", "warmup"):
            counted = "count" in event and "index" in event
            where = f"{event['index'] + 1}/{event['count']} " if counted else ""
            self.case = f"{'warm-up ' if what == 'warmup' else ''}{where}{event.get('label', '')}"
            self.detail = ""
            if what == "case" and counted:
                self._first_case = now if event["index"] == 0 else self._first_case
                self._pace = (now, event["index"], event["count"])
        elif what == "repeat":
            self.detail = f"repeat {event['repeat']}, case {event['elapsed_s']:.1f} s"
        elif what == "retime":
            self.case = f"{self.case} (timed again: {_rule_name(event.get('why', ''))})"
            self.detail = ""
        self._show(now)

    def eta_s(self, now: float) -> float | None:
        """Seconds the stage has left at the pace of its finished cases; None before one finished."""
        if self._pace is None or self._first_case is None or self._pace[1] == 0:
            return None
        at, index, count = self._pace
        per_case = (at - self._first_case) / index
        return max(0.0, per_case * (count - index) - (now - at))

    def text(self, now: float) -> str:
        parts = [self.contestant, self.stage, self.case, self.detail, f"{now - self._started:.0f} s"]
        eta = self.eta_s(now)
        if eta is not None:
            parts.append(f"about {eta:.0f} s left in {self.stage}")
        return " · ".join(p for p in parts if p)

    def _show(self, now: float) -> None:
        if not self.enabled:
            return
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self._write("\r" + self.text(now)[:width].ljust(width))
        self._shown = True

    def done(self, run: RunResult | None = None) -> None:
        if self.enabled and self._shown:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self._write("\r" + " " * width + "\r")
            self._shown = False


class PlainLog(Feedback):
    """One line per finished case and per finished stage, for logs: no carriage returns."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._told: set[tuple[str, int]] = set()  # (stage, case index); index -1 is the stage itself

    def start(self, contestant: str) -> None:
        super().start(contestant)
        self._told = set()

    def update(self, run: RunResult) -> None:
        if run.status == REFUSED and ("precheck", -1) not in self._told:
            self._told.add(("precheck", -1))
            self._write(f"{self.contestant}: refused: {first_line(run.reason)}\n")
        for stage in run.stages:
            for case in stage.cases:
                if case.status != "skipped" and (stage.name, case.index) not in self._told:
                    self._told.add((stage.name, case.index))
                    self._write(self._case_line(stage, case.index) + "\n")
            if stage.status != RUNNING and (stage.name, -1) not in self._told:
                self._told.add((stage.name, -1))
                self._write(self._stage_line(stage) + "\n")

    def done(self, run: RunResult | None = None) -> None:
        if run is not None:
            self.update(run)

    def _case_line(self, stage: StageResult, index: int) -> str:
        case = stage.cases[index]
        if case.stats is not None and case.passed:
            detail = f" {format_ns(case.stats.mean_ns)} ({case.stats.runs} runs)"
        else:
            detail = f": {first_line(case.message)}" if case.message and not case.passed else ""
        if case.retimed:
            detail += f" (timed again: the first attempt failed {_rule_name(case.retimed)})"
        return (f"{self.contestant} · {stage.name} · case {index + 1}/{len(stage.cases)} {case.case.label}: "
                f"{case.status}{detail}")

    def _stage_line(self, stage: StageResult) -> str:
        passed = sum(c.passed for c in stage.cases)
        why = f": {first_line(stage.reason)}" if stage.reason else ""
        return (f"{self.contestant} · {stage.name}: {stage.status}{why} "
                f"({passed}/{len(stage.cases)} cases passed, {stage.wall_s:.1f} s)")


def feedback(stream: TextIO | None = None) -> Feedback:
    """The live status line on a terminal, plain lines elsewhere."""
    stream = stream or sys.stderr
    return ProgressLine(stream) if stream.isatty() else PlainLog(stream)
