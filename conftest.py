"""Loads qrbench's pytest plugin in a plain checkout; once qrbench is installed, pytest has
already loaded it under this same name through the ``pytest11`` entry point, and this is a no-op.

No process of a test session writes Python bytecode. Hardened stages fail any file that appears or
changes in the project's trees while they run (rule sandbox, evaluator/hardening/sandbox/snapshot.py),
and under pytest-xdist another worker's first import of a module, or a command it starts, would
write that module's ``.pyc`` there mid-stage and fail an honest run. So the session compiles the
project's modules once before any worker starts (:func:`pytest_configure`), and every process after
that (workers, their commands, pytest's assertion rewriting) only reads bytecode.
"""

import compileall
import os
import sys

import pytest

from evaluator.hardening.sandbox.snapshot import project_paths

os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # inherited by xdist's workers and every command a test runs
sys.dont_write_bytecode = True

pytest_plugins = ["evaluator.pytest_plugin"]


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller compiled before starting it
        return
    for tree in project_paths():  # the trees the snapshot watches; pytest rewrites the test modules itself
        if tree.name != "tests":
            compileall.compile_dir(tree, quiet=2)
