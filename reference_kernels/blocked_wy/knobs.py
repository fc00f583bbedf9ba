"""blocked_wy's knobs for ``qrbench sweep`` (evaluator/axes.py): ``Plan`` fields and the trailing
update's tile fields (``UpdateTiles``), laid over each size's ``DEFAULT_PLANS`` entry. The values
are the ones the kernels take (powers of two, tl.dot's 16-row minimum) and earlier sweeps tried.
A combination a size's plan refuses (``fused`` tiles without the tf32x3 update) fails that size's
cases with ``Plan``'s message. Not part of the contest export.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from reference_kernels.blocked_wy.qr import PANELS, UPDATES, Plan, clear_graphs, default_plan
from reference_kernels.knobs import Knobs, Value

__all__ = ["PLAN_AXES", "configure", "configured_plan"]

_ON_OFF = (True, False)
# Axis name -> the UpdateTiles field it sets (``tile_warps``: the panel kernel has warps of its own).
_TILE_FIELDS = {"project_bm": "project_bm", "block_n": "block_n", "subtract_bm": "subtract_bm",
                "tile_warps": "warps", "stages": "stages", "fused": "fused"}

PLAN_AXES: dict[str, tuple[Value, ...]] = {
    "nb": (16, 32, 64, 128, 256),
    "leaf": (4, 8, 16, 32, 64),
    "whole_max": (0, 32, 64, 128),
    "halves": _ON_OFF,
    "update": UPDATES,
    "inner": ("torch", "triton"),
    "one_reduction": _ON_OFF,
    "top_tile": _ON_OFF,
    "two_columns": _ON_OFF,
    "panel_warps": (None, 1, 2, 4, 8, 16),
    "graph": _ON_OFF,
    "trim": _ON_OFF,
    "panel": PANELS,
    "lookahead": _ON_OFF,
    "lookahead_registers": (None, 128, 168),
    "project_bm": (16, 32, 64, 128),
    "block_n": (32, 64, 128),
    "subtract_bm": (32, 64, 128),
    "tile_warps": (None, 2, 4, 8),
    "stages": (2, 3, 4),
    "fused": _ON_OFF,
}


def _apply(plan: Plan, params: Mapping[str, Value]) -> Plan:
    tiles = {_TILE_FIELDS[k]: v for k, v in params.items() if k in _TILE_FIELDS}
    fields = {k: v for k, v in params.items() if k not in _TILE_FIELDS}
    if tiles:
        fields["tiles"] = replace(plan.tiles, **tiles)
    return replace(plan, **fields)


_KNOBS = Knobs(PLAN_AXES, _apply, clear_graphs)
configure = _KNOBS.configure


def configured_plan(n: int) -> Plan | None:
    """The plan for n x n matrices under the knob values set, or None (``qr``'s own choice)."""
    return _KNOBS.plan(default_plan, n)
