"""``qrbench compare A B [C...]``: paired, interleaved timing of contestants against the first.

A thin door onto :func:`evaluator.paired_runner.run_comparison` (the measurement),
:mod:`evaluator.paired_stats` (the ratios and verdicts) and :mod:`evaluator.report.paired` (the
Markdown and the pytest-benchmark export). Registered by :mod:`evaluator.cli` only when named, and
imports torch only when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator.axes import AxisError, Requested, split_setting
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
    writable_file,
)
from evaluator.paired_stats import RatioRule

if TYPE_CHECKING:
    from evaluator.contestant import Contestant
    from evaluator.paired_results import Comparison
    from evaluator.progress import Feedback

__all__ = ["register"]

_DESCRIPTION = (
    "Time two or more contestants paired and interleaved: each in a hardened worker of its own on one device, "
    "driven by one parent in blocks (per block one timed repeat of each, on the same fresh content, in a random "
    "order, with the L2 flush and every output checked), so drift between them cancels. The first contestant is "
    "the baseline. Prints each candidate's geometric-mean time ratio to it with a confidence interval over the "
    "blocks and a faster / slower / same verdict, case by case and overall; writes the results file (--json) and "
    "its Markdown beside it. --budget is the wall seconds of blocks per case and --repeats the cap on blocks per "
    "case (default: the shape set's benchmark budget and repeat cap); --cases keeps only some benchmark cases. "
    "A contestant named NAME[KNOB=VALUE,...] runs with those knobs set (the knobs qrbench sweep varies), so a "
    "kernel's plan is compared with its variants, paired, without editing it."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand to the ``qrbench`` parser."""
    p = subparsers.add_parser("compare", help="paired, interleaved timing of contestants: time ratios and verdicts",
                              description=_DESCRIPTION)
    p.set_defaults(func=_cmd_compare)
    p.add_argument("contestants", nargs="+", metavar="CONTESTANT",
                   help="two or more, the baseline first: names under contestants/, folders with submission.py, "
                        "or .py files (one may be named twice: it is compared with itself); NAME[KNOB=VALUE,...] "
                        "is the contestant with those knobs of its PLAN_AXES set, as a sweep's variant of that "
                        "label (quote it for the shell)")
    add_cases_option(p)
    add_run_options(p)
    p.add_argument("--min-change", type=float, default=RatioRule.min_change, metavar="FRACTION",
                   help="smallest change a verdict calls faster or slower (default: %(default)s)")
    p.add_argument("--benchmark-json", type=Path, metavar="PATH",
                   help="also write the paired samples as pytest-benchmark JSON (pytest-benchmark compare PATH)")


def _checked(args: argparse.Namespace) -> RatioRule:
    """What can be refused before anything runs."""
    if len(args.contestants) < 2:
        raise UsageError("compare needs at least two contestants: the baseline first, then the others")
    if args.compat:
        raise UsageError("--compat: a comparison runs hardened only (under --compat each kernel runs beside its "
                         "own protocol, and nothing could interleave them)")
    if args.discard_on_throttle:
        raise UsageError("--discard-on-throttle: a comparison keeps every repeat (a discarded one would break its "
                         "block)")
    if args.benchmark_json is not None:
        try:
            import pytest_benchmark  # noqa: F401 - only to refuse early when it is missing
        except ImportError:
            raise UsageError("--benchmark-json needs pytest-benchmark (pip install pytest-benchmark)") from None
        writable_file(args.benchmark_json, "--benchmark-json")
    try:
        return RatioRule(min_change=args.min_change)
    except ValueError as exc:
        raise UsageError(f"--min-change: {exc}") from exc


def _settings(texts: list[str]) -> tuple[list[str], list[Requested]]:
    """The contestants' references and knobs: ``NAME[KNOB=VALUE,...]`` (unless a file or folder of
    that very name exists) is NAME with those knobs set."""
    split = [(text, {}) if Path(text).exists() else split_setting(text) for text in texts]
    return [ref for ref, _ in split], [requested for _, requested in split]


def _labelled(contestant: Contestant, requested: Requested) -> Contestant:
    """A knobbed contestant named as a sweep names that variant, ``blocked_wy[nb=32]``."""
    if not requested:
        return contestant
    return replace(contestant, name=f"{contestant.name}[{','.join(f'{k}={v[0]}' for k, v in requested.items())}]")


def _case_lines(comparison: Comparison, rule: RatioRule, told: int) -> list[str]:
    """One line per case finished since ``told``: each candidate's ratio to the baseline."""
    from evaluator.report.paired import ratio_text

    base_stage = comparison.runs[0].stage("benchmark")
    if base_stage is None:
        return []
    summaries = comparison.summary(rule)
    lines = []
    for i in range(told, len(comparison.orders)):
        ratios = "; ".join(f"{s.label}: {ratio_text(s.cases[i])}" for s in summaries)
        lines.append(f"compare · case {i + 1}/{len(base_stage.cases)} {base_stage.cases[i].case.label} "
                     f"({len(comparison.orders[i])} blocks): {ratios}")
    return lines


def _cmd_compare(args: argparse.Namespace) -> int:
    # Imported here: they bring torch, and `qrbench --help` should not pay for it.
    from evaluator.modes import Mode
    from evaluator.paired_results import write_comparison
    from evaluator.paired_runner import run_comparison, unique_labels
    from evaluator.progress import feedback
    from evaluator.report.paired import pytest_benchmark_document, render_comparison
    from evaluator.run_command import setup, stopped

    rule = _checked(args)
    try:
        args.contestants, knobs = _settings(args.contestants)
    except AxisError as exc:
        raise UsageError(str(exc)) from exc
    plan = setup(args, Mode.BENCHMARK, pick_device(args.device))
    plan = replace(plan, shapes=chosen_cases(plan.shapes, args.cases),
                   contestants=[_labelled(c, k) for c, k in zip(plan.contestants, knobs, strict=True)])
    path = results_path(args, "compare", plan.shapes)
    markdown = path.with_name(path.name.removesuffix(".gz").removesuffix(".json") + ".md")  # cmp.json(.gz) -> cmp.md
    shown: Feedback = feedback()
    shown.start(" vs ".join(unique_labels(plan.contestants)))
    told = [0]

    def save(comparison: Comparison) -> None:
        write_comparison(path, comparison, rule)
        lines = _case_lines(comparison, rule, told[0])
        if not lines:
            return
        shown.done()  # clears a live status line before the plain ones
        try:
            print("\n".join(lines), file=sys.stderr, flush=True)
        except BrokenPipeError:  # as the status line does: the run stops as after Ctrl-C, and is saved
            raise OutputClosed("the output was closed") from None
        told[0] = len(comparison.orders)

    try:
        comparison = run_comparison(plan.contestants, plan.shapes, plan.options, save, shown, knobs=knobs)
    except AxisError as exc:
        shown.done()
        raise UsageError(str(exc)) from exc
    except KeyboardInterrupt as stop:
        shown.done()
        return stopped(stop, path)
    shown.done()
    write_comparison(path, comparison, rule)
    text = render_comparison(comparison, rule)
    markdown.write_text(text)
    print(text)
    print(f"results: {path}\nmarkdown: {markdown}")
    if args.benchmark_json is not None:
        args.benchmark_json.write_text(json.dumps(pytest_benchmark_document(comparison, rule), indent=1) + "\n")
        print(f"pytest-benchmark: {args.benchmark_json} (pytest-benchmark compare {args.benchmark_json})")
    return EXIT_OK if comparison.passed else EXIT_FAILED
