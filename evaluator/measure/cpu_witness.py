"""What the parent reads of a CPU worker's scheduling from outside: the run time of its main
thread (a second witness, rule ``parent-clock``) and the host's stalls inside a repeat.

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

The same files say how long a thread waited for a core while it could run (schedstat's second
field). A loaded host stretches the wall-clock witness by such waits of the parent (writing the
inputs, reading the reply) and of the worker's main thread; no work of the worker's can happen
in them except on its other threads, whose run time the parent reads too (the process's CPU
clock, which counts threads that have exited), or in processes of its own, whose run time that
clock does not count: so a stall is granted only while the worker has none (:func:`alone`, and
its reaped children's run time unchanged). :func:`host_stall_ns` is the part of a repeat's wall
time the rule may take as the host's, not the kernel's (docs/hardening.md, "A loaded host").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

from evaluator.hardening.sandbox.children import process_table

__all__ = ["CpuReading", "MainThreadClock", "alone", "host_stall_ns"]


def _schedstat(path: str) -> tuple[int, int]:
    """A thread's run time and its runnable wait for a core so far, in ns."""
    with open(path, "rb") as f:
        fields = f.read().split()
    return int(fields[0]), int(fields[1])


@dataclass(frozen=True)
class CpuReading:
    """One moment's clocks (ns): the worker's main thread's run time and runnable wait, the run
    time of all the worker's threads, and the runnable wait of the parent's reading thread; and
    the run time of the worker's reaped children, in clock ticks (/proc's only unit for it)."""

    main_run_ns: int
    main_wait_ns: int
    process_ns: int
    parent_wait_ns: int
    children_ticks: int = 0


def host_stall_ns(before: CpuReading, after: CpuReading, claimed_ns: float) -> float:
    """The wall time between two readings that the host's scheduler took from the repeat: the
    longer of the two threads' waits for a core (the parent's and the worker's main thread's,
    which take turns in a repeat, so the longer is never more than their union), less every ns
    the worker's threads ran beyond the claim. Work a kernel does outside its claim, on any
    thread, so takes back as much of the stall as it took CPU time; a wait it causes with threads
    of its own is their run time, and no stall."""
    waited = max(after.parent_wait_ns - before.parent_wait_ns, after.main_wait_ns - before.main_wait_ns)
    unclaimed = max(0.0, (after.process_ns - before.process_ns) - claimed_ns)
    return max(0.0, waited - unclaimed)


def alone(worker: int, workers: Collection[int]) -> bool:
    """Whether ``worker`` has no process of its own beside it: no child, alive or a zombie, and
    nothing re-parented to this process (a subreaper, :mod:`evaluator.hardening.sandbox.children`)
    but the ``workers`` it started itself."""
    me = os.getpid()
    return not any(proc.ppid == worker or (proc.ppid == me and pid != worker and pid not in workers)
                   for pid, proc in process_table().items())


class MainThreadClock:
    """Reads one worker's main-thread run time in ns; :meth:`of` is None where this host cannot."""

    def __init__(self, pid: int) -> None:
        self._schedstat = f"/proc/{pid}/task/{pid}/schedstat"
        self._stat = f"/proc/{pid}/stat"
        self._process_clock = ((~pid) << 3) | 2  # the kernel's CPU clock id of process pid (CPUCLOCK_SCHED)

    @classmethod
    def of(cls, pid: int) -> MainThreadClock | None:
        clock = cls(pid)
        try:
            return clock if clock.read() > 0 else None  # zero: scheduler statistics are off
        except (OSError, ValueError, IndexError):
            return None

    def read(self) -> int:
        return _schedstat(self._schedstat)[0]

    def reading(self) -> CpuReading:
        """Every clock :func:`host_stall_ns` needs, the parent's own thread's wait included."""
        run, wait = _schedstat(self._schedstat)
        process = time.clock_gettime_ns(self._process_clock)
        parent_wait = _schedstat(f"/proc/self/task/{threading.get_native_id()}/schedstat")[1]
        return CpuReading(run, wait, process, parent_wait, self.children_ticks())

    def children_ticks(self) -> int:
        """The run time of the worker's reaped children (cutime + cstime), in clock ticks."""
        with open(self._stat, "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[13]) + int(fields[14])
