"""Linux ``prctl`` switches the sandbox needs, through ctypes; elsewhere each is a no-op that says so.

``PR_SET_CHILD_SUBREAPER`` makes orphans of our descendants our children (so a double-forked,
``setsid``'ed grandchild of a worker can still be found and killed). ``PR_SET_DUMPABLE`` 0 makes
``/proc/<pid>/{fd,mem,environ,...}`` of this process owned by root and refuses ptrace-style
access to it from processes without ``CAP_SYS_PTRACE``: a worker running as another, unprivileged
user cannot open our pipes or read our memory. It does not stop root (root holds
``CAP_SYS_PTRACE``), nor a process of the same uid that is our ptrace parent; the worker's audit
hook (:mod:`evaluator.hardening.sandbox.audit`) refuses those paths for a root worker, as defense in depth.
Note ``execve`` resets the flag to 1, so each process sets it on itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["AVAILABLE", "is_child_subreaper", "is_dumpable", "set_child_subreaper", "set_dumpable"]

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37

AVAILABLE = sys.platform.startswith("linux")
"""Whether the switches do anything here (Linux only)."""

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True) if AVAILABLE else None
if _libc is not None:
    _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _prctl(option: int, arg: int = 0) -> int:
    assert _libc is not None
    result = _libc.prctl(option, arg, 0, 0, 0)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")
    return int(result)


def set_child_subreaper(on: bool = True) -> bool:
    """Adopt orphaned descendants (Linux); return whether the switch is available."""
    if AVAILABLE:
        _prctl(_PR_SET_CHILD_SUBREAPER, int(on))
    return AVAILABLE


def is_child_subreaper() -> bool:
    """Whether this process adopts orphaned descendants (False where unavailable)."""
    if not AVAILABLE:
        return False
    flag = ctypes.c_int(0)
    _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag))
    return bool(flag.value)


def set_dumpable(on: bool) -> bool:
    """Set this process's dumpable flag (0: see the module docstring); return whether available."""
    if AVAILABLE:
        _prctl(_PR_SET_DUMPABLE, int(on))
    return AVAILABLE


def is_dumpable() -> bool:
    """This process's dumpable flag (True where unavailable: nothing was restricted)."""
    return bool(_prctl(_PR_GET_DUMPABLE)) if AVAILABLE else True
