"""Rule ``tamper``: notice, and undo, a kernel replacing what timing and checking run on.

The kernel runs in the worker's own interpreter, so it can rebind any name: ``time.perf_counter``,
``torch.cuda.Event.elapsed_time``, ``torch.linalg.householder_product``, the checker's helpers,
the evaluator's own functions. The timers call references bound before any kernel was imported
(:mod:`evaluator.timing`), and the :class:`Tripwire` covers the rest: made before the kernel is
imported, it records

- every entry of the evaluator's and the reference's own modules and classes (data included:
  ``WALL_CAP_S`` is as much a figure's input as a function is);
- every name those modules' functions look up at run time (attribute chains such as
  ``torch.linalg.householder_product``, read from their bytecode), and, transitively, the
  names the third-party Python functions among them look up (``torch.cuda.synchronize``
  calls ``torch._C._cuda_synchronize``); only modules, classes and callables are recorded
  there, so a library flipping its own flags is not a change;
- the classes reached that way (``torch.Tensor``, ``torch.cuda.Event``), including new
  attributes that would shadow inherited ones;
- the hooks through which code runs outside its call: trace and profile functions, signal
  handlers, ``gc.callbacks``, ``sys.monitoring`` tools, and audit hooks (which it refuses).

:meth:`Tripwire.problem` compares, restores every original it can and names what changed. The
evaluator calls it after each kernel call and before any check, so a replaced checker never
judges, and before a result is sent, so a replaced channel never carries it. Only names the
evaluator uses are watched: ``torch.compile`` rewrapping ``torch.manual_seed``, as it does,
is not a change. What this cannot see is in docs/hardening.md (threat model).
"""

from __future__ import annotations

import _signal
import builtins
import dis
import gc
import signal
import sys
import threading
import types
from collections.abc import Iterator
from itertools import repeat
from operator import is_
from typing import Any

from evaluator.guards import rule_message

__all__ = ["Tripwire"]

_OWN_PACKAGES = ("evaluator", "reference")
# The contest's stand-in modules are for kernels to import and use, not part of the evaluator.
_NOT_OWN = ("evaluator.compat",)
# Names the contest's own timing used. The timers here bound theirs before any kernel was
# imported, so replacing these changes nothing, but no honest kernel does it: it is reported.
_CONTEST_TIMING = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "time"), ("time", "time_ns"),
    ("time", "monotonic"), ("time", "monotonic_ns"), ("torch.cuda", "synchronize"), ("torch.cuda", "Event"),
    ("torch.cuda", "current_stream"),
)
_MISSING = object()
_MAX_DEPTH = 8  # how far into third-party Python functions the name closure follows calls
_ATTR_OPS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: built-in and extension types refuse assignment


def _readable_signals() -> tuple[int, ...]:
    readable = []
    for sig in signal.valid_signals():
        try:
            _signal.getsignal(int(sig))
        except (OSError, ValueError):
            continue
        readable.append(int(sig))
    return tuple(readable)


_SIGNALS = _readable_signals()

# Audit hooks cannot be removed once added, so the first tripwire in a process adds one that
# refuses every later ``sys.addaudithook`` (raising RuntimeError makes Python drop the new
# hook silently) and counts the attempts.
_audit_state = {"installed": False, "refused": 0}


def _refuse_audit_hooks(event: str, args: tuple[Any, ...]) -> None:
    if event == "sys.addaudithook":
        _audit_state["refused"] += 1
        raise RuntimeError("qrbench: audit hooks are not allowed in the worker")


def _own(name: str) -> bool:
    return name.split(".")[0] in _OWN_PACKAGES and not name.startswith(_NOT_OWN)


def _third_party_function(value: object) -> bool:
    module = getattr(value, "__module__", None) or ""
    return isinstance(value, types.FunctionType) and module.split(".")[0] not in _OWN_PACKAGES


def _watchable(value: object) -> bool:
    return isinstance(value, types.ModuleType | type) or callable(value)


def _immutable(cls: type) -> bool:
    return bool(cls.__flags__ & _IMMUTABLE_TYPE)


def _codes(obj: object) -> Iterator[types.CodeType]:
    """The code objects of a function, method wrapper or property, nested functions included."""
    if isinstance(obj, staticmethod | classmethod):
        obj = obj.__func__
    if isinstance(obj, property):
        for accessor in (obj.fget, obj.fset, obj.fdel):
            yield from _codes(accessor)
        return
    code = obj.__code__ if isinstance(obj, types.FunctionType) else obj
    if not isinstance(code, types.CodeType):
        return
    yield code
    for const in code.co_consts:
        yield from _codes(const)


def _chains(code: types.CodeType) -> Iterator[tuple[str, ...]]:
    """Names a function looks up: ``torch.linalg.householder_product`` as a tuple of parts."""
    chain: tuple[str, ...] = ()
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL":
            chain = (ins.argval,)
        elif ins.opname in _ATTR_OPS and chain:
            chain = (*chain, ins.argval)
        else:
            chain = ()
            continue
        yield chain


def _functions_of(namespace: dict[str, Any], module_name: str) -> Iterator[object]:
    """Functions defined in a module, and the methods of its classes."""
    for value in namespace.values():
        if getattr(value, "__module__", None) != module_name:
            continue
        if isinstance(value, type):
            yield from vars(value).values()
        else:
            yield value


def _label(owner: object) -> str:
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    cls = owner if isinstance(owner, type) else type(owner)
    return f"{cls.__module__}.{cls.__qualname__}" + ("" if cls is owner else "()")


class _Namespace:
    """The watched entries of one module, class or object, compared in one pass of C code.

    ``closed`` namespaces (the evaluator's own modules and objects, and every class) also
    report new entries: a new global in an evaluator module shadows a builtin, a new class
    attribute may shadow an inherited one. Third-party modules grow attributes as submodules
    load, so there only the recorded entries count. ``ignore`` names entries that change
    by design (a harness's running maximum).
    """

    def __init__(self, owner: object, closed: bool, ignore: frozenset[str] = frozenset()) -> None:
        self.owner = owner
        self.closed = closed
        self.ignore = ignore
        self.entries: dict[str, object] = {}
        self.size = len(vars(owner))
        self.inherited = frozenset(dir(owner)) if isinstance(owner, type) else frozenset()
        self._names: tuple[str, ...] = ()
        self._originals: tuple[object, ...] = ()

    def add(self, name: str, value: object) -> None:
        self.entries.setdefault(name, value)

    def freeze(self) -> None:
        self._names = tuple(self.entries)
        self._originals = tuple(self.entries.values())

    def _unchanged(self, namespace: Any) -> bool:
        current = map(namespace.get, self._names, repeat(_MISSING))
        return all(map(is_, current, self._originals)) and (not self.closed or len(namespace) == self.size)

    def restore(self) -> list[str]:
        """Labels of what changed; each is put back (new entries are removed)."""
        namespace = vars(self.owner)
        if self._unchanged(namespace):
            return []
        changed = []
        for name, original in self.entries.items():
            if namespace.get(name, _MISSING) is not original:
                changed.append(f"{_label(self.owner)}.{name}")
                setattr(self.owner, name, original)
        if self.closed:
            changed += self._remove_additions()
        return changed

    def _remove_additions(self) -> list[str]:
        namespace = vars(self.owner)
        added = []
        for name in list(namespace):
            if name in self.entries or name in self.ignore or (name.startswith("__") and name.endswith("__")):
                continue
            if isinstance(self.owner, type) and name not in self.inherited:
                continue  # a new class attribute that shadows nothing is harmless
            if isinstance(namespace[name], types.ModuleType):
                continue  # a submodule imported later
            added.append(f"{_label(self.owner)}.{name} (added)")
            delattr(self.owner, name)
        self.size = len(vars(self.owner))
        return added


class Tripwire:
    """Snapshot of what timing and checking rely on; see the module docstring."""

    def __init__(self) -> None:
        if not _audit_state["installed"]:
            sys.addaudithook(_refuse_audit_hooks)
            _audit_state["installed"] = True
        self._refused = _audit_state["refused"]
        self._namespaces: dict[int, _Namespace] = {}
        self._scan()
        for space in self._namespaces.values():
            space.freeze()
        self._hooks = _hooks()

    def watch_object(self, obj: object, ignore: frozenset[str] = frozenset()) -> None:
        """Also watch an evaluator object's attributes (the harness's timer, checker and floor;
        the timer's drain switch): replacing one needs no more than ``gc.get_objects()``."""
        space = _Namespace(obj, closed=True, ignore=ignore)
        for name, value in vars(obj).items():
            if name not in ignore:
                space.add(name, value)
        space.freeze()
        self._namespaces[id(obj)] = space

    # -- building the snapshot -------------------------------------------------------------

    def _space(self, owner: object, closed: bool = False) -> _Namespace:
        space = self._namespaces.get(id(owner))
        if space is None:
            space = self._namespaces[id(owner)] = _Namespace(owner, closed or isinstance(owner, type))
            if isinstance(owner, type):
                for name, value in vars(owner).items():
                    self._watch(owner, name, value)
        return space

    def _watch(self, owner: object, name: str, value: object) -> None:
        self._space(owner).add(name, value)
        if isinstance(value, type) and not _immutable(value):
            self._space(value)

    def _watch_attribute(self, owner: types.ModuleType | type, name: str) -> None:
        """Watch the entry that ``owner.name`` resolves to: a module's, or the defining class's."""
        if isinstance(owner, types.ModuleType):
            self._watch(owner, name, vars(owner)[name])
            return
        for cls in owner.__mro__:
            if name in vars(cls):
                if not _immutable(cls):
                    self._watch(cls, name, vars(cls)[name])
                return

    def _scan(self) -> None:
        pending: list[tuple[object, dict[str, Any]]] = []
        for name, module in list(sys.modules.items()):
            if module is None or not _own(name):
                continue
            namespace = vars(module)
            self._space(module, closed=True)
            for key, value in namespace.items():
                if not key.startswith("__"):
                    self._watch(module, key, value)
                if _third_party_function(value):  # a bound reference such as timing's _event_record
                    pending.append((value, value.__globals__))
            pending.extend((fn, namespace) for fn in _functions_of(namespace, name))
        for module_name, attr in _CONTEST_TIMING:
            module = sys.modules.get(module_name)
            if module is not None and attr in vars(module):
                self._watch_attribute(module, attr)
        seen: set[int] = set()
        for _ in range(_MAX_DEPTH):
            found: list[tuple[object, dict[str, Any]]] = []
            for fn, namespace in pending:
                if id(fn) not in seen:
                    seen.add(id(fn))
                    for code in _codes(fn):
                        for chain in _chains(code):
                            found.extend(self._resolve(chain, namespace))
            if not found:
                break
            pending = found

    def _resolve(self, chain: tuple[str, ...], namespace: dict[str, Any]) -> list[tuple[object, dict[str, Any]]]:
        """Watch each step of ``chain``; return the third-party Python function it reaches, if any."""
        root = chain[0]
        if root in namespace:
            value = namespace[root]
            module = sys.modules.get(namespace.get("__name__", ""))
            if module is not None and not _own(module.__name__) and _watchable(value):
                self._watch(module, root, value)
        elif hasattr(builtins, root):
            value = getattr(builtins, root)
            self._watch(builtins, root, value)
        else:
            return []
        for part in chain[1:]:
            if not isinstance(value, types.ModuleType | type):
                break
            try:
                nxt = getattr(value, part)
            except AttributeError:
                break
            if _watchable(nxt):
                self._watch_attribute(value, part)
            value = nxt
        return [(value, value.__globals__)] if _third_party_function(value) else []

    # -- checking --------------------------------------------------------------------------

    def problem(self) -> str | None:
        """Name what the kernel replaced or installed since the snapshot, and undo it."""
        changed = [label for space in self._namespaces.values() for label in space.restore()]
        changed += _restore_hooks(self._hooks)
        if _audit_state["refused"] != self._refused:
            changed.append("sys.addaudithook (refused)")
            self._refused = _audit_state["refused"]
        if changed:
            return rule_message("tamper", f"the kernel replaced or installed {', '.join(sorted(changed))}")
        return None


def _monitoring_tools() -> tuple[str | None, ...]:
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    return tuple(monitoring.get_tool(i) for i in range(6)) if monitoring else ()


def _hooks() -> dict[str, Any]:
    """Everything through which Python runs code on its own: trace and profile functions,
    garbage-collector callbacks, signal handlers, monitoring tools."""
    return {
        "sys.settrace": sys.gettrace(),
        "sys.setprofile": sys.getprofile(),
        "threading.settrace": threading.gettrace(),
        "threading.setprofile": threading.getprofile(),
        "gc.callbacks": tuple(gc.callbacks),
        "signal handlers": tuple(map(_signal.getsignal, _SIGNALS)),
        "sys.monitoring tools": _monitoring_tools(),
    }


def _restore_hooks(saved: dict[str, Any]) -> list[str]:
    """Hooks that differ from ``saved``, each set back where Python allows it."""
    now = _hooks()
    changed = [name for name in saved if now[name] != saved[name]]
    if "sys.settrace" in changed:
        sys.settrace(saved["sys.settrace"])
    if "sys.setprofile" in changed:
        sys.setprofile(saved["sys.setprofile"])
    if "threading.settrace" in changed:
        threading.settrace(saved["threading.settrace"])
    if "threading.setprofile" in changed:
        threading.setprofile(saved["threading.setprofile"])
    if "gc.callbacks" in changed:
        gc.callbacks[:] = saved["gc.callbacks"]
    if "signal handlers" in changed and threading.current_thread() is threading.main_thread():
        for sig, before, after in zip(_SIGNALS, saved["signal handlers"], now["signal handlers"], strict=True):
            if before != after and before is not None:
                signal.signal(sig, before)
    if "sys.monitoring tools" in changed:
        for i, (before, after) in enumerate(zip(saved["sys.monitoring tools"], now["sys.monitoring tools"],
                                                strict=True)):
            if before is None and after is not None:
                sys.monitoring.free_tool_id(i)
    return changed
