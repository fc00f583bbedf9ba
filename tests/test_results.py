"""Results documents: round trip, atomic writes, schema checks, scoring and ranking."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import evaluator.results as results_module
from evaluator.measure.stats import Stats
from evaluator.results import CaseResult, ResultsError, RunResult, StageResult, load_results, write_results
from evaluator.score import rank
from evaluator.shapes import Case


def _run(name: str, means_ns: list[float], status: str = "pass", secret_ok: bool = True) -> RunResult:
    cases = tuple(
        CaseResult(i, Case(2, 8, 1, i), "pass", stats=Stats.from_samples([m, m]), samples_ns=(m, m))
        for i, m in enumerate(means_ns)
    )
    tests = StageResult("test", "test", "pass", tuple(CaseResult(c.index, c.case, "pass") for c in cases))
    bench = StageResult("benchmark", "benchmark", "pass", cases)
    ranked = StageResult("ranked", "leaderboard", status, cases)
    secret = StageResult("ranked-secret", "leaderboard", "pass" if secret_ok else "fail", cases, seed=7,
                         reason="" if secret_ok else "boom")
    return RunResult({"name": name, "path": f"/x/{name}.py", "sha256": "0" * 64}, "leaderboard",
                     {"name": "smoke", "path": "shapes/smoke.yaml"}, "cpu", "cpu-clock", False,
                     (tests, bench, ranked, secret), {"device": "cpu", "cpu": "test"})


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    runs = [_run("a", [1e6, 4e6]), _run("b", [2e6, 2e6], secret_ok=False)]
    write_results(path, runs)
    loaded = load_results(path)
    assert [r.to_dict() for r in loaded] == [r.to_dict() for r in runs]
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == results_module.SCHEMA_VERSION
    assert doc["runs"][0]["score_s"] == pytest.approx(2e-3)


def test_round_trip_compressed(tmp_path: Path) -> None:
    """A name ending in .gz is written and read through gzip, the same document as plain JSON."""
    runs = [_run("a", [1e6, 4e6]), _run("b", [2e6, 2e6], secret_ok=False)]
    plain, packed = tmp_path / "r.json", tmp_path / "r.json.gz"
    write_results(plain, runs)
    write_results(packed, runs)
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    assert [r.to_dict() for r in load_results(packed)] == [r.to_dict() for r in runs]
    unpacked = json.loads(gzip.decompress(packed.read_bytes()))
    assert {**unpacked, "written_at": None} == {**json.loads(plain.read_text()), "written_at": None}


@pytest.mark.parametrize("name", ["r.json", "r.json.gz"])
def test_write_is_atomic(tmp_path: Path, monkeypatch, name: str) -> None:
    path = tmp_path / name
    write_results(path, [_run("a", [1e6])])
    before = path.read_bytes()

    def broken_sync(fd: int) -> None:
        raise KeyboardInterrupt  # a Ctrl-C in the middle of writing

    monkeypatch.setattr(results_module.os, "fsync", broken_sync)
    with pytest.raises(KeyboardInterrupt):
        write_results(path, [_run("b", [2e6])])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary left behind


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"kind": "qrbench-results", "schema_version": 99, "runs": []}))
    with pytest.raises(ResultsError, match="newer"):
        load_results(path)


def test_not_a_results_file(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("{}")
    with pytest.raises(ResultsError, match=str(path)):
        load_results(path)
    path.write_text('{"kind": ')
    with pytest.raises(ResultsError, match=f"{path}: not valid JSON"):
        load_results(path)
    with pytest.raises(ResultsError, match=f"{tmp_path / 'missing.json'}: cannot read"):
        load_results(tmp_path / "missing.json")
    packed = tmp_path / "r.json.gz"
    packed.write_text("{}")
    with pytest.raises(ResultsError, match=f"{packed}: not valid gzip"):
        load_results(packed)
    packed.write_bytes(gzip.compress(b"\xff\xfe"))
    with pytest.raises(ResultsError, match=f"{packed}: not valid UTF-8"):
        load_results(packed)


def test_ranking_orders_by_geomean_and_lists_unranked_with_reason() -> None:
    fast, slow = _run("fast", [1e6, 1e6]), _run("slow", [4e6, 1e6])
    failed_secret = _run("cheat", [1.0, 1.0], secret_ok=False)
    standings = rank([slow, failed_secret, fast])
    assert [(s.place, s.name) for s in standings] == [(1, "fast"), (2, "slow"), (None, "cheat")]
    assert failed_secret.score_s is None
    assert failed_secret.reason == "ranked-secret: boom"


def test_ties_share_a_place() -> None:
    standings = rank([_run("a", [1e6]), _run("b", [1e6]), _run("c", [2e6])])
    assert [s.place for s in standings] == [1, 1, 3]


def test_a_run_missing_stages_of_its_mode_is_incomplete_not_passed() -> None:
    full = _run("a", [1e6])
    assert full.status == "pass"
    partial = RunResult(full.contestant, "leaderboard", full.shapes, "cpu", "cpu-clock", False,
                        full.stages[:3], full.environment)
    assert partial.status == "incomplete"
    assert partial.score_s is None
    assert partial.reason == "incomplete: no result for stage(s) ranked-secret"
