"""Tests that need the machine to themselves, under pytest-xdist's workers.

Most of the suite is arithmetic and runs side by side in ``pytest -n auto``. Some tests cannot share
the machine: they change the project tree on purpose (an exploit planting bytecode, which a hardened
run elsewhere then rightly refuses), judge the host's clocks or load, or count processes. They (or
their modules) carry the ``alone`` marker, and every test takes a lock shared between the workers around
its whole protocol (setup, call, teardown, so module fixtures too): ``alone`` tests, and ``gpu``
tests (one device for every worker), take it exclusively, the others shared. A turnstile taken
first keeps new shared holders out while an exclusive one waits, so it is not starved. Under ``-n``
the alone tests also go to one worker as one group (``--dist loadgroup``), which keeps the lock from
one to the next: the other workers wait once for the lot, not once per test. Without xdist nothing
is locked.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

__all__ = ["LOCK_DIR_VARIABLE", "configure", "group_the_alone", "holding_the_machine", "is_alone", "unconfigure"]

LOCK_DIR_VARIABLE = "QRBENCH_TEST_LOCK_DIR"
_CREATED = pytest.StashKey[str]()  # the lock folder, in the config of the session that made it


def _is_worker(config: pytest.Config) -> bool:
    """Whether this session is an xdist worker. Not from the environment: a session a test starts
    inherits the worker's variables, and must not wait for the lock its own test holds."""
    return hasattr(config, "workerinput")


def configure(config: pytest.Config) -> None:
    """In the controller of an xdist session, make the lock folder its workers inherit."""
    if _is_worker(config) or not getattr(config.option, "numprocesses", None):
        return
    folder = tempfile.mkdtemp(prefix="qrbench-tests-")
    config.stash[_CREATED] = os.environ[LOCK_DIR_VARIABLE] = folder
    if config.option.dist == "load":  # what -n alone gives: group the alone tests (group_the_alone)
        config.option.dist = "loadgroup"


def unconfigure(config: pytest.Config) -> None:
    """In the controller that made the lock folder, once its workers are done, remove it (a
    session a test starts inherits the variable, but not the folder's ownership)."""
    folder = config.stash.get(_CREATED, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(LOCK_DIR_VARIABLE) == folder:
            del os.environ[LOCK_DIR_VARIABLE]


def is_alone(item: pytest.Item) -> bool:
    """Whether ``item`` needs the machine to itself: marked ``alone``, or a GPU test."""
    return item.get_closest_marker("alone") is not None or item.get_closest_marker("gpu") is not None


def group_the_alone(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Send every test that needs the machine alone to one worker, one after another (xdist's
    ``loadgroup``), so that they take it once, not once each while the other workers drain."""
    if getattr(config.option, "dist", "no") in ("load", "loadgroup"):
        for item in items:
            if is_alone(item):
                item.add_marker(pytest.mark.xdist_group("alone"))


_held: IO[str] | None = None  # the machine's lock file while this worker keeps it across alone tests


@contextmanager
def holding_the_machine(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The machine held for ``item``: alone if :func:`is_alone`, else shared with other tests. An
    alone test followed by another on this worker keeps it for that one."""
    global _held
    folder = os.environ.get(LOCK_DIR_VARIABLE)
    if not _is_worker(item.config) or not folder:
        yield
        return
    alone = is_alone(item)
    machine = _held
    if machine is None:
        machine = (Path(folder) / "machine.lock").open("a")
        with (Path(folder) / "turnstile.lock").open("a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    _held = None
    try:
        yield
    finally:
        if alone and nextitem is not None and is_alone(nextitem):
            _held = machine
        else:
            fcntl.flock(machine, fcntl.LOCK_UN)
            machine.close()
