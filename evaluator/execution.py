"""Where the kernel runs, as the run modes see it: an :class:`Executor`.

The modes (:mod:`evaluator.protocol`) make inputs, decide, check and score; an executor only
hands inputs to the kernel, runs its calls (timed or not) and hands back what it returned.

- :class:`LocalExecutor` calls the kernel in this process: the contest's own arrangement, used by
  ``--compat`` workers (which run the whole protocol next to the kernel, as the contest does) and
  by in-process tests.
- :class:`evaluator.remote.RemoteExecutor` drives a worker process that holds nothing but the
  kernel: the hardened default, where the parent decides every verdict and time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

from evaluator.hardening import guards
from evaluator.measure.timing import Measurement, Timer, synchronize

__all__ = ["Executor", "Handed", "KernelError", "LocalExecutor", "Profile", "Returned", "WorkerGone", "profiled"]

Kernel = Callable[[torch.Tensor], object]
#: How a profile-mode call runs: plain, inside NVTX ranges, or also under the torch profiler.
Profile = Literal["", "nvtx", "profiler"]
_clone = torch.Tensor.clone


class KernelError(Exception):
    """The kernel raised where it ran; the message is its type, text and innermost frames."""


class WorkerGone(BaseException):
    """The worker died, hung past the stage's limit or broke the result channel: the stage
    ends here with ``status`` and ``reason`` (not caught as one case's error)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Handed:
    """Inputs handed to the kernel: ``tensors`` are the evaluator's view of that memory (what it
    writes fresh content into and compares afterwards)."""

    tensors: list[torch.Tensor]
    token: object = None


@dataclass
class Returned:
    """One call's result as the evaluator sees it: ``output`` is what the checker gets (plain
    tensors over the output's memory, or stand-ins for a malformed output), ``problem`` an output
    rule broken where the kernel ran, ``table`` a profiler table where one was asked for, and
    ``snapshot`` a copy taken the moment the output was reported, where the executor takes one."""

    output: object
    problem: str | None = None
    table: str = ""
    snapshot: object = field(default=None, repr=False)


class Executor(Protocol):
    #: How times from this executor are labelled ("cuda-events" or "cpu-clock").
    timer_kind: str

    def hand(self, tensors: Sequence[torch.Tensor]) -> Handed:
        """Memory the kernel will be given, holding a copy of ``tensors``' content."""
        ...

    def call(self, handed: Handed, index: int, profile: Profile = "") -> Returned:
        """One untimed call on input ``index`` (profile mode: see :func:`profiled`)."""
        ...

    def timed(self, handed: Handed, install: Callable[[], None], deliver: bool) -> tuple[Measurement, list[Returned]]:
        """One timed repeat: ``install()`` writes its fresh content, then one call per input in
        order. Without ``deliver`` the outputs are not looked at (warm-up passes)."""
        ...

    def release(self, handed: Handed) -> None:
        ...


class LocalExecutor:
    """Calls the kernel in this process (``rules`` judges exact-tensor and no-alias here)."""

    def __init__(self, kernel: Kernel, timer: Timer, rules: bool) -> None:
        self.kernel = kernel
        self.timer = timer
        self.timer_kind = timer.kind
        self.rules = rules

    def hand(self, tensors: Sequence[torch.Tensor]) -> Handed:
        return Handed([_clone(t) for t in tensors])

    def _returned(self, output: object, given: torch.Tensor) -> Returned:
        if not self.rules:
            return Returned(output)
        problem = guards.output_type_problem(output)
        plain = guards.plain_output(output)
        problem = problem or guards.aliasing_problem((given,), plain)
        return Returned(plain, problem)

    def call(self, handed: Handed, index: int, profile: Profile = "") -> Returned:
        given = handed.tensors[index]
        output, table = profiled(lambda: self.kernel(given), profile)
        returned = self._returned(output, given)
        returned.table = table
        return returned

    def timed(self, handed: Handed, install: Callable[[], None], deliver: bool) -> tuple[Measurement, list[Returned]]:
        install()
        measurement, outputs = self.timer.time(lambda: [self.kernel(t) for t in handed.tensors])
        if not deliver:
            return measurement, []
        return measurement, [self._returned(o, t) for o, t in zip(outputs, handed.tensors, strict=True)]

    def release(self, handed: Handed) -> None:
        handed.tensors.clear()


def profiled(call: Callable[[], object], profile: Profile) -> tuple[object, str]:
    """Run ``call`` and wait for the device; in profile mode inside an NVTX range, and with
    ``"profiler"`` (CUDA) under the torch profiler, whose per-kernel table is returned."""
    cuda = torch.cuda.is_available()
    nvtx = torch.cuda.nvtx.range("custom_kernel") if profile and cuda else nullcontext()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    profiling = torch.profiler.profile(activities=activities) if profile == "profiler" and cuda else nullcontext()
    with profiling as prof, nvtx:
        output = call()
        synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25) if prof is not None else ""
    return output, table
