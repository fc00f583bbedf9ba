"""Display units: times are nanoseconds inside qrbench and scaled only here."""

from __future__ import annotations

__all__ = ["format_ns", "format_s"]


def format_ns(ns: float | None) -> str:
    """``1234567`` -> ``1.235 ms``; None -> ``-``."""
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.4g} {unit}"
    return f"{ns:.4g} ns"


def format_s(seconds: float | None) -> str:
    return format_ns(None if seconds is None else seconds * 1e9)
