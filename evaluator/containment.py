"""One stage's containment, as the runner and the worker use :mod:`evaluator.sandbox`.

The parent, around each worker (:func:`contained_stage`): its own descriptors and memory closed
to other processes (non-dumpable), a snapshot of the project, the run's shape file and the other
contestants' scratch directories (their compile caches), a sweep of every process the worker
left behind, and no bytecode written by the parent meanwhile; after the worker is gone, planted
bytecode and changed files in other contestants' caches are removed (both regenerate) and
everything found is named (rule ``sandbox``). The worker (:func:`enter_worker_sandbox`), after
the evaluator's own imports and just before the kernel's: non-dumpable itself, and the audit hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evaluator.contestant import Contestant
from evaluator.guards import rule_message
from evaluator.sandbox import (
    Change,
    ProjectSnapshot,
    Scratch,
    SweepReport,
    contained_children,
    install_audit_hook,
    no_bytecode,
    project_paths,
    set_dumpable,
    worker_env,
)

__all__ = ["StageContainment", "contained_stage", "enter_worker_sandbox", "worker_env", "worker_scratch"]


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


def _other_scratches(own: Scratch) -> list[Path]:
    root = own.path.parent
    return [p for p in sorted(root.iterdir()) if p.is_dir() and p != own.path] if root.is_dir() else []


@contextlib.contextmanager
def contained_stage(shape_file: Path | None, scratch: Scratch) -> Iterator[StageContainment]:
    """Contain one worker's stage (see the module docstring); the body spawns and waits for it.
    ``scratch`` is the worker's own scratch directory, the one place it may change."""
    set_dumpable(False)
    others = _other_scratches(scratch)
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


def enter_worker_sandbox(scratch: Path | None) -> Callable[[], tuple[str, ...]]:
    """Close the worker before the kernel is imported; returns the audit hook's refusals."""
    set_dumpable(False)
    return install_audit_hook([scratch] if scratch is not None else [])
