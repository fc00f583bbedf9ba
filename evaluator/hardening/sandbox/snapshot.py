"""Project integrity across a stage: what in the evaluator's own trees did the stage change?

A worker (or what it left running) can write files the evaluator reads later: a forged
``.pyc`` in ``evaluator/__pycache__`` (git-ignored, so ``git status`` stays clean) is imported
by every later run; a rewritten shape file changes the next stage's cases. The parent takes a
:class:`ProjectSnapshot` before each stage and compares after it. Each file is recorded by
size, mtime, ctime and inode: ctime cannot be set from user space (only by changing the system
clock), so a rewrite that restores size and mtime is still seen, without reading any content.
:meth:`ProjectSnapshot.restore` removes bytecode that appeared or changed (Python regenerates
it); a changed source or data file cannot be restored and is only reported.

The parent must not write bytecode itself during the stage, or its own writes show up as
changes: run the stage under :func:`no_bytecode`. Another process writing in the same trees
(a concurrent test run compiling ``evaluator/``) shows up too; the sweep cannot tell it apart.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

__all__ = ["Change", "FileState", "ProjectSnapshot", "no_bytecode", "project_paths"]

REPO = Path(__file__).resolve().parents[3]
PROJECT_TREES = ("evaluator", "reference", "reference_kernels", "shapes", "contestants", "benchmarks", "tests")


class FileState(NamedTuple):
    """What a file looked like: enough to see any rewrite without reading it."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int


@dataclass(frozen=True)
class Change:
    """One difference between a snapshot and now."""

    path: Path
    kind: Literal["added", "changed", "removed"]

    @property
    def bytecode(self) -> bool:
        return self.path.suffix == ".pyc"

    def describe(self) -> str:
        return f"{self.kind} {self.path}"


def project_paths(repo: Path = REPO) -> list[Path]:
    """The trees the evaluator reads: its code, the reference, the shipped kernels and shapes,
    and the benchmarks and tests that pytest imports (the pytest door runs the parent there)."""
    return [repo / name for name in PROJECT_TREES if (repo / name).exists()]


def _state(stat: os.stat_result) -> FileState:
    return FileState(stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


def _walk(root: Path, into: dict[Path, FileState], deep: bool) -> None:
    """Record every non-directory under ``root`` (only its own entries unless ``deep``)."""
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if deep:
                _walk(Path(entry.path), into, deep)
            continue
        with contextlib.suppress(FileNotFoundError):
            into[Path(entry.path)] = _state(entry.stat(follow_symlinks=False))


def _site_dirs() -> list[Path]:
    """Where a planted file would run in later Pythons: a ``.pth`` or ``sitecustomize.py`` in
    site-packages (the user's too), and a module at the project's root, which is the current
    directory, first on ``sys.path``, of every ``python -m`` run from it."""
    return [*(Path(p) for p in site.getsitepackages()), Path(site.getusersitepackages()), REPO]


@dataclass(frozen=True)
class ProjectSnapshot:
    """Every file under ``trees`` (recursively), the top level of ``shallow`` and each of ``files``."""

    trees: tuple[Path, ...]
    shallow: tuple[Path, ...]
    files: tuple[Path, ...]
    states: dict[Path, FileState]

    @classmethod
    def take(cls, trees: Iterable[Path] | None = None, files: Iterable[Path] = (),
             shallow: Iterable[Path] | None = None) -> ProjectSnapshot:
        """Record now. Defaults: :func:`project_paths`, and the top of :func:`_site_dirs`."""
        snapshot = cls(
            tuple(project_paths() if trees is None else trees),
            tuple(_site_dirs() if shallow is None else shallow),
            tuple(files),
            {},
        )
        snapshot.states.update(snapshot._scan())
        return snapshot

    def _scan(self) -> dict[Path, FileState]:
        states: dict[Path, FileState] = {}
        for tree in self.trees:
            _walk(tree, states, deep=True)
        for folder in self.shallow:
            _walk(folder, states, deep=False)
        for file in self.files:
            with contextlib.suppress(FileNotFoundError):
                states[file] = _state(file.lstat())
        return states

    def changes(self) -> list[Change]:
        """What was added, changed or removed since the snapshot, by path."""
        now = self._scan()
        found = [Change(path, "added" if path not in self.states else "changed")
                 for path, state in now.items() if self.states.get(path) != state]
        found += [Change(path, "removed") for path in self.states if path not in now]
        return sorted(found, key=lambda change: str(change.path))

    def restore(self, changes: Iterable[Change] | None = None) -> list[Path]:
        """Delete bytecode that was added or changed (default: all of :meth:`changes`); return it."""
        removed = []
        for change in self.changes() if changes is None else changes:
            if change.bytecode and change.kind != "removed":
                with contextlib.suppress(FileNotFoundError):
                    change.path.unlink()
                removed.append(change.path)
        return removed


@contextlib.contextmanager
def no_bytecode() -> Iterator[None]:
    """While a stage runs, this process imports without writing ``.pyc`` files."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before
