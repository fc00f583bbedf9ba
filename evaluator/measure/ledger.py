"""Where a stage's wall time goes: a ledger of seconds by activity, kept by the parent.

Users iterate on a kernel hundreds of times; a ranked submission's minutes are mostly not the
kernel's. Each stage records how its wall time splits (issue #20: measure first):

- ``worker_start``: spawning the worker, or taking a spare started ahead (:mod:`evaluator.workers`),
  until it is ready (interpreter, torch);
- ``calibration``: the hand-over allowance measured before the kernel is imported;
- ``load``: importing the submission;
- ``inputs``: making inputs and fresh content (the generator) and handing them over;
- ``untimed_calls``: the calls nobody times (test mode, the correctness pass before timing):
  first-call compilation lands here;
- ``kernel``: the timed repeats as the worker's clock reports them;
- ``flush``: the parent's L2 flushes;
- ``handover``: the rest of each timed repeat the parent witnessed (fresh content copied in,
  messages, events, outputs copied back);
- ``check``: the checker, the output rules and the copies they compare;
- ``mirror_check``: with ``--mirror-check``, the worker repeating each check in its own process
  before the next timed repeat
  (:meth:`evaluator.remote.RemoteExecutor.timed`);
- ``clocks``: the GPU's clocks read through NVML before and after each timed repeat;
- ``reporting``: progress events and each finished case handed on (the results file written);
- ``other``: whatever is left of the stage's wall time (statistics, the stopping rule, idle).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["ACTIVITIES", "Ledger"]

ACTIVITIES = ("worker_start", "calibration", "load", "inputs", "untimed_calls", "kernel", "flush", "handover",
              "check", "mirror_check", "clocks", "reporting", "other")


class Ledger:
    """Seconds by activity (``ACTIVITIES``); ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.seconds: dict[str, float] = dict.fromkeys(ACTIVITIES, 0.0)

    def add(self, activity: str, seconds: float) -> None:
        if activity not in self.seconds:
            raise ValueError(f"unknown activity {activity!r}")
        self.seconds[activity] += seconds

    @contextmanager
    def timing(self, activity: str) -> Iterator[None]:
        start = self._clock()
        try:
            yield
        finally:
            self.add(activity, self._clock() - start)

    def breakdown(self, wall_s: float) -> dict[str, float]:
        """Every activity in seconds (3 decimals), ``other`` being what the rest leaves of ``wall_s``."""
        known = sum(v for k, v in self.seconds.items() if k != "other")
        out = {k: round(v, 3) for k, v in self.seconds.items() if k != "other"}
        out["other"] = round(max(0.0, wall_s - known), 3)
        return out
