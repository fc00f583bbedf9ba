"""Spare workers (:mod:`evaluator.workers`): started beside a run's test stage, each serves a later
stage; closed to other processes from their first statement; never left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import evaluator.runner as runner
from evaluator.contestant import resolve_contestant
from evaluator.hardening.sandbox import Scratch
from evaluator.hardening.sandbox.children import children
from evaluator.hardening.sandbox.prctl import AVAILABLE as PRCTL_AVAILABLE
from evaluator.runner import RunOptions, StagePlan, run_contestant
from evaluator.shapes import load_shapes
from evaluator.workers import SPARE_READY, SpareWorkers, _Pending

pytestmark = pytest.mark.alone  # counts and reaps worker processes (tests/machine_share.py)

TESTS = Path(__file__).parent
TINY = load_shapes(TESTS / "shapes_tiny.yaml")
CPU = RunOptions(device="cpu")
GEQRF = resolve_contestant(TESTS.parent / "contestants" / "geqrf")


def _scratch(tmp_path: Path) -> Scratch:
    return Scratch.for_contestant("0" * 64, root=tmp_path)


def test_the_entry_imports_nothing_heavy_before_it_closes_the_process() -> None:
    code = "import sys, evaluator.worker_entry; print([m for m in ('torch', 'evaluator.worker') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# Run as the kernel of another stage would be: without CAP_SYS_PTRACE, it lists the target's
# descriptors and opens its stdin (a pipe) for writing, the way a forged job line would go in.
_PROBE = textwrap.dedent("""
    import os, sys
    from evaluator.hardening.sandbox.prctl import drop_ptrace_capability
    assert drop_ptrace_capability()
    pid = int(sys.argv[1])
    try:
        os.listdir(f"/proc/{pid}/fd")
        os.close(os.open(f"/proc/{pid}/fd/0", os.O_WRONLY | os.O_NONBLOCK))
        print("reached")
    except PermissionError:
        print("refused")
""")


_DUMPABLE_PEER = textwrap.dedent("""
    import sys
    from evaluator.hardening.sandbox.prctl import drop_ptrace_capability
    assert drop_ptrace_capability()
    print("dropped", flush=True)
    sys.stdin.read()
""")


def _probe(pid: int) -> str:
    return subprocess.run([sys.executable, "-c", _PROBE, str(pid)], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not PRCTL_AVAILABLE, reason="process switches are Linux-only")
def test_a_waiting_spare_is_out_of_reach_of_a_kernel_without_ptrace_rights(tmp_path: Path) -> None:
    with SpareWorkers(CPU, _scratch(tmp_path), 1) as spares:
        spare = spares.take()
        assert spare is not None, "the spare never announced itself closed"
        assert spare.proc.poll() is None
        assert _probe(spare.proc.pid) == "refused"
    # The control: a dumpable process of the same user holding no more capabilities than the probe
    # (as root, holding more is a refusal of its own) is within the probe's reach.
    plain = subprocess.Popen([sys.executable, "-c", _DUMPABLE_PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert plain.stdout is not None
    assert plain.stdout.readline() == b"dropped\n"
    try:
        assert _probe(plain.pid) == "reached"
    finally:
        plain.kill()
        plain.wait()


def test_spares_not_taken_are_killed_and_reaped(tmp_path: Path) -> None:
    before = children()
    with SpareWorkers(CPU, _scratch(tmp_path), 2) as spares:
        assert len(children() - before) == 2
        taken = spares.take()
        assert taken is not None
    assert children() - before == {taken.proc.pid}  # the stage that took it stops it
    taken.proc.kill()
    taken.proc.wait()


def test_a_spare_that_died_is_not_handed_out(tmp_path: Path) -> None:
    with SpareWorkers(CPU, _scratch(tmp_path), 2) as spares:
        first, second = spares._pending
        os.kill(first.proc.pid, signal.SIGKILL)
        taken = spares.take()
        assert taken is not None
        assert taken.proc is second.proc
        assert spares.take() is None
        assert first.proc.returncode is not None  # reaped


def test_a_silent_spare_is_given_up_at_the_deadline(tmp_path: Path) -> None:
    with SpareWorkers(CPU, _scratch(tmp_path), 1) as spares:
        (pending,) = spares._pending
        os.kill(pending.proc.pid, signal.SIGSTOP)  # stopped before (or while) it announces
        assert spares.take(wait_s=0.5) is None
        assert pending.proc.returncode is not None


@pytest.mark.parametrize(("printed", "closed"), [
    (b"", None),
    (b"a warning\n" + SPARE_READY, None),  # the flag has not arrived yet
    (b"a warning\n" + SPARE_READY + b"0\n", True),
    (SPARE_READY + b"1\n", not PRCTL_AVAILABLE),  # dumpable: refused where the switch exists
    (SPARE_READY + b"yes\n", False),
])
def test_the_announcement_says_whether_the_spare_is_closed(printed: bytes, closed: bool | None) -> None:
    pending = _Pending(None, -1)  # type: ignore[arg-type]
    pending.output += printed
    assert pending.announcement() is closed


def test_only_a_hardened_run_that_starts_with_its_test_stage_starts_spares() -> None:
    leaderboard = runner.plan_stages("leaderboard", None)
    assert runner.spare_count(leaderboard, CPU) == 3
    assert runner.spare_count(leaderboard, RunOptions(device="cpu", compat=True)) == 0
    assert runner.spare_count(leaderboard[1:], CPU) == 0  # a part that starts timed (a cloud run's)
    assert runner.spare_count([StagePlan("test", "test", None)], CPU) == 0


@pytest.mark.slow
def test_a_ranked_submission_starts_one_worker_itself_and_leaves_none(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh: list[int] = []
    spawn = runner.spawn_worker

    def counted(*args: object, **kwargs: object) -> tuple[subprocess.Popen[bytes], int]:
        proc, fd = spawn(*args, **kwargs)  # type: ignore[arg-type]
        fresh.append(proc.pid)
        return proc, fd

    monkeypatch.setattr(runner, "spawn_worker", counted)
    before = children()
    run = run_contestant(GEQRF, "leaderboard", TINY, RunOptions(device="cpu", precheck=False))
    assert run.passed, [(s.name, s.reason) for s in run.stages]
    assert [s.name for s in run.stages] == ["test", "benchmark", "ranked", "ranked-secret"]
    assert len(fresh) == 1  # the test stage's; the three later stages each took a spare
    assert children() - before == set()


@pytest.mark.slow
def test_a_run_that_stops_at_its_test_stage_leaves_no_spare() -> None:
    before = children()
    raises = resolve_contestant(TESTS / "contestants" / "raises.py")
    run = run_contestant(raises, "leaderboard", TINY, RunOptions(device="cpu", precheck=False))
    assert [s.name for s in run.stages] == ["test"]
    assert not run.passed
    assert children() - before == set()
