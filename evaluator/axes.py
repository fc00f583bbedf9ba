"""A kernel's plan axes: the hook through which ``qrbench sweep`` (and ``qrbench compare``, for a
contestant named at one setting, ``NAME[KNOB=VALUE,...]``) sets a contestant's knobs.

A contestant module may declare its knobs and a way to set them::

    PLAN_AXES = {"nb": (16, 32, 64), "two_columns": (True, False)}  # each knob: every value it takes

    def configure(**params) -> None:
        '''Later calls use these knob values; called with none, the kernel's own plan again.'''

Values are JSON scalars: integers, floats, strings, booleans or None. The sweep
(:mod:`evaluator.sweep`) asks the worker for ``PLAN_AXES`` once the kernel is loaded, resolves the
command line's texts against them (``--axis nb=32,64``, ``--axis two_columns=on,off``, ``none``)
and has the worker call ``configure`` before each variant is timed. The parent never imports a
contestant: it sees ``PLAN_AXES`` as data. Nothing here imports torch.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluator.documents import read_yaml

__all__ = [
    "AXES_NAME",
    "CONFIGURE_NAME",
    "AxisError",
    "Requested",
    "Scalar",
    "Variant",
    "axes_reply",
    "configure_kernel",
    "declared_axes",
    "load_axes_file",
    "parse_axis",
    "plain_axes",
    "replied_axes",
    "resolve",
    "setting_text",
    "split_setting",
    "value_text",
    "variant_count",
    "variants",
]

AXES_NAME = "PLAN_AXES"
CONFIGURE_NAME = "configure"

Scalar = int | float | str | bool | None
# Axis name -> the values asked for, as typed on the command line (or written in an axes file).
Requested = dict[str, tuple[str, ...]]


class AxisError(ValueError):
    """A plan axis that cannot be used: an unknown name or value, a bad axes file, a missing hook."""


def value_text(value: Scalar) -> str:
    """How a value is written on the command line and in labels: on/off, none, else its text."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def _spellings(value: Scalar) -> tuple[str, ...]:
    if isinstance(value, bool):
        return ("on", "true") if value else ("off", "false")
    return (value_text(value).lower(),)


# -- the worker's side: the contestant module's hook ---------------------------------------------


def _hook_module(kernel: Callable[..., object]) -> Any:
    module = inspect.getmodule(kernel)
    if module is None:
        raise AxisError("the kernel's module cannot be found, so neither can its PLAN_AXES")
    return module


def declared_axes(kernel: Callable[..., object]) -> dict[str, list[Scalar]]:
    """The ``PLAN_AXES`` of the module defining ``kernel``, as JSON data; an :class:`AxisError`
    says what is missing or malformed (the module also needs a callable ``configure``)."""
    module = _hook_module(kernel)
    axes = getattr(module, AXES_NAME, None)
    if axes is None:
        raise AxisError(f"declares no {AXES_NAME} (a dict of knob name to the values it takes) and "
                        f"{CONFIGURE_NAME}(**params): see evaluator/axes.py")
    if not callable(getattr(module, CONFIGURE_NAME, None)):
        raise AxisError(f"declares {AXES_NAME} but no callable {CONFIGURE_NAME}(**params)")
    return plain_axes(axes)


def plain_axes(axes: object) -> dict[str, list[Scalar]]:
    """``axes`` checked to be a ``PLAN_AXES`` (each knob's name and at least one JSON scalar value),
    as plain data: the worker checks what the module declares, the parent what the worker sent."""
    if not isinstance(axes, Mapping) or not axes:
        raise AxisError(f"{AXES_NAME} must be a non-empty dict of knob name to values, got {type(axes).__name__}")
    out: dict[str, list[Scalar]] = {}
    for name, values in axes.items():
        if not isinstance(name, str) or isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise AxisError(f"{AXES_NAME}[{name!r}]: expected a name and a tuple of values, got {values!r:.80}")
        plain = [v for v in values if v is None or isinstance(v, bool | int | float | str)]
        if len(plain) != len(values) or not plain:
            raise AxisError(f"{AXES_NAME}[{name!r}]: values must be integers, floats, strings, booleans or "
                            f"None, and at least one, got {values!r:.80}")
        out[name] = plain
    return out


def replied_axes(contestant: str, reply: Mapping[str, Any]) -> dict[str, list[Scalar]]:
    """The ``PLAN_AXES`` a worker's :func:`axes_reply` carries, checked as data; an
    :class:`AxisError` naming ``contestant`` when it carries the problem instead."""
    if reply.get("axes") is None:
        raise AxisError(f"{contestant}: {reply.get('problem', 'no plan axes')}")
    return plain_axes(reply["axes"])


def axes_reply(kernel: Callable[..., object]) -> dict[str, Any]:
    """The worker's answer to the parent's ``axes`` command: the axes, or what is wrong with them."""
    try:
        return {"event": "axes", "axes": declared_axes(kernel)}
    except AxisError as exc:
        return {"event": "axes", "axes": None, "problem": str(exc)}


def configure_kernel(kernel: Callable[..., object], params: Mapping[str, Scalar]) -> None:
    """Call the kernel module's ``configure`` with ``params`` (none: the kernel's own plan)."""
    getattr(_hook_module(kernel), CONFIGURE_NAME)(**params)


# -- the parent's side: the command line, the grid ------------------------------------------------


def _checked(where: str, items: Sequence[str]) -> tuple[str, ...]:
    if len(set(items)) != len(items):
        raise AxisError(f"{where}: a value is repeated")
    return tuple(items)


def parse_axis(text: str) -> tuple[str, tuple[str, ...]]:
    """``NAME=V1,V2,...`` -> (NAME, (V1, V2, ...)); a missing part or a repeated value is an error."""
    name, sep, values = text.partition("=")
    items = [v.strip() for v in values.split(",")]
    if not sep or not name.strip() or not all(items):
        raise AxisError(f"--axis {text!r}: expected NAME=VALUE[,VALUE...], e.g. nb=32,64")
    return name.strip(), _checked(f"--axis {text!r}", items)


def load_axes_file(path: Path) -> Requested:
    """An axes file: a YAML (or JSON) mapping of axis name to a value or a list of values."""
    doc = read_yaml(path, AxisError)
    if not isinstance(doc, dict) or not doc:
        raise AxisError(f"{path}: expected a mapping of axis name to values, e.g. {{nb: [32, 64]}}")
    requested: Requested = {}
    for name, values in doc.items():
        listed = values if isinstance(values, list) else [values]
        if not listed or any(isinstance(v, dict | list) for v in listed):
            raise AxisError(f"{path}: {name}: expected a value or a list of values, got {values!r}")
        requested[str(name)] = _checked(f"{path}: {name}", [value_text(v) for v in listed])
    return requested


def variant_count(requested: Requested) -> int:
    """How many variants a sweep times: the kernel's own plan, then every combination."""
    return 1 + math.prod(len(values) for values in requested.values())


def resolve(contestant: str, requested: Requested,
            declared: Mapping[str, Sequence[Scalar]]) -> dict[str, tuple[Scalar, ...]]:
    """The typed values of every requested axis, by the contestant's ``PLAN_AXES``; an unknown
    axis or value is an :class:`AxisError` naming the contestant, the axis and what it takes."""
    resolved: dict[str, tuple[Scalar, ...]] = {}
    for name, texts in requested.items():
        if name not in declared:
            raise AxisError(f"{contestant}: no axis {name!r} (its {AXES_NAME}: {', '.join(declared)})")
        allowed = declared[name]
        values = []
        for text in texts:
            match = [v for v in allowed if text.lower() in _spellings(v)]
            if not match:
                raise AxisError(f"{contestant}: axis {name}: {text!r} is not one of "
                                f"{', '.join(value_text(v) for v in allowed)}")
            values.append(match[0])
        if len({value_text(v) for v in values}) != len(values):
            raise AxisError(f"{contestant}: axis {name}: a value is given twice ({', '.join(texts)})")
        resolved[name] = tuple(values)
    return resolved


def split_setting(text: str) -> tuple[str, Requested]:
    """``NAME[k=v,k2=v2]`` (a variant's label, as a sweep writes it) -> (NAME, {k: (v,), k2: (v2,)}):
    the contestant at one setting of its knobs, for ``qrbench compare``; a text without brackets
    is the contestant's own plan. A malformed or repeated knob is an :class:`AxisError`."""
    if not text.endswith("]") or "[" not in text:
        return text, {}
    name, _, inside = text[:-1].partition("[")
    requested: Requested = {}
    for item in inside.split(","):
        knob, sep, value = (part.strip() for part in item.partition("="))
        if not name or not sep or not knob or not value:
            raise AxisError(f"{text!r}: expected NAME[KNOB=VALUE,...], e.g. blocked_wy[nb=32,two_columns=on]")
        if knob in requested:
            raise AxisError(f"{text!r}: knob {knob} is given twice")
        requested[knob] = (value,)
    return name, requested


def setting_text(params: Mapping[str, Scalar]) -> str:
    """Knob values as a label writes them, ``nb=32,two_columns=on``; none: ``default``."""
    return ",".join(f"{k}={value_text(v)}" for k, v in params.items()) or "default"


@dataclass(frozen=True)
class Variant:
    """One point of a sweep: the knob values (none: the kernel's own plan) and its label, the
    contestant's name with the values, e.g. ``blocked_wy[nb=32,two_columns=on]``."""

    params: dict[str, Scalar]
    label: str

    @property
    def setting(self) -> str:
        return setting_text(self.params)


def variants(contestant: str, axes: Mapping[str, Sequence[Scalar]]) -> list[Variant]:
    """The kernel's own plan first (the baseline a report compares with), then every combination
    of the axes' values, the first axis varying slowest."""
    grid = [Variant({}, contestant)]
    for values in itertools.product(*axes.values()):
        params = dict(zip(axes, values, strict=True))
        grid.append(Variant(params, f"{contestant}[{setting_text(params)}]"))
    return grid
