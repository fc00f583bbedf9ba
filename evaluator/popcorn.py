"""Drop-in for the contest's ``eval.py``: ``python -m evaluator.popcorn MODE SPECFILE``.

Started, like the contest's runner starts ``eval.py``, in a folder holding ``submission.py``;
reads the spec lines, runs that submission through the qrbench runner (its own worker process,
hardened unless ``--compat`` is given or ``QRBENCH_COMPAT=1``), and writes the contest's
``key: value`` lines to the descriptor named by ``POPCORN_FD``, with the contest's exit codes:
0 pass, 112 a check failed, 111 no ``POPCORN_FD``, 113 a bad spec file, 2 usage.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from evaluator.contestant import ContestantError, resolve_contestant
from evaluator.modes import MODE_NAMES, Mode
from evaluator.results import CaseResult, StageResult
from evaluator.runner import RunOptions, StagePlan, run_stage
from evaluator.shapes import ShapeFileError, ShapeSet

__all__ = ["main", "parse_spec_lines"]

EXIT_OK, EXIT_USAGE, EXIT_NO_FD, EXIT_FAILED, EXIT_BAD_SPEC = 0, 2, 111, 112, 113
_PART = re.compile(r"\s*([a-zA-Z]+):\s*([a-zA-Z]+|[+-]?[0-9]+)\s*")
_STAT_FIELDS = ("runs", "mean", "std", "err", "best", "worst")
_NO_LIMIT_S = 7 * 24 * 3600.0  # the contest's runner enforces its own limits around eval.py


class SpecError(ValueError):
    pass


def parse_spec_lines(text: str) -> list[tuple[str, dict[str, int | str]]]:
    """Each line ``key: value; key: value`` as (line, fields), integers parsed as the contest does."""
    specs = []
    for line in text.splitlines():
        fields: dict[str, int | str] = {}
        for part in line.split(";"):
            match = _PART.fullmatch(part)
            if match is None:
                raise SpecError(f"invalid test case: '{line}': '{part}'")
            key, value = match[1], match[2]
            fields[key] = int(value) if re.fullmatch(r"[+-]?[0-9]+", value) else value
        specs.append((line, fields))
    return specs


def _shape_set(specs: Sequence[dict[str, int | str]], spec_path: Path) -> ShapeSet:
    """The spec lines as both tests and benchmarks, validated as a shape file's cases are."""
    return ShapeSet.from_dict({
        "name": "popcorn",
        "path": str(spec_path),
        "timeouts_s": dict.fromkeys(MODE_NAMES, _NO_LIMIT_S),
        "tests": list(specs),
        "benchmarks": list(specs),
    })


class _Log:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, key: str, value: object) -> None:
        print(f"{key}: {value}", file=self.stream, flush=True)


def _case_lines(log: _Log, prefix: str, case: CaseResult, timed: bool) -> None:
    if timed and case.passed and case.stats is not None:
        stats = case.stats
        values = (stats.runs, stats.mean_ns, stats.std_ns, stats.err_ns, stats.best_ns, stats.worst_ns)
        for name, value in zip(_STAT_FIELDS, values, strict=True):
            log(f"{prefix}.{name}", value)
    elif case.passed:
        log(f"{prefix}.status", "pass")
        if case.message:
            log(f"{prefix}.message", case.message)
    else:
        log(f"{prefix}.status", "fail")
        log(f"{prefix}.error", case.message)


def _cases_to_report(stage: StageResult) -> list[CaseResult]:
    """The stage's cases; if the worker died or timed out, its reason goes to the first case
    it did not finish (the contest's runner would see ``eval.py`` itself fail there)."""
    cases = list(stage.cases)
    if stage.reason and all(c.passed or c.status == "skipped" for c in cases):
        for i, case in enumerate(cases):
            if case.status == "skipped":
                cases[i] = CaseResult(case.index, case.case, "error", stage.reason)
                break
    return cases


def _report(log: _Log, mode: Mode, lines: Sequence[str], stage: StageResult) -> bool:
    """Write the contest's lines for a finished stage; True when every case passed."""
    cases = _cases_to_report(stage)
    if mode == Mode.TEST:
        log("test-count", len(lines))
        for case in cases:
            log(f"test.{case.index}.spec", lines[case.index])
            _case_lines(log, f"test.{case.index}", case, timed=False)
    elif mode == Mode.PROFILE:
        log("benchmark-count", len(lines))
        case = cases[0]
        log("benchmark.0.spec", lines[0])
        if not case.passed:
            log("benchmark.0.status", "fail")
            log("benchmark.0.error", case.message)
    else:
        log("benchmark-count", len(lines))
        for case in cases:
            if case.status == "skipped" and mode == Mode.LEADERBOARD:
                break
            log(f"benchmark.{case.index}.spec", lines[case.index])
            _case_lines(log, f"benchmark.{case.index}", case, timed=True)
    passed = all(c.passed for c in cases) and stage.passed
    log("check", "pass" if passed else "fail")
    return passed


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    fd = os.getenv("POPCORN_FD")
    if not fd:
        return EXIT_NO_FD
    compat = "--compat" in argv or os.getenv("QRBENCH_COMPAT") == "1"
    argv = [a for a in argv if a != "--compat"]
    if len(argv) < 2 or argv[0] not in MODE_NAMES:
        return EXIT_USAGE
    mode, spec_path = Mode(argv[0]), Path(argv[1])
    secret_text = os.environ.pop("POPCORN_SEED", None)
    secret = int(secret_text) if secret_text else None
    try:
        specs = parse_spec_lines(spec_path.read_text())
    except OSError as exc:
        print(f"Could not open test file `{spec_path}`: {exc}", file=sys.stderr)
        return EXIT_BAD_SPEC
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_SPEC
    try:
        contestant = resolve_contestant(Path.cwd() / "submission.py")
    except ContestantError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    try:
        shapes = _shape_set([fields for _, fields in specs], spec_path)
    except ShapeFileError as exc:
        print(f"invalid test case: {exc}", file=sys.stderr)
        return EXIT_BAD_SPEC
    device = "cuda" if _cuda_available() else "cpu"
    stage, _ = run_stage(contestant, StagePlan(mode, mode, secret), shapes, RunOptions(device=device, compat=compat))
    with os.fdopen(int(fd), "w") as stream:
        passed = _report(_Log(stream), mode, [line for line, _ in specs], stage)
    return EXIT_OK if passed else EXIT_FAILED


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
