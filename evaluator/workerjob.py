"""The job a worker is given, as data: who runs, in which mode, on which cases.

Cases travel in the job itself, never as a path: a file the worker would read is a file a kernel
could rewrite between stages, and the parent judges every case by its own copy anyway.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from evaluator.shapes import Case, ShapeSet, Timing

__all__ = ["shapes_from_dict", "shapes_to_dict"]


def shapes_to_dict(shapes: ShapeSet) -> dict[str, Any]:
    """A shape set as plain JSON data (its timing included)."""
    return {
        "name": shapes.name,
        "path": str(shapes.path),
        "tests": [case.fields() for case in shapes.tests],
        "benchmarks": [case.fields() for case in shapes.benchmarks],
        "timeouts_s": dict(shapes.timeouts_s),
        "timing": asdict(shapes.timing),
        "description": shapes.description,
    }


def _case(fields: dict[str, Any]) -> Case:
    return Case(int(fields["batch"]), int(fields["n"]), int(fields["cond"]), int(fields["seed"]), fields.get("case"))


def shapes_from_dict(data: dict[str, Any]) -> ShapeSet:
    """The inverse of :func:`shapes_to_dict`."""
    return ShapeSet(
        name=data["name"],
        path=Path(data["path"]),
        tests=tuple(_case(c) for c in data["tests"]),
        benchmarks=tuple(_case(c) for c in data["benchmarks"]),
        timeouts_s={k: float(v) for k, v in data["timeouts_s"].items()},
        timing=Timing(**data["timing"]),
        description=data.get("description", ""),
    )
