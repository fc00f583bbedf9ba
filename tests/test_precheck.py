"""The contest service's submission gates (evaluator.hardening.precheck): each refuses its case with its rule
and location, kernelguard fails closed, ``qrbench check`` exits 0/112/2, and a run refused at the
gates fails there while the next contestant still runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.cli import main
from evaluator.hardening import precheck
from evaluator.hardening.precheck import MAX_BYTES, Precheck, precheck_file, precheck_source
from evaluator.results import RunResult
from tests.conftest import REPO

TINY = str(Path(__file__).parent / "shapes_tiny.yaml")
GEQRF = REPO / "contestants" / "geqrf" / "submission.py"

# An output cache that kernelguard 0.3.2 filters (LAST_CALL_REPLAY): the first call's result replayed.
CACHING_KERNEL = '''"""Replays the first result computed for a buffer."""

import torch
from task import input_t, output_t

_results: dict[int, output_t] = {}


def custom_kernel(data: input_t) -> output_t:
    key = data.data_ptr()
    if key not in _results:
        _results[key] = torch.geqrf(data)
    return _results[key]
'''


def _rule(verdict: Precheck) -> str | None:
    match = re.match(r"\[rule ([a-z-]+)\]", verdict.reason)
    return match[1] if match else None


def _fake_kernelguard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Make the gate run ``script`` (a shell script) instead of kernelguard, as KERNELGUARD_COMMAND does."""
    fake = tmp_path / "fake-kernelguard"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KERNELGUARD_COMMAND", str(fake))


def test_an_empty_file_is_refused() -> None:
    verdict = precheck_source(b"", "s.py", "test")
    assert not verdict.passed
    assert _rule(verdict) == "submission-size"
    assert verdict.reason.startswith("[rule submission-size] s.py: the file is empty")


def test_a_file_over_the_service_limit_is_refused_and_one_at_it_is_not() -> None:
    line = b"# padding\n"
    at_limit = line * (MAX_BYTES // len(line))
    assert len(at_limit) == MAX_BYTES
    assert precheck_source(at_limit, "s.py", "test").passed
    verdict = precheck_source(at_limit + b"#", "s.py", "test")
    assert _rule(verdict) == "submission-size"
    assert "1,000,001 bytes" in verdict.reason


def test_a_file_that_is_not_utf8_is_refused_at_its_line() -> None:
    verdict = precheck_source(b"import torch\nname = '\xe9t\xe9'\n", "s.py", "test")
    assert _rule(verdict) == "submission-encoding"
    assert verdict.findings[0].lines == (2,)
    assert "s.py: line 2: byte 21 (0xe9)" in verdict.reason
    assert verdict.outcomes == {"submission-size": "pass", "submission-encoding": "refuse",
                                "stream-word": "skip", "kernelguard": "skip"}


def test_the_word_is_refused_in_any_case_in_comments_and_strings_with_its_lines() -> None:
    code = b"import torch\n\n# run on a side Stream\nx = 1\nname = 'UPSTREAM'\n"
    verdict = precheck_source(code, "s.py", "test")
    assert _rule(verdict) == "stream-word"
    assert verdict.findings[0].lines == (3, 5)
    assert "line 3: '# run on a side Stream'" in verdict.reason
    assert "line 5: \"name = 'UPSTREAM'\"" in verdict.reason
    assert "torch.cuda.graph(g)" in verdict.reason  # how to fix


def test_kernelguard_refuses_an_output_cache_in_guarded_modes_only() -> None:
    for mode in ("benchmark", "profile", "leaderboard"):
        verdict = precheck_source(CACHING_KERNEL.encode(), "s.py", mode)
        assert _rule(verdict) == "kernelguard", mode
        assert "LAST_CALL_REPLAY" in verdict.reason
        assert verdict.kernelguard is not None
        assert verdict.kernelguard["result"]["should_filter"] is True
        assert verdict.kernelguard["result"]["classification"] == "hacked"
        assert verdict.kernelguard["version"] == "0.3.2"
    in_test = precheck_source(CACHING_KERNEL.encode(), "s.py", "test")
    assert in_test.passed
    assert in_test.outcomes["kernelguard"] == "skip"
    assert in_test.kernelguard is None


def test_kernelguard_warn_reports_without_refusing_and_off_does_not_run() -> None:
    warned = precheck_source(CACHING_KERNEL.encode(), "s.py", "leaderboard", kernelguard="warn")
    assert warned.passed
    assert warned.outcomes["kernelguard"] == "warn"
    assert warned.findings[0].level == "warn"
    off = precheck_source(CACHING_KERNEL.encode(), "s.py", "leaderboard", kernelguard="off")
    assert off.passed
    assert off.outcomes["kernelguard"] == "skip"
    assert off.kernelguard is None


def test_a_clean_kernel_passes_every_gate_with_kernelguards_verdict_kept() -> None:
    verdict = precheck_file(GEQRF, "leaderboard")
    assert verdict.passed, verdict.reason
    assert set(verdict.outcomes.values()) == {"pass"}
    assert verdict.kernelguard["result"]["classification"] == "valid"
    assert Precheck.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("exec sleep 10", "gave no verdict within 0.5 s"),
        ("echo 'Traceback: boom' >&2; exit 3", "exited with code 3: Traceback: boom"),
        ("echo not json", "printed no JSON object"),
    ],
)
def test_kernelguard_without_a_verdict_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, problem: str
) -> None:
    _fake_kernelguard(tmp_path, monkeypatch, script)
    verdict = precheck_source(GEQRF.read_bytes(), "s.py", "benchmark", timeout_s=0.5)
    assert _rule(verdict) == "kernelguard"
    assert problem in verdict.reason
    assert "fail closed" in verdict.reason
    assert problem in verdict.kernelguard["error"]
    warned = precheck_source(GEQRF.read_bytes(), "s.py", "benchmark", kernelguard="warn", timeout_s=0.5)
    assert warned.passed
    assert warned.outcomes["kernelguard"] == "warn"


def test_kernelguard_installed_without_its_script_runs_through_the_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package on the path whose console script is not beside the interpreter (``pip install
    --target``): the gate runs it through this interpreter instead of refusing every file as
    unchecked, or running a script on PATH that may be another environment's."""
    interpreter = sys.executable
    monkeypatch.delenv("KERNELGUARD_COMMAND", raising=False)
    monkeypatch.setattr(precheck.shutil, "which", lambda _name: "/elsewhere/bin/kernelguard")
    monkeypatch.setattr(precheck.sys, "executable", str(tmp_path / "python"))  # no script beside it
    assert precheck._kernelguard_command() == [str(tmp_path / "python"), "-c", precheck.RUN_IMPORTED_KERNELGUARD]
    done = subprocess.run([interpreter, "-c", precheck.RUN_IMPORTED_KERNELGUARD, "--api-mode"],
                          input=GEQRF.read_bytes(), capture_output=True, check=False)
    assert done.returncode == 0, done.stderr[-500:]
    assert json.loads(done.stdout.decode().strip().splitlines()[-1])["should_filter"] is False


def test_a_missing_kernelguard_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELGUARD_COMMAND", str(tmp_path / "no-such-kernelguard"))
    verdict = precheck_source(GEQRF.read_bytes(), "s.py", "leaderboard")
    assert _rule(verdict) == "kernelguard"
    assert "cannot start" in verdict.reason
    assert "install kernelguard==0.3.2" in verdict.reason


# ---- qrbench check ------------------------------------------------------------------------------

def test_check_exits_0_when_every_file_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(GEQRF)]) == 0
    assert f"{GEQRF}: passed" in capsys.readouterr().out


def test_check_exits_112_naming_the_refused_file_and_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused = tmp_path / "s.py"
    refused.write_text("x = 1\n# stream\n")
    assert main(["check", str(GEQRF), str(refused)]) == 112
    out = capsys.readouterr().out
    assert f"{GEQRF}: passed" in out
    assert f"{refused}: REFUSED" in out
    assert f"[rule stream-word] {refused}: line 2: '# stream'" in out


def test_check_of_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nope.py")]) == 2
    assert f"{tmp_path / 'nope.py'}: no such contestant" in capsys.readouterr().err


def test_check_takes_a_contestant_as_every_run_does(capsys: pytest.CaptureFixture[str]) -> None:
    """A name under contestants/ or a folder: its submission file is what is judged."""
    assert main(["check", "geqrf", str(GEQRF.parent)]) == 0
    assert capsys.readouterr().out.count(f"{GEQRF.resolve()}: passed") == 2


# ---- runs ---------------------------------------------------------------------------------------

def _runs(path: Path) -> list[RunResult]:
    return [RunResult.from_dict(r) for r in json.loads(path.read_text())["runs"]]


@pytest.mark.parametrize("compat", [False, True])
def test_a_refused_contestant_fails_at_the_gates_and_the_next_still_runs(tmp_path: Path, compat: bool) -> None:
    refused = tmp_path / "side.py"
    refused.write_text(GEQRF.read_text() + "# keeps to the default stream\n")
    out = tmp_path / "r.json"
    args = ["test", str(refused), "geqrf", "--shapes", TINY, "--device", "cpu", "--json", str(out)]
    assert main([*args, *(["--compat"] if compat else [])]) == 112
    first, second = _runs(out)
    assert first.status == "refused"
    assert first.stages == ()
    assert first.reason.startswith(f"precheck: [rule stream-word] {refused}: line ")
    data = json.loads(out.read_text())["runs"][0]
    assert data["precheck"]["outcomes"]["stream-word"] == "refuse"
    assert second.precheck is not None
    assert second.precheck.passed
    assert second.stages, "the next contestant ran no stage"


def test_kernelguard_refuses_in_a_benchmark_run(tmp_path: Path) -> None:
    kernel = tmp_path / "cache.py"
    kernel.write_text(CACHING_KERNEL)
    out = tmp_path / "r.json"
    assert main(["benchmark", str(kernel), "--shapes", TINY, "--device", "cpu", "--json", str(out)]) == 112
    (run,) = _runs(out)
    assert run.status == "refused"
    assert "[rule kernelguard]" in run.reason
    assert run.precheck.kernelguard["result"]["matched_patterns"][0]["pattern"] == "LAST_CALL_REPLAY"


def test_no_precheck_skips_the_gates_and_says_so(tmp_path: Path) -> None:
    kernel = tmp_path / "side.py"
    kernel.write_text(GEQRF.read_text() + "# keeps to the default stream\n")
    out = tmp_path / "r.json"
    args = ["test", str(kernel), "--shapes", TINY, "--device", "cpu", "--json", str(out), "--no-precheck"]
    assert main(args) == 0
    data = json.loads(out.read_text())["runs"][0]
    assert data["status"] == "pass"
    assert data["precheck"]["skipped"] is True
    assert set(data["precheck"]["outcomes"].values()) == {"skip"}


def test_results_without_a_precheck_still_load() -> None:
    run = RunResult({"name": "x", "path": "x.py", "sha256": ""}, "test", {}, "cpu", "cpu-clock", False, (), {})
    data = run.to_dict()
    del data["precheck"]
    assert RunResult.from_dict(data).precheck is None
