"""Writes outside a worker's own folders, and signals to processes outside it, refused by the
operating system (Linux Landlock).

The audit hook (:mod:`.audit`) refuses writes outside the scratch directory to Python code only:
``ctypes`` calling libc, or a program the kernel starts, is not subject to it, and the project
snapshot (:mod:`.snapshot`) sees what such a write changed only after the stage, and only in
the trees it watches. Landlock, a Linux security module open to unprivileged processes (Linux
5.13 on), makes the kernel of the operating system refuse them: once :func:`confine` has run
with write folders, this process and every process it starts may create, write, truncate,
rename or remove files only beneath those folders, whatever code asks. Reading and running
files stay allowed, as do writes through descriptors opened before (the result channel, the
pipes).

The audit hook also refuses ``os.kill`` aimed at a process the worker did not start, and
``ctypes`` passes it the same way: a kernel could stop the parent, a spare worker waiting for a
later stage, or the other contestant's worker of a paired comparison while it is timed. Once
:func:`confine` has scoped signals (Landlock ABI 6, Linux 6.12 on), the worker and what it
starts may signal only processes they started themselves.

Where Landlock is missing (an older kernel, a kernel built without it, another OS, gVisor),
:func:`confine` changes nothing and says so; the audit hook, the snapshot and the sweep remain.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

__all__ = ["WRITES_ABI", "Confinement", "confine", "landlock_abi"]

# Linux's Landlock interface (include/uapi/linux/landlock.h); the same syscall numbers on every
# architecture that has them.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_WRITE_FILE = 1 << 1
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE_CHAR, _MAKE_DIR, _MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = (1 << i for i in range(6, 13))
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_SCOPE_SIGNAL = 1 << 1  # ABI 6
# The first ABI whose rules can allow a rename across directories (LANDLOCK_ACCESS_FS_REFER).
WRITES_ABI = 2
_WRITES_ABI_1 = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK
                 | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _ScopedRulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 where there is none."""
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _writes(abi: int) -> int:
    """Every access right that changes the file system, as far as ``abi`` (``WRITES_ABI`` on) knows them."""
    return _WRITES_ABI_1 | _REFER | (_TRUNCATE if abi >= 3 else 0)


class Confinement(NamedTuple):
    """What :func:`confine` put in force: writes refused outside the folders, signals scoped."""

    writes: bool
    signals: bool


def confine(write_folders: Iterable[Path] | None = None, write_files: Iterable[Path] = (),
            signals: bool = True) -> Confinement:
    """Restrict this process and every process it starts, in one Landlock layer: with
    ``write_folders``, changes to the file system only beneath them (and writes to
    ``write_files``, such as ``/dev/null``; paths that do not exist are skipped); with
    ``signals``, signals only to processes in the same domain (themselves and what they start).

    One layer, not one per restriction: Linux refuses a rename or link across directories in
    every layer of a domain that handles file-system access unless that layer allows it, so a
    signal-only layer stacked on the write layer would refuse such a rename even inside an
    allowed folder (Triton's cache writes every file that way). For the same reason writes are
    restricted only from ABI 2, the first that can allow such a rename at all. Where the kernel
    refuses the write rules, signals are scoped alone; where Landlock is missing, nothing changes.
    """
    abi = landlock_abi()
    scoped = _SCOPE_SIGNAL if signals and abi >= 6 else 0
    if write_folders is not None and abi >= WRITES_ABI:
        handled = _writes(abi)
        file_rights = _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
        beneath = [(Path(f), handled) for f in write_folders] + [(Path(f), file_rights) for f in write_files]
        attr = _ScopedRulesetAttr(handled, 0, scoped) if scoped else _RulesetAttr(handled)
        if _enforce(attr, beneath):
            return Confinement(writes=True, signals=bool(scoped))
    return Confinement(writes=False, signals=bool(scoped) and _enforce(_ScopedRulesetAttr(0, 0, scoped), []))


def _enforce(attr: ctypes.Structure, beneath: list[tuple[Path, int]]) -> bool:
    """Create a ruleset from ``attr``, allow writes ``beneath`` its paths, and restrict this
    process to it; False (and nothing restricted) wherever the kernel refuses a step, since a
    refused rule would leave an allowed folder unwritable."""
    libc = _libc()
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        if not all(_allow(libc, int(ruleset), path, access) for path, access in beneath):
            return False
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
    finally:
        os.close(int(ruleset))


def _allow(libc: ctypes.CDLL, ruleset: int, path: Path, access: int) -> bool:
    """Add ``path`` to the ruleset; True if it was added or does not exist (nothing to allow)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        if not path.is_dir():
            access &= _WRITE_FILE | _TRUNCATE  # a file takes only the rights that act on a file
        rule = _PathBeneathAttr(access, fd)
        return libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                            ctypes.byref(rule), ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)
