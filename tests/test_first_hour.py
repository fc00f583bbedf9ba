"""Issue #18, a new user's first hour: where results go, files never clobbered, Ctrl-C, a kernel's
output and tracebacks, a clock that keeps ticking, plain logs off a terminal, a fast --help."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import evaluator.run_command as run_command
from evaluator.cli import main
from evaluator.cli_args import OutputClosed, UsageError, results_path, sigterm_as_interrupt
from evaluator.measure.stats import Stats
from evaluator.progress import Feedback, PlainLog, ProgressLine, feedback, use_color
from evaluator.report.leaderboard import write_leaderboard
from evaluator.report.tables import render_run
from evaluator.results import CaseResult, RunResult, StageResult, load_results, write_results
from evaluator.run_command import interrupted
from evaluator.score import rank
from evaluator.shapes import Case
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "contestants"
TINY = str(Path(__file__).parent / "shapes_tiny.yaml")
LONG = "RuntimeError: " + "a message longer than any terminal column limit " * 4


def _run(stages: tuple[StageResult, ...], mode: str = "leaderboard") -> RunResult:
    return RunResult({"name": "k", "path": "/x/k.py", "sha256": "0" * 64}, mode, {"name": "smoke", "path": "s.yaml"},
                     "cpu", "cpu-clock", False, stages, {"device": "cpu", "cpu": "test"})


def _case(i: int, status: str = "pass", message: str = "") -> CaseResult:
    stats = Stats.from_samples([1e6, 1e6]) if status == "pass" else None
    return CaseResult(i, Case(2, 8, 1, i), status, message, stats=stats)


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"json": None, "force": False, **kw})


# -- 1. where results go, and never over an existing file --------------------------------------

def test_results_and_reports_go_under_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = results_path(_args(), "test", argparse.Namespace(name="smoke"))
    assert path.parent == Path("results")
    assert path.name.endswith("-test-smoke.json")
    parser_out = next(a for a in _rank_parser_actions() if a.dest == "out")
    assert not Path(parser_out.default).is_absolute()


def _rank_parser_actions() -> list[argparse.Action]:
    from evaluator.cli import _parser

    sub = next(a for a in _parser(["rank"])._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["rank"]._actions


def test_existing_json_is_refused_unless_force(tmp_path: Path) -> None:
    existing = tmp_path / "r.json"
    existing.write_text("keep me")
    with pytest.raises(UsageError, match=f"--json {existing}: the file exists; pass --force"):
        results_path(_args(json=existing), "test", argparse.Namespace(name="smoke"))
    assert results_path(_args(json=existing, force=True), "test", argparse.Namespace(name="smoke")) == existing
    assert existing.read_text() == "keep me"


def test_unwritable_json_fails_before_anything_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("")

    def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("ran a contestant before checking --json")

    monkeypatch.setattr(run_command, "run_contestant", must_not_run)
    code = main(["test", "geqrf", "--shapes", TINY, "--device", "cpu", "--json", str(a_file / "r.json")])
    assert code == 2
    assert f"--json {a_file / 'r.json'}: {a_file} is a file, not a folder" in capsys.readouterr().err


def test_leaderboard_page_is_never_overwritten_silently(tmp_path: Path) -> None:
    run = _run((StageResult("ranked", "leaderboard", "pass", (_case(0),)),), mode="benchmark")
    standings = rank([run])
    first = write_leaderboard([run], standings, Path("r.json"), tmp_path)
    second = write_leaderboard([run], standings, Path("r.json"), tmp_path)
    assert (first.name, second.name) == ("leaderboard-smoke-cpu.md", "leaderboard-smoke-cpu-2.md")
    assert write_leaderboard([run], standings, Path("r.json"), tmp_path, force=True) == first


# -- 2. Ctrl-C ------------------------------------------------------------------------------------

class _CtrlCAtSecondCase(Feedback):
    def __call__(self, stage: str, event: dict[str, Any]) -> None:
        if event.get("event") == "case" and event.get("index") == 1:
            raise KeyboardInterrupt


def test_ctrl_c_saves_the_run_as_interrupted_and_exits_130(tmp_path: Path, monkeypatch, capsys) -> None:
    out_json = tmp_path / "r.json"
    monkeypatch.setattr(run_command, "feedback", lambda: _CtrlCAtSecondCase())
    code = main(["test", "geqrf", str(FIXTURES / "zeros.py"), "--shapes", TINY, "--device", "cpu",
                 "--json", str(out_json)])
    assert code == 130
    assert f"interrupted; what was measured is in {out_json}" in capsys.readouterr().err
    [run] = load_results(out_json)  # the second contestant never started
    assert run.status == "interrupted"
    assert not run.passed
    assert [c.status for c in run.stages[0].cases] == ["pass", "interrupted"]  # the finished case is kept
    assert run.stages[0].reason == "interrupted (Ctrl-C) while running case 2/2 (2x16 mixed)"


def _finished_runs(path: Path) -> list[RunResult]:
    try:
        return load_results(path)
    except (OSError, ValueError):  # not written yet
        return []


def test_sigterm_saves_the_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """`timeout`, a batch scheduler or `kill` stop qrbench with SIGTERM: the run in progress is saved
    as interrupted, the finished one kept, and qrbench exits 130 as after Ctrl-C."""
    out_json = tmp_path / "r.json"
    command = [sys.executable, "-m", "evaluator", "test", "geqrf", str(FIXTURES / "hangs.py"), "--shapes", TINY,
               "--device", "cpu", "--json", str(out_json)]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(run.passed for run in _finished_runs(out_json)):  # geqrf done: hangs.py is next
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "geqrf's test run did not finish"
        time.sleep(0.1)
    time.sleep(1.0)  # into hangs.py's run (its worker starting, or its first case hanging)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"interrupted; what was measured is in {out_json}" in err
    first, second = load_results(out_json)
    assert first.passed
    assert second.status == "interrupted"
    assert second.stages[0].reason.startswith("interrupted (SIGTERM)")


def test_sigterm_is_an_interrupt_only_inside_the_block() -> None:
    def terminated() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at the next bytecode; never reached

    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt(), pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        terminated()
    assert signal.getsignal(signal.SIGTERM) == before


def test_interrupt_between_stages_interrupts_the_next_stage() -> None:
    tests = StageResult("test", "test", "pass", (_case(0),))
    run = interrupted(_run((tests,)))
    assert run.status == "interrupted"
    assert [(s.name, s.status) for s in run.stages] == [("test", "pass"), ("benchmark", "interrupted")]
    assert run.reason == "benchmark: interrupted before it started"


def test_interrupt_turns_a_running_stage_interrupted_and_leaves_a_failed_run_alone() -> None:
    running = StageResult("test", "test", "running", (_case(0), _case(1, "skipped", "not run")))
    assert interrupted(_run((running,), mode="test")).status == "interrupted"
    failed = _run((StageResult("test", "test", "fail", (_case(0, "fail", "wrong"),)),))
    assert interrupted(failed) == failed


# -- 3. a kernel's output, whole tracebacks, whole messages -------------------------------------

def test_failures_show_the_whole_message_and_the_workers_output() -> None:
    traceback = f"{LONG}\n  File \"k.py\", line 3, in custom_kernel\n    raise RuntimeError(...)"
    stage = StageResult("test", "test", "fail", (_case(0, "error", traceback),), output="debug: hello")
    text = render_run(_run((stage,), mode="test"))
    assert LONG.strip() in text  # not cut at 90 characters
    assert 'File "k.py", line 3, in custom_kernel' in text
    assert "debug: hello" in text


def test_old_results_without_output_still_load(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_results(path, [_run((StageResult("test", "test", "pass", (_case(0),)),), mode="test")])
    doc = json.loads(path.read_text())
    del doc["runs"][0]["stages"][0]["output"]
    path.write_text(json.dumps(doc))
    assert load_results(path)[0].stages[0].output == ""


def test_a_print_in_the_kernel_reaches_the_results_and_the_terminal(tmp_path: Path, capsys) -> None:
    out_json = tmp_path / "r.json"
    code = main(["test", "geqrf", str(FIXTURES / "prints.py"), "--shapes", TINY, "--device", "cpu",
                 "--json", str(out_json)])
    captured = capsys.readouterr()
    assert code == 112
    stage = load_results(out_json)[1].stages[0]
    assert "debug: custom_kernel got a batch of shape (2, 8, 8)" in stage.output
    assert "debug: custom_kernel got a batch of shape (2, 8, 8)" in captured.out
    assert 'prints.py", line 7, in custom_kernel' in captured.out  # the whole traceback, not one line
    # 5. off a terminal: a plain line per case and stage, and a summary of the contestants
    assert "prints · test · case 1/2 2x8: error: ValueError: kernel gave up after printing" in captured.err
    assert "geqrf · test: pass (2/2 cases passed" in captured.err
    assert "\r" not in captured.err
    assert "summary: 1 of 2 contestants passed" in captured.out


# -- 4. the progress line keeps ticking, with an estimate ----------------------------------------

class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_ticks_while_waiting_and_estimates_the_time_left() -> None:
    now = [0.0]
    stream = _Tty()
    line = ProgressLine(stream, clock=lambda: now[0])
    line.start("k")
    line("test", {"event": "case", "index": 0, "count": 4, "label": "2x8"})
    now[0] = 10.0
    line("test", {"event": "case", "index": 1, "count": 4, "label": "2x16"})
    now[0] = 13.0
    line("test", {"event": "wait"})
    assert stream.getvalue().rsplit("\r", 1)[-1].strip() == "k · test · 2/4 2x16 · 13 s · about 27 s left in test"


# -- 5. off a terminal, and colors --------------------------------------------------------------

def test_plain_log_tells_each_finished_case_and_stage_once() -> None:
    stream = io.StringIO()
    log = PlainLog(stream)
    log.start("k")
    pending = StageResult("test", "test", "running", (_case(0), _case(1, "skipped", "not run")))
    log.update(_run((pending,), mode="test"))
    log.update(_run((pending,), mode="test"))
    log.done(_run((StageResult("test", "test", "pass", (_case(0), _case(1)), wall_s=1.5),), mode="test"))
    assert stream.getvalue().splitlines() == [
        "k · test · case 1/2 2x8: pass 1 ms (2 runs)",
        "k · test · case 2/2 2x8: pass 1 ms (2 runs)",
        "k · test: pass (2/2 cases passed, 1.5 s)",
    ]
    assert isinstance(feedback(io.StringIO()), PlainLog)
    assert isinstance(feedback(_Tty()), ProgressLine)


def test_a_case_timed_again_says_so_live_and_in_the_log() -> None:
    first = "[rule parent-clock] in 2 of 3 repeats the worker reported less than the parent saw: e.g. ..."
    stream = _Tty()
    line = ProgressLine(stream, clock=lambda: 0.0)
    line.start("k")
    line("benchmark", {"event": "case", "index": 0, "count": 2, "label": "2x8"})
    line("benchmark", {"event": "retime", "index": 0, "label": "2x8", "why": first})
    assert "1/2 2x8 (timed again: rule parent-clock)" in stream.getvalue().rsplit("\r", 1)[-1]

    log_stream = io.StringIO()
    log = PlainLog(log_stream)
    log.start("k")
    retimed = replace(_case(0), retimed=first)
    log.done(_run((StageResult("benchmark", "benchmark", "pass", (retimed,), wall_s=1.0),), mode="benchmark"))
    assert log_stream.getvalue().splitlines()[0] == (
        "k · benchmark · case 1/1 2x8: pass 1 ms (2 runs) (timed again: the first attempt failed rule parent-clock)")


def test_color_only_on_a_terminal_without_no_color(monkeypatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(_Tty())
    assert not use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(_Tty())


# -- 6. a fast --help, and a quiet end when the reader goes away ----------------------------------

def test_version_does_not_import_torch() -> None:
    script = ("import runpy, sys\nsys.argv = ['qrbench', '--version']\n"
              "try:\n    runpy.run_module('evaluator', run_name='__main__')\nexcept SystemExit:\n    pass\n"
              "print(sorted(m for m in ('torch', 'numpy', 'evaluator.runner') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == ["qrbench 0.1.0", "[]"]


def _closed_pipe_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``qrbench ARGS | head -0``: stdout is a pipe nobody reads."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "evaluator", *args], cwd=cwd, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write_end)


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    proc = _closed_pipe_run("check", str(REPO / "contestants" / "geqrf" / "submission.py"), "--kernelguard", "off",
                            cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.slow
def test_a_closed_pipe_after_a_run_keeps_its_results(tmp_path: Path) -> None:
    proc = _closed_pipe_run("test", "geqrf", "--shapes", TINY, "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 141
    assert "Traceback" not in proc.stderr
    [saved] = list((tmp_path / "results").iterdir())
    assert load_results(saved)[0].passed


def test_a_closed_stderr_stops_the_run_as_an_interrupt() -> None:
    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    log = PlainLog(Closed())
    log.start("k")
    with pytest.raises(OutputClosed):
        log.update(_run((StageResult("test", "test", "pass", (_case(0),)),), mode="test"))
