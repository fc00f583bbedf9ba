"""Time to verdict: one contestant's full ranked submission, hardened and under ``--compat``.

``python -m benchmarks.time_to_verdict [CONTESTANT] [--shapes NAME] [--json PATH]`` runs the
leaderboard mode (tests, benchmark, ranked and secret-seed passes) twice in this process tree,
once hardened and once with the contest's protocol, and prints each run's wall time, where each
stage's went (hardened stages record it), and the ratio of the two walls (issue #20 asks for a
hardened ranked submission in a third of the contest's). Both runs go to one results file.

A kernel's compile caches live in its scratch directory, shared by both protocols, so whichever
ran first would pay the compiles for both: a test run and a one-repeat benchmark run (not
counted) fill them first.
The results file is rewritten after every finished case, and SIGTERM (a time limit's) stops the
run as Ctrl-C does, so a run cut off keeps what it measured; the ratio to a stopped ``--compat``
run is then an upper bound, and is printed as one.
``--protocols`` runs one of the two (to split a long pair across machine leases), and ``--from
FILE...`` reports runs saved earlier, such a split pair among them;
``--mirror-check`` runs the hardened one with mirror checks (docs/hardening.md): on an H100 they
brought every large case within 3% of ``--compat`` and cost the wall ratio and the small case
(reports/h100/2026-12-07-mirror-check.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tabulate import tabulate

from evaluator.cli_args import EXIT_INTERRUPTED, pick_device, sigterm_as_interrupt
from evaluator.contestant import resolve_contestant
from evaluator.measure.ledger import ACTIVITIES
from evaluator.modes import SECRET_STAGE
from evaluator.progress import Feedback, feedback
from evaluator.results import (
    INTERRUPTED,
    CaseResult,
    ResultsError,
    RunResult,
    StageResult,
    load_results,
    write_results,
)
from evaluator.run_command import interrupted
from evaluator.runner import RunOptions, run_contestant
from evaluator.shapes import resolve_shapes


def _timed_run(contestant: str, shapes_name: str, device: str, compat: bool, mirror_check: bool,
               save: Callable[[RunResult], None], shown: Feedback) -> tuple[RunResult, float]:
    """One protocol's leaderboard run, saved after every finished case (``save``) and shown as it
    goes (``shown``: a status line on a terminal, a line per case in a log)."""
    shapes = resolve_shapes(shapes_name)
    start = time.monotonic()
    options = RunOptions(device=device, compat=compat, mirror_check=mirror_check and not compat)

    def update(current: RunResult) -> None:
        save(current)
        shown.update(current)

    shown.start(f"{contestant} ({'--compat' if compat else 'hardened'})")
    run = run_contestant(resolve_contestant(contestant), "leaderboard", shapes, options, on_update=update,
                         on_progress=shown)
    shown.done(run)
    return run, time.monotonic() - start


CASE_TOLERANCE = 0.03
"""How far a case's hardened mean may be from its ``--compat`` mean (issue #20)."""


TIMED_STAGES = ("benchmark", "ranked", SECRET_STAGE)


def _pairs(h: StageResult | None, c: StageResult | None) -> list[tuple[CaseResult, CaseResult]]:
    """A timed stage's cases with statistics under both protocols (hardened, ``--compat``), side by side."""
    if h is None or c is None:
        return []
    return [(hc, cc) for hc, cc in zip(h.cases, c.cases, strict=False) if hc.stats and cc.stats]


def _ratio(pair: tuple[CaseResult, CaseResult]) -> float:
    return pair[0].stats.mean_ns / pair[1].stats.mean_ns  # type: ignore[union-attr]


def _case_table(hardened: RunResult, compat: RunResult) -> str:
    """Per case and timed stage: the hardened mean over the ``--compat`` one, with each side's
    timed repeats (the stopping rule's count), so that a case's drift and its noise read together;
    a hardened case timed a second time (rule parent-clock set its first attempt aside, and its
    wall counts both) says so."""
    cells: dict[str, dict[str, str]] = {}
    for stage in TIMED_STAGES:
        for pair in _pairs(hardened.stage(stage), compat.stage(stage)):
            h, c = pair
            again = ", timed again" if h.retimed else ""
            cells.setdefault(h.case.label, {})[stage] = (
                f"{_ratio(pair):.3f} ({h.stats.runs}/{c.stats.runs}{again})")  # type: ignore[union-attr]
    rows = [[label, *(row.get(stage, "-") for stage in TIMED_STAGES)] for label, row in cells.items()]
    headers = ["case", *(f"{stage}: hardened/compat (repeats)" for stage in TIMED_STAGES)]
    return tabulate(rows, headers=headers, tablefmt="github")


def _agreement(hardened: RunResult, compat: RunResult) -> str:
    """Each timed stage's per-case means and geomean, hardened against ``--compat``, and the worst
    case's difference (issue #20: geomean within 2%, every case within 3%, same verdicts)."""
    lines = []
    for stage in TIMED_STAGES:
        h, c = hardened.stage(stage), compat.stage(stage)
        pairs = _pairs(h, c)
        if h is None or c is None or not pairs:
            continue
        ratios = [_ratio(pair) for pair in pairs]
        worst = max(pairs, key=lambda pair: abs(_ratio(pair) - 1))
        geo = (h.geomean_s() or 0.0) / (c.geomean_s() or 1.0)
        outside = [f"{hc.case.label} {ratio:.3f}" for (hc, _), ratio in zip(pairs, ratios, strict=True)
                   if abs(ratio - 1) > CASE_TOLERANCE]
        lines.append(f"{stage}: geomean hardened/compat {geo:.4f}; per case {min(ratios):.4f} to {max(ratios):.4f} "
                     f"(worst {worst[0].case.label}); {len(pairs) - len(outside)} of {len(pairs)} cases within "
                     f"{CASE_TOLERANCE:.0%}{': outside ' + ', '.join(outside) if outside else ''}; "
                     f"verdicts {h.status}/{c.status}")
    return "\n".join(lines)


def _protocol(run: RunResult) -> str:
    return "--compat" if run.compat else "hardened with mirror checks" if run.mirror_check else "hardened"


def _report(runs: dict[bool, tuple[RunResult, float]], contestant: str, where: str, wall: str) -> None:
    """Each stage's wall and where it went, the per-case agreement of the two protocols, and the
    ratio of their walls (``wall`` says what the walls are)."""
    rows = [[_protocol(run), stage.name, stage.status, f"{stage.wall_s:.1f}",
             *(f"{stage.breakdown_s.get(a, 0.0):.1f}" if stage.breakdown_s else "-" for a in ACTIVITIES)]
            for run, _ in runs.values() for stage in run.stages]
    print(tabulate(rows, headers=["protocol", "stage", "status", "wall s", *ACTIVITIES], tablefmt="github"))
    if len(runs) == 2:
        print(_case_table(runs[False][0], runs[True][0]))
        print(_agreement(runs[False][0], runs[True][0]))
    walls = ", ".join(f"{_protocol(run)} {seconds:.1f} s{'' if run.passed else f' ({run.status})'}"
                      for run, seconds in runs.values())
    print(f"\n{contestant} on {where}: {wall + ' ' if wall else ''}{walls}{_wall_ratio(runs)}")


def _wall_ratio(runs: dict[bool, tuple[RunResult, float]]) -> str:
    """The hardened wall over the ``--compat`` one; a ``--compat`` run stopped before its end
    (``timeout``, Ctrl-C) ran at least that long, so its ratio is a bound; a hardened one, none."""
    if len(runs) != 2:
        return ""
    (hardened, hardened_s), (compat, compat_s) = runs[False], runs[True]
    if _unfinished(hardened):
        return "; no ratio: the hardened run did not finish"
    if _unfinished(compat):
        return (f", ratio at most {hardened_s / compat_s:.2f} (the --compat run was stopped before its end; "
                "the goal is 0.33 or less)")
    return f", ratio {hardened_s / compat_s:.2f} (the goal is 0.33 or less)"


def _unfinished(run: RunResult) -> bool:
    """Stopped before its end (``timeout``, Ctrl-C), as opposed to finished, passing or not."""
    return run.status == INTERRUPTED or bool(run.missing_stages)


def _exit_code(runs: dict[bool, tuple[RunResult, float]], wanted: int) -> int:
    """130 where a wanted run is missing or was stopped, as a shell reports Ctrl-C; else 0 when every
    run passed, 112 when one failed."""
    if len(runs) < wanted or any(_unfinished(run) for run, _ in runs.values()):
        return EXIT_INTERRUPTED
    return 0 if all(run.passed for run, _ in runs.values()) else 112


def _from_files(paths: list[Path]) -> int:
    """The report of runs saved earlier (``--protocols`` on two machine leases, or a run cut off
    after its first protocol): the last hardened and the last ``--compat`` leaderboard run found,
    each wall the sum of its stages' (the process's own wall is not recorded)."""
    runs: dict[bool, tuple[RunResult, float]] = {}
    for path in paths:
        try:
            loaded = load_results(path)
        except ResultsError as exc:
            raise SystemExit(f"time_to_verdict: {exc}") from exc
        for run in loaded:
            if run.mode == "leaderboard":
                runs[run.compat] = (run, sum(stage.wall_s for stage in run.stages))
    if not runs:
        raise SystemExit(f"time_to_verdict: no leaderboard run in {', '.join(map(str, paths))}")
    first = next(iter(runs.values()))[0]
    names = {run.contestant.get("name", "?") for run, _ in runs.values()}
    _report(dict(sorted(runs.items())), "/".join(sorted(names)), f"{first.shapes['name']} ({first.device})",
            "stage walls summed:")
    return _exit_code(runs, len(runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contestant", nargs="?", default="geqrf")
    parser.add_argument("--shapes", default=None, help="default: qr_v2 on a GPU, smoke on the CPU")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, default=Path("results/time-to-verdict.json"))
    parser.add_argument("--protocols", choices=("both", "hardened", "compat"), default="both")
    parser.add_argument("--mirror-check", action="store_true",
                        help="the hardened run with mirror checks (the worker runs each check again first)")
    parser.add_argument("--from", dest="sources", type=Path, nargs="+", metavar="RESULTS.json",
                        help="run nothing: report the hardened and --compat runs saved in these files")
    args = parser.parse_args(argv)
    if args.sources:
        return _from_files(args.sources)
    device = pick_device(args.device)
    shapes = args.shapes or ("qr_v2" if device == "cuda" else "smoke")
    chosen = {"both": (False, True), "hardened": (False,), "compat": (True,)}[args.protocols]
    runs: dict[bool, tuple[RunResult, float]] = {}
    latest: list[RunResult] = []  # the running protocol's run as last saved

    def save(current: RunResult) -> None:  # after every finished case, so a cut-off run keeps them
        latest[:] = [current]
        write_results(args.json, [*(run for run, _ in runs.values()), current])

    begun = time.monotonic()
    shown = feedback()
    try:
        with sigterm_as_interrupt():
            print(f"{args.contestant}: filling the compile caches (a test run and a one-repeat benchmark, not counted)",
                  file=sys.stderr, flush=True)
            one_repeat = RunOptions(device=device, timing={"benchmark_repeats": 1, "benchmark_warmup_repeats": 1})
            for mode in ("test", "benchmark"):  # see the module docstring
                run_contestant(resolve_contestant(args.contestant), mode, resolve_shapes(shapes), one_repeat)
            for compat in chosen:
                latest.clear()
                begun = time.monotonic()
                runs[compat] = _timed_run(args.contestant, shapes, device, compat, args.mirror_check, save, shown)
                write_results(args.json, [run for run, _ in runs.values()])
    except KeyboardInterrupt as stop:
        cut = interrupted(latest[0]) if latest else None
        if cut is not None:
            runs[cut.compat] = (cut, time.monotonic() - begun)
            write_results(args.json, [run for run, _ in runs.values()])
        print(f"time_to_verdict: stopped ({stop or 'Ctrl-C'}); what was measured is in {args.json}", file=sys.stderr)
    if runs:
        _report(runs, args.contestant, f"{shapes} ({device})", "")
    print(f"results: {args.json}")
    return _exit_code(runs, len(chosen))


if __name__ == "__main__":
    raise SystemExit(main())
