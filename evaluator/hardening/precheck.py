"""The contest service's submission gates: what gpu-mode/kernelbot refuses before it evaluates a file.

A file the service would refuse never reaches the leaderboard, however fast it is, so qrbench runs
the same gates first. Each gate is a named rule; its message starts ``[rule NAME]`` and says where
(file, line) and how to fix it. The gates run in the service's order and stop at the first refusal,
as the service does: ``submission-size`` and ``submission-encoding`` (the upload),
``stream-word`` (the Discord and API paths), then ``kernelguard`` (the backend, for benchmark,
profile and leaderboard submissions only). This module does not import torch: ``qrbench check``
stays fast.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from evaluator.modes import Mode

__all__ = [
    "GUARDED_MODES",
    "KERNELGUARD_POLICIES",
    "MAX_BYTES",
    "RULES",
    "Finding",
    "KernelguardUnavailable",
    "Precheck",
    "precheck_file",
    "precheck_source",
    "run_kernelguard",
]

# name -> what the service refuses (README's table lists the same names).
RULES: dict[str, str] = {
    "submission-size": "the file must not be empty nor larger than 1 MB (1,000,000 bytes)",
    "submission-encoding": "the file must be UTF-8 text",
    "stream-word": 'the text must not contain "stream" in any case, comments and strings included',
    "kernelguard": "kernelguard --api-mode must not classify the code as one to filter "
    "(benchmark, profile and leaderboard submissions)",
}

MAX_BYTES = 1_000_000  # the API's limit: len(content) > 1_000_000 is refused
# The modes the service runs kernelguard for: all but test.
GUARDED_MODES = frozenset({Mode.BENCHMARK, Mode.PROFILE, Mode.LEADERBOARD})
KERNELGUARD_TIMEOUT_S = 300.0  # the service's default KERNELGUARD_TIMEOUT_SEC
# enforce: the service's default (a filtered file, or a kernelguard that cannot run, is refused);
# warn: run it and report, refuse nothing; off: do not run it (the service without KERNELGUARD_ENABLED).
KERNELGUARD_POLICIES = ("enforce", "warn", "off")
_WORD = "stream"
_SHOWN_LINES = 5

REFUSE, WARN, NOTE = "refuse", "warn", "note"  # a Finding's levels; a gate's outcome is pass, refuse, warn or skip


def _message(rule: str, where: str, detail: str) -> str:
    """A gate's message: the rule's name first, as the hardening rules' messages do."""
    if rule not in RULES:
        raise ValueError(f"unknown gate {rule!r}")
    return f"[rule {rule}] {where}: {detail}"


@dataclass(frozen=True)
class Finding:
    """One gate's verdict on one file when it is not a plain pass: ``level`` is refuse, warn or note."""

    rule: str
    level: str
    message: str
    lines: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "level": self.level, "message": self.message, "lines": list(self.lines)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(data["rule"], data["level"], data["message"], tuple(data.get("lines", ())))


@dataclass(frozen=True)
class Precheck:
    """The gates' verdict on one file in one mode.

    ``outcomes`` maps each gate to pass, refuse, warn or skip (not run: an earlier gate refused,
    the mode is not guarded, or the policy is off). ``kernelguard`` is kernelguard's whole record:
    its command, version, seconds, JSON result and any error. ``skipped`` is a run with
    ``--no-precheck``: no gate ran.
    """

    file: str
    mode: str
    kernelguard_policy: str = "enforce"
    outcomes: dict[str, str] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    kernelguard: dict[str, Any] | None = None
    skipped: bool = False

    @property
    def passed(self) -> bool:
        return not any(f.level == REFUSE for f in self.findings)

    @property
    def reason(self) -> str:
        """The refusing gate's message, or "" when every gate passed."""
        return next((f.message for f in self.findings if f.level == REFUSE), "")

    @classmethod
    def not_run(cls, file: str, mode: str) -> Precheck:
        """The record of a run started with ``--no-precheck``."""
        return cls(file, mode, "off", dict.fromkeys(RULES, "skip"), skipped=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "mode": self.mode,
            "passed": self.passed,
            "skipped": self.skipped,
            "kernelguard_policy": self.kernelguard_policy,
            "outcomes": dict(self.outcomes),
            "findings": [f.to_dict() for f in self.findings],
            "kernelguard": self.kernelguard,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Precheck:
        return cls(
            file=data.get("file", ""),
            mode=data.get("mode", ""),
            kernelguard_policy=data.get("kernelguard_policy", "enforce"),
            outcomes=dict(data.get("outcomes", {})),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", ())),
            kernelguard=data.get("kernelguard"),
            skipped=bool(data.get("skipped", False)),
        )


def _size_finding(data: bytes, where: str) -> Finding | None:
    if not data:
        return Finding("submission-size", REFUSE, _message(
            "submission-size", where, "the file is empty (the service: \"Empty file submitted. Please provide a "
            "file with code.\")"))
    if len(data) > MAX_BYTES:
        return Finding("submission-size", REFUSE, _message(
            "submission-size", where, f"the file has {len(data):,} bytes, over the service's limit of "
            f"{MAX_BYTES:,} (\"Submission file is too large (limit: 1MB).\"); move data out of the source, "
            "e.g. compute tables at import"))
    return None


def _encoding_finding(data: bytes, where: str) -> Finding | None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return Finding("submission-encoding", REFUSE, _message(
            "submission-encoding", where, f"line {line}: byte {exc.start} (0x{data[exc.start]:02x}) is not "
            "UTF-8 (the service: \"Failed to decode submission file content as UTF-8.\"); save the file as UTF-8"),
            (line,))
    return None


def _stream_finding(data: bytes, where: str) -> Finding | None:
    text = data.decode("utf-8")
    if _WORD not in text.lower():
        return None
    hits = [(i, line.strip()) for i, line in enumerate(text.split("\n"), 1) if _WORD in line.lower()]
    shown = "; ".join(f"line {i}: {line[:100]!r}" for i, line in hits[:_SHOWN_LINES])
    more = f" and {len(hits) - _SHOWN_LINES} more line(s)" if len(hits) > _SHOWN_LINES else ""
    return Finding("stream-word", REFUSE, _message(
        "stream-word", where, f"{shown}{more}. The service refuses any file whose text contains "
        f"\"{_WORD}\" in any case, comments and strings included (\"Your code contains work on another "
        f"{_WORD}...\"). Remove the word everywhere: capture CUDA graphs with torch.cuda.graph(g) alone (it "
        "captures on an internal side stream of its own; warm up on the current stream before it), and rename "
        "or rephrase identifiers, comments and docstrings"), tuple(i for i, _ in hits))


class KernelguardUnavailable(RuntimeError):
    """kernelguard could not give a verdict: not found, timed out, failed, or printed no JSON object."""


# kernelguard's console script, run by this interpreter: for a package installed where no script
# lands on PATH (``pip install --target``, a folder on PYTHONPATH).
RUN_IMPORTED_KERNELGUARD = "import sys; from kernelguard import main; sys.exit(main())"


def _kernelguard_command() -> list[str]:
    """``KERNELGUARD_COMMAND`` (as the service reads it), else the one beside this interpreter, else
    the package this interpreter imports, else PATH's. The package before PATH: its version is the
    one the record states (:func:`_installed_version`), where a script on PATH may belong to another
    environment, or to a ``pip install --target`` whose modules its own interpreter cannot import."""
    configured = os.environ.get("KERNELGUARD_COMMAND", "").strip()
    if configured:
        return shlex.split(configured)
    beside = Path(sys.executable).parent / "kernelguard"
    if beside.is_file():
        return [str(beside)]
    if find_spec("kernelguard") is not None:
        return [sys.executable, "-c", RUN_IMPORTED_KERNELGUARD]
    found = shutil.which("kernelguard") or shutil.which("kguard")
    if found is not None:
        return [found]
    raise KernelguardUnavailable("kernelguard is not installed (not beside the interpreter, not on PATH, "
                                 "not importable)")


def _installed_version() -> str | None:
    try:
        return metadata.version("kernelguard")
    except metadata.PackageNotFoundError:
        return None


def run_kernelguard(code: str, timeout_s: float = KERNELGUARD_TIMEOUT_S) -> dict[str, Any]:
    """kernelguard's JSON verdict on ``code``, run as the service runs it: ``--api-mode``, code on stdin,
    the last non-empty output line parsed as one JSON object. Raises :class:`KernelguardUnavailable`."""
    command = [*_kernelguard_command(), "--api-mode"]
    try:
        proc = subprocess.run(command, input=code.encode(), capture_output=True, timeout=timeout_s, check=False,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    except FileNotFoundError as exc:
        raise KernelguardUnavailable(f"cannot start {command[0]}: {exc.strerror or exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise KernelguardUnavailable(f"{shlex.join(command)} gave no verdict within {timeout_s:g} s") from exc
    stdout = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        tail = (proc.stderr.decode(errors="replace").strip() or stdout.strip())[-300:]
        raise KernelguardUnavailable(f"{shlex.join(command)} exited with code {proc.returncode}: {tail}")
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        raise KernelguardUnavailable(f"{shlex.join(command)} printed no JSON object: {stdout.strip()[-300:]!r}")
    return result


def _patterns(result: dict[str, Any]) -> list[str]:
    items = result.get("matched_patterns", [])
    return sorted({str(item.get("pattern", "unknown")) for item in items if isinstance(item, dict)})


def _kernelguard_check(text: str, where: str, policy: str, timeout_s: float) -> tuple[Finding | None, dict[str, Any]]:
    """(finding or None, kernelguard's record) under ``policy`` (enforce or warn)."""
    fails = REFUSE if policy == "enforce" else WARN
    record: dict[str, Any] = {"command": None, "version": _installed_version(), "result": None, "error": None}
    started = time.monotonic()
    try:
        record["command"] = _kernelguard_command()
        result = run_kernelguard(text, timeout_s)
    except KernelguardUnavailable as exc:
        record["error"] = str(exc)
        consequence = ("the service refuses a file it cannot check (fail closed): install kernelguard==0.3.2, "
                       "or pass --kernelguard warn (or off) to go on without it"
                       if fails == REFUSE else "going on without it (--kernelguard warn)")
        detail = f"no verdict: {exc}; {consequence}"
        return Finding("kernelguard", fails, _message("kernelguard", where, detail)), record
    finally:
        record["seconds"] = round(time.monotonic() - started, 3)
    record["result"] = result
    classification = str(result.get("classification", "unknown"))
    patterns = ", ".join(_patterns(result)) or "none"
    if result.get("should_filter"):
        reason = result.get("filter_reason") or classification
        evidence = "; ".join(str(p.get("evidence", "")) for p in result.get("matched_patterns", [])
                             if isinstance(p, dict) and p.get("evidence"))
        return Finding("kernelguard", fails, _message(
            "kernelguard", where, f"kernelguard {record['version'] or ''} classifies it {classification} and "
            f"filters it ({reason}); matched rules: {patterns}" + (f" ({evidence})" if evidence else "")
            + ". The service refuses it in benchmark, profile and leaderboard mode: remove what the rules "
            "match (e.g. output caching, timer or module patching)")), record
    if classification != "valid":
        return Finding("kernelguard", NOTE, _message(
            "kernelguard", where, f"kernelguard classifies it {classification} (not filtered: the service "
            f"accepts and logs it); matched rules: {patterns}")), record
    return None, record


def _outcome(finding: Finding | None) -> str:
    return "pass" if finding is None or finding.level == NOTE else finding.level


def precheck_source(data: bytes, where: str, mode: str, kernelguard: str = "enforce",
                    timeout_s: float = KERNELGUARD_TIMEOUT_S) -> Precheck:
    """Run the gates on a file's bytes, in the service's order, stopping at the first refusal."""
    if kernelguard not in KERNELGUARD_POLICIES:
        raise ValueError(f"kernelguard policy {kernelguard!r} is not one of {KERNELGUARD_POLICIES}")
    outcomes = dict.fromkeys(RULES, "skip")
    findings: list[Finding] = []
    for rule, gate in (("submission-size", _size_finding), ("submission-encoding", _encoding_finding),
                       ("stream-word", _stream_finding)):
        finding = gate(data, where)
        outcomes[rule] = _outcome(finding)
        if finding is not None:
            findings.append(finding)
            if finding.level == REFUSE:
                return Precheck(where, mode, kernelguard, outcomes, tuple(findings))
    record = None
    if kernelguard != "off" and mode in GUARDED_MODES:
        finding, record = _kernelguard_check(data.decode("utf-8"), where, kernelguard, timeout_s)
        outcomes["kernelguard"] = _outcome(finding)
        findings.extend([finding] if finding is not None else [])
    return Precheck(where, mode, kernelguard, outcomes, tuple(findings), record)


def precheck_file(path: Path, mode: str, kernelguard: str = "enforce",
                  timeout_s: float = KERNELGUARD_TIMEOUT_S) -> Precheck:
    """Run the gates on the file at ``path`` (read errors propagate as OSError)."""
    return precheck_source(Path(path).read_bytes(), str(path), mode, kernelguard, timeout_s)
