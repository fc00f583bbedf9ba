"""Numerical margin: how far under each of the checker's gates a kernel's worst residual stays.

The checker (reference/checker.py) passes an output whose scaled factor residual is at most 20
and whose scaled orthogonality residual is at most 100, in units of n·eps. A kernel whose worst
residual is 15 passes as one at 0.5 does, yet another input may push it over: its margin,
gate / worst residual, says how much room is left. Every case records its worst residual over
all its checks as a fraction of each gate (``margin`` in the results), and a run warns when a
passing kernel's margin on either gate is under a factor (``--margin-warn``, default 4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reference.checker import FACTOR_RTOL_FACTOR, ORTH_RTOL_FACTOR

__all__ = ["DEFAULT_MARGIN_WARN", "GATES", "Margin", "case_margins", "format_margin", "gate_fractions",
           "least", "margin_warning", "tightest"]

#: Gate name -> (the checker's diagnostic holding the scaled residual, the gate in n·eps).
GATES: dict[str, tuple[str, float]] = {
    "factor": ("scaled_factor_residual", FACTOR_RTOL_FACTOR),
    "orthogonality": ("scaled_orthogonality_residual", ORTH_RTOL_FACTOR),
}
DEFAULT_MARGIN_WARN = 4.0


@dataclass(frozen=True)
class Margin:
    """A worst residual against its gate (both in n·eps), and where it was seen."""

    gate: str
    residual: float
    limit: float
    where: str = ""

    @property
    def fraction(self) -> float:
        """The residual as a fraction of the gate: under 1 passes."""
        return self.residual / self.limit

    @property
    def factor(self) -> float:
        """Gate / residual: how many times over the residual could grow and still pass (inf at 0)."""
        return self.limit / self.residual if self.residual > 0 else math.inf


def case_margins(diagnostics: Mapping[str, float | int], where: str = "") -> list[Margin]:
    """One margin per gate whose residual the checker's diagnostics hold."""
    return [Margin(gate, float(diagnostics[key]), limit, where)
            for gate, (key, limit) in GATES.items() if key in diagnostics]


def gate_fractions(diagnostics: Mapping[str, float | int]) -> dict[str, float]:
    """Worst residual / gate for each gate the diagnostics hold (``margin`` in a case's JSON)."""
    return {m.gate: m.fraction for m in case_margins(diagnostics)}


def tightest(margins: Iterable[Margin]) -> dict[str, Margin]:
    """Per gate, the smallest of these margins (the first, on a tie); gates absent from them are absent."""
    out: dict[str, Margin] = {}
    for m in margins:
        if m.gate not in out or m.residual > out[m.gate].residual:
            out[m.gate] = m
    return out


def least(margins: Mapping[str, Margin]) -> Margin | None:
    """The gate with the least room (smallest factor), or None when there is none."""
    return min(margins.values(), key=lambda m: m.factor, default=None)


def format_margin(m: Margin) -> str:
    """``2.50×``, ``200×``, ``1,250×`` (three significant digits, no exponent), ``∞`` for a zero residual."""
    if math.isinf(m.factor):
        return "∞"
    return f"{m.factor:,.0f}×" if m.factor >= 999.5 else f"{m.factor:#.3g}".rstrip(".") + "×"


def margin_warning(margins: Mapping[str, Margin], warn_below: float) -> str | None:
    """What a run warns of when a gate's margin is under ``warn_below``; None when none is."""
    under = [m for m in margins.values() if m.factor < warn_below]
    if not under:
        return None
    parts = [f"{m.gate} residual {m.residual:.3g} n·eps ({m.where}) is only {format_margin(m)} under its gate of "
             f"{m.limit:g}" for m in under]
    return f"numerical margin under {warn_below:g}×: {'; '.join(parts)}"
