"""Contestants: find a submission file from a name or path, and import its ``custom_kernel``.

A contestant is a Python file that defines ``custom_kernel(A) -> (H, tau)``. It can be named
three ways: a name under ``contestants/`` (``geqrf``), a folder holding ``submission.py``, or a
path to a ``.py`` file. Resolution happens in the parent process and only hashes the file;
the import happens in the worker, under :func:`contest_modules`, so an unmodified contest
submission finds the ``task``/``reference``/``utils`` modules it expects.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "CONTESTANTS_DIR",
    "Contestant",
    "ContestantError",
    "contest_modules",
    "discover_contestants",
    "load_kernel",
    "resolve_contestant",
]

CONTESTANTS_DIR = Path(__file__).resolve().parents[1] / "contestants"
SUBMISSION_FILE = "submission.py"
# Names a contest submission may import that the contest's runner puts beside it.
_CONTEST_MODULES = {
    "task": "evaluator.contest_modules.task",
    "utils": "evaluator.contest_modules.utils",
    "reference": "reference",
}

Kernel = Callable[..., object]


class ContestantError(Exception):
    """A contestant that cannot be found or loaded; the message starts with its name."""


@dataclass(frozen=True)
class Contestant:
    """A resolved submission: display name, absolute file path and the file's SHA-256."""

    name: str
    path: Path
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "path": str(self.path), "sha256": self.sha256}


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _name_for(path: Path) -> str:
    return path.parent.name if path.name == SUBMISSION_FILE else path.stem


def resolve_contestant(ref: str | Path, root: Path = CONTESTANTS_DIR) -> Contestant:
    """Turn a name under ``root``, a folder or a ``.py`` path into a :class:`Contestant`."""
    text = str(ref)
    candidates = [Path(text)]
    if not Path(text).is_absolute():
        candidates.append(root / text)
    for candidate in candidates:
        if candidate.is_dir():
            candidate = candidate / SUBMISSION_FILE
            if not candidate.is_file():
                raise ContestantError(f"{text}: folder {candidate.parent} holds no {SUBMISSION_FILE}")
        if candidate.is_file():
            if candidate.suffix != ".py":
                raise ContestantError(f"{text}: {candidate} is not a Python file")
            path = candidate.resolve()
            return Contestant(_name_for(path), path, _hash(path))
    raise ContestantError(
        f"{text}: no such contestant (not a file, a folder with {SUBMISSION_FILE}, or a name under {root})"
    )


def discover_contestants(root: Path = CONTESTANTS_DIR) -> list[Contestant]:
    """Every ``<root>/<name>/submission.py``, sorted by name."""
    return [resolve_contestant(p.parent) for p in sorted(root.glob(f"*/{SUBMISSION_FILE}"))]


@contextmanager
def contest_modules(folder: Path) -> Iterator[None]:
    """Make ``task``, ``utils``, ``reference`` and the submission's sibling files importable.

    On exit, ``sys.modules`` and ``sys.path`` are as before: the stand-ins, and any module
    imported from ``folder``, are removed, so two contestants loaded in one process never see
    each other's helper modules. (The worker stays inside this context for its whole life, so
    imports a kernel makes lazily, at call time, resolve as well.)
    """
    saved_path = list(sys.path)
    saved = {name: sys.modules.get(name) for name in _CONTEST_MODULES}
    before = set(sys.modules)
    folder = folder.resolve()
    try:
        for name, target in _CONTEST_MODULES.items():
            sys.modules[name] = importlib.import_module(target)
        sys.path.insert(0, str(folder))
        yield
    finally:
        sys.path[:] = saved_path
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for name in set(sys.modules) - before:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if origin and Path(origin).resolve().is_relative_to(folder):
                del sys.modules[name]


def _import_submission(contestant: Contestant) -> ModuleType:
    module_name = f"qrbench_contestant_{contestant.sha256[:16]}"
    spec = importlib.util.spec_from_file_location(module_name, contestant.path)
    if spec is None or spec.loader is None:
        raise ContestantError(f"{contestant.name}: cannot import {contestant.path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[module_name]
        raise ContestantError(
            f"{contestant.name}: syntax error in {exc.filename}, line {exc.lineno}: {exc.msg}"
        ) from exc
    except (Exception, SystemExit) as exc:
        del sys.modules[module_name]
        raise ContestantError(
            f"{contestant.name}: importing {contestant.path} raised {type(exc).__name__}: {exc}"
        ) from exc
    return module


def load_kernel(contestant: Contestant) -> Kernel:
    """Import the submission and return its ``custom_kernel``.

    Call inside :func:`contest_modules` for the submission's folder.
    """
    if not contestant.path.is_file():
        raise ContestantError(f"{contestant.name}: {contestant.path} no longer exists")
    if _hash(contestant.path) != contestant.sha256:
        raise ContestantError(f"{contestant.name}: {contestant.path} changed since it was resolved")
    module = _import_submission(contestant)
    kernel = getattr(module, "custom_kernel", None)
    if not callable(kernel):
        raise ContestantError(f"{contestant.name}: {contestant.path} defines no callable custom_kernel(A)")
    return kernel
