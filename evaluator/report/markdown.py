"""The Markdown report: summary, per-case times and throughput, speedups with noise verdicts,
correctness, numerical margin, GPU clocks, history and the environment of every run, beside its
plots.

:func:`render_markdown` turns a :class:`~evaluator.report.compare.Report` into text;
:func:`write_report` draws the plots and writes both into one folder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tabulate import tabulate

from evaluator.environment import gpu_key
from evaluator.margin import Margin, format_margin, least
from evaluator.measure.clocks import ClockSummary
from evaluator.measure.ledger import ACTIVITIES
from evaluator.report import plots
from evaluator.report.compare import FASTER, SAME, SLOWER, Comparison, Entry, Report, run_label, shortened
from evaluator.report.tables import clock_text, first_line, throttle_text, timing_label
from evaluator.report.units import format_interval, format_ns, format_ratio, format_s
from evaluator.results import CaseResult, RunResult, now_iso

__all__ = ["render_markdown", "write_report"]

REPORT_FILE = "report.md"

CaseCell = Callable[[CaseResult], str]


def _table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


SHORTENED_MARK = "†"
WARN_MARK = "⚠"
SHORTENED_NOTE = (f"{SHORTENED_MARK} shortened timed passes: fewer repeats or a shorter budget than the contest's "
                  "(`--budget`, `--repeats` or the shape file's `timing`), so not contest figures.")


def _groups(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    """Entries by shape set and mode (``tiny-benchmark``), the runs whose cases compare."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(f"{entry.shapes}-{entry.run.mode}", []).append(entry)
    return groups


def _time_cell(case: CaseResult) -> str:
    if not case.passed or case.stats is None:
        return f"**{case.status}**"
    return f"{format_ns(case.stats.mean_ns)} ± {format_ns(case.stats.err_ns)}"


def _rate_cell(case: CaseResult) -> str:
    if not case.passed or case.stats is None:
        return f"**{case.status}**"
    return f"{case.case.flops / case.stats.mean_ns / 1e3:.3g}"


def _case_table(entries: Sequence[Entry], cell: CaseCell) -> str:
    """Cases down, contestants across, cases matched by position and label."""
    rows: dict[tuple[int, str], list[str]] = {}
    for column, entry in enumerate(entries):
        for c in entry.cases:
            key = (c.case.index, c.case.case.label)
            row = rows.setdefault(key, [c.case.case.label, f"{c.case.case.flops / 1e9:.3g}"] + ["-"] * len(entries))
            row[2 + column] = cell(c.case)
    return _table(list(rows.values()), ["case", "GFLOP", *(e.label for e in entries)])


def _verdict_counts(entry: Entry) -> str:
    if entry.baseline is None:
        return "-"
    return " / ".join(str(entry.count(v)) for v in (FASTER, SLOWER, SAME))


def _margin_cell(run: RunResult) -> str:
    """``8.33× (orthogonality)``, the gate with the least room, marked when under the run's warning factor."""
    m = least(run.margins)
    if m is None:
        return "-"
    return f"{format_margin(m)} ({m.gate})" + (f" {WARN_MARK}" if m.factor < run.margin_warn else "")


def _summary(report: Report) -> str:
    rows = []
    for e in report.entries:
        status = "pass" if e.run.passed else f"**{e.run.status}**"
        score = format_s(e.run.score_s) + (f" {SHORTENED_MARK}" if shortened(e.run) else "")
        rows.append([e.label, e.shapes, e.run.mode, status, score, format_ratio(e.speedup), _verdict_counts(e),
                     _margin_cell(e.run)])
    headers = ["contestant", "shapes", "mode", "status", "score (geomean)", "speedup over baseline",
               "faster / slower / same", "tightest margin"]
    notes = [SHORTENED_NOTE] if any(shortened(e.run) for e in report.entries) else []
    warnings = [f"{WARN_MARK} {e.label} ({e.run.mode}): {e.run.margin_warning}." for e in report.entries
                if e.run.margin_warning]
    return "\n\n".join([_table(rows, headers), *notes, *warnings, *report.notes])


def _speedup_text(comparison: Comparison | None) -> str:
    if comparison is None:
        return "-"
    if comparison.low is None or comparison.high is None:
        return f"{format_ratio(comparison.speedup)} (too few repeats to judge)"
    return f"{format_ratio(comparison.speedup)} {format_interval(comparison.low, comparison.high)}"


def _baseline_table(entries: Sequence[Entry]) -> str:
    rows = []
    for e in entries:
        for c in e.cases:
            baseline = _time_cell(c.baseline) if c.baseline is not None else "-"
            verdict = c.comparison.verdict if c.comparison is not None else "-"
            rows.append([c.case.case.label, e.label, baseline, _time_cell(c.case), _speedup_text(c.comparison),
                         verdict])
    return _table(rows, ["case", "contestant", "baseline", "time", "speedup [CI]", "verdict"])


def _method(report: Report) -> str:
    rule = report.rule
    return (
        f"Verdicts: *faster* or *slower* only when the {rule.confidence:.0%} bootstrap interval of the speedup "
        f"(ratio of mean times, {rule.resamples} resamples of both runs' raw repeat times) excludes 1 **and** the "
        f"speedup differs from 1 by at least {rule.min_change:.0%}; otherwise *same*. *Same* means that no "
        "difference was shown, not that there is none: a smaller change may hide in it, and the interval holds "
        "only the noise between repeats inside each run, not drift between runs (clocks, temperature, load)."
    )


def _failures(report: Report) -> str:
    rows = []
    for e in report.entries:
        failed = [c.case for c in e.cases if not c.case.passed and c.case.status != "skipped"]
        rows.extend([e.label, c.case.label, c.status, first_line(c.message)]
                    for c in failed)
        if not e.run.passed and not failed:
            rows.append([e.label, "-", e.run.status, first_line(e.run.reason)])
    verdicts = (_table(rows, ["contestant", "case", "status", "message"]) if rows else
                "Every reported contestant passed every check (every timed repeat's output is checked).")
    retimed = [[e.label, stage.name, c.case.label, first_line(c.retimed)]
               for e in report.entries for stage in e.run.stages for c in stage.cases if c.retimed]
    if not retimed:
        return verdicts
    return "\n\n".join([verdicts, RETIMED_TEXT, _table(retimed, ["contestant", "stage", "case", "first attempt"])])


RETIMED_TEXT = (
    "Timed again: a first timed attempt that rule parent-clock failed was set aside and the case timed once more "
    "(a loaded host can stretch what the parent's clock sees; a kernel's own shortfall comes back), in any stage "
    "of the run. Its verdict and times are the second attempt's alone."
)


MARGIN_TEXT = (
    "The checker passes an output whose scaled factor residual is at most 20 and whose scaled orthogonality "
    "residual is at most 100 (units of n·eps). The margin is gate / worst residual: how many times over the worst "
    "residual of any check of a passing case (every timed repeat's outputs included) could grow and still pass. "
    "A run warns when a margin is under its `--margin-warn` factor (recorded with the run, default 4×): such a "
    "kernel passes here, and may fail on inputs it has not met."
)


def _margin_pair(m: Margin | None) -> list[str]:
    return ["-", "-"] if m is None else [f"{m.residual:.3g} ({format_margin(m)})", m.where]


def _margins(entries: Sequence[Entry]) -> str:
    """Per run and stage: each gate's worst residual, its margin and where it was seen."""
    rows = []
    for e in entries:
        for stage in e.run.stages:
            margins = stage.margins
            if margins:
                rows.append([e.label, stage.name, *_margin_pair(margins.get("factor")),
                             *_margin_pair(margins.get("orthogonality"))])
    return _table(rows, ["contestant", "stage", "factor: worst (margin)", "where", "orthogonality: worst (margin)",
                         "where"]) if rows else ""


CLOCKS_TEXT = (
    "The GPU's clocks, power and NVML throttle reasons, read just before and just after every timed repeat. "
    "A repeat is *throttled* when either reading names a reason that holds the GPU below its clock: SW power cap, "
    "HW slowdown, SW or HW thermal slowdown, HW power brake (an idle GPU or set application clocks are not). A "
    "throttle that starts and ends inside a repeat is not seen. With `--discard-on-throttle` the throttled "
    "repeats are *discarded*: kept in the results, marked, but the stopping rule and every statistic here use "
    "only the kept repeats."
)


def _clocks(entries: Sequence[Entry]) -> str:
    """Per timed case: repeats read, SM clock range and median, memory clock, peak power, throttling."""
    rows = []
    for e in entries:
        for stage in e.run.stages:
            for case in stage.cases:
                summary = ClockSummary.of(case.clocks)
                if summary is not None:
                    rows.append([e.label, stage.name, case.case.label, clock_text(summary), throttle_text(summary)])
    if rows:
        return f"{CLOCKS_TEXT}\n\n{_table(rows, ['contestant', 'stage', 'case', 'clocks', 'throttling'])}"
    why = [f"{e.label}: {e.run.environment.get('clock_sampler', 'run before clocks were read')}"
           for e in entries if e.cases and e.run.device == "cuda"]
    return f"No clock readings ({'; '.join(why)})." if why else ""


def _commit(env: Mapping[str, object]) -> str:
    """The checkout's commit and, where the run recorded it, its sources' digest: a dirty commit or
    a copied tree is told apart by the digest alone."""
    commit = str(env.get("git_commit") or "")[:10]
    text = commit + (" (dirty)" if commit and env.get("git_dirty") else "") if commit else "-"
    sources = str(env.get("source_sha256") or "")[:8]
    return f"{text}, sources {sources}" if sources else text


def _history(history: Sequence[RunResult]) -> str:
    rows = [[r.started_at or "-", run_label(r), r.shapes.get("name", "?"), gpu_key(r.environment),
             format_s(r.score_s), _margin_cell(r), r.status, _commit(r.environment)] for r in history]
    return _table(rows, ["started", "contestant", "shapes", "device", "score", "tightest margin", "status",
                         "qrbench commit"])


def _environment(runs: Sequence[RunResult]) -> str:
    def version(env: Mapping[str, object], key: str) -> str:
        return str(env.get(key) or "-")

    rows = []
    for r in runs:
        env = r.environment
        clocks = f"{env['sm_clock_mhz']}/{env['sm_clock_max_mhz']} MHz" if "sm_clock_mhz" in env else "-"
        rows.append([run_label(r), r.started_at or "-", timing_label(r), version(env, "driver_version"), clocks,
                     version(env, "clock_sampler"), version(env, "torch"), version(env, "cuda"), version(env, "triton"),
                     version(env, "python"), _commit(env), env.get("hostname", "-")])
    headers = ["contestant", "started", "measured on", "driver", "SM clock (now/max)", "clocks read from", "torch",
               "CUDA", "triton", "python", "qrbench commit", "host"]
    return _table(rows, headers)


def _time_spent(entries: Sequence[Entry]) -> str:
    """Each stage's wall time by activity (stages that recorded it): where a user's minutes go."""
    rows = [[f"{e.label} ({e.run.mode})", stage.name, format_s(stage.wall_s),
             *(format_s(stage.breakdown_s.get(a, 0.0)) for a in ACTIVITIES)]
            for e in entries for stage in e.run.stages if stage.breakdown_s]
    if not rows:
        return ""
    return _table(rows, ["run", "stage", "wall", *(a.replace("_", " ") for a in ACTIVITIES)])


def render_markdown(report: Report, images: Mapping[str, Path] | None = None) -> str:
    """The report as Markdown; ``images`` maps plot names (``times-<shapes>-<mode>``,
    ``speedup-<shapes>-<mode>``, ``history``, ``margin-history``) to files, linked relative to the
    report's folder."""
    images = images or {}

    def image(name: str, alt: str) -> list[str]:
        return [f"![{alt}]({images[name].name})", ""] if name in images else []

    out = ["# qrbench report", "", f"Written {now_iso()} from {', '.join(f'`{s}`' for s in report.sources)}.", ""]
    if report.warning:
        out += [f"> **WARNING: {report.warning}.**", ""]
    out += ["## Summary", "", _summary(report), ""]
    if report.baseline_text:
        out += [f"Baseline: {report.baseline_text}. {_method(report)}", ""]
    for group, entries in _groups(report.entries).items():
        if not any(e.cases for e in entries):
            continue  # test-mode runs: nothing timed
        title = f"{entries[0].shapes}, {entries[0].run.mode} mode"
        measured = "; ".join(dict.fromkeys(timing_label(e.run) for e in entries))
        out += [f"## Per-case times: {title}", "", f"Measured on {measured}. Mean per call ± standard error.", "",
                _case_table(entries, _time_cell), "", *image(f"times-{group}", f"per-case times, {title}"),
                "Throughput (TFLOP/s, counting 4/3·n³ per matrix):", "", _case_table(entries, _rate_cell), ""]
        if any(e.baseline is not None for e in entries):
            out += [f"### Against the baseline: {title}", "", _baseline_table(entries), "",
                    *image(f"speedup-{group}", f"speedup over the baseline, {title}")]
    out += ["## Correctness", "", _failures(report), ""]
    if margins := _margins(report.entries):
        out += ["## Numerical margin", "", MARGIN_TEXT, "", margins, ""]
    if clocks := _clocks(report.entries):
        out += ["## Clocks", "", clocks, ""]
    if spent := _time_spent(report.entries):
        out += ["## Where the time went", "", "Each stage's wall time by activity (`breakdown_s` in the results; "
                "`kernel` is the timed repeats as reported, `handover` the rest of what the parent witnessed of "
                "them).", "", spent, ""]
    out += ["## History", "", _history(report.history), "", *image("history", "history of scores"),
            *image("margin-history", "history of the tightest numerical margin")]
    out += ["## Environment", "", _environment([e.run for e in report.entries]), ""]
    return "\n".join(out)


def write_report(report: Report, out_dir: Path) -> Path:
    """Draw the plots and write ``report.md`` into ``out_dir``; return the Markdown's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images: dict[str, Path] = {}
    for group, entries in _groups(report.entries).items():
        if any(c.case.stats is not None for e in entries for c in e.cases):
            images[f"times-{group}"] = plots.render_case_times(entries, out_dir / f"times-{group}.png")
        if any(c.comparison is not None for e in entries for c in e.cases):
            name = f"speedup-{group}"
            images[name] = plots.render_speedups(entries, report.baseline_text, out_dir / f"{name}.png")
    if sum(1 for r in report.history if r.score_s is not None) >= 2:
        images["history"] = plots.render_history(report.history, out_dir / "history.png")
    if sum(1 for r in report.history if r.margins) >= 2:
        images["margin-history"] = plots.render_margin_history(report.history, out_dir / "margin-history.png")
    path = out_dir / REPORT_FILE
    path.write_text(render_markdown(report, images))
    return path
