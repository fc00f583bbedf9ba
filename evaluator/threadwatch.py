"""Rule ``idle-threads``: threads a kernel leaves behind must stay idle between its calls.

A thread that runs while the kernel is not running could watch the input it was handed and
start on the next repeat's fresh content before the clock starts. Forbidding threads outright
would reject honest kernels: ``torch.compile`` leaves an idle ``ThreadPoolExecutor`` behind, a
kernel may keep a pool of its own, and ``multiprocessing.pool.ThreadPool`` keeps a thread that
wakes ten times a second. So the rule looks at what threads *do*, and only where doing
something pays: from the moment the next repeat's fresh content is about to be written into the
inputs until the kernel's next call. (Work a thread finishes after the kernel returned is
caught otherwise: the outputs are copied the moment the clock stops and the copies are checked.)

That stretch is short (a copy, a flush and an event) and starts long after the kernel returned,
so a pool's bookkeeping has settled and a periodic wake-up rarely falls in it, while a thread
that works ahead must run there every time it gains. Where other threads exist, the
evaluator sleeps ``YIELD_S`` without the interpreter lock just before the stretch (so a pool
that was only waiting for the lock to finish its bookkeeping finishes it, unwatched) and again
at its start (so a thread that wants to run, one starved by the evaluator's own Python, runs
and shows); a blocked thread stays blocked through both. A thread "ran" if
its CPU time grew (Linux per-thread clocks; a thread blocked on a lock or queue gains exactly
zero), if it ended, if it is new, or if it is a Python thread the ``threading`` module does not
know. The rule fires when threads ran in more than half of the windows, with at least two.

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
# Where other threads exist, the watched stretch starts with the evaluator sleeping this long,
# twice, without the interpreter lock (see the module docstring). Outside the timed region.
YIELD_S = 2e-4

_enumerate = threading.enumerate
_active_count = threading.active_count
_get_ident = threading.get_ident
_current_frames = sys._current_frames
_clock_gettime_ns = time.clock_gettime_ns
_sleep = time.sleep
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

    Call :meth:`open` when the kernel returns, :meth:`observe` when the next inputs are about
    to be written, :meth:`close` just before the next call, and :meth:`finish` after a case.
    """

    def __init__(self) -> None:
        self.windows = 0
        self.busy = 0
        self.names: set[str] = set()
        self._open = False
        self._since: _Sample | None = None
        self._gc_was_enabled = True

    def open(self) -> None:
        """The kernel has returned: pause the garbage collector until its next call."""
        if self._open:
            return
        self._open = True
        self._gc_was_enabled = _gc_isenabled()
        _gc_disable()

    def observe(self) -> None:
        """From here to :meth:`close`, any thread that runs counts (outside the timed region)."""
        if not self._open or self._since is not None:
            return
        if _active_count() == 1:
            self._since = _sample()
            return
        _sleep(YIELD_S)  # whatever other threads still had to finish, they finish now, unwatched
        self._since = _sample()
        _sleep(YIELD_S)  # and a thread that wants to run now runs, watched

    def close(self) -> None:
        """The kernel is about to run again (or the case is over): count the window."""
        if not self._open:
            return
        ran: set[str] = set()
        if self._since is not None:
            now = _sample()
            ran = {name for key, (name, cpu) in now.items()
                   if cpu is None or key not in self._since or self._since[key][1] != cpu}
            ran |= {name for key, (name, _) in self._since.items() if key not in now}
            self.windows += 1
        self._since = None
        self._open = False
        if ran:
            self.busy += 1
            self.names |= ran
        _gc_freeze()
        if self._gc_was_enabled:
            _gc_enable()

    def finish(self) -> None:
        """The case is over: close an open window, and let the collector see frozen objects."""
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
