"""Display units: times are nanoseconds inside qrbench and scaled only here."""

from __future__ import annotations

__all__ = ["format_ns", "format_s", "ns_unit"]

_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3))


def ns_unit(ns: float) -> tuple[str, float]:
    """The unit a time in ns reads best in, and its size in ns: ``2.5e6`` -> ``("ms", 1e6)``."""
    for unit, scale in _UNITS:
        if abs(ns) >= scale:
            return unit, scale
    return "ns", 1.0


def format_ns(ns: float | None) -> str:
    """``1234567`` -> ``1.235 ms``; None -> ``-``."""
    if ns is None:
        return "-"
    unit, scale = ns_unit(ns)
    return f"{ns / scale:.4g} {unit}"


def format_s(seconds: float | None) -> str:
    return format_ns(None if seconds is None else seconds * 1e9)
