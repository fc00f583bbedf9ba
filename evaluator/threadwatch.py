"""Rule ``idle-threads``: threads a kernel leaves behind must stay idle between its calls.

A thread that runs while the kernel is not running can finish the kernel's work after it
returned (off the clock), or watch the input it was handed and start on the next repeat's
fresh content before the clock starts. Forbidding threads outright would reject honest
kernels: ``torch.compile`` leaves an idle ``ThreadPoolExecutor`` behind, and a kernel may
keep a pool of its own. So the rule looks at what threads *do*, and only where doing
something pays:

- from the kernel's return until the evaluator has copied its outputs (work finished later
  is not in the copies that are checked), and
- from the moment the next repeat's fresh inputs are complete until the kernel's next call
  (before that there is nothing to work ahead on).

Both stretches are short (a drain and a copy; a flush and an event), so a pool's bookkeeping
or a library's periodic wake-up (``multiprocessing.pool.ThreadPool`` polls ten times a
second) rarely falls in them, while a thread that does the kernel's work off the clock must
run there every time it gains. A thread "ran" if its CPU time grew (Linux per-thread clocks;
a thread blocked on a lock or queue gains exactly zero), if it ended, if it is new, or if it
is a Python thread the ``threading`` module does not know. The rule fires when threads ran in
more than half of the windows (each window: both stretches between two calls), with at least
two windows.

The garbage collector is paused from the kernel's return to its next call, so a finalizer the
kernel planted in a reference cycle cannot run there either. When a window closes, what the
evaluator allocated in it is frozen (``gc.freeze``, a constant-time move to a generation never
collected) before the collector resumes: otherwise the first collection after the pause, with
the whole window's allocations to trace, would land inside the timed region.
:meth:`ThreadWatch.finish` hands the frozen objects back to the collector when the case is over.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

from evaluator.guards import rule_message

__all__ = ["ThreadWatch", "thread_cpu_ns"]

MIN_WINDOWS = 2

_enumerate = threading.enumerate
_get_ident = threading.get_ident
_current_frames = sys._current_frames
_clock_gettime_ns = time.clock_gettime_ns
_gc_enable, _gc_disable, _gc_isenabled, _gc_freeze = gc.enable, gc.disable, gc.isenabled, gc.freeze

# thread key -> (name, CPU ns or None once the thread has ended)
_Sample = dict[int, tuple[str, int | None]]


def thread_cpu_ns(native_id: int) -> int | None:
    """CPU time of one thread of this process, or None if it has ended (or the platform has no
    per-thread clocks). Linux encodes a thread's clock id as ``(~tid << 3) | 6``
    (CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD); the kernel refuses ids outside this process."""
    try:
        return _clock_gettime_ns(((~native_id) << 3) | 6)
    except (OSError, OverflowError):
        return None


# Without per-thread clocks (not Linux) only threads that start or end between calls count.
_PER_THREAD_CLOCKS = thread_cpu_ns(threading.get_native_id()) is not None


def _sample() -> _Sample:
    """Every Python thread but the caller: known threads by native id, unknown ones by ident."""
    me = _get_ident()
    sample: _Sample = {}
    known = set()
    for thread in _enumerate():
        known.add(thread.ident)
        if thread.ident != me and thread.native_id is not None:
            cpu = thread_cpu_ns(thread.native_id) if _PER_THREAD_CLOCKS else 0
            sample[thread.native_id] = (thread.name, cpu)
    for ident in _current_frames():
        if ident not in known:
            sample[-ident] = (f"unregistered thread {ident}", None)  # started with _thread directly
    return sample


class ThreadWatch:
    """Counts the windows between a kernel's calls in which another thread ran.

    Call :meth:`open` when the kernel returns, :meth:`pause` once its outputs are copied,
    :meth:`resume` once the next inputs are complete, :meth:`close` just before the next call
    (a window with no :meth:`resume` ends at :meth:`pause`), and :meth:`finish` after a case.
    """

    def __init__(self) -> None:
        self.windows = 0
        self.busy = 0
        self.names: set[str] = set()
        self._open = False
        self._since: _Sample | None = None
        self._ran: set[str] = set()
        self._gc_was_enabled = True

    def open(self) -> None:
        """The kernel has returned: pause the garbage collector and start observing."""
        if self._open:
            return
        self._open = True
        self._gc_was_enabled = _gc_isenabled()
        _gc_disable()
        self._ran = set()
        self._since = _sample()

    def pause(self) -> None:
        """Stop observing until :meth:`resume`; what ran so far counts for this window."""
        if self._since is None:
            return
        now = _sample()
        self._ran |= {name for key, (name, cpu) in now.items()
                      if cpu is None or key not in self._since or self._since[key][1] != cpu}
        self._ran |= {name for key, (name, _) in self._since.items() if key not in now}
        self._since = None

    def resume(self) -> None:
        """Observe again, until :meth:`close`."""
        if self._open and self._since is None:
            self._since = _sample()

    def close(self) -> None:
        """The kernel is about to run again (or the case is over): count the window."""
        if not self._open:
            return
        self.pause()
        self._open = False
        self.windows += 1
        if self._ran:
            self.busy += 1
            self.names |= self._ran
        _gc_freeze()
        if self._gc_was_enabled:
            _gc_enable()

    def finish(self) -> None:
        """The case is over: count an open window, and let the collector see frozen objects."""
        self.close()
        gc.unfreeze()

    def problem(self) -> str | None:
        if self.windows < MIN_WINDOWS or 2 * self.busy <= self.windows:
            return None
        return rule_message(
            "idle-threads",
            f"threads ran between the kernel's calls in {self.busy} of {self.windows} windows "
            f"({', '.join(sorted(self.names))}); a thread may outlive a call only if it stays idle until the next",
        )
