"""qrbench sweep: axes from the command line and from files resolved against a contestant's
PLAN_AXES, the reference kernels' hooks, every variant timed in one worker into an ordinary
results file, and per-variant verdicts from qrbench report."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from evaluator.axes import (
    AxisError,
    Variant,
    declared_axes,
    load_axes_file,
    parse_axis,
    plain_axes,
    resolve,
    variant_count,
    variants,
)
from evaluator.cli import main
from evaluator.contestant import contest_modules, load_kernel, resolve_contestant
from evaluator.report.compare import SLOWER, build_report
from evaluator.results import CaseResult, StageResult, load_results
from evaluator.runner import RunOptions, new_run
from evaluator.shapes import load_shapes
from evaluator.sweep import _Sweep

FIXTURES = Path(__file__).parent / "contestants"
KNOBBED = str(FIXTURES / "knobbed.py")
TINY = str(Path(__file__).parent / "shapes_tiny.yaml")
DECLARED = {"nb": [16, 32, 64], "two_columns": [True, False], "warps": [None, 2, 4], "update": ["torch", "tf32x3"]}


def _sweep(capsys, tmp_path: Path, contestant: str, *axes: str) -> tuple[int, str, str, Path]:
    out = tmp_path / "sweep.json"
    code = main(["sweep", contestant, *axes, "--shapes", TINY, "--device", "cpu", "--no-precheck", "--json", str(out)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err, out


def test_axis_texts_resolve_to_the_declared_values_and_a_grid() -> None:
    requested = dict(parse_axis(t) for t in ("nb=32,64", "two_columns=on,false", "warps=none,4", "update=tf32x3"))
    axes = resolve("k", requested, DECLARED)
    assert axes == {"nb": (32, 64), "two_columns": (True, False), "warps": (None, 4), "update": ("tf32x3",)}
    assert type(axes["nb"][0]) is int
    grid = variants("k", axes)
    assert variant_count(requested) == len(grid) == 1 + 2 * 2 * 2
    assert grid[0] == Variant({}, "k")  # the kernel's own plan first: the sweep's baseline
    assert grid[1].label == "k[nb=32,two_columns=on,warps=none,update=tf32x3]"
    assert grid[-1].params == {"nb": 64, "two_columns": False, "warps": 4, "update": "tf32x3"}


@pytest.mark.parametrize(("axis", "message"), [
    ("nb", "expected NAME=VALUE"),
    ("nb=", "expected NAME=VALUE"),
    ("=32", "expected NAME=VALUE"),
    ("nb=32,32", "a value is repeated"),
    ("nb=48", "k: axis nb: '48' is not one of 16, 32, 64"),
    ("nbb=32", "k: no axis 'nbb' (its PLAN_AXES: nb, two_columns, warps, update)"),
    ("two_columns=1", "k: axis two_columns: '1' is not one of on, off"),
    ("two_columns=on,true", "k: axis two_columns: a value is given twice"),
])
def test_a_bad_axis_is_named(axis: str, message: str) -> None:
    with pytest.raises(AxisError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve("k", dict([parse_axis(axis)]), DECLARED)


def test_axes_files_in_yaml_and_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "axes.yaml"
    yaml_file.write_text("nb: [32, 64]\ntwo_columns: off\n")
    assert load_axes_file(yaml_file) == {"nb": ("32", "64"), "two_columns": ("off",)}
    json_file = tmp_path / "axes.json"
    json_file.write_text('{"warps": [null, 2], "update": "torch"}')
    assert resolve("k", load_axes_file(json_file), DECLARED) == {"warps": (None, 2), "update": ("torch",)}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- nb\n")
    with pytest.raises(AxisError, match=f"{bad}: expected a mapping"):
        load_axes_file(bad)
    bad.write_text("nb: [32, 32]\n")
    with pytest.raises(AxisError, match=f"{bad}: nb: a value is repeated"):
        load_axes_file(bad)
    bad.write_text("nb: [32\n")
    with pytest.raises(AxisError, match=f"{bad}: not valid YAML"):
        load_axes_file(bad)


@pytest.mark.parametrize(("axes", "message"), [
    ([], "must be a non-empty dict"),
    ({"nb": "32"}, "expected a name and a tuple of values"),
    ({"tiles": (object(),)}, "values must be integers, floats, strings, booleans or None"),
    ({"nb": ()}, "and at least one"),
])
def test_a_malformed_declaration_is_refused(axes: object, message: str) -> None:
    with pytest.raises(AxisError, match=message):
        plain_axes(axes)


def test_the_reference_kernels_lay_their_knobs_over_their_own_plans() -> None:
    from reference_kernels.blocked_wy import default_plan
    from reference_kernels.blocked_wy import knobs as wy
    from reference_kernels.cholesky_orhr import knobs as orhr
    from reference_kernels.cholesky_orhr.plan import DEFAULT_PLAN

    try:
        assert wy.configured_plan(512) is None  # unconfigured: qr picks its own plan
        wy.configure(panel_warps=2, two_columns=True, stages=2)
        own = default_plan(512)
        assert wy.configured_plan(512) == replace(own, panel_warps=2, two_columns=True,
                                                  tiles=replace(own.tiles, stages=2))
        with pytest.raises(ValueError, match="knob nb: 48"):
            wy.configure(nb=48)
        with pytest.raises(ValueError, match="knob two_columns: 1 "):  # True and 1 are not the same knob value
            wy.configure(two_columns=1)
        with pytest.raises(ValueError, match="no knob 'nbb'"):
            wy.configure(nbb=32)
        orhr.configure(second_pass_min=8)
        assert orhr.configured_plan(4, 64) == replace(DEFAULT_PLAN, second_pass_min=8)
    finally:
        wy.configure()
        orhr.configure()
    assert wy.configured_plan(512) is None
    assert orhr.configured_plan(4, 64) is None


@pytest.mark.parametrize("name", ["blocked_wy", "cholesky_orhr"])
def test_the_bundled_contestants_expose_their_kernels_axes(name: str) -> None:
    contestant = resolve_contestant(name)
    with contest_modules(contestant.path.parent):
        kernel = load_kernel(contestant)
        module = __import__(f"reference_kernels.{name}.knobs", fromlist=["PLAN_AXES"])
        assert declared_axes(kernel) == plain_axes(module.PLAN_AXES)


def test_a_stage_stopped_mid_sweep_splits_into_finished_and_stopped_variants() -> None:
    """A timeout in the second variant: the first keeps its pass, the second and the third (not
    reached) carry the stage's status and reason, each with its own cases re-indexed from 0."""
    shapes = load_shapes(TINY)
    contestant = resolve_contestant(KNOBBED)
    base = new_run(contestant, "benchmark", shapes, RunOptions(device="cpu"))
    sweep = _Sweep(contestant, shapes, {"sleep_ms": ("5", "20")}, base, None, None)
    sweep.grid = variants("knobbed", {"sleep_ms": (5, 20)})
    a, b = shapes.benchmarks
    statuses = ["pass", "pass", "timeout", "skipped", "skipped", "skipped"]
    cases = tuple(CaseResult(i, (a, b)[i % 2], status) for i, status in enumerate(statuses))
    stage = StageResult("benchmark", "benchmark", "timeout", cases, reason="exceeded the 60 s limit")
    runs = sweep.runs(stage, {"device": "cpu"})
    assert [(r.contestant["name"], r.status) for r in runs] == [
        ("knobbed", "pass"), ("knobbed[sleep_ms=5]", "timeout"), ("knobbed[sleep_ms=20]", "timeout")]
    assert [c.index for c in runs[1].stages[0].cases] == [0, 1]
    assert runs[0].stages[0].reason == ""
    assert runs[1].stages[0].reason == runs[2].stages[0].reason == "exceeded the 60 s limit"
    assert [r.params for r in runs] == [{}, {"sleep_ms": 5}, {"sleep_ms": 20}]
    assert all(r.environment == {"device": "cpu"} for r in runs)


def test_a_sweep_times_every_variant_in_one_worker_and_report_judges_each(capsys, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    workers: list[list[str]] = []
    popen = subprocess.Popen

    def counted(args: list[str], *rest: object, **kwargs: object) -> subprocess.Popen[bytes]:
        if "evaluator.worker_entry" in args:
            workers.append(args)
        return popen(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    code, out, _, path = _sweep(capsys, tmp_path, KNOBBED, "--axis", "sleep_ms=0,20")
    assert code == 0, out
    assert len(workers) == 1
    runs = load_results(path)
    assert [r.contestant["name"] for r in runs] == ["knobbed", "knobbed[sleep_ms=0]", "knobbed[sleep_ms=20]"]
    assert [r.params for r in runs] == [{}, {"sleep_ms": 0}, {"sleep_ms": 20}]
    for run in runs:
        assert run.mode == "benchmark"
        assert run.passed
        assert [c.case.label for c in run.stage("benchmark").cases] == ["2x8", "2x16 rankdef"]
        assert all(len(c.samples_ns) >= 3 for c in run.stage("benchmark").cases)
    assert all(c.stats.mean_ns >= 20e6 for c in runs[2].stage("benchmark").cases)  # the knob reached the kernel
    assert all(c.stats.mean_ns < 20e6 for r in runs[:2] for c in r.stage("benchmark").cases)
    slow_row = next(line for line in out.splitlines() if line.startswith("| sleep_ms=20"))
    assert "*" not in slow_row
    assert "slower" in slow_row

    assert main(["report", str(path), "--baseline", "knobbed", "--out", str(tmp_path / "report")]) == 0
    assert "knobbed[sleep_ms=20]" in (tmp_path / "report" / "report.md").read_text()
    entries = {e.label: e for e in build_report(runs, "knobbed").entries}
    assert entries["knobbed"].baseline is None
    assert all(c.comparison is not None for c in entries["knobbed[sleep_ms=0]"].cases)
    assert [c.comparison.verdict for c in entries["knobbed[sleep_ms=20]"].cases] == [SLOWER, SLOWER]


def test_a_variant_whose_configure_raises_fails_alone(capsys, tmp_path: Path) -> None:
    code, out, _, path = _sweep(capsys, tmp_path, KNOBBED, "--axis", "sleep_ms=-1,5")
    assert code == 112
    default, refused, slept = load_results(path)
    assert default.passed
    assert slept.passed
    assert [c.status for c in refused.stage("benchmark").cases] == ["error", "error"]
    assert "configure(sleep_ms=-1) raised" in refused.reason
    assert "sleep_ms must not be negative" in refused.reason
    assert "knobbed[sleep_ms=-1]: fail" in out


@pytest.mark.parametrize(("contestant", "axes", "message"), [
    (KNOBBED, ["--axis", "sleep=1"], "knobbed: no axis 'sleep' (its PLAN_AXES: sleep_ms)"),
    (KNOBBED, ["--axis", "sleep_ms=7"], "knobbed: axis sleep_ms: '7' is not one of 0, 5, 20, -1"),
    ("geqrf", ["--axis", "nb=32"], "geqrf: declares no PLAN_AXES"),
    (KNOBBED, [], "give at least one --axis"),
    (KNOBBED, ["--axis", "sleep_ms=5", "--compat"], "--compat: a sweep times its variants under the hardened"),
    (KNOBBED, ["--axis", "sleep_ms=5", "--cases", "999"], "--cases 999: no benchmark case of tiny matches"),
])
def test_bad_axes_and_kernels_without_the_hook_are_usage_errors(capsys, tmp_path: Path, contestant: str,
                                                                axes: list[str], message: str) -> None:
    code, _, err, path = _sweep(capsys, tmp_path, contestant, *axes)
    assert code == 2
    assert message in err
    assert not path.exists()


@pytest.mark.slow
def test_blocked_wy_sweeps_under_the_interpreter(capsys, tmp_path: Path) -> None:
    code, out, _, path = _sweep(capsys, tmp_path, "blocked_wy", "--axis", "panel_warps=1", "--cases", "2x8")
    assert code == 0, out
    runs = load_results(path)
    assert [(r.contestant["name"], r.params) for r in runs] == [("blocked_wy", {}),
                                                                 ("blocked_wy[panel_warps=1]", {"panel_warps": 1})]
    assert all(r.passed and len(r.stage("benchmark").cases) == 1 for r in runs)
