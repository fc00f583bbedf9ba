"""The reference kernels' side of ``qrbench sweep``'s hook (evaluator/axes.py): knob values that
``configure`` sets, laid over a kernel's own plan.

A contestant module re-exports a kernel's ``PLAN_AXES`` and ``configure`` and asks for the plan of
each call (:meth:`Knobs.plan`): None while nothing is set, so the kernel picks its own plan as it
always does; else its own plan with the values laid over it, built once per shape. Not part of
the contest export.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["Knobs", "Value"]

Value = int | float | str | bool | None
P = TypeVar("P")


def _same(a: Value, b: Value) -> bool:
    """Equal and of one type: True is not 1 here."""
    return type(a) is type(b) and a == b


class Knobs(Generic[P]):
    """``axes``: each knob's name and every value it takes (a kernel's ``PLAN_AXES``); ``apply``
    lays knob values over a plan; ``reset`` drops what the kernel keeps per plan (its captured
    graphs), called whenever the values change."""

    def __init__(self, axes: Mapping[str, tuple[Value, ...]], apply: Callable[[P, Mapping[str, Value]], P],
                 reset: Callable[[], None]) -> None:
        self.axes = dict(axes)
        self._apply = apply
        self._reset = reset
        self.params: dict[str, Value] = {}
        self._plans: dict[Hashable, P] = {}

    def configure(self, **params: Value) -> None:
        """Use these knob values from the next call on; none: the kernel's own plan."""
        for name, value in params.items():
            if name not in self.axes:
                raise ValueError(f"no knob {name!r} (knobs: {', '.join(self.axes)})")
            if not any(_same(value, allowed) for allowed in self.axes[name]):
                raise ValueError(f"knob {name}: {value!r} is not one of {self.axes[name]}")
        self.params = dict(params)
        self._plans.clear()
        self._reset()

    def plan(self, default: Callable[..., P], *key: Hashable) -> P | None:
        """``default(*key)`` with the knob values laid over it, or None while none are set."""
        if not self.params:
            return None
        if key not in self._plans:
            self._plans[key] = self._apply(default(*key), self.params)
        return self._plans[key]
