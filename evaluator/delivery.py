"""How a kernel's output crosses from the worker to the parent, and what the parent checks.

The worker (:func:`deliver`) copies a well-formed output, a real tuple of two exactly
``torch.Tensor`` values of the expected shapes, dtype and device, into the parent's buffers, and
describes anything else in a small JSON form. The parent (:func:`received`) turns the form back
into what the checker sees: its own buffers, or stand-ins with the same type, shape, dtype and
device, so a malformed output gets the contest's own message. Nothing the worker sends is
unpickled; the checker never runs an object the kernel made.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from evaluator.hardening import guards

__all__ = ["deliver", "deliver_all", "joined", "received", "snapshot", "snapshot_all"]

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


def _stackable(outputs: Sequence[object]) -> bool:
    """Whether every output is a pair of exactly ``torch.Tensor`` of one dtype and device, each
    position's tensors alike in all but their first dimension (so they stack along it)."""
    if not outputs or any(type(o) is not tuple or len(o) != 2 or any(type(v) is not torch.Tensor for v in o)
                          for o in outputs):
        return False
    kind = (outputs[0][0].dtype, outputs[0][0].device)  # type: ignore[index]
    for position in (0, 1):
        first = outputs[0][position]  # type: ignore[index]
        if first.dim() == 0 or any((v.dtype, v.device, v.dim(), v.shape[1:]) != (*kind, first.dim(), first.shape[1:])
                                   for v in (o[position] for o in outputs)):  # type: ignore[index]
            return False
    return True


def snapshot_all(outputs: Sequence[object]) -> list[object]:
    """:func:`snapshot` of each of a repeat's outputs. Where they stack (the usual case: every
    output an (H, tau) pair of one shape), the copies are two concatenations into one buffer, every
    H then every tau, instead of two copies per output (50 outputs at 20x32); each output's copy is
    a view of that buffer, so :func:`joined` gives stacked copies back without copying again."""
    if len(outputs) < 2 or not _stackable(outputs):
        return [snapshot(o) for o in outputs]
    columns = [[o[position] for o in outputs] for position in (0, 1)]  # type: ignore[index]
    sizes = [sum(v.numel() for v in column) for column in columns]
    first = columns[0][0]
    buffer = torch.empty(sum(sizes), dtype=first.dtype, device=first.device)
    parts = []
    for column, stacked in zip(columns, buffer.split(sizes), strict=True):
        stacked = stacked.view(sum(v.shape[0] for v in column), *column[0].shape[1:])
        torch.cat(column, out=stacked)
        parts.append(stacked.split([v.shape[0] for v in column]))
    return list(zip(*parts, strict=True))


def joined(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)``, without the copy where the parts already lie back to back, in order, in
    one contiguous tensor (the views :func:`snapshot_all` makes, or a batch made at once and
    chunked): a view of that memory in the concatenation's shape."""
    first, base = parts[0], parts[0]._base
    if (base is not None and base.is_contiguous() and all(p._base is base and p.is_contiguous() for p in parts)
            and all(p.shape[1:] == first.shape[1:] for p in parts)
            and all(p.data_ptr() == q.data_ptr() + q.nbytes for q, p in itertools.pairwise(parts))):
        start = (first.data_ptr() - base.data_ptr()) // first.element_size()
        count = sum(p.numel() for p in parts)
        if start >= 0 and start + count <= base.numel():
            return base.view(-1)[start:start + count].view(sum(p.shape[0] for p in parts), *first.shape[1:])
    return torch.cat(list(parts))
