"""The CPU time of the worker's main thread, as the parent reads it from outside: a second
witness for CPU runs (rule ``parent-clock``).

What the parent's wall clock sees of a repeat is stretched by every wait of the worker for a
core, so on a loaded CPU host the wall-clock witness needs a wide allowance (10 ms) and judges
no shorter repeat. The CPU time the worker's main thread is given is not stretched that way,
and that thread calls the kernel and times the claim: it cannot run for longer than the claim
plus its own bookkeeping. The parent reads it where the worker cannot write it,
``/proc/<pid>/task/<pid>/schedstat`` (readable even though the worker is not dumpable).

Only the main thread bounds the claim. Other threads of an honest kernel may keep spinning
after the call returns (OpenMP runtimes wait for the next parallel region busily, for up to
200 ms with some settings), so their CPU time says nothing about the call; work a kernel moves
to them is bounded by the wall clock alone (docs/hardening.md, threat model). Where the file
cannot be read (not Linux, a restricted ``/proc``, a kernel without scheduler statistics)
there is no CPU witness and the wall clock judges alone.
"""

from __future__ import annotations

__all__ = ["MainThreadClock"]


class MainThreadClock:
    """Reads one worker's main-thread run time in ns; :meth:`of` is None where this host cannot."""

    def __init__(self, pid: int) -> None:
        self._schedstat = f"/proc/{pid}/task/{pid}/schedstat"

    @classmethod
    def of(cls, pid: int) -> MainThreadClock | None:
        clock = cls(pid)
        try:
            return clock if clock.read() > 0 else None  # zero: scheduler statistics are off
        except (OSError, ValueError, IndexError):
            return None

    def read(self) -> int:
        with open(self._schedstat, "rb") as f:
            return int(f.read().split()[0])
