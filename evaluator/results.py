"""The results document: what a run measured, in JSON, written atomically.

One file holds the runs of one invocation (one run per contestant). Times are nanoseconds
(``*_ns``) inside and seconds only in scores (``score_s``). Every file carries
``schema_version``; :func:`load_results` migrates older files and refuses newer ones.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evaluator import __version__
from evaluator.documents import is_gzip, read_json
from evaluator.hardening.precheck import Precheck
from evaluator.margin import DEFAULT_MARGIN_WARN, Margin, case_margins, gate_fractions, margin_warning, tightest
from evaluator.measure.clocks import RepeatClocks
from evaluator.measure.stats import Stats, geomean
from evaluator.measure.witness import ParentClock
from evaluator.modes import STAGES_BY_MODE
from evaluator.shapes import Case

__all__ = [
    "INTERRUPTED",
    "RUNNING",
    "SCHEMA_VERSION",
    "CaseResult",
    "ResultsError",
    "RunResult",
    "StageResult",
    "load_results",
    "now_iso",
    "results_from",
    "write_results",
]

SCHEMA_VERSION = 4
KIND = "qrbench-results"

# Statuses of a case or stage. "error" is an exception in the kernel or the harness, "crash"
# a worker that died, "timeout" a run stopped at its time limit, "skipped" a case never reached.
# A run whose stages all passed but that lacks some of its mode's stages (it was stopped, or
# its file was written mid-run) is "incomplete", never "pass". A run the submission gates
# (evaluator.hardening.precheck) refused has no stages and is "refused". A stage whose file was written while
# it ran is "running"; one the user stopped (Ctrl-C, or the reader of qrbench's output went away) is
# "interrupted", and so is its run: neither a pass nor the kernel's failure.
PASSED = "pass"
INCOMPLETE = "incomplete"
REFUSED = "refused"
RUNNING = "running"
INTERRUPTED = "interrupted"

class ResultsError(ValueError):
    """A results file that cannot be read; the message names the file."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class CaseResult:
    """One case of one stage: its verdict, and its timings when it was timed.

    ``samples_ns`` are the per-call times the statistics use: every timed repeat's, less those
    discarded as throttled (``--discard-on-throttle``). ``clocks`` holds the GPU's clocks around
    each timed repeat (discarded ones too, marked, with their times), when they could be read.
    ``diagnostics`` holds the checker's residuals (a timed case: the worst over all its checks).
    ``parent_clock`` holds each timed repeat's claim beside the parent's witness of it (hardened
    runs; :mod:`evaluator.measure.witness`). ``retimed`` is the rule message that set aside the
    case's first timed attempt, whose repeats are in none of these (:func:`evaluator.protocol.benchmark_case`).
    """

    index: int
    case: Case
    status: str
    message: str = ""
    stats: Stats | None = None
    samples_ns: tuple[float, ...] = ()
    diagnostics: dict[str, float | int] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    clocks: tuple[RepeatClocks, ...] = ()
    parent_clock: ParentClock | None = None
    retimed: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "spec": self.case.fields(),
            "label": self.case.label,
            "status": self.status,
            "message": self.message,
            "stats": self.stats.to_dict() if self.stats else None,
            "samples_ns": list(self.samples_ns),
            "diagnostics": self.diagnostics,
            "margin": gate_fractions(self.diagnostics),
            "seeds": list(self.seeds),
            "clocks": [r.to_dict() for r in self.clocks],
            "parent_clock": self.parent_clock.to_dict() if self.parent_clock else None,
            "retimed": self.retimed,
            "work": {"flops": self.case.flops, "min_bytes": self.case.min_bytes},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        spec = data["spec"]
        return cls(
            index=int(data["index"]),
            case=Case(spec["batch"], spec["n"], spec["cond"], spec["seed"], spec.get("case")),
            status=data["status"],
            message=data.get("message", ""),
            stats=Stats.from_dict(data["stats"]) if data.get("stats") else None,
            samples_ns=tuple(data.get("samples_ns", ())),
            diagnostics=dict(data.get("diagnostics", {})),
            seeds=tuple(data.get("seeds", ())),
            clocks=tuple(RepeatClocks.from_dict(r) for r in data["clocks"]),
            parent_clock=ParentClock.from_dict(data["parent_clock"]) if data.get("parent_clock") else None,
            retimed=data.get("retimed", ""),
        )


@dataclass(frozen=True)
class StageResult:
    """One pass over a shape set in one contest mode (one worker process).

    ``name`` is the stage's role (``test``, ``benchmark``, ``ranked``, ``ranked-secret``,
    ``profile``); ``seed`` is the secret seed combined into every spec seed, if any;
    ``breakdown_s`` is where ``wall_s`` went, by activity (:mod:`evaluator.measure.ledger`; hardened
    stages only). ``output`` is the tail of the worker's stdout and stderr (what the kernel
    printed, capped), kept for debugging a failure.
    """

    name: str
    mode: str
    status: str
    cases: tuple[CaseResult, ...] = ()
    seed: int | None = None
    reason: str = ""
    wall_s: float = 0.0
    profile_table: str = ""
    breakdown_s: dict[str, float] = field(default_factory=dict)
    output: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "status": self.status,
            "seed": self.seed,
            "reason": self.reason,
            "wall_s": self.wall_s,
            "cases": [c.to_dict() for c in self.cases],
            "profile_table": self.profile_table,
            "breakdown_s": self.breakdown_s,
            "output": self.output,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageResult:
        return cls(
            name=data["name"],
            mode=data["mode"],
            status=data["status"],
            cases=tuple(CaseResult.from_dict(c) for c in data.get("cases", ())),
            seed=data.get("seed"),
            reason=data.get("reason", ""),
            wall_s=float(data.get("wall_s", 0.0)),
            profile_table=data.get("profile_table", ""),
            breakdown_s={k: float(v) for k, v in data.get("breakdown_s", {}).items()},
            output=data.get("output", ""),
        )

    @property
    def margins(self) -> dict[str, Margin]:
        """Per checker gate, the smallest margin over the stage's passing cases (:mod:`evaluator.margin`)."""
        return tightest(m for case in self.cases if case.passed
                        for m in case_margins(case.diagnostics, f"{self.name} · {case.case.label}"))

    def geomean_s(self) -> float | None:
        """Geometric mean of the per-case means in seconds, if every case passed and was timed."""
        means = [c.stats.mean_ns / 1e9 for c in self.cases if c.stats is not None and c.passed]
        if not self.passed or not means or len(means) != len(self.cases):
            return None
        return geomean(means)


@dataclass(frozen=True)
class RunResult:
    """Everything one contestant's run produced, with the environment it ran in.

    ``precheck`` is the submission gates' verdict (None in files written before the gates existed).
    ``params`` are the knob values a sweep timed this run with (:mod:`evaluator.axes`; empty for
    the contestant's own plan, and in files written before sweeps).
    ``margin_warn``: the run warns when a passing case's numerical margin on a checker gate is
    under this factor (:mod:`evaluator.margin`). ``mirror_check``: its worker ran each check again
    before the next timed repeat (:class:`evaluator.runner.RunOptions`; False in older files).
    """

    contestant: dict[str, str]
    mode: str
    shapes: dict[str, Any]
    device: str
    timer: str
    compat: bool
    stages: tuple[StageResult, ...]
    environment: dict[str, Any]
    seed: int | None = None
    started_at: str = field(default_factory=now_iso)
    evaluator_version: str = __version__
    precheck: Precheck | None = None
    params: dict[str, Any] = field(default_factory=dict)
    margin_warn: float = DEFAULT_MARGIN_WARN
    mirror_check: bool = False

    @property
    def no_stage_failed(self) -> bool:
        """True while every stage run so far passed (a partial run can still go on)."""
        return all(stage.passed for stage in self.stages)

    @property
    def missing_stages(self) -> tuple[str, ...]:
        """The mode's stages this run has no result for."""
        return tuple(name for name in STAGES_BY_MODE.get(self.mode, ()) if self.stage(name) is None)

    @property
    def status(self) -> str:
        if self.precheck is not None and not self.precheck.passed:
            return REFUSED
        for stage in self.stages:
            if not stage.passed:
                return stage.status
        return INCOMPLETE if self.missing_stages or not self.stages else PASSED

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def reason(self) -> str:
        """Why the run failed: the refusing gate, the first failing stage and case, or its crash reason."""
        if self.precheck is not None and not self.precheck.passed:
            return f"precheck: {self.precheck.reason}"
        for stage in self.stages:
            if stage.passed:
                continue
            for case in stage.cases:
                if not case.passed and case.status != "skipped":
                    return f"{stage.name}: {case.case.label}: {case.message}"
            return f"{stage.name}: {stage.reason or stage.status}"
        if self.status == INCOMPLETE:
            return f"incomplete: no result for stage(s) {', '.join(self.missing_stages)}"
        return ""

    @property
    def margins(self) -> dict[str, Margin]:
        """Per checker gate, the smallest margin over every passing case of every stage."""
        return tightest(m for stage in self.stages for m in stage.margins.values())

    @property
    def margin_warning(self) -> str | None:
        """The warning when a gate's margin is under ``margin_warn``, else None."""
        return margin_warning(self.margins, self.margin_warn)

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)

    @property
    def scored_stage(self) -> StageResult | None:
        """The stage whose timings make the score: the public ranked pass, else the benchmark."""
        return self.stage("ranked") or self.stage("benchmark")

    @property
    def score_s(self) -> float | None:
        """Geometric mean of per-case means (s); None unless every stage passed."""
        stage = self.scored_stage
        if stage is None or not self.passed:
            return None
        return stage.geomean_s()

    def with_stage(self, stage: StageResult) -> RunResult:
        """This run with ``stage`` added, or replacing the stage of the same name."""
        kept = tuple(s for s in self.stages if s.name != stage.name)
        return replace(self, stages=(*kept, stage))

    def to_dict(self) -> dict[str, Any]:
        return {
            "contestant": self.contestant,
            "mode": self.mode,
            "shapes": self.shapes,
            "device": self.device,
            "timer": self.timer,
            "compat": self.compat,
            "seed": self.seed,
            "started_at": self.started_at,
            "evaluator_version": self.evaluator_version,
            "environment": self.environment,
            "status": self.status,
            "reason": self.reason,
            "score_s": self.score_s,
            "precheck": self.precheck.to_dict() if self.precheck is not None else None,
            "params": self.params,
            "margin_warn": self.margin_warn,
            "margin_warning": self.margin_warning,
            "mirror_check": self.mirror_check,
            "stages": [s.to_dict() for s in self.stages],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            contestant=dict(data["contestant"]),
            mode=data["mode"],
            shapes=dict(data["shapes"]),
            device=data["device"],
            timer=data["timer"],
            compat=bool(data.get("compat", False)),
            stages=tuple(StageResult.from_dict(s) for s in data.get("stages", ())),
            environment=dict(data.get("environment", {})),
            seed=data.get("seed"),
            started_at=data.get("started_at", ""),
            evaluator_version=data.get("evaluator_version", ""),
            precheck=Precheck.from_dict(data["precheck"]) if data.get("precheck") else None,
            params=dict(data.get("params") or {}),
            margin_warn=float(data["margin_warn"]),
            mirror_check=bool(data.get("mirror_check", False)),
        )


def _document(runs: list[RunResult], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "written_at": now_iso(),
        "evaluator_version": __version__,
        "runs": [r.to_dict() for r in runs],
        **(extra or {}),
    }


def write_results(path: Path, runs: list[RunResult], extra: dict[str, Any] | None = None) -> None:
    """Write ``runs`` to ``path`` atomically: readers see the old file or the new, never half;
    gzip-compressed where the name ends in ``.gz``.
    ``extra`` adds top-level sections that :func:`load_results` leaves alone (a paired
    comparison's, :mod:`evaluator.paired_results`)."""
    text = json.dumps(_document(runs, extra), indent=1, allow_nan=False) + "\n"
    data = gzip.compress(text.encode(), mtime=0) if is_gzip(path) else text.encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for sharing
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added each case's clock readings (none before) and each run's margin warning
    factor (the default: a version-1 run is judged as a new one would be)."""
    for run in doc.get("runs", ()):
        run.setdefault("margin_warn", DEFAULT_MARGIN_WARN)
        for stage in run.get("stages", ()):
            for case in stage.get("cases", ()):
                case.setdefault("clocks", [])
    return {**doc, "schema_version": 2}


def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added each timed case's claims beside the parent's witnesses (none before)."""
    for run in doc.get("runs", ()):
        for stage in run.get("stages", ()):
            for case in stage.get("cases", ()):
                case.setdefault("parent_clock", None)
    return {**doc, "schema_version": 3}


def _v3_to_v4(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 4 added the message that set aside a case's first timed attempt (none before)."""
    for run in doc.get("runs", ()):
        for stage in run.get("stages", ()):
            for case in stage.get("cases", ()):
                case.setdefault("retimed", "")
    return {**doc, "schema_version": 4}


# version -> function turning a document of that version into one of the next version.
_MIGRATIONS: dict[int, Any] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def load_results(path: Path) -> list[RunResult]:
    """Read a results file, migrating it to the current schema."""
    return results_from(read_json(path, ResultsError), path)


def results_from(doc: Any, path: Path) -> list[RunResult]:
    """The runs of a results document read from ``path`` (named in errors), migrated to the
    current schema: for readers that need the document's other sections too."""
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ResultsError(f"{path}: not a qrbench results file (no kind: {KIND})")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {version!r} is newer than this qrbench ({SCHEMA_VERSION})")
    if version not in _MIGRATIONS and version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {version!r} was never written by qrbench")
    try:
        while version < SCHEMA_VERSION:
            doc = _MIGRATIONS[version](doc)
            version += 1
        return [RunResult.from_dict(r) for r in doc["runs"]]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{path}: malformed run entry: {exc!r}") from exc
