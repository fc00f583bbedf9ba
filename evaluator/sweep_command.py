"""``qrbench sweep``: a kernel's knobs over a grid of variants, each timed as ``qrbench benchmark``
times a contestant, in one worker; a results file of one run per variant and a table.

A thin door onto :func:`evaluator.sweep.run_sweep` and :func:`evaluator.report.sweep.render_sweep`;
the hook a contestant exposes (``PLAN_AXES`` and ``configure``) is :mod:`evaluator.axes`.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from evaluator.axes import AxisError, Requested, Variant, load_axes_file, parse_axis
from evaluator.cli_args import (
    EXIT_FAILED,
    EXIT_OK,
    OutputClosed,
    UsageError,
    add_cases_option,
    add_run_options,
    chosen_cases,
    pick_device,
    results_path,
)
from evaluator.modes import Mode

__all__ = ["register"]

def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` subcommand to the ``qrbench`` parser."""
    p = subparsers.add_parser(
        "sweep", help="time a kernel's knobs (its PLAN_AXES) over a grid of variants",
        description="Time the contestant's own plan, then every combination of the axes' values, each as "
                    "benchmark mode times a contestant (every timed output checked, the hardened protocol), in "
                    "one worker. The contestant module declares PLAN_AXES (knob name -> the values it takes) "
                    "and configure(**params) (evaluator/axes.py). Each variant is a run of its own in the "
                    "results file, named with its values: `qrbench report FILE --baseline NAME` gives every "
                    "variant's verdicts against the kernel's own plan.")
    p.set_defaults(func=_cmd_sweep)
    p.add_argument("contestants", nargs=1, metavar="CONTESTANT",
                   help="name under contestants/, a folder with submission.py, or a .py file")
    p.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                   help="a knob and the values to try (on/off for booleans, none for None); repeat for a grid")
    p.add_argument("--axes", type=Path, metavar="FILE",
                   help="a YAML or JSON file of axes, e.g. {nb: [32, 64], two_columns: [on, off]}")
    add_cases_option(p)
    add_run_options(p)


def _requested(args: argparse.Namespace) -> Requested:
    requested: Requested = load_axes_file(args.axes) if args.axes is not None else {}
    for text in args.axis:
        name, values = parse_axis(text)
        if name in requested:
            raise AxisError(f"--axis {text!r}: axis {name} is given twice")
        requested[name] = values
    if not requested:
        raise AxisError("give at least one --axis NAME=V1,V2 (or --axes FILE)")
    return requested


def _cmd_sweep(args: argparse.Namespace) -> int:
    # Imported here: they bring torch, and `qrbench --help` should not pay for it.
    from evaluator.progress import feedback
    from evaluator.report.sweep import render_sweep
    from evaluator.results import RunResult, write_results
    from evaluator.run_command import setup, stopped, summary
    from evaluator.sweep import run_sweep

    if args.compat:
        raise UsageError("--compat: a sweep times its variants under the hardened protocol only")
    try:
        requested = _requested(args)
    except AxisError as exc:
        raise UsageError(str(exc)) from exc
    plan = setup(args, Mode.BENCHMARK, pick_device(args.device))
    shapes, (contestant,) = chosen_cases(plan.shapes, args.cases), plan.contestants
    path = results_path(args, "sweep", shapes)
    shown = feedback()
    shown.start(contestant.name)

    def save(runs: list[RunResult]) -> None:
        write_results(path, runs)
        current = next((r for r in runs if r.contestant["name"] == shown.contestant), None)
        if current is not None:
            shown.update(current)

    def started(variant: Variant) -> None:
        shown.done()
        shown.start(variant.label)

    try:
        runs = run_sweep(contestant, shapes, requested, plan.options, save, shown, started)
    except AxisError as exc:
        raise UsageError(str(exc)) from exc
    except KeyboardInterrupt as stop:
        with contextlib.suppress(OutputClosed):
            shown.done()
        return stopped(stop, path)
    shown.done(runs[-1])
    print(render_sweep(runs))
    print(f"results: {path}\ncompare: qrbench report {path} --baseline {contestant.name}")
    if not all(r.passed for r in runs):
        print(summary(runs))
        return EXIT_FAILED
    return EXIT_OK
