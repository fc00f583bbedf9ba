"""A kernel that raises, crashes, exits, hangs, floods its output or returns the wrong type
fails only itself, with a clear reason; the other contestants' results stay on disk."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from evaluator.cli import main
from evaluator.contestant import resolve_contestant
from evaluator.runner import RunOptions, run_contestant
from evaluator.shapes import load_shapes

pytestmark = pytest.mark.alone  # hangs and crashes judged against time limits (tests/machine_share.py)

FIXTURES = Path(__file__).parent / "contestants"
TINY_FILE = Path(__file__).parent / "shapes_tiny.yaml"
TINY = load_shapes(TINY_FILE)
CPU = RunOptions(device="cpu")


def _test_run(name: str, options: RunOptions = CPU):
    return run_contestant(resolve_contestant(FIXTURES / name), "test", TINY, options)


def test_exception_is_the_cases_error_with_traceback() -> None:
    run = _test_run("raises.py")
    case = run.stages[0].cases[0]
    assert case.status == "error"
    assert "RuntimeError: kernel blew up on purpose" in case.message
    assert "raises.py" in case.message  # the traceback tail names the line


def test_segfault_is_a_crash_named_by_signal() -> None:
    run = _test_run("segfault.py")
    assert run.status == "crash"
    assert "killed by SIGSEGV" in run.stages[0].reason
    assert [c.status for c in run.stages[0].cases] == ["skipped", "skipped"]


def test_os_exit_is_a_crash_with_its_code() -> None:
    run = _test_run("exits.py")
    assert run.status == "crash"
    assert "exited with code 3" in run.stages[0].reason


def test_hang_is_stopped_at_the_time_limit_naming_the_case_and_the_clock_ticks() -> None:
    events: list[tuple[float, dict]] = []
    run = run_contestant(resolve_contestant(FIXTURES / "hangs.py"), "test", TINY,
                         RunOptions(device="cpu", timeout_scale=0.5),
                         on_progress=lambda _stage, e: events.append((time.monotonic(), e)))
    assert run.status == "timeout"
    stage = run.stages[0]
    assert "exceeded the 10 s limit of test mode while running case 1/2 (2x8)" in stage.reason
    assert [c.status for c in stage.cases] == ["timeout", "skipped"]  # the hung case, then the one never reached
    assert stage.cases[0].message == stage.reason
    started = next(t for t, e in events if e == {"event": "case", "index": 0, "count": 2, "label": "2x8"})
    ticks = [t for t, e in events if e["event"] == "wait" and t > started]
    # One per silent second of the hang (a progress line keeps its clock going); the hang's share of
    # the 10 s is what the worker's start left (4.6 s of a 5 s limit on a loaded H200 machine, where
    # torch finds CUDA libraries to load).
    assert ticks, "no progress line during the hang"
    assert len(ticks) >= int(ticks[-1] - started) >= 1


def test_ctrl_c_during_a_hung_kernel_interrupts_at_once_and_keeps_the_stage() -> None:
    saved: list = []
    seen: list[str] = []

    def ctrl_c_while_waiting(_stage: str, event: dict) -> None:
        seen.append(event["event"])
        if event["event"] == "wait" and "case" in seen:  # the hung case is running
            raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_contestant(resolve_contestant(FIXTURES / "hangs.py"), "test", TINY,
                       RunOptions(device="cpu", timeout_scale=0.5), on_update=saved.append,
                       on_progress=ctrl_c_while_waiting)
    assert time.monotonic() - started < 10  # not held until the 10 s limit by the release of the hung case
    stage = saved[-1].stages[0]
    assert saved[-1].status == "interrupted"
    assert [c.status for c in stage.cases] == ["interrupted", "skipped"]
    assert stage.reason == "interrupted (Ctrl-C) while running case 1/2 (2x8)"


def test_what_the_kernel_prints_is_kept_in_the_stage() -> None:
    stage = _test_run("prints.py").stages[0]
    assert "debug: custom_kernel got a batch of shape (2, 8, 8)" in stage.output
    assert "debug: and a line on stderr" in stage.output


def test_flood_of_output_is_harmless() -> None:
    run = _test_run("floods.py")
    assert run.passed


def test_wrong_output_type_fails_with_the_contest_message() -> None:
    run = _test_run("wrong_type.py")
    assert run.stages[0].cases[0].message == "output must be a tuple `(H, tau)`"


def test_load_failure_is_the_contestants_error() -> None:
    run = _test_run("syntax_error.py")
    assert run.status == "error"
    assert "syntax_error: syntax error" in run.stages[0].reason


@pytest.mark.slow
def test_other_contestants_results_survive_a_crash(capsys, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    # The hang waits out its stage's limit: 10 s here (the tiny file's 20 halved, as the hang test above
    # has it), which the passing contestants' test stages stay far under.
    shapes = tmp_path / "tiny.yaml"
    tiny = yaml.safe_load(TINY_FILE.read_text())
    tiny["timeouts_s"]["test"] = 10
    shapes.write_text(yaml.safe_dump(tiny))
    code = main(["test", "geqrf", str(FIXTURES / "segfault.py"), str(FIXTURES / "hangs.py"),
                 str(FIXTURES / "contest_format"), "--shapes", str(shapes),
                 "--device", "cpu", "--json", str(out_json)])
    capsys.readouterr()
    assert code == 112
    runs = json.loads(out_json.read_text())["runs"]
    assert [(r["contestant"]["name"], r["status"]) for r in runs] == [
        ("geqrf", "pass"), ("segfault", "crash"), ("hangs", "timeout"), ("contest_format", "pass")]
