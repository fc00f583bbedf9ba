"""Shape files: the bundled sets match the contract; malformed files are refused clearly."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from evaluator.cli import main
from evaluator.shapes import MAX_INPUT_BYTES, Case, ShapeFileError, ShapeSet, Timing, load_shapes, resolve_shapes
from reference import CASES
from tests.conftest import GOLDEN


def test_qr_v2_is_the_contests_set() -> None:
    shapes = resolve_shapes("qr_v2")
    golden = json.loads((GOLDEN / "inputs_cpu.json").read_text())["inputs"]
    assert [c.fields() for c in shapes.tests] == [e["spec"] for e in golden if e["group"] == "tests"]
    assert [c.fields() for c in shapes.benchmarks] == [e["spec"] for e in golden if e["group"] == "benchmarks"]
    assert (len(shapes.tests), len(shapes.benchmarks)) == (22, 12)
    assert shapes.timeouts_s == {"test": 240, "benchmark": 480, "leaderboard": 900}
    assert shapes.timing.max_inputs == 50  # the contest's protocol, no overrides


def test_smoke_set_covers_every_case_type_at_small_n() -> None:
    shapes = resolve_shapes("smoke")
    assert {c.kind for c in shapes.tests} == set(CASES)
    assert max(c.n for c in (*shapes.tests, *shapes.benchmarks)) <= 96


def test_spec_line_is_the_contest_runners_text() -> None:
    assert Case(20, 32, 1, 53124).spec == "batch: 20; n: 32; cond: 1; seed: 53124"
    assert Case(16, 512, 4, 1, "dense").spec == "batch: 16; n: 512; cond: 4; seed: 1; case: dense"


def test_case_work_and_input_count() -> None:
    case = Case(640, 512, 2, 1029)
    assert case.flops == pytest.approx(4 / 3 * 512**3 * 640)
    assert case.min_bytes == 8 * 512 * 512 * 640
    timing = resolve_shapes("qr_v2").timing
    assert timing.input_count(case) == 1
    assert timing.input_count(Case(20, 32, 1, 1)) == 50


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


GOOD_CASE = {"batch": 2, "n": 8, "cond": 1, "seed": 3}


def _doc(**overrides: object) -> dict:
    doc = {"name": "t", "timeouts_s": {"test": 10}, "tests": [GOOD_CASE], "benchmarks": [GOOD_CASE]}
    doc.update(overrides)
    return doc


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (_doc(tests=[{**GOOD_CASE, "case": "sparse"}]), "tests[0]: unknown case 'sparse'"),
        (_doc(benchmarks=[GOOD_CASE, {**GOOD_CASE, "n": 0}]), "benchmarks[1]: n must be positive, got 0"),
        (_doc(tests=[{"batch": 2, "n": 8, "cond": 1}]), "tests[0]: missing key(s) seed"),
        (_doc(tests=[{**GOOD_CASE, "n": "8"}]), "tests[0]: n must be an integer, got '8'"),
        (_doc(tests=[{**GOOD_CASE, "size": 3}]), "tests[0]: unknown key(s) size"),
        (_doc(tests=[{**GOOD_CASE, "cond": -2}]), "tests[0]: cond must be non-negative"),
        (_doc(tests=[]), "tests: expected a non-empty list"),
        (_doc(timeouts_s={"tset": 3}), "timeouts_s.tset: unknown mode"),
        (_doc(timing={"max_inputs": 0}), "timing.max_inputs: expected a positive integer"),
        (_doc(timing={"budget": 1}), "timing.budget: unknown setting"),
        (_doc(timings={"max_inputs": 1}), "unknown key(s) timings (allowed: name, "),
        (_doc(benchmarks=[{"batch": 1, "n": 100_000, "cond": 1, "seed": 1}]),
         "benchmarks[0]: batch 1 x n 100000 is a 37.3 GiB input, over the 16 GiB"),
        ("tests: [", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
    ],
)
def test_malformed_file_is_refused_naming_file_entry_and_problem(tmp_path: Path, doc: object, fragment: str) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ShapeFileError) as info:
        load_shapes(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_unknown_set_name_lists_the_bundled_ones() -> None:
    with pytest.raises(ShapeFileError, match=r"bundled: qr_v2, smoke"):
        resolve_shapes("nosuchset")


def test_timing_overrides_are_read(tmp_path: Path) -> None:
    shapes = load_shapes(_write(tmp_path, _doc(timing={"max_inputs": 3, "benchmark_budget_s": 0.5})))
    assert shapes.timing.max_inputs == 3
    assert shapes.timing.benchmark_budget_s == 0.5
    assert shapes.timing.leaderboard_budget_s == 30.0


def test_the_size_cap_admits_every_contest_case_and_the_largest_fitting_input(tmp_path: Path) -> None:
    largest = max(c.input_bytes for c in resolve_shapes("qr_v2").cases("benchmark"))
    assert largest < MAX_INPUT_BYTES / 16
    n = 65536  # one matrix of exactly the cap
    assert load_shapes(_write(tmp_path, _doc(tests=[{**GOOD_CASE, "batch": 1, "n": n}]))).tests[0].input_bytes == (
        MAX_INPUT_BYTES)
    with pytest.raises(ShapeFileError, match="tests\\[0\\]: batch 2 x n 65536"):
        load_shapes(_write(tmp_path, _doc(tests=[{**GOOD_CASE, "batch": 2, "n": n}])))


def test_the_cli_refuses_a_bad_shape_file_with_113(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _doc(timings={"max_inputs": 1}))
    assert main(["test", "geqrf", "--device", "cpu", "--shapes", str(path), "--json", str(tmp_path / "r.json")]) == 113
    assert f"bad shape file: {path}: unknown key(s) timings" in capsys.readouterr().err


def test_a_cpu_run_of_a_file_without_timing_gets_a_note(tmp_path: Path) -> None:
    plain = load_shapes(_write(tmp_path, _doc()))
    assert plain.timing_note("cpu") == (
        f"note: {plain.path} has no timing section, so its timed passes use the contest's GPU protocol "
        "(up to 1000 repeats, 30 s a case); on a CPU add one as shapes/smoke.yaml does")
    assert plain.timing_note("cuda") is None  # the contest's protocol is what a GPU run wants
    assert resolve_shapes("smoke").timing_note("cpu") is None
    assert resolve_shapes("qr_v2").timing_note("cpu") is not None


@pytest.mark.parametrize("name", ["smoke", "qr_v2"])
def test_a_set_round_trips_through_json_data_timing_and_all(name: str) -> None:
    shapes = resolve_shapes(name)
    data = json.loads(json.dumps(shapes.to_dict()))
    assert ShapeSet.from_dict(data) == shapes
    assert ("timing" in data) == shapes.timing_given  # smoke has its own timing, qr_v2 the contest's


def test_changed_timing_travels_in_the_data() -> None:
    shapes = replace(resolve_shapes("qr_v2"), timing=Timing(max_inputs=3))
    assert ShapeSet.from_dict(shapes.to_dict()).timing.max_inputs == 3


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"timings": {"max_inputs": 1}}, "shapes/smoke.yaml: unknown key(s) timings"),
        ({"tests": [{**GOOD_CASE, "size": 3}]}, "smoke.yaml: tests[0]: unknown key(s) size"),
        ({"path": 7}, "path: expected a string, got 7"),
    ],
)
def test_data_is_validated_as_a_file_is(change: dict, fragment: str) -> None:
    with pytest.raises(ShapeFileError) as info:
        ShapeSet.from_dict({**resolve_shapes("smoke").to_dict(), **change})
    assert fragment in str(info.value)
