"""Each timed case keeps its repeats' claims beside the parent's witnesses: the data a tighter
``parent-clock`` share would be set from (evaluator/measure/witness.py, benchmarks/parent_clock_margin.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from benchmarks import loaded_host, parent_clock_margin
from evaluator.handover import HandoverArena
from evaluator.hardening.sandbox.children import children
from evaluator.measure.cpu_witness import CpuReading, MainThreadClock, alone, host_stall_ns
from evaluator.measure.stats import Stats
from evaluator.measure.timing import Measurement
from evaluator.measure.witness import ParentClock
from evaluator.remote import Allowance, RemoteExecutor, copy_ns_per_byte
from evaluator.results import CaseResult, RunResult, StageResult, load_results, write_results
from evaluator.shapes import Case

pytestmark = pytest.mark.alone  # the parent's clock witnesses of timed repeats (tests/machine_share.py)


def _measurements(claims: list[float], witness: float = 100.0, allowance: float = 20.0) -> list[Measurement]:
    return [Measurement(c, witness_ns=witness, allowance_ns=allowance) for c in claims]


def test_nothing_is_witnessed_where_the_kernel_ran_in_the_evaluators_process() -> None:
    assert ParentClock.of([Measurement(5.0), Measurement(6.0)]) is None


def test_the_share_is_the_claim_over_the_witness_less_the_allowance() -> None:
    witnessed = ParentClock.of(_measurements([80.0, 40.0, 72.0]))
    assert witnessed is not None
    assert witnessed.shares() == pytest.approx([1.0, 0.5, 0.9])
    assert witnessed.unclaimed_over_allowance() == pytest.approx([1.0, 3.0, 1.4])
    assert witnessed.over_witness() == pytest.approx([0.8, 0.4, 0.72])
    summary = witnessed.summary()
    assert summary is not None
    assert (summary.repeats, summary.median, summary.least) == (3, pytest.approx(0.9), pytest.approx(0.5))


def test_a_repeat_whose_witness_is_within_its_allowance_has_no_share() -> None:
    witnessed = ParentClock.of([Measurement(10.0, witness_ns=15.0, allowance_ns=20.0),
                                Measurement(30.0, witness_ns=60.0, allowance_ns=20.0)])
    assert witnessed is not None
    assert witnessed.shares() == pytest.approx([0.75])
    assert ParentClock((1.0,), (2.0,), (3.0,)).summary() is None


def test_figures_must_be_given_per_repeat() -> None:
    with pytest.raises(ValueError, match="per repeat"):
        ParentClock((1.0, 2.0), (3.0,), (0.0,))


def _run(witnessed: ParentClock | None) -> RunResult:
    case = CaseResult(0, Case(640, 512, 2, 1), "pass", stats=Stats.from_samples([70.0, 80.0]),
                      samples_ns=(70.0, 80.0), parent_clock=witnessed)
    return RunResult({"name": "blocked_wy", "path": "/x/blocked_wy", "sha256": "0" * 64}, "benchmark",
                     {"name": "qr_v2", "path": "shapes/qr_v2.yaml"}, "cuda", "cuda-events", False,
                     (StageResult("benchmark", "benchmark", "pass", (case,)),), {"device": "cuda"})


def test_the_witnesses_round_trip_and_a_version_2_file_has_none(tmp_path: Path) -> None:
    for witnessed in (ParentClock((70.0, 80.0), (100.0, 110.0), (20.0, 20.0)),
                      ParentClock((70.0, 80.0), (100.0, 110.0), (20.0, 20.0), (75.0, 85.0), (10.0, 10.0)),
                      ParentClock((70.0, 80.0), (100.0, 110.0), (20.0, 20.0), (75.0, 85.0), (10.0, 10.0), (5.0, 0.0))):
        write_results(tmp_path / "r.json", [_run(witnessed)])
        (loaded,) = load_results(tmp_path / "r.json")
        assert loaded.stages[0].cases[0].parent_clock == witnessed
        assert ParentClock.of(witnessed.measurements()) == witnessed  # the repeats as the rule reads them
    run = _run(ParentClock((70.0, 80.0), (100.0, 110.0), (20.0, 20.0)))
    write_results(tmp_path / "r.json", [run])

    doc = json.loads((tmp_path / "r.json").read_text())
    doc["schema_version"] = 2
    del doc["runs"][0]["stages"][0]["cases"][0]["parent_clock"]
    (tmp_path / "v2.json").write_text(json.dumps(doc))
    (old,) = load_results(tmp_path / "v2.json")
    assert old.stages[0].cases[0].parent_clock is None


def test_a_retimed_case_round_trips_and_a_version_3_file_has_none(tmp_path: Path) -> None:
    first = "[rule parent-clock] in 2 of 3 repeats the worker reported less than the parent saw: e.g. ..."
    run = _run(None)
    stage = run.stages[0]
    run = replace(run, stages=(replace(stage, cases=(replace(stage.cases[0], retimed=first),)),))
    write_results(tmp_path / "r.json", [run])
    (loaded,) = load_results(tmp_path / "r.json")
    assert loaded.stages[0].cases[0].retimed == first

    doc = json.loads((tmp_path / "r.json").read_text())
    doc["schema_version"] = 3
    del doc["runs"][0]["stages"][0]["cases"][0]["retimed"]
    (tmp_path / "v3.json").write_text(json.dumps(doc))
    (old,) = load_results(tmp_path / "v3.json")
    assert old.stages[0].cases[0].retimed == ""


def test_the_margin_table_reads_the_shares_from_results_files(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path / "r.json", [_run(ParentClock((70.0, 80.0), (100.0, 110.0), (20.0, 20.0)))])
    assert parent_clock_margin.main([str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "640x512" in line)
    assert [cell.strip() for cell in row.strip("|").split("|")][4:] == ["2", "0.882", "0.875", "0.875", "0.714",
                                                                        "1.500, 1.500", "1.08", "-", "-", "-"]
    assert "r.json: cuda, driver -, torch -" in out  # where it was measured, as far as the file says

    write_results(tmp_path / "within.json", [_run(ParentClock((70.0, 80.0), (100.0, 110.0), (200.0, 200.0)))])
    assert parent_clock_margin.main([str(tmp_path / "within.json")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "640x512" in line)
    assert [cell.strip() for cell in row.strip("|").split("|")][4:] == ["0", "-", "-", "-", "0.714", "0.150, 0.150",
                                                                        "-", "-", "-", "-"]

    cpu = ParentClock((70.0, 80.0), (100.0, 110.0), (200.0, 200.0), (90.0, 85.0), (40.0, 10.0))
    write_results(tmp_path / "cpu.json", [_run(cpu)])
    assert parent_clock_margin.main([str(tmp_path / "cpu.json")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "640x512" in line)
    assert [cell.strip() for cell in row.strip("|").split("|")][-3:] == ["1.067", "0.5", "-"]

    # A loaded host: 20 and 25 of the witnesses' 100 and 110 were its stall, which the shares leave out.
    stalled = ParentClock((70.0, 80.0), (100.0, 110.0), (20.0, 20.0), (90.0, 85.0), (40.0, 10.0), (20.0, 25.0))
    write_results(tmp_path / "stalled.json", [_run(stalled)])
    assert parent_clock_margin.main([str(tmp_path / "stalled.json")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "640x512" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[5:8] == ["1.199", "1.167", "1.167"]  # the median of 70 / (100 - 20 - 20) and 80 / (110 - 20 - 25)
    assert cells[-1] == "1.25"  # the most of it (25) over the allowance (20): how far the host stretched the witness

    write_results(tmp_path / "compat.json", [_run(None)])
    assert parent_clock_margin.main([str(tmp_path / "compat.json")]) == 1
    assert "no witnessed timed case" in capsys.readouterr().err


def test_the_loaded_host_tally_judges_each_case_with_and_without_its_stall() -> None:
    """An honest claim inside a witness the host stretched: failed with the stall left in, passed
    with it taken out, as the evaluator judges it; a case without stalls is judged alike both ways."""
    stalled = ParentClock((0.15e6,) * 4, (35e6,) * 4, (10e6,) * 4, stall_ns=(25e6,) * 4)
    shaved = ParentClock((0.15e6,) * 4, (35e6,) * 4, (10e6,) * 4)
    tally = loaded_host.Tally()
    tally.add(_run(stalled))
    tally.add(_run(shaved))
    assert (tally.runs, tally.cases, tally.retimed, tally.fails_out, tally.fails_in) == (2, 2, 0, 1, 2)
    run = _run(stalled)
    retimed = replace(run.stages[0].cases[0], retimed="[rule parent-clock] ...")
    tally.add(replace(run, stages=(replace(run.stages[0], cases=(retimed,)),)))
    assert (tally.cases, tally.retimed) == (3, 1)
    assert tally.most_in == pytest.approx((35e6 - 0.15e6) / 10e6)
    assert tally.most_out == pytest.approx((35e6 - 0.15e6) / 10e6)  # the unstalled case's


def test_the_allowance_counts_each_byte_at_its_copys_rate_in_nanoseconds() -> None:
    allowance = Allowance(fixed_ns=1000.0, per_call_ns=10.0, input_ns_per_byte=0.5, output_ns_per_byte=2.0)
    assert allowance.of(calls=3, input_bytes=100, output_bytes=40) == pytest.approx(1000 + 30 + 50 + 80)


def test_the_copy_rates_are_nanoseconds_per_byte_of_a_copy_timed_here() -> None:
    """A bytes term in seconds where nanoseconds are meant would add nothing (a factor of 1e9):
    the calibrated rates must price a copy the test times itself within a thousandfold either
    way (wide: a loaded machine times one copy many times slower than another)."""
    plain, transposing = copy_ns_per_byte(torch.device("cpu"))
    src = torch.empty(16 << 20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    took = min(_timed_copy(dst, src) for _ in range(3))
    assert took / 1000 < plain * dst.nbytes < took * 1000
    assert transposing > 0


def _timed_copy(dst: torch.Tensor, src: torch.Tensor) -> int:
    start = time.perf_counter_ns()
    dst.copy_(src)
    return time.perf_counter_ns() - start


class _ScriptedWorker:
    """A worker link whose timed repeats take scripted times on a clock the executor reads."""

    def __init__(self, repeats_ns: list[float]) -> None:
        self.now = 0
        self._repeats: Iterator[float] = iter(repeats_ns)
        self.timed = 0
        self.proc = SimpleNamespace(pid=os.getpid())  # a CPU witness of this process: not under test here

    def clock(self) -> int:
        return self.now

    def ask(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        if message["op"] == "timed":
            self.now += int(next(self._repeats))
            self.timed += 1
        return {"event": expect, "elapsed_ns": 0.0, "tail_ns": 0.0}


def _calibrated(repeats_ns: list[float]) -> tuple[Allowance, int]:
    worker = _ScriptedWorker(repeats_ns)
    executor = RemoteExecutor(worker, torch.device("cpu"), HandoverArena(torch.device("cpu")),  # type: ignore[arg-type]
                              rules=True, clock=worker.clock)
    return executor.calibrate(), worker.timed


def test_a_burst_during_calibration_does_not_widen_the_allowance() -> None:
    """A quarter of the first round's null repeats caught in a 50 ms stall: that round's 75th
    percentile is the stall; the next two rounds agree on the quiet 0.1 ms, which is kept."""
    burst = [100e3] * 8 + [50e6] * 4
    null = burst + [100e3] * 24
    busy = [300e3] * 24
    allowance, timed = _calibrated(null + busy)
    assert timed == len(null + busy)
    assert allowance.fixed_ns == pytest.approx(2 * 100e3 + 10e6)
    assert allowance.per_call_ns == pytest.approx(2 * (300e3 - 100e3) / 32)


def test_a_sustained_load_is_calibrated_as_it_is() -> None:
    """Honest hand-overs under a lasting load need its allowance: two rounds that agree settle it."""
    allowance, timed = _calibrated([5e6] * 24 + [5.5e6] * 24)
    assert timed == 48
    assert allowance.fixed_ns == pytest.approx(2 * 5e6 + 10e6)
    assert allowance.per_call_ns == pytest.approx(2 * 0.5e6 / 32)


def test_the_main_threads_run_time_counts_work_and_not_waiting() -> None:
    """The CPU witness reads what the thread ran, in ns, not how long it waited: 50 ms asleep
    adds almost nothing, 50 ms of work by the thread's own CPU clock adds that."""
    clock = MainThreadClock.of(os.getpid())
    if clock is None:
        pytest.skip("this host's /proc gives no scheduler statistics")
    before = clock.read()
    time.sleep(0.05)
    slept = clock.read() - before
    start = time.thread_time()
    while time.thread_time() - start < 0.05:
        pass
    worked = clock.read() - before - slept
    assert slept < 10e6
    assert 45e6 < worked < 100e6


@pytest.mark.parametrize(("parent_wait", "main_wait", "process_run", "stall"), [
    (20e6, 5e6, 1e6, 20e6),   # the longer wait (they take turns), the worker's run time all claimed
    (5e6, 20e6, 1e6, 20e6),
    (20e6, 5e6, 9e6, 12e6),   # 8 ms of run time beyond the claim take 8 ms of the stall back
    (20e6, 5e6, 40e6, 0.0),   # threads of the worker's own that ran longer than the waits: no stall
    (0.0, 0.0, 0.5e6, 0.0),   # a claim longer than the run time (a kernel that waits) gives none either
])
def test_the_hosts_stall_is_the_longer_wait_less_the_workers_unclaimed_run_time(
        parent_wait: float, main_wait: float, process_run: float, stall: float) -> None:
    before = CpuReading(main_run_ns=100, main_wait_ns=1000, process_ns=5000, parent_wait_ns=70)
    after = CpuReading(main_run_ns=100 + int(process_run), main_wait_ns=1000 + int(main_wait),
                       process_ns=5000 + int(process_run), parent_wait_ns=70 + int(parent_wait))
    assert host_stall_ns(before, after, claimed_ns=1e6) == pytest.approx(stall)


def _spin(seconds: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


def test_a_wait_the_process_causes_itself_is_its_threads_run_time_and_no_stall() -> None:
    """Two threads of one process spinning on one core: the main thread's wait for it is read
    (schedstat's second field), the helper's run time is read after it has exited (the process's
    CPU clock), and the stall left for a claim of nothing is none."""
    clock = MainThreadClock.of(os.getpid())
    if clock is None or not hasattr(os, "sched_setaffinity"):
        pytest.skip("this host's /proc gives no scheduler statistics")
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})  # this thread, and the helper, which inherits it
    try:
        before = clock.reading()
        helper = threading.Thread(target=_spin, args=(0.1,))
        helper.start()
        _spin(0.1)
        helper.join()
        after = clock.reading()
    finally:
        os.sched_setaffinity(0, cores)
    waited = after.main_wait_ns - before.main_wait_ns
    assert waited > 20e6  # for the helper's turns on the core
    assert (after.process_ns - before.process_ns) - (after.main_run_ns - before.main_run_ns) > 80e6  # the helper's
    # None of it is a stall when the two threads have the core to themselves (the helper ran longer than the
    # main thread waited); a busy test suite's threads on the same core would be a real stall, hence the half.
    assert host_stall_ns(before, after, claimed_ns=0.0) < 0.5 * waited


def test_a_worker_is_alone_only_without_processes_of_its_own_beside_it() -> None:
    """A host stall is granted only while the worker runs no process of its own, whose run time
    the worker's CPU clock would not count: a child of the worker, or anything else under the
    parent but the workers it started (an escapee re-parented to it), takes it away."""
    started = children()
    plain = subprocess.Popen(["sleep", "30"])
    parenting = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    stray = None
    try:
        workers = started | {plain.pid, parenting.pid}
        deadline = time.monotonic() + 5
        while not children(parenting.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert alone(plain.pid, workers)
        assert not alone(parenting.pid, workers)  # its sleep is a process of its own
        stray = subprocess.Popen(["sleep", "30"])
        assert not alone(plain.pid, workers)  # a child of the parent it did not start as a worker
    finally:
        # The grandchild first, which its shell then reaps: killed with the shell, it would be
        # re-parented to this process wherever an earlier test made it a subreaper.
        for grandchild in children(parenting.pid):
            os.kill(grandchild, signal.SIGKILL)
        parenting.wait(timeout=10)
        for proc in (plain, stray):
            if proc is not None:
                proc.kill()
                proc.wait()
    assert alone(plain.pid, workers)


def test_a_process_that_is_gone_has_no_cpu_witness() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert MainThreadClock.of(gone.pid) is None
