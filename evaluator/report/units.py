"""Display units: times are nanoseconds inside qrbench and scaled only here; ratios read as
people say them (``41.6×``, ``1,499× slower``), never as ``0.0006671×``."""

from __future__ import annotations

__all__ = ["format_interval", "format_ns", "format_ratio", "format_s", "ns_unit"]

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


def _three_digits(value: float) -> str:
    """Three significant digits, without an exponent for large values: ``1.00``, ``41.6``, ``1,499``."""
    return f"{value:,.0f}" if value >= 999.5 else f"{value:#.3g}"


def format_ratio(speedup: float | None) -> str:
    """A speedup (baseline time over this time): ``41.6×`` when faster, ``1,499× slower`` below 1."""
    if speedup is None:
        return "-"
    return f"{_three_digits(speedup)}×" if speedup >= 1 else f"{_three_digits(1 / speedup)}× slower"


def format_interval(low: float, high: float) -> str:
    """A speedup's confidence interval, as speedups to three significant digits: ``[0.981, 1.02]``."""
    return f"[{low:#.3g}, {high:#.3g}]"
