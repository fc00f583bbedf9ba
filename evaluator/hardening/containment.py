"""One stage's containment, as the runner and the worker use :mod:`evaluator.hardening.sandbox`.

The parent, around each worker (:func:`contained_stage`): its own descriptors and memory closed
to other processes (non-dumpable), a snapshot of the project, the run's shape file and the other
contestants' scratch directories (their compile caches, while no other qrbench run shares the
scratch root), a sweep of every process the worker
left behind, and no bytecode written by the parent meanwhile; after the worker is gone, planted
bytecode and changed files in other contestants' caches are removed (both regenerate) and
everything found is named (rule ``sandbox``). The worker (:func:`enter_worker_sandbox`), after
the evaluator's own imports and just before the kernel's: non-dumpable itself, the audit hook,
and (both modes, CPU and CUDA runs) no ``CAP_SYS_PTRACE`` (:func:`close_other_processes`); where
Linux has Landlock, also writes outside its own folders and signals to processes it did not
start refused by the operating system.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from evaluator.contestant import Contestant
from evaluator.hardening.guards import rule_message
from evaluator.hardening.sandbox import (
    Change,
    ProjectSnapshot,
    Scratch,
    SweepReport,
    contained_children,
    drop_ptrace_capability,
    install_audit_hook,
    no_bytecode,
    parent_cache,
    project_paths,
    set_dumpable,
    worker_env,
)
from evaluator.hardening.sandbox.landlock import confine
from evaluator.hardening.sandbox.prctl import AVAILABLE as PRCTL_AVAILABLE
from reference.checker import prepare

__all__ = [
    "StageContainment",
    "alone",
    "close_other_processes",
    "contained_stage",
    "enter_worker_sandbox",
    "prepare_checks",
    "worker_env",
    "worker_scratch",
]


def worker_scratch(contestant: Contestant) -> Scratch:
    """The contestant's scratch directory, its ``tmp/`` emptied for a new stage."""
    scratch = Scratch.for_contestant(contestant.sha256)
    scratch.reset_tmp()
    return scratch


@dataclass
class StageContainment:
    """What a stage's containment found once the worker was gone."""

    swept: SweepReport = field(default_factory=SweepReport)
    changes: list[Change] = field(default_factory=list)

    def problem(self) -> str | None:
        found = []
        if self.swept.killed:
            found.append(f"the worker left processes behind ({self.swept.describe()})")
        if self.changes:
            listed = ", ".join(change.describe() for change in self.changes[:5])
            more = f" and {len(self.changes) - 5} more" if len(self.changes) > 5 else ""
            found.append(f"the worker wrote into the project ({listed}{more}; bytecode removed)")
        return rule_message("sandbox", "; ".join(found)) if found else None


_RUNS_LOCK = ".runs.lock"
_held: dict[Path, int] = {}


def alone(root: Path) -> bool:
    """Whether this process is the only qrbench run using the scratch root ``root``.

    Every run holds a shared lock on a file there for as long as it lives; asking for the lock
    exclusively succeeds only when no other run holds it. Another run compiling into its own
    contestant's caches would look, from here, like a worker writing into them.
    """
    if root not in _held:
        root.mkdir(parents=True, exist_ok=True)
        _held[root] = os.open(root / _RUNS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(_held[root], fcntl.LOCK_SH)
    fd = _held[root]
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_SH)
    return True


def _watched_caches(own: tuple[Scratch, ...]) -> list[Path]:
    """The caches a worker must not touch, while no other run may be writing them: the other
    contestants' scratch directories and the parent's own Triton cache (:func:`prepare_checks`)."""
    root = own[0].path.parent
    if not alone(root):
        return []
    mine = {scratch.path for scratch in own}
    others = [p for p in sorted(root.iterdir()) if p.is_dir() and p not in mine]
    parents = parent_cache()
    return [*others, parents] if parents.is_dir() else others


def prepare_checks(device: str, sizes: Iterable[int]) -> None:
    """Before a stage's containment begins: load every piece of code the parent's checks will run
    for matrices of ``sizes`` (:func:`reference.checker.prepare`), its Triton cache in
    :func:`~evaluator.hardening.sandbox.parent_cache`.

    A kernel's process can write files the parent reads later (class 6 of docs/hardening.md). What
    the parent imported at start is in memory; what it would load later is the checks' GPU code,
    loaded on first use: torch's CUDA linear-algebra library (the published path), Triton and the
    residual kernels' module, and each kernel specialisation's cubin and launcher library, which
    Triton reads from its on-disk cache (the launcher is ``dlopen``'ed) or makes with ``ptxas`` and
    a C compiler. Loaded here, before any kernel has run, none of it is read again. The cache is
    the parent's own, not ``~/.triton/cache`` (which every process of the user writes), and every
    stage's snapshot watches it: a file planted or changed there is named and removed, so no later
    run loads it."""
    prepare(torch.device(device), sizes, cache_dir=parent_cache())


@contextlib.contextmanager
def contained_stage(shape_file: Path | None, scratch: Scratch, *more: Scratch) -> Iterator[StageContainment]:
    """Contain one worker's stage (see the module docstring); the body spawns and waits for it.
    ``scratch`` is the worker's own scratch directory, the one place it may change. A paired
    comparison (:mod:`evaluator.paired_runner`) runs several workers at once in one containment:
    ``more`` are the others' own directories, and what is found cannot be told apart by worker."""
    set_dumpable(False)
    others = _watched_caches((scratch, *more))
    snapshot = ProjectSnapshot.take(trees=[*project_paths(), *others],
                                    files=[shape_file] if shape_file is not None else [])
    found = StageContainment()
    try:
        with contained_children() as swept, no_bytecode():
            found.swept = swept
            yield found
    finally:
        found.changes = snapshot.changes()
        snapshot.restore(found.changes)
        for change in found.changes:
            if change.kind != "removed" and any(change.path.is_relative_to(o) for o in others):
                with contextlib.suppress(OSError):
                    change.path.unlink()


def close_other_processes() -> None:
    """Before a kernel is imported (both modes): give up ``CAP_SYS_PTRACE``, so that a worker
    running as root cannot open the parent's descriptors or memory through ``/proc`` whatever it
    calls; the parent is non-dumpable (:func:`contained_stage`), so the kernel refuses it."""
    if not PRCTL_AVAILABLE:
        return
    if not drop_ptrace_capability():
        raise RuntimeError("the worker could not give up CAP_SYS_PTRACE (capset refused): its kernel could reach "
                           "the parent through /proc; run qrbench where a process may drop its own capabilities")


def enter_worker_sandbox(scratch: Path | None, handover: Path | None = None) -> Callable[[], tuple[str, ...]]:
    """Close the worker before the kernel is imported; returns the audit hook's refusals.

    Where the kernel has Landlock (:mod:`.sandbox.landlock`) the operating system then refuses
    the worker's writes outside the scratch directory, ``/dev/shm``, ``/dev/null`` and the
    parent's ``handover`` folder (whose files the worker opens for each case), to ``ctypes`` and
    subprocesses too, and (ABI 6 on) lets it signal only what it starts: not the parent, a spare,
    or a paired comparison's other worker. On a GPU the CUDA context and its device files are
    open by then; what the libraries write later (Triton's cache) lies in the scratch directory."""
    set_dumpable(False)
    close_other_processes()
    roots = [scratch] if scratch is not None else []
    confine([*roots, Path("/dev/shm"), *([handover] if handover else [])], [Path("/dev/null")], signals=True)
    return install_audit_hook(roots)
