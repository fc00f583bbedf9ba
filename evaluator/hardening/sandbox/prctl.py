"""Linux ``prctl`` switches the sandbox needs, through ctypes; elsewhere each is a no-op that says so.

``PR_SET_CHILD_SUBREAPER`` makes orphans of our descendants our children (so a double-forked,
``setsid``'ed grandchild of a worker can still be found and killed). ``PR_SET_DUMPABLE`` 0 makes
``/proc/<pid>/{fd,mem,environ,...}`` of this process owned by root and refuses ptrace-style
access to it from processes without ``CAP_SYS_PTRACE``: a worker running as another, unprivileged
user cannot open our pipes or read our memory. It does not stop root (root holds
``CAP_SYS_PTRACE``), nor a process of the same uid that is our ptrace parent; the worker's audit
hook (:mod:`evaluator.hardening.sandbox.audit`) refuses those paths for a root worker, as defense in depth.
Note ``execve`` resets the flag to 1, so each process sets it on itself.

:func:`drop_ptrace_capability` closes the root case: a process without ``CAP_SYS_PTRACE`` (in
its effective, permitted, inheritable, ambient and bounding sets, so no program it starts gets it
back) cannot open a non-dumpable process's ``/proc/<pid>`` descriptors or memory even as uid 0,
whatever it calls (``ctypes``, a second interpreter): the kernel refuses, not a hook.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

__all__ = [
    "AVAILABLE",
    "drop_ptrace_capability",
    "has_ptrace_capability",
    "is_child_subreaper",
    "is_dumpable",
    "set_child_subreaper",
    "set_dumpable",
]

_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_SYS_PTRACE = 19
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

AVAILABLE = sys.platform.startswith("linux")
"""Whether the switches do anything here (Linux only)."""

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True) if AVAILABLE else None
if _libc is not None:
    _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


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


def _capabilities() -> tuple[_CapHeader, ctypes.Array[_CapData]]:
    """This process's capability sets (two 32-bit words each, version 3)."""
    assert _libc is not None
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"capget: {os.strerror(errno)}")
    return header, data


def has_ptrace_capability() -> bool:
    """Whether this process holds ``CAP_SYS_PTRACE`` in its effective set (False where unavailable)."""
    if not AVAILABLE:
        return False
    _, data = _capabilities()
    return bool(data[0].effective & (1 << _CAP_SYS_PTRACE))


def drop_ptrace_capability() -> bool:
    """Give up ``CAP_SYS_PTRACE`` for good: from the bounding set (where this process may change
    it: root may, others hold nothing to drop), the ambient set, and the effective, permitted
    and inheritable sets. Returns whether this process is now without it (False where
    unavailable)."""
    if not AVAILABLE:
        return False
    assert _libc is not None
    with contextlib.suppress(OSError):  # EPERM without CAP_SETPCAP: then nothing is held to drop
        _prctl(_PR_CAPBSET_DROP, _CAP_SYS_PTRACE)
    with contextlib.suppress(OSError):  # EINVAL on kernels without ambient capabilities
        _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header, data = _capabilities()
    keep = ~(1 << _CAP_SYS_PTRACE) & 0xFFFFFFFF
    data[0].effective &= keep
    data[0].permitted &= keep
    data[0].inheritable &= keep
    _libc.capset(ctypes.byref(header), data)  # a failure shows below, if it left the capability held
    return not has_ptrace_capability()
