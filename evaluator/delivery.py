"""How a kernel's output crosses from the worker to the parent, and what the parent checks.

The worker (:func:`deliver`) copies a well-formed output, a real tuple of two exactly
``torch.Tensor`` values of the expected shapes, dtype and device, into the parent's buffers, and
describes anything else in a small JSON form. The parent (:func:`received`) turns the form back
into what the checker sees: its own buffers, or stand-ins with the same type, shape, dtype and
device, so a malformed output gets the contest's own message. Nothing the worker sends is
unpickled; the checker never runs an object the kernel made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from evaluator.hardening import guards

__all__ = ["deliver", "deliver_all", "received", "snapshot"]

Form = dict[str, Any]


def _describe(value: object, buffer: torch.Tensor) -> tuple[Form, bool]:
    """One item of a pair: (its form, whether it can be copied into ``buffer``)."""
    if type(value) is not torch.Tensor:
        if isinstance(value, torch.Tensor):
            return {"kind": "object", "type": f"{type(value).__module__}.{type(value).__qualname__}"}, False
        return {"kind": "object", "type": type(value).__qualname__}, False
    fits = value.shape == buffer.shape and value.dtype == buffer.dtype and value.device == buffer.device
    if fits:
        return {"kind": "buffer"}, True
    return {"kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype), "device": str(value.device)}, False


def _form(output: object, handed: torch.Tensor, buffers: Sequence[torch.Tensor], rules: bool,
          copies: list[tuple[torch.Tensor, torch.Tensor]]) -> Form:
    problem = guards.output_type_problem(output) if rules else None
    plain = guards.plain_output(output)
    if not isinstance(plain, tuple) or len(plain) != 2:
        return {"pair": False, "problem": problem}
    if rules and problem is None:
        problem = guards.aliasing_problem((handed,), plain)
    items = []
    for value, buffer in zip(plain, buffers, strict=True):
        form, fits = _describe(value, buffer)
        if fits:
            copies.append((buffer, value))
        items.append(form)
    return {"pair": True, "items": items, "problem": problem}


def deliver_all(outputs: Sequence[object], handed: Sequence[torch.Tensor],
                buffers: Sequence[Sequence[torch.Tensor]], rules: bool) -> list[Form]:
    """Worker side: copy each output into its ``buffers`` (H, tau) where it fits, all in one
    multi-tensor copy; return the forms. With ``rules``, the output rules judged where the
    kernel's objects live (exact-tensor, no-alias) are recorded in each form's ``problem``.
    The copy is queued on the current stream; the caller synchronizes before it reports."""
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []
    forms = [_form(o, t, b, rules, copies) for o, t, b in zip(outputs, handed, buffers, strict=True)]
    if copies:
        torch._foreach_copy_([dst for dst, _ in copies], [src for _, src in copies])
    return forms


def deliver(output: object, handed: torch.Tensor, buffers: Sequence[torch.Tensor], rules: bool) -> Form:
    """:func:`deliver_all` for one output."""
    return deliver_all([output], [handed], [buffers], rules)[0]


def _stand_in(form: Form) -> object:
    if form["kind"] == "object":
        return object()
    dtype = getattr(torch, str(form["dtype"]).removeprefix("torch."), torch.float64)
    try:
        device = torch.device(form["device"])
        base = torch.zeros((), dtype=dtype, device=device)
    except (RuntimeError, TypeError, ValueError):
        base = torch.zeros((), dtype=dtype, device="meta")
    return base.expand([int(s) for s in form["shape"]])


def received(form: Form, buffers: Sequence[torch.Tensor]) -> tuple[object, str | None]:
    """Parent side: (what the checker sees, the rule the kernel broke where it ran, or None)."""
    problem = form.get("problem")
    if not form.get("pair"):
        return [], problem  # not a tuple: the checker says so in the contest's words
    items = form.get("items", [])
    if len(items) != 2:
        raise ValueError("malformed output form")
    output = tuple(buffer if item.get("kind") == "buffer" else _stand_in(item)
                   for item, buffer in zip(items, buffers, strict=True))
    return output, problem if isinstance(problem, str) or problem is None else str(problem)


def snapshot(output: object) -> object:
    """A copy of a plain output's tensors, to compare the output with later (rule ``settled``)."""
    if type(output) is not tuple:
        return output
    return tuple(torch.Tensor.clone(v) if type(v) is torch.Tensor else v for v in output)
