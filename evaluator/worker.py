"""The worker: a fresh process that loads one contestant and runs one stage of one mode.

Started by :mod:`evaluator.runner` as ``python -m evaluator.worker FD``; reads its job (one JSON
line) from stdin, streams signed results to file descriptor FD (:mod:`evaluator.channel`).
Timing and checking code is imported before the contestant is, so the functions they bind
are the originals whatever the kernel does later (:mod:`evaluator.timing`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from evaluator.channel import Writer
from evaluator.compat.utils import set_seed
from evaluator.contestant import Contestant, ContestantError, contest_modules, load_kernel
from evaluator.environment import fingerprint
from evaluator.guards import Hardening, PhysicalFloor
from evaluator.protocol import Harness, run_benchmark, run_leaderboard, run_profile, run_test
from evaluator.shapes import load_shapes
from evaluator.timing import make_timer
from evaluator.tripwire import Tripwire

__all__ = ["main"]

_MODES = {"test": run_test, "benchmark": run_benchmark, "leaderboard": run_leaderboard}


def _run(job: dict[str, Any], out: Writer) -> None:
    device = torch.device(job["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        out.send({"event": "error", "message": "--device cuda asked for, but this machine has no CUDA device"})
        return
    hardening = Hardening.compat() if job["compat"] else Hardening()
    shapes = load_shapes(Path(job["shapes_path"]))
    shapes = replace(shapes, timing=replace(shapes.timing, **job["timing"]))
    set_seed(job["secret"] or 42)
    floor = PhysicalFloor.measure(device) if device.type == "cuda" and hardening.physical_floor else None
    out.send({"event": "hello", "environment": fingerprint(device),
              "floor": None if floor is None else {"bytes_per_s": floor.bytes_per_s, "flops_per_s": floor.flops_per_s}})

    contestant = Contestant(job["contestant"]["name"], Path(job["contestant"]["path"]), job["contestant"]["sha256"])
    with contest_modules(contestant.path.parent):
        tripwire = Tripwire() if hardening.tamper else None  # before the kernel's import-time code runs
        try:
            kernel = load_kernel(contestant)
        except ContestantError as exc:
            out.send({"event": "error", "message": str(exc)})
            return
        harness = Harness(
            kernel=kernel,
            timer=make_timer(device, drain=hardening.device_drain),
            hardening=hardening,
            q_method="published" if job["compat"] else "auto",
            floor=floor,
            progress=lambda event: out.send({"event": "progress", "progress": event}),
            tripwire=tripwire,
        )
        mode = job["mode"]
        if mode == "profile":
            result, table = run_profile(harness, shapes, job["secret"], profiler=job.get("profiler", False))
            out.send({"event": "case", "result": result.to_dict()})
            out.send({"event": "profile", "table": table})
        else:
            for result in _MODES[mode](harness, shapes, job["secret"]):
                out.send({"event": "case", "result": result.to_dict()})
    out.send({"event": "done"})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fd = int(argv[0])
    job = json.loads(sys.stdin.readline())
    sys.stdin.close()
    out = Writer(fd, job.pop("key"))
    _run(job, out)
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
