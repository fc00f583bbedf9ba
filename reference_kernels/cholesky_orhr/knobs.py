"""cholesky_orhr's knobs for ``qrbench sweep`` (evaluator/axes.py): ``Plan`` fields laid over
``default_plan``, with the values earlier sweeps tried (docs/kernel-log.md §C2). Not part of the
contest export.
"""

from __future__ import annotations

from dataclasses import replace

from reference_kernels.cholesky_orhr.kernels import MAX_WHOLE
from reference_kernels.cholesky_orhr.plan import Plan, default_plan
from reference_kernels.cholesky_orhr.qr import clear_graphs
from reference_kernels.knobs import Knobs, Value

__all__ = ["PLAN_AXES", "configure", "configured_plan"]

PLAN_AXES: dict[str, tuple[Value, ...]] = {
    "leaf": (32, 64),
    "block": (128, 256, 512),
    "whole_max": (0, MAX_WHOLE),
    "graph": (True, False),
    "second_pass_min": (1, 8, 32, 128, 512),
}

_KNOBS: Knobs[Plan] = Knobs(PLAN_AXES, lambda plan, params: replace(plan, **params), clear_graphs)
configure = _KNOBS.configure


def configured_plan(batch: int, n: int) -> Plan | None:
    """The plan for a batch of n x n matrices under the knob values set, or None (``qr``'s own)."""
    return _KNOBS.plan(default_plan, batch, n)
