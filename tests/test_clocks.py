"""GPU clocks around timed repeats, on a fake NVML: readings, the throttle rule, the discard rule
in the protocol, the summary, the results schema (and its migration) and the CLI's refusals."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from itertools import chain, cycle
from pathlib import Path

import pytest
import torch

from evaluator.cli import main
from evaluator.hardening.guards import Hardening
from evaluator.margin import DEFAULT_MARGIN_WARN
from evaluator.measure import clocks
from evaluator.measure.clocks import (
    ClockSample,
    ClockSummary,
    NullSampler,
    NvmlSampler,
    RepeatClocks,
    RepeatLog,
    open_sampler,
    reason_names,
    sampler_for,
)
from evaluator.protocol import BenchSettings, benchmark_case
from evaluator.report.compare import build_report
from evaluator.report.markdown import render_markdown
from evaluator.report.tables import render_run
from evaluator.results import CaseResult, RunResult, StageResult, load_results, write_results
from evaluator.runner import RunOptions
from evaluator.shapes import Case, Timing
from tests.conftest import REPO
from tests.test_protocol import FakeTimer, _harness, fake_clock

IDLE, APP_CLOCKS, POWER_CAP, HW_SLOWDOWN, SYNC_BOOST = 0x1, 0x2, 0x4, 0x8, 0x10
SW_THERMAL, HW_THERMAL, POWER_BRAKE, DISPLAY = 0x20, 0x40, 0x80, 0x100
UUIDS = ["GPU-00000000-1111-2222-3333-444444444444", "GPU-6f6c3f8a-aaaa-bbbb-cccc-0123456789ab"]
CASE = Case(2, 8, 1, 3)


class FakeNvml:
    """The few pynvml functions the sampler calls, over made-up devices and readings.

    The first reading (the one :func:`open_sampler` proves the device with) is ``probe``, every
    later one the next of ``script``, cycled: (SM MHz, memory MHz, power mW, reasons bitmask).
    ``fail`` names a function that raises NVMLError from the given call on (1 = the first).
    """

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    class NVMLError(Exception):
        pass

    def __init__(self, script: list[tuple[int, int, int, int]] | None = None, uuids: list[str] = UUIDS,
                 fail: tuple[str, int] | None = None, probe: tuple[int, int, int, int] = (1980, 3201, 450_000, 0)
                 ) -> None:
        self._script: Iterator[tuple[int, int, int, int]] = chain([probe], cycle(script or [probe]))
        self._uuids = uuids
        self._fail = fail
        self._calls: dict[str, int] = {}
        self.current = (0, 0, 0, 0)
        self.opened: list[int] = []

    def _called(self, name: str) -> None:
        self._calls[name] = self._calls.get(name, 0) + 1
        if self._fail and self._fail[0] == name and self._calls[name] >= self._fail[1]:
            raise self.NVMLError(f"{name}: Not Supported")

    def nvmlInit(self) -> None:
        self._called("nvmlInit")

    def nvmlDeviceGetCount(self) -> int:
        return len(self._uuids)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self.opened.append(index)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._uuids[handle]

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        self._called("nvmlDeviceGetClockInfo")
        if kind == self.NVML_CLOCK_SM:
            self.current = next(self._script)
            return self.current[0]
        return self.current[1]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._called("nvmlDeviceGetPowerUsage")
        return self.current[2]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        self._called("nvmlDeviceGetCurrentClocksEventReasons")
        return self.current[3]


def _reading(reasons: int = 0, sm: int = 1980) -> tuple[int, int, int, int]:
    return sm, 3201, 600_000, reasons


# The throttle rule ----------------------------------------------------------------------------

@pytest.mark.parametrize(("reasons", "throttled"), [
    (0, False), (IDLE, False), (APP_CLOCKS, False), (SYNC_BOOST, False), (DISPLAY, False),
    (POWER_CAP, True), (HW_SLOWDOWN, True), (SW_THERMAL, True), (HW_THERMAL, True), (POWER_BRAKE, True),
    (IDLE | APP_CLOCKS | POWER_CAP, True),
])
def test_which_reasons_count_as_throttling(reasons: int, throttled: bool) -> None:
    assert ClockSample(1980, 3201, 600.0, reasons).throttled is throttled


def test_reasons_are_named_and_unknown_bits_kept() -> None:
    assert reason_names(POWER_CAP | SW_THERMAL) == ["SW power cap", "SW thermal slowdown"]
    assert reason_names(0x2000 | IDLE) == ["GPU idle", "0x2000"]


# Opening NVML -----------------------------------------------------------------------------------

def test_the_sampler_reads_the_device_with_the_cuda_uuid() -> None:
    nvml = FakeNvml([(1755, 2619, 512_345, POWER_CAP)])
    sampler = open_sampler("6f6c3f8a-aaaa-bbbb-cccc-0123456789ab", nvml)  # torch's form, without "GPU-"
    assert isinstance(sampler, NvmlSampler)
    assert nvml.opened[-1] == 1
    assert sampler.description == "nvml"
    assert sampler.read() == ClockSample(1755, 2619, 512.345, POWER_CAP)


@pytest.mark.parametrize(("nvml", "why"), [
    (FakeNvml(uuids=[UUIDS[0]]), "NVML lists no GPU with UUID 6f6c3f8a"),
    (FakeNvml(fail=("nvmlInit", 1)), "NVML: nvmlInit: Not Supported"),
    (FakeNvml(fail=("nvmlDeviceGetCurrentClocksEventReasons", 1)), "NVML: nvmlDeviceGetCurrentClocksEventReasons"),
])
def test_an_unreadable_gpu_gets_a_null_sampler_that_says_why(nvml: FakeNvml, why: str) -> None:
    sampler = open_sampler("6f6c3f8a-aaaa-bbbb-cccc-0123456789ab", nvml)
    assert isinstance(sampler, NullSampler)
    assert sampler.description.startswith(f"none: {why}")
    assert sampler.read() is None


def test_without_pynvml_or_a_gpu_nothing_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert open_sampler(UUIDS[0]).description.startswith("none: pynvml is not installed")
    assert sampler_for(torch.device("cpu")).description == "none: cpu device"


def test_a_reading_that_fails_mid_run_is_missing_not_an_error() -> None:
    sampler = open_sampler(UUIDS[0], FakeNvml(fail=("nvmlDeviceGetPowerUsage", 2)))  # the probe is call 1
    assert sampler.read() is None


# The repeat log and the discard rule --------------------------------------------------------------

def _log(reasons: list[int], discard: bool) -> RepeatLog:
    """A log of one repeat per entry of ``reasons`` (both readings carry it), sample = 10 * number."""
    log = RepeatLog(open_sampler(UUIDS[0], FakeNvml([_reading(r) for r in reasons for _ in range(2)])), discard)
    for i in range(len(reasons)):
        log.add(log.read(), 10.0 * i)
    return log


def test_discarding_leaves_out_only_throttled_repeats_and_marks_them() -> None:
    log = _log([0, POWER_CAP, IDLE, HW_THERMAL, 0], discard=True)
    assert [r.discarded for r in log.records] == [False, True, False, True, False]
    assert [r.sample_ns for r in log.records] == [0.0, 10.0, 20.0, 30.0, 40.0]  # discarded times kept
    assert log.kept([0.0, 10.0, 20.0, 30.0, 40.0]) == [0.0, 20.0, 40.0]
    assert log.all_discarded() is None


def test_without_discarding_throttled_repeats_are_marked_throttled_and_kept() -> None:
    log = _log([POWER_CAP, 0], discard=False)
    assert [(r.throttled, r.discarded) for r in log.records] == [(True, False), (False, False)]
    assert log.kept([1.0, 2.0]) == [1.0, 2.0]


def test_a_null_sampler_records_nothing_and_keeps_everything() -> None:
    log = RepeatLog(NullSampler("cpu device"), discard_throttled=True)
    log.add(log.read(), 5.0)
    assert log.records == []
    assert log.kept([5.0]) == [5.0]
    assert log.all_discarded() is None


def test_every_repeat_discarded_is_named() -> None:
    assert "every one of its 2 timed repeats" in (_log([POWER_CAP, SW_THERMAL], discard=True).all_discarded() or "")


def test_summary_statistics() -> None:
    records = [
        RepeatClocks(0, 1.0, ClockSample(1980, 3201, 600.0, IDLE), ClockSample(1900, 3201, 650.0, 0)),
        RepeatClocks(1, 2.0, ClockSample(1500, 2619, 700.0, POWER_CAP | IDLE), None, discarded=True),
        RepeatClocks(2, 3.0, ClockSample(1800, 3201, 640.0, 0), ClockSample(1700, 3201, 690.0, SW_THERMAL)),
    ]
    summary = ClockSummary.of(records)
    assert summary is not None
    assert (summary.repeats, summary.sm_min_mhz, summary.sm_median_mhz, summary.sm_max_mhz) == (3, 1500, 1800, 1980)
    assert (summary.mem_median_mhz, summary.power_max_w) == (3201, 700.0)
    assert (summary.throttled, summary.discarded) == (2, 1)
    assert summary.reasons == POWER_CAP | SW_THERMAL  # idle is not throttling
    assert summary.throttled_share == pytest.approx(2 / 3)
    assert ClockSummary.of([]) is None


# The protocol: readings around every timed repeat, the stopping rule on the kept samples ----------

def _bench(reasons: list[int], discard: bool, repeats: int = 1000) -> CaseResult:
    """A case timed at 10 us a repeat, 90 us on each repeat whose readings carry a throttle reason."""
    script = [_reading(r) for r in reasons for _ in range(2)]
    times = tuple(9e4 if r & clocks.THROTTLING else 1e4 for r in reasons)
    sampler = open_sampler(UUIDS[0], FakeNvml(script))
    h = _harness(torch.geqrf, FakeTimer(times), Hardening(), clock=fake_clock(0.04), sampler=sampler,
                 discard_throttled=discard)
    return benchmark_case(h, 0, CASE, BenchSettings(True, repeats, 10.0), Timing(max_inputs=1))


def test_the_protocol_reads_clocks_around_every_timed_repeat() -> None:
    result = _bench([0, POWER_CAP], discard=False, repeats=4)
    assert result.passed, result.message
    assert len(result.clocks) == len(result.samples_ns) == result.stats.runs
    assert [r.repeat for r in result.clocks] == list(range(result.stats.runs))
    assert all(r.before is not None and r.after is not None for r in result.clocks)
    assert 9e4 in result.samples_ns  # kept: discarding is off


def test_discarded_repeats_leave_the_statistics_and_the_stopping_rule() -> None:
    result = _bench([0, POWER_CAP], discard=True)
    assert result.passed, result.message
    assert set(result.samples_ns) == {1e4}
    # Three kept samples that agree end the case once 0.1 s has passed, as the contest's rule does;
    # the throttled repeats between them ran, and are in the results, marked.
    assert result.stats.runs == 3
    assert [r.discarded for r in result.clocks] == [False, True, False, True, False]
    assert [r.sample_ns for r in result.clocks if r.discarded] == [9e4, 9e4]


def test_a_case_whose_every_repeat_was_discarded_fails_saying_why() -> None:
    result = _bench([POWER_CAP], discard=True, repeats=5)
    assert result.status == "fail"
    assert "every one of its 5 timed repeats" in result.message
    assert result.stats is None
    assert len(result.clocks) == 5


# Results: the readings round-trip; version-1 files still load --------------------------------------

def _run_with_clocks() -> RunResult:
    case = _bench([0, POWER_CAP], discard=True)
    stage = StageResult("benchmark", "benchmark", "pass", (case,))
    return RunResult({"name": "geqrf", "path": "/x/geqrf.py", "sha256": "0" * 64}, "benchmark",
                     {"name": "tiny", "path": "tests/shapes_tiny.yaml"}, "cuda", "cuda-events", False, (stage,),
                     {"device": "cuda", "clock_sampler": "nvml"})


def test_clock_readings_round_trip(tmp_path: Path) -> None:
    run = _run_with_clocks()
    write_results(tmp_path / "r.json", [run])
    (loaded,) = load_results(tmp_path / "r.json")
    assert loaded.to_dict() == run.to_dict()
    assert loaded.stages[0].cases[0].clocks == run.stages[0].cases[0].clocks
    stored = json.loads((tmp_path / "r.json").read_text())["runs"][0]["stages"][0]["cases"][0]["clocks"]
    assert stored[1]["discarded"] is True
    assert stored[1]["before"]["throttled"] is True
    assert stored[1]["before"]["power_w"] == 600.0


def test_a_version_1_file_is_migrated(tmp_path: Path) -> None:
    doc = {"schema_version": 1, "kind": "qrbench-results", "runs": [_run_with_clocks().to_dict()]}
    for run in doc["runs"]:
        del run["margin_warn"]
        for case in run["stages"][0]["cases"]:
            del case["clocks"]
    (tmp_path / "v1.json").write_text(json.dumps(doc))
    (run,) = load_results(tmp_path / "v1.json")
    assert run.stages[0].cases[0].clocks == ()
    assert run.margin_warn == DEFAULT_MARGIN_WARN
    h200 = sorted((REPO / "reports" / "h200").glob("*.json.gz"))
    assert h200
    assert all(load_results(path) for path in h200)  # the committed version-1 files


def test_an_unknown_old_schema_is_refused(tmp_path: Path) -> None:
    (tmp_path / "v0.json").write_text(json.dumps({"schema_version": 0, "kind": "qrbench-results", "runs": []}))
    with pytest.raises(ValueError, match="schema_version 0 was never written by qrbench"):
        load_results(tmp_path / "v0.json")


# Options: never discarding under --compat ---------------------------------------------------------

def test_discarding_is_refused_under_compat(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="keeps every repeat"):
        RunOptions(device="cpu", compat=True, discard_on_throttle=True)
    assert main(["benchmark", "geqrf", "--compat", "--discard-on-throttle", "--device", "cpu"]) == 2
    assert "--discard-on-throttle cannot be used with --compat" in capsys.readouterr().err


# Reports ------------------------------------------------------------------------------------------

def test_the_report_summarises_clocks_per_case_and_says_what_discarding_did() -> None:
    run = _run_with_clocks()
    text = render_markdown(build_report([run]))
    section = text.split("## Clocks")[1].split("\n## ")[0]
    assert "use only the kept repeats" in section
    row = next(line for line in section.splitlines() if line.startswith("| geqrf"))
    assert "SM 1980-1980 MHz (median 1980), memory 3201 MHz, up to 600 W" in row
    assert "2 of 5 repeats (40.0%) throttled (SW power cap), 2 discarded" in row
    assert "| nvml " in text.split("## Environment")[1]
    printed = render_run(run)
    assert "clocks: SM 1980-1980 MHz (median 1980), memory 3201 MHz, up to 600 W; 2 of 5 repeats" in printed


def test_a_gpu_run_without_readings_says_why_and_a_cpu_run_says_nothing() -> None:
    gpu = _run_with_clocks()
    stage = gpu.stages[0]
    unread = replace(gpu, stages=(replace(stage, cases=tuple(replace(c, clocks=()) for c in stage.cases)),),
                     environment={"device": "cuda", "clock_sampler": "none: NVML: Driver Not Loaded"})
    assert "No clock readings (geqrf: none: NVML: Driver Not Loaded)." in render_markdown(build_report([unread]))
    assert "clocks: not read (none: NVML: Driver Not Loaded)" in render_run(unread)
    cpu = replace(unread, device="cpu", environment={"device": "cpu", "clock_sampler": "none: cpu device"})
    assert "## Clocks" not in render_markdown(build_report([cpu]))
    assert "clocks:" not in render_run(cpu)
