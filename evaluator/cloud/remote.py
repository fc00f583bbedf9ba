"""The body of a cloud job: unpack the request, run it with the local runner, return the run.

The Modal function is a one-line wrapper around :func:`execute`, and ``--local`` calls it in this
process, so both run exactly this code. :func:`evaluator.runner.run_contestant` spawns the worker
inside the container, so the time limits, isolation and hardening of a local run hold remotely.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from evaluator.cloud.jobs import RunRequest
from evaluator.contestant import Contestant
from evaluator.runner import run_contestant
from evaluator.shapes import ShapeSet

__all__ = ["execute"]


def _write(root: Path, relative: str, data: bytes) -> Path:
    """Write one shipped file under ``root``; a path that would leave ``root`` is refused."""
    target = (root / relative).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ValueError(f"shipped file {relative!r} points outside its folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def execute(request: RunRequest) -> dict[str, Any]:
    """Run the request's stages and return the RunResult as a dict, recorded under the local
    contestant (the temporary copy means nothing to the caller) and the shape set's local path."""
    with tempfile.TemporaryDirectory(prefix="qrbench-job-") as tmp:
        root = Path(tmp)
        for relative, data in request.files.items():
            _write(root / "contestant", relative, data)
        contestant = Contestant(request.contestant["name"], root / "contestant" / request.entry,
                                request.contestant["sha256"])
        run = run_contestant(contestant, request.mode, ShapeSet.from_dict(request.shapes), request.options,
                             stages=request.stages)
    run = replace(run, contestant=dict(request.contestant), environment={**request.provenance, **run.environment})
    return run.to_dict()
