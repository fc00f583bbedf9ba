"""Command-line pieces shared by ``qrbench``'s subcommands (local runs, ``modal rank``, ``report``):
the run options, device choice, contestant resolution, results paths, and the usage error."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from evaluator.contestant import CONTESTANTS_DIR, Contestant, ContestantError, discover_contestants, resolve_contestant
from evaluator.precheck import KERNELGUARD_POLICIES
from evaluator.shapes import ShapeSet

__all__ = [
    "EXIT_BAD_SHAPES",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "REPORTS_DIR",
    "RESULTS_DIR",
    "UsageError",
    "add_kernelguard_option",
    "add_run_options",
    "pick_device",
    "resolve_contestants",
    "results_path",
    "timing_overrides",
]

EXIT_OK, EXIT_USAGE, EXIT_FAILED, EXIT_BAD_SHAPES = 0, 2, 112, 113
REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "results"
REPORTS_DIR = REPO / "reports"


class UsageError(Exception):
    """Bad command line: reported with exit code 2."""


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
                   help="results file (default: results/<time>-<mode>-<shapes>.json)")
    p.add_argument("--compat", action="store_true",
                   help="the contest's exact protocol: no hardening rules, published checker path")
    p.add_argument("--budget", type=float, metavar="S",
                   help="per-case time budget of timed passes in seconds (deviates from the contest's 10/30 s)")
    p.add_argument("--repeats", type=int, metavar="N", help="cap on timed repeats per case (deviates from the contest)")
    p.add_argument("--no-precheck", dest="precheck", action="store_false",
                   help="skip the contest service's submission gates (lab work; the results say so)")
    add_kernelguard_option(p)


def add_kernelguard_option(p: argparse.ArgumentParser) -> None:
    """How the kernelguard gate (evaluator.precheck) treats its verdict: runs and ``qrbench check`` share it."""
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
    """``--json``, or a new time-stamped file under ``results/``."""
    if args.json is not None:
        return args.json
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return RESULTS_DIR / f"{stamp}-{mode}-{shapes.name}.json"
