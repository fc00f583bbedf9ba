"""A worker's only writable place: a per-contestant scratch directory, and the environment that
points every cache and temporary directory an honest kernel touches into it.

Layout under ``$XDG_CACHE_HOME/qrbench/scratch/<sha256[:16]>`` (``~/.cache`` by default):
``tmp/<pid>/`` (``TMPDIR``, one per evaluator process, emptied before each stage: two runs of one
contestant at once, as pytest-xdist makes them, never empty each other's), ``home/`` (``HOME``:
whatever writes to ``~`` lands here, not in a home other contestants' workers and the evaluator
read), and compile caches kept between runs so a kernel recompiles only once: ``triton/``
(``TRITON_CACHE_DIR``, ``TRITON_HOME``), ``inductor/`` (``TORCHINDUCTOR_CACHE_DIR``),
``torch_extensions/`` (``load_inline``), ``cuda/`` (``CUDA_CACHE_PATH``, the driver's PTX JIT
cache). Caches are per contestant, so a kernel can poison only its own. The evaluator never reads
this directory: it must stay off the worker's ``sys.path`` and out of ``PYTHONPYCACHEPREFIX``
(which is why :func:`worker_env` drops that variable and sets ``PYTHONSAFEPATH``: ``python -m``
would otherwise put the working directory first on ``sys.path``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Scratch", "parent_cache", "scratch_root", "worker_env"]

_COMPILE_CACHES = ("triton", "inductor", "torch_extensions", "cuda")
_CACHE_DIRS = ("tmp", "home", *_COMPILE_CACHES)
# Would make the worker read or write bytecode somewhere a kernel can write, or run code at start.
_DROPPED = ("PYTHONPYCACHEPREFIX", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE")


def scratch_root(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/qrbench/scratch``, else ``~/.cache/qrbench/scratch``."""
    environ = os.environ if environ is None else environ
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(cache).resolve() / "qrbench" / "scratch"


def parent_cache(environ: Mapping[str, str] | None = None) -> Path:
    """``qrbench/parent/triton`` beside the scratch root: the Triton cache of the evaluator's own
    checker kernels (:mod:`evaluator.hardening.containment` says why it is not ``~/.triton``)."""
    return scratch_root(environ).parent / "parent" / "triton"


@dataclass(frozen=True)
class Scratch:
    """One contestant's scratch directory (see the module docstring for its layout)."""

    path: Path
    owner: int = field(default_factory=os.getpid)  # the evaluator process whose tmp/ this is

    @classmethod
    def for_contestant(cls, sha256: str, root: Path | None = None) -> Scratch:
        """The scratch directory of the contestant whose file hashes to ``sha256``, created (mode 700)."""
        if len(sha256) < 16 or not all(c in "0123456789abcdef" for c in sha256):
            raise ValueError(f"not a hex SHA-256: {sha256!r}")
        scratch = cls((scratch_root() if root is None else root).resolve() / sha256[:16])
        for name in _CACHE_DIRS:
            (scratch.path / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        scratch.tmp.mkdir(mode=0o700, exist_ok=True)
        return scratch

    @property
    def tmp(self) -> Path:
        return self.path / "tmp" / str(self.owner)

    def compile_cache_state(self) -> frozenset[tuple[str, int, int]]:
        """Every file of the compile caches as (path, size, mtime): two states differ when
        something compiled between them, as a cache hit writes nothing. Listed without following
        links and never opened (the contestant writes here)."""
        files: set[tuple[str, int, int]] = set()
        for name in _COMPILE_CACHES:
            for folder, _, names in os.walk(self.path / name):
                for file in names:
                    path = os.path.join(folder, file)
                    try:
                        stat = os.lstat(path)
                    except OSError:  # gone since it was listed
                        continue
                    files.add((path, stat.st_size, stat.st_mtime_ns))
        return frozenset(files)

    def reset_tmp(self) -> None:
        """Empty this process's ``tmp/`` (before each stage, so no stage finds what an earlier one
        left), and remove those of evaluator processes that are gone."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
        for other in self.tmp.parent.iterdir():  # also what tmp/ held before it was per process
            if other == self.tmp or _running(other.name):
                continue
            if other.is_dir() and not other.is_symlink():
                shutil.rmtree(other, ignore_errors=True)
            else:
                other.unlink(missing_ok=True)

    def env(self) -> dict[str, str]:
        """The variables that point caches, temporary files and ``~`` into this directory."""
        path = self.path
        return {
            "TMPDIR": str(self.tmp),
            "HOME": str(path / "home"),
            "XDG_CACHE_HOME": str(path / "home" / ".cache"),
            "TRITON_HOME": str(path / "triton"),
            "TRITON_CACHE_DIR": str(path / "triton" / "cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(path / "inductor"),
            "TORCH_EXTENSIONS_DIR": str(path / "torch_extensions"),
            "CUDA_CACHE_PATH": str(path / "cuda"),
            "MPLCONFIGDIR": str(path / "home" / ".config" / "matplotlib"),
        }


def _running(name: str) -> bool:
    """Whether ``name`` (a ``tmp/`` entry) is the pid of a live process; anything else is left over."""
    if not name.isdigit():
        return False
    try:
        os.kill(int(name), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def worker_env(base: Mapping[str, str], scratch: Scratch) -> dict[str, str]:
    """``base`` (the runner's worker environment) with the scratch variables, no bytecode
    writing (so any bytecode that changes during a stage is not the worker's doing), and no
    working directory on ``sys.path``."""
    env = {key: value for key, value in base.items() if key not in _DROPPED}
    env.update(scratch.env())
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    return env
