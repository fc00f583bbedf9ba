"""The worker's audit hook: refuse, in the worker's interpreter, what no honest kernel needs.

Installed by the worker (:func:`install_audit_hook`) after the evaluator's own imports and
before the kernel's. A refused action raises ``PermissionError("[rule sandbox] ...")`` and is
recorded, so the worker can report it even if the kernel catches the error;
with ``report_fd`` each refusal is also written there at once, and a worker that can no longer
write it exits with :data:`EXIT_UNREPORTED`.

Refused: ``sys.setprofile``/``sys.settrace`` (also through ``threading`` and the C API, and the
3.12 all-threads variants), ``gc.get_objects``/``get_referrers``/
``get_referents``, ``os.fork``/``os.forkpty`` and ``os.exec*`` (subprocesses are allowed:
Triton runs ``ptxas`` and ``torch.compile`` starts compile workers through ``subprocess``),
``os.kill``/``os.killpg`` aimed at a process that is not this one or its descendant (signal 0
is allowed; so is a pid that no longer exists), opening for writing, creating, renaming,
linking, removing or changing the metadata of anything outside the write roots (the scratch
directory, ``/dev/shm``, ``/dev/null``), a relative path with ``..`` opened for writing (its
``dir_fd`` is not in the event), a directory outside the roots opened with ``os.open`` (it
could serve as such a ``dir_fd``), a symlink whose target is not an absolute path inside the
roots, and opening or listing ``/proc/<pid>/{fd,mem,environ,root,cwd,map_files,...}`` of another
process.

Allowed, because the harness or honest libraries need them: ``sys._getframe`` and frame
walks (logging, ``inspect``, ``torch.compile``), ``sys._current_frames`` (the idle-threads
rule), ``ctypes``, ``subprocess``, reading files anywhere else.

This is defense in depth, not a boundary. ``ctypes`` can write memory and call libc directly,
and a subprocess (e.g. a second Python) runs without the hook; those are left to the
operating-system measures (:mod:`evaluator.hardening.sandbox.children`, :mod:`evaluator.hardening.sandbox.snapshot`,
a non-dumpable parent, and best of all an unprivileged worker uid). The hook keeps no state a
kernel can reach and change: everything it calls was bound when it was installed (a kernel
that rebinds ``os.lstat`` or a builtin changes nothing here), its records live in a tuple
re-bound in a closure cell, and it raises only builtin exception types.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["EXIT_UNREPORTED", "RULE", "install_audit_hook"]

RULE = "sandbox"
EXIT_UNREPORTED = 86
"""The worker's exit status when a refusal could not be written to ``report_fd``."""

_ALWAYS_REFUSED = {
    "sys.setprofile": "profile hooks run code outside the kernel's calls",
    "sys.settrace": "trace hooks run code outside the kernel's calls",
    "sys._setprofileallthreads": "profile hooks run code outside the kernel's calls",
    "sys._settraceallthreads": "trace hooks run code outside the kernel's calls",
    "gc.get_objects": "walking the heap finds the harness's objects",
    "gc.get_referrers": "walking the heap finds the harness's objects",
    "gc.get_referents": "walking the heap finds the harness's objects",
    "os.fork": "a forked copy of the worker outlives its checks (use subprocess)",
    "os.forkpty": "a forked copy of the worker outlives its checks (use subprocess)",
    "os.exec": "replacing the worker's program",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# event -> (indices of the path arguments, index of their dir_fd argument per path, or -1)
_PATH_EVENTS = {
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.utime": ((0, 3),),
    "os.truncate": ((0, -1),),
    "os.setxattr": ((0, -1),),
    "os.removexattr": ((0, -1),),
    "os.rename": ((0, 2), (1, 3)),
    "os.link": ((0, 2), (1, 3)),
}
_PROC_PRIVATE = r"/proc/(\d+)/(?:task/\d+/)?(?:fd|fdinfo|mem|environ|root|cwd|exe|map_files|pagemap|syscall)(?:/|$)"
_FILE_TYPE, _LINK, _DIRECTORY = 0o170000, 0o120000, 0o040000
_MAX_LINKS = 40


def install_audit_hook(
    write_roots: Iterable[str | Path],
    report_fd: int | None = None,
) -> Callable[[], tuple[str, ...]]:
    """Install the hook (for the rest of this process's life); return a function that lists its
    refusals so far, each ``[rule sandbox] <event>: <why>``. ``write_roots`` are the directories
    the worker may change (its scratch directory); ``/dev/shm`` and ``/dev/null`` are added."""
    # Everything below is bound now, before any kernel code runs; nothing is looked up later.
    _str, _bytes, _int, _type, _isinstance = str, bytes, int, type, isinstance
    _as_str, _join_bytes, _decode = str.__str__, bytes.join, bytes.decode
    _item = tuple.__getitem__
    _path_types, _path_str = (pathlib.PurePosixPath, pathlib.PosixPath), pathlib.PurePath.__str__
    _lstat, _stat, _readlink, _getcwd, _getpid = os.lstat, os.stat, os.readlink, os.getcwd, os.getpid
    _open, _read, _close, _write, _exit, _getpgrp = os.open, os.read, os.close, os.write, os._exit, os.getpgrp
    _rdonly = os.O_RDONLY
    _proc_private = re.compile(_PROC_PRIVATE).match
    _refused_always = types.MappingProxyType(dict(_ALWAYS_REFUSED))
    _path_events = types.MappingProxyType(dict(_PATH_EVENTS))
    _roots = (*map(os.path.realpath, write_roots), "/dev/shm")
    _files = ("/dev/null",)
    _permission, _exception, _oserror = PermissionError, Exception, OSError
    _rule, _unreported = RULE, EXIT_UNREPORTED
    _write_flags, _file_type, _link, _directory, _max_links = _WRITE_FLAGS, _FILE_TYPE, _LINK, _DIRECTORY, _MAX_LINKS
    records: tuple[str, ...] = ()

    def text(path: object) -> str | None:
        """An exact ``str`` copy of a path argument (a subclass's methods are never called)."""
        kind = _type(path)
        if kind is _str or _isinstance(path, _str):
            return _as_str(path)  # type: ignore[arg-type]
        if kind is _bytes or _isinstance(path, _bytes):
            return _decode(_join_bytes(b"", (path,)), "utf-8", "surrogateescape")
        return None

    def absolute(path: str, dir_fd: object) -> str:
        if path.startswith("/"):
            return path
        if _type(dir_fd) is _int and dir_fd >= 0:  # type: ignore[operator]
            return _readlink(f"/proc/self/fd/{dir_fd}") + "/" + path
        return _getcwd() + "/" + path

    def resolve(path: str) -> str:
        """``path`` (absolute) with every existing symlink followed, like ``os.path.realpath``."""
        pending = path.split("/")[::-1]
        resolved = ""
        links = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                resolved = resolved[: resolved.rfind("/")]
                continue
            candidate = resolved + "/" + part
            try:
                mode = _item(_lstat(candidate), 0)
            except _oserror:
                resolved = candidate
                continue
            if mode & _file_type != _link:
                resolved = candidate
                continue
            links += 1
            if links > _max_links:
                raise _permission(f"[rule {_rule}] too many symbolic links in {path}")
            target = _readlink(candidate)
            if target.startswith("/"):
                resolved = ""
            pending.extend(target.split("/")[::-1])
        return resolved or "/"

    def inside(path: str) -> bool:
        if path in _files:
            return True
        for root in _roots:  # noqa: SIM110  (``any`` would be looked up when called)
            if path == root or path.startswith(root + "/"):
                return True
        return False

    def lexical(path: str) -> str:
        parts: list[str] = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return "/" + "/".join(parts)

    def private_proc(path: str) -> bool:
        """Whether ``path`` names a private /proc file of another process (lexically or really)."""
        me = f"{_getpid()}"
        for candidate in (lexical(path), resolve(path)):
            match = _proc_private(candidate)
            if match is not None and match[1] != me:
                return True
        return False

    def writable(raw: object, dir_fd: object) -> str | None:
        """Why changing ``raw`` is refused, or None (an int is an fd the kernel already holds)."""
        if _type(raw) is _int:
            return None
        path = text(raw)
        if path is None:
            return f"unexpected path type {_type(raw).__name__}"
        full = resolve(absolute(path, dir_fd))
        return None if inside(full) else f"{full} is outside the scratch directory"

    def mkdir_fails(raw: object, dir_fd: object) -> bool:
        """Whether making this directory fails without changing anything (it exists, or is "")."""
        path = text(raw)
        if not path:
            return path is not None  # "" fails with ENOENT
        try:
            _lstat(absolute(path, dir_fd))
        except _oserror:
            return False
        return True

    def on_listing(args: tuple[object, ...]) -> str | None:
        """``os.listdir``/``os.scandir`` of another process's private /proc directory: the first
        step to its descriptors, refused even where the kernel would refuse the open after it."""
        raw = args[0] if args else None
        if raw is None or _type(raw) is _int:
            return None  # the current directory, or an fd the kernel already holds
        path = _path_str(raw) if _type(raw) in _path_types else text(raw)  # pathlib's iterdir passes itself
        if path is None:
            return f"unexpected path type {_type(raw).__name__}"
        full = absolute(path, -1)
        if "proc" in full and private_proc(full):
            return f"{path} is another process's private directory"
        return None

    def on_open(args: tuple[object, ...]) -> str | None:
        raw, mode, flags = args[0], args[1], args[2]
        if _type(raw) is _int:
            return None
        path = text(raw)
        if path is None:
            return f"unexpected path type {_type(raw).__name__}"
        writing = _type(flags) is _int and flags & _write_flags  # type: ignore[operator]
        full = absolute(path, -1)
        if ("proc" in full or full.startswith("/dev/") or ".." in full) and private_proc(full):
            return f"{path} is another process's private file"
        if not writing:
            if mode is None and not inside(resolve(full)):  # os.open: a directory fd could be a dir_fd
                try:
                    is_dir = _item(_stat(full), 0) & _file_type == _directory
                except _oserror:
                    is_dir = False
                if is_dir:
                    return f"directory {path} is outside the scratch directory"
            return None
        if not path.startswith("/") and ".." in path.split("/"):
            return f"relative path {path} climbs out of its directory"
        return writable(path, -1)

    def on_symlink(args: tuple[object, ...]) -> str | None:
        target = text(args[0])
        if target is None or not target.startswith("/") or not inside(resolve(target)):
            return f"symlink target {args[0]!r} is not an absolute path inside the scratch directory"
        return writable(args[1], args[2])

    def descends(pid: int) -> bool | None:
        """Whether ``pid`` is this process or below it; None if there is no such process."""
        me, hops = _getpid(), 0
        while pid > 1 and hops < 64:
            if pid == me:
                return True
            try:
                fd = _open(f"/proc/{pid}/stat", _rdonly)
            except _oserror:
                return None if hops == 0 else False
            try:
                data = _read(fd, 4096)
            finally:
                _close(fd)
            pid, hops = _int(data[data.rfind(b")") + 2:].split()[1]), hops + 1
        return False

    def on_signal(target: object, signal: object, group: bool) -> str | None:
        if _type(target) is not _int or _type(signal) is not _int:
            return "unexpected argument types"
        if signal == 0:
            return None
        me = _getpid()
        if not group and target == -1:
            return "a signal to every process"
        if not group and target < 0:  # type: ignore[operator]
            target, group = -target, True  # type: ignore[operator]
        if group:
            if target == 0 or target == me:
                return None if _getpgrp() == me else "the worker's process group is not its own"
            return None if target != 1 and descends(target) else f"process group {target} is not the worker's"  # type: ignore[arg-type]
        if target == 0:
            return None if _getpgrp() == me else "the worker's process group is not its own"
        return None if descends(target) is not False else f"process {target} is not the worker or its descendant"  # type: ignore[arg-type]

    def judge(event: str, args: tuple[object, ...]) -> str | None:
        why = _refused_always.get(event)
        if why is not None:
            return why
        if event == "open":
            return on_open(args)
        if event in ("os.listdir", "os.scandir"):
            return on_listing(args)
        spec = _path_events.get(event)
        if event == "os.mkdir" and mkdir_fails(args[0], args[2]):
            return None  # ``os.makedirs(..., exist_ok=True)`` tries existing directories
        if spec is not None:
            for path_index, fd_index in spec:
                problem = writable(args[path_index], args[fd_index] if fd_index >= 0 else -1)
                if problem is not None:
                    return problem
            return None
        if event == "os.symlink":
            return on_symlink(args)
        if event == "os.kill":
            return on_signal(args[0], args[1], False)
        if event == "os.killpg":
            return on_signal(args[0], args[1], True)
        return None

    watched = frozenset((*_ALWAYS_REFUSED, *_PATH_EVENTS, "open", "os.listdir", "os.scandir", "os.symlink", "os.kill",
                         "os.killpg"))

    def hook(event: str, args: tuple[object, ...]) -> None:
        nonlocal records
        if event not in watched:
            return
        try:
            why = judge(event, args)
        except _permission:
            raise
        except _exception as exc:  # fail closed: an event that cannot be judged is refused
            why = f"could not be judged ({_type(exc).__name__})"
        if why is None:
            return
        message = f"[rule {_rule}] {event}: {why}"
        records = (*records, message)
        if report_fd is not None:
            try:
                _write(report_fd, (message + "\n").encode())
            except _oserror:
                _exit(_unreported)
        raise _permission(message)

    def refusals() -> tuple[str, ...]:
        """Every refusal so far, oldest first."""
        return records

    sys.addaudithook(hook)
    return refusals
