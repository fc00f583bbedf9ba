"""Descendants die with the worker: after a stage, kill and reap every process it left behind.

A worker's process-group kill misses what left the group (``setsid``, double fork). The parent
makes itself a child subreaper (:func:`evaluator.hardening.sandbox.prctl.set_child_subreaper`), so every
orphan among its descendants is re-parented to it instead of to init, and after each stage
:func:`sweep` SIGKILLs every descendant that hangs under a child which was not there when the
stage began, reaps those that become our zombies, and repeats until two scans in a row find
nothing (a fork in progress, or a grandchild re-parented to us as its parent dies, shows up in
a later scan). Call it after the worker itself has been waited for (``Popen.wait``), or it is
swept and reaped too and ``Popen`` loses its exit status. It judges by parentage, so it assumes
one stage at a time in this process: a child started meanwhile by another thread is swept too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from evaluator.hardening.sandbox.prctl import set_child_subreaper

__all__ = ["Proc", "SweepReport", "children", "contained_children", "process_table", "sweep"]

_PROC = "/proc"
_QUIET_SCANS = 2
_PAUSE_S = 0.005
_MAX_S = 5.0
# How long leftovers get to exit by themselves before they count: torch.compile's compile-worker
# pool exits once it sees its parent gone; something still alive after this was left behind.
GRACE_S = 1.0


@dataclass
class SweepReport:
    """What a sweep found: ``killed`` (pid, command name) pairs, and whether the subreaper was on."""

    killed: list[tuple[int, str]] = field(default_factory=list)
    subreaper: bool = False

    def describe(self) -> str:
        """One line for a stage's report, e.g. ``killed 2 leftover processes: 412 (sleep), 415 (sh)``."""
        if not self.killed:
            return ""
        listed = ", ".join(f"{pid} ({name})" for pid, name in self.killed)
        return f"killed {len(self.killed)} leftover process{'es' if len(self.killed) > 1 else ''}: {listed}"


class Proc(NamedTuple):
    """One line of the process table: parent pid, command name, state letter (``Z``: zombie)."""

    ppid: int
    name: str
    state: str


def _stat(pid: int) -> Proc | None:
    """``pid``'s entry from /proc/<pid>/stat, or None if it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    head, _, tail = data.rpartition(b")")
    fields = tail.split()
    return Proc(int(fields[1]), head.partition(b"(")[2].decode(errors="replace"), fields[0].decode())


def process_table() -> dict[int, Proc]:
    """pid -> :class:`Proc` for every process visible in /proc."""
    table = {}
    for entry in os.listdir(_PROC):
        if entry.isdigit() and (info := _stat(int(entry))) is not None:
            table[int(entry)] = info
    return table


def children(pid: int | None = None) -> set[int]:
    """The pids whose parent is ``pid`` (default: this process)."""
    me = os.getpid() if pid is None else pid
    return {child for child, proc in process_table().items() if proc.ppid == me}


def _strays(before: set[int]) -> dict[int, Proc]:
    """Every process below a child of ours that is not in ``before`` (the child included)."""
    me = os.getpid()
    table = process_table()
    strays: dict[int, Proc] = {}
    for pid, proc in table.items():
        cursor, hops = pid, 0
        while cursor in table and hops < 256:
            ppid = table[cursor].ppid
            if ppid == me:
                if cursor not in before:
                    strays[pid] = proc
                break
            cursor, hops = ppid, hops + 1
    return strays


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _settle(before: set[int], grace_s: float) -> None:
    """Give leftovers that are on their way out (a library's worker pool noticing its parent
    is gone) up to ``grace_s`` to exit by themselves, reaping those that became ours."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        for pid in children() - before:
            _reap(pid)
        if all(proc.state == "Z" for proc in _strays(before).values()):
            return
        time.sleep(10 * _PAUSE_S)


def sweep(before: set[int], grace_s: float = GRACE_S) -> list[tuple[int, str]]:
    """After ``grace_s`` for leftovers to exit by themselves, SIGKILL and reap every descendant
    under a child not in ``before``; return (pid, name) of those that were still alive
    (zombies are only reaped)."""
    me = os.getpid()
    _settle(before, grace_s)
    killed: dict[int, str] = {}
    quiet = 0
    deadline = time.monotonic() + _MAX_S
    while quiet < _QUIET_SCANS and time.monotonic() < deadline:
        strays = _strays(before)
        if not strays:
            quiet += 1
        else:
            quiet = 0
        for pid, proc in strays.items():
            if proc.state == "Z":
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.setdefault(pid, proc.name)
        for pid in children(me) - before:
            _reap(pid)
        time.sleep(_PAUSE_S)
    return sorted(killed.items())


@contextlib.contextmanager
def contained_children() -> Iterator[SweepReport]:
    """Around one stage: adopt orphans, then sweep what the stage left; the report fills on exit."""
    report = SweepReport(subreaper=set_child_subreaper())
    before = children()
    try:
        yield report
    finally:
        report.killed = sweep(before)
