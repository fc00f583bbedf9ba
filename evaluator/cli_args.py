"""Command-line pieces shared by ``qrbench``'s subcommands (local runs, ``modal rank``, ``report``):
the run options, device choice, contestant resolution, results paths, and the usage error.

Nothing here imports torch: ``qrbench --help`` builds its parser from these.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator.contestant import CONTESTANTS_DIR, Contestant, ContestantError, discover_contestants, resolve_contestant
from evaluator.hardening.precheck import KERNELGUARD_POLICIES, Precheck

if TYPE_CHECKING:
    from evaluator.shapes import ShapeSet

__all__ = [
    "EXIT_BAD_SHAPES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "REPORTS_DIR",
    "RESULTS_DIR",
    "UsageError",
    "add_cases_option",
    "add_kernelguard_option",
    "add_run_options",
    "chosen_cases",
    "measurement_options",
    "pick_device",
    "precheck_text",
    "resolve_contestants",
    "results_path",
    "sigterm_as_interrupt",
    "timing_overrides",
    "unused_path",
    "writable_file",
]

EXIT_OK, EXIT_USAGE, EXIT_FAILED, EXIT_BAD_SHAPES = 0, 2, 112, 113
EXIT_INTERRUPTED, EXIT_PIPE = 130, 141  # as a shell reports a process stopped by SIGINT, SIGPIPE
# Relative: results and reports go under the directory qrbench runs in, not into its checkout.
RESULTS_DIR = Path("results")
REPORTS_DIR = Path("reports")


class UsageError(Exception):
    """Bad command line: reported with exit code 2."""


class OutputClosed(KeyboardInterrupt):
    """The reader of qrbench's output went away (``qrbench ... | head``): the run stops as after
    Ctrl-C (the runner saves the stage as interrupted) and qrbench exits quietly with 141."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While open, SIGTERM stops a run as Ctrl-C does (``KeyboardInterrupt("SIGTERM")``): the
    runner saves the stage it was in as interrupted, with its finished cases. ``timeout``, batch
    schedulers and ``kill`` send SIGTERM, whose default would end the process with the running
    case's samples unsaved and its stage left "running". Off the main thread nothing changes
    (Python delivers signals there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cuda_available() -> bool:
    import torch  # imported here: `qrbench --help` should not pay for it

    return torch.cuda.is_available()


def pick_device(choice: str) -> str:
    """``auto`` -> CUDA when present, else the CPU; ``cuda`` without a GPU is a usage error."""
    if choice == "auto":
        return "cuda" if _cuda_available() else "cpu"
    if choice == "cuda" and not _cuda_available():
        raise UsageError("--device cuda: no CUDA device is available here")
    return choice


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options every command that runs kernels takes."""
    p.add_argument("--shapes", help="bundled shape set name (qr_v2, smoke) or a shape file path "
                                    "(default: qr_v2 on CUDA, smoke on the CPU)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where kernels run (default: auto = CUDA when present)")
    p.add_argument("--seed", type=int, help="combine every spec seed with this seed, as the contest's POPCORN_SEED")
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="results file (default: results/<time>-<mode>-<shapes>.json in this directory; a name "
                        "ending in .gz is written gzip-compressed); an existing file is refused unless --force")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing --json file (and the leaderboard page of rank)")
    p.add_argument("--compat", action="store_true",
                   help="the contest's exact protocol: no hardening rules, published checker path")
    p.add_argument("--budget", type=float, metavar="S",
                   help="per-case time budget of timed passes in seconds (deviates from the contest's 10/30 s)")
    p.add_argument("--repeats", type=int, metavar="N", help="cap on timed repeats per case (deviates from the contest)")
    p.add_argument("--no-precheck", dest="precheck", action="store_false",
                   help="skip the contest service's submission gates (lab work; the results say so)")
    p.add_argument("--margin-warn", type=float, default=4.0, metavar="FACTOR",
                   help="warn when a passing kernel's worst residual is within FACTOR of a checker gate "
                        "(gate / worst < FACTOR); 1 never warns (default: %(default)g)")
    p.add_argument("--discard-on-throttle", action="store_true",
                   help="leave timed repeats the GPU throttled in (NVML: power cap, thermal, HW slowdown, "
                        "power brake) out of the stopping rule and statistics; kept in the results, marked "
                        "(not with --compat)")
    p.add_argument("--mirror-check", action="store_true",
                   help="before each checked timed repeat, have the kernel's worker run the check again in its "
                        "own process, as the contest's process does beside the kernel (GPU; not with --compat)")
    add_kernelguard_option(p)


def add_cases_option(p: argparse.ArgumentParser) -> None:
    """``--cases``: the benchmark cases a sweep or a comparison times (see :func:`chosen_cases`)."""
    p.add_argument("--cases", metavar="LABEL,...",
                   help="only these benchmark cases, by label; shell patterns match several "
                        "(e.g. '20x32,640x512*': 20x32 and every 640x512 case)")


def chosen_cases(shapes: ShapeSet, cases: str | None) -> ShapeSet:
    """The shape set with only the benchmark cases ``--cases`` names or matches (all without it)."""
    if cases is None:
        return shapes
    wanted = [w.strip() for w in cases.split(",") if w.strip()]
    kept = tuple(c for c in shapes.benchmarks if any(fnmatch.fnmatchcase(c.label, w) for w in wanted))
    if not kept:
        labels = ", ".join(c.label for c in shapes.benchmarks)
        raise UsageError(f"--cases {cases}: no benchmark case of {shapes.name} matches (its cases: {labels})")
    return replace(shapes, benchmarks=kept)


def add_kernelguard_option(p: argparse.ArgumentParser) -> None:
    """How the kernelguard gate (evaluator.hardening.precheck) treats its verdict: runs and
    ``qrbench check`` share it."""
    p.add_argument("--kernelguard", choices=KERNELGUARD_POLICIES, default="enforce",
                   help="enforce: a file kernelguard filters, or one it cannot check, is refused, as the service "
                        "does; warn: report, refuse nothing; off: do not run it (default: enforce)")


def timing_overrides(args: argparse.Namespace) -> dict[str, float | int]:
    """The shape set's timing settings that ``--budget`` and ``--repeats`` replace."""
    overrides: dict[str, float | int] = {}
    if args.budget is not None:
        if args.budget <= 0:
            raise UsageError("--budget must be positive")
        overrides.update(benchmark_budget_s=args.budget, leaderboard_budget_s=args.budget)
    if args.repeats is not None:
        if args.repeats < 1:
            raise UsageError("--repeats must be at least 1")
        overrides.update(benchmark_repeats=args.repeats, leaderboard_repeats=args.repeats)
    return overrides


def measurement_options(args: argparse.Namespace) -> dict[str, float | bool]:
    """``--margin-warn``, ``--discard-on-throttle`` and ``--mirror-check``, checked, as
    :class:`RunOptions` fields.

    ``--discard-on-throttle`` is refused with ``--compat``: the contest's protocol keeps every
    repeat; so is ``--mirror-check``: its check already runs beside the kernel.
    """
    if not args.margin_warn >= 1:
        raise UsageError(f"--margin-warn must be at least 1 (1 never warns), got {args.margin_warn:g}")
    if args.discard_on_throttle and args.compat:
        raise UsageError("--discard-on-throttle cannot be used with --compat: the contest's protocol keeps every "
                         "repeat")
    if args.mirror_check and args.compat:
        raise UsageError("--mirror-check cannot be used with --compat: the contest's protocol checks beside the "
                         "kernel already")
    return {"margin_warn": args.margin_warn, "discard_on_throttle": args.discard_on_throttle,
            "mirror_check": args.mirror_check}


def resolve_contestants(refs: Sequence[str]) -> list[Contestant]:
    """The named contestants, or every one under ``contestants/`` when none is named."""
    try:
        if refs:
            return [resolve_contestant(r) for r in refs]
        found = discover_contestants()
    except ContestantError as exc:
        raise UsageError(str(exc)) from exc
    if not found:
        raise UsageError(f"no contestants found under {CONTESTANTS_DIR}")
    return found


def results_path(args: argparse.Namespace, mode: str, shapes: ShapeSet) -> Path:
    """``--json``, or a new time-stamped file under ``results/`` of the current directory; checked
    before anything runs, so a run never ends in a file it cannot write or one it would clobber."""
    if args.json is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = unused_path(RESULTS_DIR / f"{stamp}-{mode}-{shapes.name}.json")
    elif args.json.exists() and not args.json.is_dir() and not getattr(args, "force", False):
        raise UsageError(f"--json {args.json}: the file exists; pass --force to overwrite it")
    else:
        path = args.json
    writable_file(path, "--json")
    return path


def unused_path(path: Path) -> Path:
    """``path``, or the first of ``name-2.ext``, ``name-3.ext``, ... that does not exist."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def writable_file(path: Path, option: str) -> None:
    """A usage error unless a file could be written at ``path`` (its missing folders made)."""
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a folder")
    for folder in path.absolute().parents:  # the nearest folder that exists decides
        if not folder.exists():
            continue
        if not folder.is_dir():
            raise UsageError(f"{option} {path}: {folder} is a file, not a folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {path}: cannot write into {folder}")
        return


def precheck_text(verdict: Precheck) -> str:
    """One file's verdict: which gates passed, refused, warned or did not run, then what they found."""
    outcomes = ", ".join(f"{rule} {outcome}" for rule, outcome in verdict.outcomes.items())
    result = (verdict.kernelguard or {}).get("result") or {}
    classified = f"; kernelguard: {result['classification']}" if "classification" in result else ""
    head = f"{verdict.file}: {'passed' if verdict.passed else 'REFUSED'} ({outcomes}{classified})"
    return "\n".join([head, *(f"  {finding.message}" for finding in verdict.findings)])
