"""The worker: a fresh process that imports one contestant and runs its kernel.

Started by :mod:`evaluator.workers` as ``python -m evaluator.worker_entry FD``. Its first stdin line
is the job (JSON); results go to file descriptor FD, signed (:mod:`evaluator.hardening.channel`).
A spare (:mod:`evaluator.workers`) first announces on stdout that its imports are done.

- Hardened (``isolated``): the worker serves the parent's commands (:mod:`evaluator.remote`):
  map the parent's buffers, call the kernel, time a repeat with CUDA events, copy outputs back.
  Everything it needs is built before the kernel is imported, and the sandbox closes just
  before the import (:mod:`evaluator.hardening.sandbox`). It decides nothing: inputs, checks, statistics
  and the results file are the parent's.
- ``--compat``: the contest's arrangement. The worker runs the whole mode beside the kernel
  (:mod:`evaluator.protocol` over a :class:`~evaluator.execution.LocalExecutor`) and sends each
  case's result, as the contest's runner does.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import select
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from evaluator.axes import axes_reply, configure_kernel
from evaluator.contest_modules.utils import set_seed
from evaluator.contestant import Contestant, ContestantError, contest_modules, load_kernel
from evaluator.delivery import deliver, deliver_all
from evaluator.execution import LocalExecutor, profiled
from evaluator.handover import attach
from evaluator.hardening.channel import Writer
from evaluator.hardening.containment import close_other_processes, enter_worker_sandbox
from evaluator.hardening.guards import Hardening
from evaluator.hardening.sandbox.prctl import is_dumpable
from evaluator.measure.clocks import sampler_for
from evaluator.measure.timing import make_timer, synchronize
from evaluator.modes import Mode
from evaluator.protocol import CASE_MODES, Harness, error_text, run_profile
from evaluator.shapes import ShapeSet
from evaluator.workers import ANNOUNCE_ENV, SPARE_READY
from reference.checker import torch_residuals

__all__ = ["main"]

HOT_WAIT_S = 0.05
"""How long a worker on a GPU waits for its next command awake (polling) before it sleeps.

The contest's process is busy between timed repeats (checking, making inputs); a worker that
sleeps on its pipe instead wakes on a cold core, and a host-bound kernel launches slower for it:
20x32, blocked_wy, 33.7 us per call hardened against 26.2 under ``--compat`` (H200,
reports/h200/2026-12-01-host-wake.md). Between repeats the parent takes a few to a few tens of
milliseconds; past this the worker blocks, so an idle worker costs no core. Only on CUDA: on a
CPU run the polling worker takes a core the parent's checks need (same report, "Why only on CUDA")."""


MIRROR_BYTES_PER_ELEMENT = 56
"""Device memory a mirror check needs per input element: five float64 and three float32 temporaries of
the check's size (``reference.checker.torch_residuals``). A worker with less free skips it."""

# Bound before any contestant is imported, as the timer's functions are (evaluator.measure.timing).
_free_device_bytes = torch.cuda.mem_get_info
_check_products = torch_residuals


def _await_command(fd: int, hot_s: float) -> None:
    """Return when ``fd`` has data or ``hot_s`` has passed, polling: the core stays awake."""
    deadline = time.perf_counter() + hot_s
    while time.perf_counter() < deadline:
        if select.select([fd], [], [], 0)[0]:
            return


def _contestant(data: dict[str, str]) -> Contestant:
    return Contestant(data["name"], Path(data["path"]), data["sha256"])


def _builtin_kernel(a: torch.Tensor, busy_cycles: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """What calibration calls: outputs of the right form at no cost (the hand-over alone), after
    keeping the device busy for ``busy_cycles`` clock cycles (the drain's round trip)."""
    if busy_cycles and a.is_cuda:
        torch.cuda._sleep(busy_cycles)
    return a, a[..., 0]


class _Server:
    """The hardened worker's command loop (see the module docstring)."""

    def __init__(self, job: dict[str, Any], out: Writer) -> None:
        self.device = torch.device(job["device"])
        self.timer = make_timer(self.device, drain=True, flush=False)
        self.out = out
        self.scratch = job.get("scratch")
        self.kernel: Any = None
        self.folder = Path(job["contestant"]["path"]).parent
        self.modules = contextlib.ExitStack()
        self.refusals: Callable[[], tuple[str, ...]] = tuple
        self.handed: dict[int, tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]] = {}
        self.mirror_check = bool(job.get("mirror_check"))

    def serve(self, commands: BinaryIO) -> None:
        # The parent asks and waits for each reply, so nothing is left in ``commands``' buffer
        # when the worker waits: the descriptor alone says whether the next command is there.
        hot_s = HOT_WAIT_S if self.device.type == "cuda" else 0.0
        while True:
            _await_command(commands.fileno(), hot_s)
            header = commands.read(4)
            if len(header) < 4:
                return
            message = pickle.loads(commands.read(struct.unpack("<I", header)[0]))  # the parent's own pickle
            if message["op"] == "bye":
                return
            try:
                reply = getattr(self, "_" + message["op"])(message)
            except ContestantError as exc:
                reply = {"event": "error", "message": str(exc)}
            except Exception as exc:  # noqa: BLE001 - the kernel's exception is the parent's to judge
                reply = {"event": "raised", "message": error_text(exc)}
            refused = self.refusals()
            if refused:  # whatever the kernel made of the error it got, the refusal counts
                reply = {"event": "refused", "message": refused[0], "count": len(refused)}
            self.out.send(reply)

    def _load(self, message: dict[str, Any]) -> dict[str, Any]:
        handover = message.get("handover")
        if self.device.type == "cuda":  # the CUDA context opens the device files: before the write boundary
            torch.empty(1, device=self.device)
            if self.mirror_check:  # the check's libraries (cuBLAS) load here, before the boundary and the kernel
                eye = torch.eye(4, device=self.device).expand(1, 4, 4).contiguous()
                _check_products(eye, eye, eye.new_zeros(1, 4))
        self.refusals = enter_worker_sandbox(Path(self.scratch) if self.scratch else None,
                                             Path(handover) if handover else None)
        # Only now, after calibration and behind the sandbox, may the submission's folder shadow
        # a module the worker imports; it stays on the path for the kernel's lazy imports.
        self.modules.enter_context(contest_modules(self.folder))
        self.kernel = load_kernel(_contestant(message["contestant"]))
        return {"event": "loaded"}

    def _axes(self, message: dict[str, Any]) -> dict[str, Any]:
        """The kernel's plan axes, for a sweep (:mod:`evaluator.axes`)."""
        return axes_reply(self.kernel)

    def _configure(self, message: dict[str, Any]) -> dict[str, Any]:
        """Set the kernel's knobs before a sweep's next variant is timed."""
        configure_kernel(self.kernel, message["params"])
        return {"event": "configured"}

    def _hand(self, message: dict[str, Any]) -> dict[str, Any]:
        inputs = [attach(spec) for spec in message["inputs"]]
        outputs = [(attach(h), attach(tau)) for h, tau in message["outputs"]]
        self.handed[message["id"]] = (inputs, outputs)
        return {"event": "handed"}

    def _release(self, message: dict[str, Any]) -> dict[str, Any]:
        self.handed.pop(message["id"], None)
        return {"event": "released"}

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        inputs, outputs = self.handed[message["id"]]
        given = inputs[message["index"]]
        output, table = profiled(lambda: self.kernel(given), message.get("profile", ""))
        form = deliver(output, given, outputs[message["index"]], message["rules"])
        synchronize()
        return {"event": "returned", "form": form, "table": table}

    def _mirror(self, message: dict[str, Any]) -> dict[str, Any]:
        """Check the batch's last outputs again here, the result unused, before the next timed repeat.

        Asked for by a run with ``--mirror-check``. The contest checks each repeat's outputs in the
        kernel's own process; the kernel's next repeat ran 1-3% slower after that work in its
        process than after the same work in the hardened parent's (an H100,
        ``reports/h100/2026-12-07-mirror-check.md``), so the worker repeats the parent's check here,
        outside every timed region and witness. Declined (``ran`` false) off CUDA, where free
        device memory is short of the check's temporaries, or where the check raises."""
        inputs, outputs = self.handed[message["id"]]
        if self.device.type != "cuda":
            return {"event": "mirrored", "ran": False, "why": "not on a GPU"}
        need = MIRROR_BYTES_PER_ELEMENT * sum(a.numel() for a in inputs)
        free = _free_device_bytes(self.device)[0]
        if free < need:
            return {"event": "mirrored", "ran": False,
                    "why": f"{free / 2**30:.1f} GiB of device memory free, the check needs {need / 2**30:.1f} GiB"}
        if len(inputs) > 1 and len({a.shape for a in inputs}) == 1:  # the stack in one check, as the parent's
            stacked = (torch.cat([h for h, _ in outputs]), torch.cat([t for _, t in outputs]))
            inputs, outputs = [torch.cat(inputs)], [stacked]
        try:
            for a, (h, tau) in zip(inputs, outputs, strict=True):
                _check_products(a, h, tau)
            synchronize()
        except RuntimeError as exc:  # whatever the kernel left (its memory, its settings): the run goes on
            return {"event": "mirrored", "ran": False, "why": (str(exc).splitlines() or [type(exc).__name__])[0]}
        return {"event": "mirrored", "ran": True}

    def _timed(self, message: dict[str, Any]) -> dict[str, Any]:
        inputs, outputs = self.handed.get(message["id"], ([], []))
        if message.get("builtin"):
            busy_cycles = int(message.get("busy_cycles", 0))
            kernel = functools.partial(_builtin_kernel, busy_cycles=busy_cycles)
        else:
            kernel = self.kernel
        measurement, results = self.timer.time(lambda: [kernel(t) for t in inputs])
        forms = []
        if message["deliver"]:
            forms = deliver_all(results, inputs, outputs, message["rules"])
            synchronize()
        return {"event": "timed", "elapsed_ns": measurement.elapsed_ns, "tail_ns": measurement.tail_ns,
                "forms": forms}


def _run_in_process(job: dict[str, Any], out: Writer) -> None:
    """The contest's arrangement (``--compat``): the mode runs here, beside the kernel."""
    device = torch.device(job["device"])
    shapes = ShapeSet.from_dict(job["shapes"])
    set_seed(job["secret"] or 42)
    close_other_processes()
    try:
        kernel = load_kernel(_contestant(job["contestant"]))
    except ContestantError as exc:
        out.send({"event": "error", "message": str(exc)})
        return
    executor = LocalExecutor(kernel, make_timer(device, drain=False), rules=False)
    harness = Harness(executor, Hardening.compat(), device=device, q_method="published", sampler=sampler_for(device),
                      progress=lambda event: out.send({"event": "progress", "progress": event}))
    mode = job["mode"]
    if mode == Mode.PROFILE:
        result, table = run_profile(harness, shapes, job["secret"], profiler=job.get("profiler", False))
        out.send({"event": "case", "result": result.to_dict()})
        out.send({"event": "profile", "table": table})
    else:
        for result in CASE_MODES[mode](harness, shapes, job["secret"]):
            out.send({"event": "case", "result": result.to_dict()})
    out.send({"event": "done"})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fd = int(argv[0])
    if os.environ.pop(ANNOUNCE_ENV, None):
        os.write(sys.stdout.fileno(), SPARE_READY + (b"1" if is_dumpable() else b"0") + b"\n")
    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline())
    out = Writer(fd, job.pop("key"))
    out.send({"event": "ready"})
    device = job["device"]
    if device == "cuda" and not torch.cuda.is_available():
        out.send({"event": "error", "message": "--device cuda asked for, but this machine has no CUDA device"})
        return 0
    if job["isolated"]:
        set_seed(job["secret"] or 42)
        _Server(job, out).serve(stdin)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # nothing is left to do: skip tearing torch and the CUDA context down (~0.5 s)
    else:
        with contest_modules(Path(job["contestant"]["path"]).parent):
            _run_in_process(job, out)
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
