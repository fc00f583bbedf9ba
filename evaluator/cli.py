"""``qrbench``: parse, call the library, print, exit with the contest's codes.

Exit codes: 0 everything passed, 112 a check failed (or a kernel crashed, hung or raised, or the
contest service's submission gates refused a file), 113 a bad shape file, 2 a usage error
(unknown contestant, missing file, bad option, a results file that exists or cannot be written),
130 interrupted (Ctrl-C: what was measured is saved, and where is printed), 141 the reader of the
output went away (``qrbench ... | head``).

This module imports no torch (the run commands import :mod:`evaluator.run_command` when they run),
so ``--help`` and ``--version`` answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from evaluator import __version__
from evaluator.cli_args import (
    EXIT_BAD_SHAPES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
    REPORTS_DIR,
    OutputClosed,
    UsageError,
    add_kernelguard_option,
    add_run_options,
    precheck_text,
    resolve_contestants,
    sigterm_as_interrupt,
)
from evaluator.hardening.precheck import precheck_file
from evaluator.modes import MODE_NAMES, Mode

__all__ = ["main"]

# Subcommands whose modules bring torch or numpy: registered for real only when named on the
# command line, otherwise (``qrbench --help``) listed by their help alone.
_DEFERRED = {
    "report": ("evaluator.report.command", "Markdown report and PNG plots from results files"),
    "modal": ("evaluator.cloud.command", "run rankings on Modal cloud GPUs (B200 by default)"),
    "compare": ("evaluator.compare_command", "paired, interleaved timing of contestants: time ratios and verdicts"),
    "sweep": ("evaluator.sweep_command", "time a kernel's knobs (its PLAN_AXES) over a grid of variants"),
}


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: deferred subcommands are registered in full only when named there
    (all of them when ``argv`` is None)."""
    parser = argparse.ArgumentParser(
        prog="qrbench",
        description="Run, time, check and rank batched FP32 Householder QR kernels as the qr_v2 contest does.",
    )
    parser.add_argument("--version", action="version", version=f"qrbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mode in Mode:
        p = sub.add_parser(mode, help=f"run contestants in {mode} mode")
        p.set_defaults(func=_cmd_run)
        p.add_argument("contestants", nargs="+", metavar="CONTESTANT",
                       help="name under contestants/, a folder with submission.py, or a .py file")
        add_run_options(p)
        if mode == Mode.PROFILE:
            p.add_argument("--profiler", action="store_true", help="also run under the torch profiler (CUDA)")
        else:
            p.add_argument("--estimate", action="store_true",
                           help="run a short pilot instead and print each stage's predicted repeats and wall time, "
                                "for qrbench and for the contest's protocol (warns past the shape file's limits)")
    p = sub.add_parser("rank", help="leaderboard run of contestants (default: all of contestants/) and a ranking")
    p.set_defaults(func=_cmd_rank)
    p.add_argument("contestants", nargs="*", metavar="CONTESTANT")
    add_run_options(p)
    p.add_argument("--out", type=Path, default=REPORTS_DIR,
                   help="folder for the leaderboard Markdown (default: reports/ in this directory; an existing "
                        "page is kept and the new one gets a suffix, -2, -3, ..., unless --force)")
    p = sub.add_parser("check", help="only the contest service's submission gates (about a second a contestant)")
    p.set_defaults(func=_cmd_check)
    p.add_argument("contestants", nargs="+", metavar="CONTESTANT",
                   help="a name under contestants/, a folder holding submission.py, or a .py file: its submission "
                        "file is judged, as every run judges it first")
    p.add_argument("--mode", choices=MODE_NAMES, default=Mode.LEADERBOARD,
                   help="the submission mode to judge for: kernelguard guards all but test (default: leaderboard)")
    add_kernelguard_option(p)
    for name, (module, text) in _DEFERRED.items():
        if argv is None or name in argv:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=text)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    from evaluator.run_command import cmd_run

    return cmd_run(args)


def _cmd_rank(args: argparse.Namespace) -> int:
    from evaluator.run_command import cmd_rank

    return cmd_rank(args)


def _cmd_check(args: argparse.Namespace) -> int:
    passed = True
    for contestant in resolve_contestants(args.contestants):
        try:
            verdict = precheck_file(contestant.path, args.mode, args.kernelguard)
        except OSError as exc:
            raise UsageError(f"cannot read {contestant.path}: {exc.strerror or exc}") from exc
        print(precheck_text(verdict), flush=True)
        passed = passed and verdict.passed
    return EXIT_OK if passed else EXIT_FAILED


def _drop_output() -> None:
    """The reader went away: point stdout and stderr at /dev/null so that flushing them at exit
    cannot fail again (Python's recipe: docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser(argv).parse_args(argv)
        with sigterm_as_interrupt():
            return args.func(args)
    except UsageError as exc:
        print(f"qrbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (BrokenPipeError, OutputClosed):
        _drop_output()
        return EXIT_PIPE
    except KeyboardInterrupt:
        print("\nqrbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        from evaluator.shapes import ShapeFileError  # on this path only: it imports torch

        if not isinstance(exc, ShapeFileError):
            raise
        print(f"qrbench: bad shape file: {exc}", file=sys.stderr)
        return EXIT_BAD_SHAPES


if __name__ == "__main__":
    sys.exit(main())
