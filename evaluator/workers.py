"""Starting workers: ``python -m evaluator.worker_entry`` in a session of its own, and spares.

A worker spends its first seconds importing the interpreter's and torch's modules (3.4-4.9 s of
every hardened stage of a ranked submission on an H200: ``worker_start`` in the ``breakdown_s`` of
reports/h200/2026-12-02-blocked_wy-time-to-verdict-hardened{,-estimate-lease}.json.gz). The stages after a run's
untimed test stage need not wait for that: :class:`SpareWorkers` starts their workers beside the
test stage's, and each later stage takes one that has its imports done and waits for its job.

What a spare is while it waits, so that the stage it serves gets what a fresh worker gives:
- nothing of the contestant: the job (contestant, key, mode, secret seed) reaches it only when its
  stage begins, and its imports are the evaluator's own;
- closed to other processes from its first statement (:mod:`evaluator.worker_entry`): the kernel
  of the stage running meanwhile holds no ``CAP_SYS_PTRACE`` and cannot open a non-dumpable
  process's memory or descriptors, so it cannot become the next stage's worker;
- idle: it announces the end of its imports, and no stage after the first begins until every
  spare has (a spare importing beside a timed stage would take host time from it);
- a child of the parent from before any stage's containment began, so no stage's sweep takes it
  for a leftover; once its own stage ends the parent kills its process group as it does a fresh
  worker's, and what it left behind is re-parented to the parent and swept.
A spare that died, stopped announcing or broke its announcement is killed and its stage starts
a fresh worker. ``--compat`` runs start every worker fresh, as the contest's service does.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from evaluator.hardening.containment import worker_env
from evaluator.hardening.sandbox import Scratch
from evaluator.hardening.sandbox.prctl import AVAILABLE as PRCTL_AVAILABLE

if TYPE_CHECKING:
    from evaluator.runner import RunOptions

__all__ = ["ANNOUNCE_ENV", "SPARE_READY", "SpareWorkers", "StartedWorker", "spawn_worker"]

_REPO = Path(__file__).resolve().parents[1]

ANNOUNCE_ENV = "QRBENCH_SPARE_ANNOUNCE"
"""Set for a spare: once its imports are done it writes :data:`SPARE_READY` and its dumpable
flag to stdout, then waits for its job."""
SPARE_READY = b"qrbench spare ready, dumpable="
IMPORT_WAIT_S = 120.0
"""How long a stage waits for the spares' imports before it gives up on the late ones (a fresh
worker then starts in their place)."""


class StartedWorker(NamedTuple):
    """A worker process, the read end of its result channel, and what it printed before its job."""

    proc: subprocess.Popen[bytes]
    read_fd: int
    output: bytes = b""


def _worker_env(options: RunOptions, scratch: Scratch, announce: bool) -> dict[str, str]:
    env = worker_env(os.environ, scratch)
    env.pop("POPCORN_SEED", None)
    env.pop("POPCORN_FD", None)
    env.pop(ANNOUNCE_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if options.device == "cpu":
        # Set before the interpreter starts, so it holds before anything imports triton, and
        # hide GPUs so the generator (which follows CUDA availability) makes CPU inputs.
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(options.env)
    if announce:
        env[ANNOUNCE_ENV] = "1"
    return env


SPAWNED: set[int] = set()
"""The pids of every worker this process started: its children that are not a kernel's processes
(rule parent-clock grants a host stall only while a worker has none, evaluator/measure/cpu_witness.py)."""


def spawn_worker(options: RunOptions, scratch: Scratch, announce: bool = False) -> tuple[subprocess.Popen[bytes], int]:
    """A worker in a session of its own, its caches and temporary files in ``scratch``; returns it
    and the read end of its result channel. ``announce``: a spare (see the module docstring)."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaluator.worker_entry", str(write_fd)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        pass_fds=(write_fd,), env=_worker_env(options, scratch, announce), start_new_session=True,
    )
    os.close(write_fd)
    SPAWNED.add(proc.pid)
    return proc, read_fd


def _discard(worker: StartedWorker) -> None:
    """Kill a spare's process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait()
    for stream in (worker.proc.stdin, worker.proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(OSError):
        os.close(worker.read_fd)


class _Pending:
    """A spare whose announcement is still being read."""

    def __init__(self, proc: subprocess.Popen[bytes], read_fd: int) -> None:
        self.proc, self.read_fd = proc, read_fd
        self.output = bytearray()

    def announcement(self) -> bool | None:
        """None while the announcement has not come; then whether it says the spare is closed
        (not dumpable, where the flag exists)."""
        start = self.output.find(SPARE_READY)
        if start < 0 or not self.output.endswith(b"\n"):
            return None
        flag = self.output[start + len(SPARE_READY):].strip()
        return flag == b"0" or (flag == b"1" and not PRCTL_AVAILABLE)

    def started(self) -> StartedWorker:
        """The worker, with whatever it printed before its announcement (all of it, if none came)."""
        end = self.output.find(SPARE_READY)
        return StartedWorker(self.proc, self.read_fd, bytes(self.output if end < 0 else self.output[:end]))


class SpareWorkers:
    """Workers for the stages after a run's first (see the module docstring); a context manager
    that kills the spares no stage took."""

    def __init__(self, options: RunOptions, scratch: Scratch, count: int) -> None:
        self._pending: list[_Pending] = []
        self._ready: list[StartedWorker] = []
        try:
            for _ in range(count):
                self._pending.append(_Pending(*spawn_worker(options, scratch, announce=True)))
        except BaseException:  # those already started must not outlive a failed start
            self.close()
            raise

    def __enter__(self) -> SpareWorkers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def take(self, wait_s: float = IMPORT_WAIT_S) -> StartedWorker | None:
        """A spare for the stage about to begin, once every spare has its imports done (or
        ``wait_s`` has passed); None when none is left (the stage starts a fresh worker)."""
        self.settle(wait_s)
        return self._ready.pop(0) if self._ready else None

    def settle(self, wait_s: float = IMPORT_WAIT_S) -> None:
        """Wait until every spare has its imports done (or ``wait_s`` has passed), as a stage
        that takes one does: whatever runs next shares the machine with idle spares only."""
        self._settle(time.monotonic() + wait_s)

    def close(self) -> None:
        """Kill every spare not taken."""
        for worker in [*self._ready, *(p.started() for p in self._pending)]:
            _discard(worker)
        self._ready.clear()
        self._pending.clear()

    def _settle(self, deadline: float) -> None:
        """Read announcements until none is pending; a spare that exits, announces itself open,
        or is still silent at ``deadline`` is killed."""
        while self._pending:
            fds = {p.proc.stdout.fileno(): p for p in self._pending if p.proc.stdout is not None}
            remaining = deadline - time.monotonic()
            readable = select.select(list(fds), [], [], max(0.0, remaining))[0] if remaining > 0 else []
            if not readable:
                for pending in self._pending:
                    _discard(pending.started())
                self._pending.clear()
                return
            for fd in readable:
                pending = fds[fd]
                chunk = os.read(fd, 1 << 16)
                pending.output += chunk
                verdict = pending.announcement()
                if chunk and verdict is None:
                    continue
                self._pending.remove(pending)
                if verdict:
                    self._ready.append(pending.started())
                else:
                    _discard(pending.started())
