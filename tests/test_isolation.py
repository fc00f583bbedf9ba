"""The parent-decides machinery: handed-over memory, output delivery, the compat collector.

The exploits that this machinery answers are in tests/test_exploits.py; these tests pin the
pieces: that memory the parent hands over is the memory the worker maps, that a malformed output
crossing back reaches the checker with the contest's own message, and that a worker which
reports a spec it was not given breaks the result channel.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import reference.inputs
from evaluator.contestant import resolve_contestant
from evaluator.delivery import deliver, received
from evaluator.handover import HandoverArena, _allocator_settings, _ipc_segments, _set_allocator_settings
from evaluator.hardening.channel import ChannelError
from evaluator.hardening.containment import alone
from evaluator.measure.witness import ParentClock
from evaluator.results import CaseResult
from evaluator.runner import RunOptions, StagePlan, _Collector, run_contestant
from evaluator.shapes import Case, ShapeSet, load_shapes
from evaluator.worker import _await_command
from reference.checker import verdict
from reference.inputs import generate_input

pytestmark = pytest.mark.alone  # the parent's handed-over memory and its worker processes (tests/machine_share.py)

CASE = Case(2, 8, 1, 3)
A = generate_input(**CASE.generator_args(), device="cpu")  # the buffers below are the CPU's


def test_handed_over_memory_is_the_memory_the_worker_maps() -> None:
    arena = HandoverArena(torch.device("cpu"))
    try:
        tensor, spec = arena.new((2, 3, 3))
        tensor.copy_(torch.arange(18.0).view(2, 3, 3))
        child = textwrap.dedent("""
            import pickle, sys
            from evaluator.handover import attach
            t = attach(pickle.loads(sys.stdin.buffer.read()))
            print(float(t.sum()))
            t.mul_(2)
        """)
        done = subprocess.run([sys.executable, "-c", child], input=pickle.dumps(spec), capture_output=True,
                              check=True)
        assert float(done.stdout) == float(torch.arange(18.0).sum())
        assert torch.equal(tensor, 2 * torch.arange(18.0).view(2, 3, 3))  # the child's write is ours to see
        assert tensor.storage_offset() == 0  # a storage of its own, as the contest's tensors are
    finally:
        arena.close()


@contextlib.contextmanager
def _allocator_setting(setting: str) -> Iterator[None]:
    """PyTorch's allocator under ``setting``, as a user could have set it; the suite's own after."""
    saved = _allocator_settings()
    _set_allocator_settings(setting)
    try:
        yield
    finally:
        _set_allocator_settings(saved or "expandable_segments:False")


@pytest.mark.skipif(not hasattr(torch._C, "_accelerator_getAllocatorSettings"),
                    reason="this torch cannot read its allocator settings back (the GPU test below maps a "
                           "buffer made under an expandable setting)")
@pytest.mark.parametrize("setting", ["expandable_segments:True", "expandable_segments:False"])
def test_handed_over_segments_are_never_expandable_and_the_users_setting_comes_back(setting: str) -> None:
    """Expandable segments cross by ``pidfd_getfd``, which a worker without CAP_SYS_PTRACE is refused."""
    with _allocator_setting(setting):
        with _ipc_segments():
            assert "expandable_segments:False" in _allocator_settings()
        assert setting in _allocator_settings()


@pytest.mark.gpu
def test_a_worker_without_the_ptrace_capability_maps_cuda_buffers_under_an_expandable_setting() -> None:
    """What a hardened CUDA worker does: drop the capability, then map the parent's buffer."""
    with _allocator_setting("expandable_segments:True"):
        arena = HandoverArena(torch.device("cuda"))
        tensor, spec = arena.new((2, 3, 3))
    tensor.copy_(torch.arange(18.0, device="cuda").view(2, 3, 3))
    torch.cuda.synchronize()
    child = textwrap.dedent("""
        import pickle, sys
        from evaluator.hardening.containment import close_other_processes
        close_other_processes()
        from evaluator.handover import attach
        t = attach(pickle.loads(sys.stdin.buffer.read()))
        print(float(t.sum()))
    """)
    done = subprocess.run([sys.executable, "-c", child], input=pickle.dumps(spec), capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert float(done.stdout) == float(torch.arange(18.0).sum())


def _buffers() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(2, 8, 8), torch.zeros(2, 8)


@pytest.mark.parametrize("make", [
    lambda a: [*torch.geqrf(a)],                                   # a list, not a tuple
    lambda a: torch.geqrf(a)[0],                                   # one tensor
    lambda a: (torch.geqrf(a)[0].double(), torch.geqrf(a)[1]),     # wrong dtype
    lambda a: (torch.geqrf(a)[0][:1], torch.geqrf(a)[1]),          # wrong shape
    lambda a: (torch.geqrf(a)[0], None),                           # not a tensor
    lambda a: (torch.full_like(a, float("nan")), torch.zeros(2, 8)),  # right form, not finite
    lambda a: (torch.geqrf(a)[0], torch.geqrf(a)[1][:, :4]),        # H fine, tau's shape wrong
    lambda a: torch.geqrf(a),                                      # right
])
def test_a_delivered_output_gets_the_checkers_own_verdict(make) -> None:
    """What crosses back is a form and the parent's buffers, never the kernel's object; the
    checker's verdict on it is the one it gives the object itself."""
    output = make(A)
    buffers = _buffers()
    form = deliver(output, A, buffers, rules=True)
    seen, problem = received(form, buffers)
    assert problem is None
    assert verdict(A, seen).as_tuple() == verdict(A, output).as_tuple()


def test_the_output_rules_are_judged_where_the_kernel_ran() -> None:
    buffers = _buffers()
    tau = torch.geqrf(A)[1]
    assert received(deliver((A, tau), A, buffers, rules=True), buffers)[1].startswith("[rule no-alias]")
    assert received(deliver((A, tau), A, buffers, rules=False), buffers)[1] is None


def _shapes() -> ShapeSet:
    return ShapeSet("tiny", Path("tiny.yaml"), (CASE,), (CASE,), {"test": 10.0})


def test_a_compat_worker_that_reports_another_spec_breaks_the_channel() -> None:
    collector = _Collector(StagePlan("test", "test", None), _shapes())
    honest = CaseResult(0, CASE, "pass").to_dict()
    collector.take({"event": "case", "result": honest})
    assert collector.cases[0].case == CASE
    other = _Collector(StagePlan("test", "test", None), _shapes())
    with pytest.raises(ChannelError, match="spec it was not given"):
        other.take({"event": "case", "result": CaseResult(0, CASE.with_seed(99), "pass").to_dict()})


def test_a_compat_workers_report_of_a_witness_is_dropped() -> None:
    """Only the parent witnesses a repeat: a worker's report cannot put a witness in the results."""
    collector = _Collector(StagePlan("test", "test", None), _shapes())
    forged = CaseResult(0, CASE, "pass", parent_clock=ParentClock((1.0,), (1.0,), (0.0,))).to_dict()
    collector.take({"event": "case", "result": forged})
    assert collector.cases[0].parent_clock is None


def test_the_cpu_handover_folder_goes_with_the_process(tmp_path: Path) -> None:
    """Handed-over CPU buffers are files in /dev/shm (memory): none may outlive the parent."""
    child = textwrap.dedent("""
        import torch
        from evaluator.handover import HandoverArena
        arena = HandoverArena(torch.device("cpu"))
        tensor, spec = arena.new((2, 3, 3))
        print(spec.path)
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert not Path(done.stdout.strip()).parent.exists()


def test_a_run_knows_when_another_shares_the_scratch_root(tmp_path: Path) -> None:
    """Another run's compile caches change under it by right: with one alive, the other
    contestants' scratch directories are not judged."""
    assert alone(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(tmp_path / ".runs.lock")!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_SH)
        print("held", flush=True)
        time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert not alone(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert alone(tmp_path)


def test_the_worker_waits_awake_only_until_a_command_or_its_bound() -> None:
    """The hot wait returns once the pipe has data, and gives up after its bound when it has none
    (the worker then blocks on the read, as before)."""
    read_fd, write_fd = os.pipe()
    try:
        started = time.monotonic()
        _await_command(read_fd, 0.05)  # nothing sent: returns after about the bound
        assert 0.04 <= time.monotonic() - started < 5.0
        os.write(write_fd, b"x")
        started = time.monotonic()
        _await_command(read_fd, 60.0)  # data waiting: returns at once, not after a minute
        assert time.monotonic() - started < 5.0
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_cpu_run_makes_its_inputs_on_the_cpu_whatever_the_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent makes and checks a run's inputs on the run's device: on a machine with a GPU,
    where the generator's default device is CUDA, a ``--device cpu`` run once made CUDA inputs and
    failed every case comparing them with the CPU worker's. Here the default is a device nothing
    can run on, so an input made there fails the run."""
    monkeypatch.setattr(reference.inputs, "default_device", lambda: torch.device("meta"))
    shapes = load_shapes(Path(__file__).parent / "shapes_tiny.yaml")
    run = run_contestant(resolve_contestant("geqrf"), "benchmark", shapes, RunOptions(device="cpu", precheck=False))
    assert run.passed, [(c.case.label, c.message) for s in run.stages for c in s.cases]
