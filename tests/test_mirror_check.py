"""Before a checked timed repeat the hardened worker repeats the parent's check in its own process
(a mirror check): outside the witness, only where outputs are checked, and leaving every buffer as it was."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from evaluator import worker
from evaluator.cli import main as qrbench
from evaluator.contestant import resolve_contestant
from evaluator.handover import HandoverArena
from evaluator.measure.ledger import Ledger
from evaluator.remote import RemoteExecutor
from evaluator.report.tables import timing_label
from evaluator.results import RunResult
from evaluator.runner import RunOptions, run_contestant
from evaluator.shapes import load_shapes
from reference import generate_input
from reference.checker import torch_residuals

CPU = torch.device("cpu")
TESTS = Path(__file__).parent
PAIR = {"pair": True, "items": [{"kind": "buffer"}, {"kind": "buffer"}], "problem": None}
MIRROR_NS = 7_000_000
REPEAT_NS = 1_000_000


class _RecordingWorker:
    """A worker link that records the commands it is sent; a mirror check takes 7 ms and a timed
    repeat 1 ms of the clock the executor and its ledger read."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self.now = 0
        self.proc = SimpleNamespace(pid=os.getpid())

    def clock(self) -> int:
        return self.now

    def seconds(self) -> float:
        return self.now / 1e9

    def ask(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        self.ops.append(message["op"])
        reply: dict[str, Any] = {"event": expect, "elapsed_ns": 0.0, "tail_ns": 0.0}
        if message["op"] == "mirror":
            self.now += MIRROR_NS
            reply["ran"] = True
        elif message["op"] == "timed":
            self.now += REPEAT_NS
            if message["deliver"] and not message["builtin"]:
                reply["forms"] = [PAIR]
        return reply


def _one_repeat(mirror: bool, deliver: bool) -> tuple[RemoteExecutor, list[str], float]:
    """An executor on a scripted worker, calibrated and handed one input: the commands one timed
    repeat sends, and that repeat's witness."""
    link = _RecordingWorker()
    executor = RemoteExecutor(link, CPU, HandoverArena(CPU), rules=True, clock=link.clock,  # type: ignore[arg-type]
                              ledger=Ledger(clock=link.seconds), mirror=mirror)
    executor.calibrate()
    handed = executor.hand([torch.zeros(2, 4, 4)])
    link.ops.clear()
    measurement, outputs = executor.timed(handed, lambda: None, deliver=deliver)
    assert len(outputs) == (1 if deliver else 0)
    return executor, link.ops, measurement.witness_ns


def test_a_checked_repeat_is_mirror_checked_first_and_outside_the_witness() -> None:
    executor, ops, witness_ns = _one_repeat(mirror=True, deliver=True)
    assert ops == ["mirror", "timed"]
    assert witness_ns == REPEAT_NS  # the mirror check's 7 ms are not the repeat's
    assert executor.ledger.seconds["mirror_check"] == pytest.approx(MIRROR_NS / 1e9)


def test_an_unchecked_repeat_gets_no_mirror_check() -> None:
    """The contest's warm-up passes check nothing between repeats: nothing to repeat there."""
    executor, ops, _ = _one_repeat(mirror=True, deliver=False)
    assert ops == ["timed"]
    assert executor.ledger.seconds["mirror_check"] == 0.0


def test_no_mirror_check_unless_asked() -> None:
    _, ops, _ = _one_repeat(mirror=False, deliver=True)
    assert ops == ["timed"]


def _server(device: str) -> worker._Server:
    job = {"device": device, "contestant": {"path": str(worker.__file__)}, "mirror_check": True}
    return worker._Server(job, out=None)  # type: ignore[arg-type]


def _handed(device: str, count: int = 1) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
    inputs = [generate_input(3, 40, 2, 8 + i, device=device) for i in range(count)]
    outputs = [(h.contiguous(), tau) for h, tau in map(torch.geqrf, inputs)]
    return inputs, outputs


def test_a_cpu_worker_runs_no_mirror_check() -> None:
    server = _server("cpu")
    server.handed[0] = _handed("cpu")
    assert server._mirror({"id": 0}) == {"event": "mirrored", "ran": False, "why": "not on a GPU"}


def test_the_mirror_checks_products_leave_inputs_and_outputs_as_they_were() -> None:
    """The parent compares outputs with copies it took at the report (rule ``settled``), and the
    next repeat's input buffers are rewritten anyway: a mirror check must write neither."""
    inputs, outputs = _handed("cpu")
    before = [t.clone() for t in (inputs[0], *outputs[0])]
    norms = torch_residuals(inputs[0], *outputs[0])
    assert all(torch.isfinite(x).all() for x in norms if x is not None)
    for kept, now in zip(before, (inputs[0], *outputs[0]), strict=True):
        assert torch.equal(kept, now)


@pytest.mark.gpu
@pytest.mark.parametrize("count", [1, 3])
def test_a_gpu_worker_mirror_checks_with_its_buffers_unchanged(count: int) -> None:
    """One input, or several (checked as one stack, as the parent checks them)."""
    server = _server("cuda")
    inputs, outputs = _handed("cuda", count)
    buffers = [*inputs, *(t for pair in outputs for t in pair)]
    before = [t.clone() for t in buffers]
    server.handed[0] = (inputs, outputs)
    assert server._mirror({"id": 0}) == {"event": "mirrored", "ran": True}
    for kept, now in zip(before, buffers, strict=True):
        assert torch.equal(kept, now)


@pytest.mark.gpu
def test_a_gpu_worker_without_room_for_the_check_skips_it(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server("cuda")
    server.handed[0] = _handed("cuda")
    monkeypatch.setattr(worker, "_free_device_bytes", lambda device: (1024, 1 << 40))
    reply = server._mirror({"id": 0})
    assert reply["ran"] is False
    assert reply["why"].startswith("0.0 GiB of device memory free")


def test_a_run_asks_its_worker_for_mirror_checks_and_says_so() -> None:
    """End to end on the CPU, where the worker declines each one: the command reaches the real
    worker before every checked repeat (the ledger's round trips), the run passes, its results
    record that it asked, and the decline is told once, with the worker's reason."""
    with pytest.warns(RuntimeWarning, match=r"declined a mirror check \(not on a GPU\)") as declined:
        run = run_contestant(resolve_contestant("geqrf"), "benchmark", load_shapes(TESTS / "shapes_tiny.yaml"),
                             RunOptions(device="cpu", precheck=False, mirror_check=True))
    assert len([w for w in declined if "mirror check" in str(w.message)]) == 1
    assert run.passed, run.reason
    assert run.mirror_check
    assert run.stages[0].breakdown_s["mirror_check"] > 0
    assert RunResult.from_dict(run.to_dict()).mirror_check
    assert timing_label(run).endswith("hardened protocol with mirror checks")
    plain = run.to_dict()
    del plain["mirror_check"]  # a file written before the option
    assert not RunResult.from_dict(plain).mirror_check


def test_mirror_checks_are_refused_under_the_contests_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="mirror_check"):
        RunOptions(device="cpu", compat=True, mirror_check=True)
    assert qrbench(["benchmark", "geqrf", "--device", "cpu", "--compat", "--mirror-check"]) == 2
    assert "--mirror-check cannot be used with --compat" in capsys.readouterr().err
