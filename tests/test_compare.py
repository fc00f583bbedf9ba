"""``qrbench compare``: paired, interleaved measurement of contestants (issue #21).

By layer: the statistics and the block rule on made-up samples; the paired protocol in-process
with fake timers (an injected slow drift between two identical kernels is read as "same" by a
comparison and as a difference by two separate runs; a fixed 3% slowdown is read as slower);
the comparison file, its Markdown and its pytest-benchmark export; and one small run of the real
command on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch

from benchmarks import compare_h200
from evaluator import protocol
from evaluator.axes import AxisError, split_setting
from evaluator.cli import main
from evaluator.cli_args import EXIT_FAILED, EXIT_USAGE
from evaluator.contestant import resolve_contestant
from evaluator.execution import LocalExecutor, WorkerGone
from evaluator.measure.stopping import BlockRule
from evaluator.measure.timing import Measurement
from evaluator.paired import PairedCase, PairedSettings, compare_shapes
from evaluator.paired_results import Comparison, load_comparison, write_comparison
from evaluator.paired_runner import unique_labels
from evaluator.paired_stats import FASTER, SAME, SLOWER, RatioRule
from evaluator.protocol import Harness
from evaluator.report.compare import NoiseRule
from evaluator.report.paired import ratio_text, render_comparison
from evaluator.report.units import format_s
from evaluator.results import CaseResult, ResultsError, RunResult, StageResult, load_results, write_results
from evaluator.shapes import Case, ShapeSet, Timing
from tests.conftest import REPO

T = TypeVar("T")
RULE = RatioRule()


# ---- statistics, on made-up samples -------------------------------------------------------------

def _noisy(n: int, mean: float, rel: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [mean * (1 + rel * rng.gauss(0, 1)) for _ in range(n)]


def test_identical_kernels_read_same_with_an_interval_around_one() -> None:
    """The same times in the opposite order: the pairs are the same set either way round, so the
    bootstrap is symmetric about a ratio of exactly 1."""
    base = _noisy(50, 1e6, 0.01, 1)
    estimate = RULE.case_ratio(base, base[::-1])
    assert estimate.time_ratio == pytest.approx(1.0)
    assert estimate.verdict == SAME
    assert estimate.low < 1 < estimate.high
    assert estimate.blocks == 50


@pytest.mark.parametrize(("factor", "verdict"), [(1.03, SLOWER), (1 / 1.03, FASTER), (1.005, SAME)])
def test_a_verdict_needs_significance_and_the_minimum_change(factor: float, verdict: str) -> None:
    base = _noisy(200, 1e6, 0.002, 1)
    estimate = RULE.case_ratio(base, [t * factor for t in _noisy(200, 1e6, 0.002, 2)])
    assert estimate.time_ratio == pytest.approx(factor, rel=1e-3)
    assert estimate.low > 1 or estimate.high < 1  # 0.5% is significant here, but under the 1% minimum
    assert estimate.verdict == verdict


def test_pairing_cancels_drift_that_separate_samples_keep() -> None:
    """Both sides ride the same slow drift (20% over the blocks): paired, the ratio's interval is
    narrow; the same samples taken as unpaired leave the drift in the noise."""
    drift = [1 + 0.2 * b / 100 for b in range(100)]
    base = [d * t for d, t in zip(drift, _noisy(100, 1e6, 0.002, 1), strict=True)]
    cand = [d * t for d, t in zip(drift, _noisy(100, 1e6, 0.002, 2), strict=True)]
    paired, unpaired = RULE.case_ratio(base, cand), RULE.case_ratio(base, cand, paired=False)
    assert paired.time_ratio == unpaired.time_ratio
    assert (paired.high - paired.low) * 10 < unpaired.high - unpaired.low


def test_the_geomean_ratio_is_the_ratio_of_geomean_scores() -> None:
    cases = [([1.0, 1.1, 0.9], [2.2, 2.0, 1.8]), ([10.0, 10.5, 9.5], [4.0, 5.5, 5.5])]
    expected = math.sqrt((6.0 / 3.0) / (30.0 / 15.0))  # each case's ratio of means, geometric mean
    estimate = RULE.geomean_ratio(cases)
    assert estimate.time_ratio == pytest.approx(expected)
    assert estimate.blocks == 3
    assert RULE.geomean_ratio(cases) == estimate  # a seeded bootstrap: the same interval every time


def test_too_few_blocks_never_make_a_difference() -> None:
    estimate = RULE.case_ratio([1.0], [2.0])
    assert (estimate.time_ratio, estimate.low, estimate.high, estimate.verdict) == (2.0, None, None, SAME)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: RULE.geomean_ratio([]), "at least one case"),
    (lambda: RULE.case_ratio([1.0, 2.0], [1.0]), "block for block"),
    (lambda: RULE.case_ratio([], [1.0], paired=False), "both sides"),
    (lambda: RULE.case_ratio([1.0, 0.0], [1.0, 1.0]), "positive"),
    (lambda: RatioRule(min_change=-0.1), "min_change"),
    (lambda: RatioRule(confidence=1.0), "confidence"),
    (lambda: RatioRule(resamples=10), "resamples"),
    (lambda: BlockRule(err_rel=0), "err_rel"),
    (lambda: BlockRule(min_blocks=1), "min_blocks"),
    (lambda: PairedSettings(max_blocks=0, budget_s=1), "max_blocks"),
    (lambda: PairedSettings(max_blocks=1, budget_s=0), "budget_s"),
])
def test_bad_arguments_are_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_the_block_rule_waits_for_every_candidate() -> None:
    rule = BlockRule(err_rel=1e-3, min_blocks=10)
    quiet = [0.0001 * (-1) ** b for b in range(10)]
    noisy = [0.01 * (-1) ** b for b in range(10)]
    assert rule.should_stop([quiet])
    assert not rule.should_stop([quiet[:9]])  # too few blocks, however quiet
    assert not rule.should_stop([quiet, noisy])
    assert rule.should_stop([quiet, quiet])


# ---- the paired protocol, in-process with fake timers --------------------------------------------

class Drift:
    """A slow drift shared by every timer made from it: each timed repeat, whoever's, makes the
    next one ``rate`` slower; each time also carries ``noise`` (relative, seeded)."""

    def __init__(self, rate: float, noise: float = 0.005, seed: int = 0) -> None:
        self.rate = rate
        self.noise = noise
        self.repeats = 0
        self._rng = random.Random(seed)

    def timer(self, factor: float = 1.0) -> Any:
        drift = self

        class Timer:
            kind = "cpu-clock"

            def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
                result = run()
                drift.repeats += 1
                jitter = 1 + drift.noise * drift._rng.gauss(0, 1)
                return Measurement(1e6 * factor * (1 + drift.rate * drift.repeats) * jitter), result

        return Timer()


SHAPES = ShapeSet("fake", Path("fake.yaml"), (Case(2, 8, 1, 1),),
                  (Case(2, 8, 1, 11), Case(2, 12, 0, 12, "rankdef"), Case(3, 8, 2, 13, "mixed")), {},
                  Timing(max_inputs=1, benchmark_warmup_repeats=1, benchmark_repeats=40, benchmark_budget_s=1e3))
SETTINGS = PairedSettings(max_blocks=40, budget_s=1e3)
SEPARATE_CLOCK_STEP_S = 0.01  # every clock reading of a separate run is 10 ms later


def _harness(kernel: Callable[[torch.Tensor], object], timer: Any, **harness: Any) -> Harness:
    return Harness(LocalExecutor(kernel, timer, rules=True), **harness)


def _compare(kernels: list[Callable[[torch.Tensor], object]], timers: list[Any],
             settings: PairedSettings = SETTINGS, seed: int = 0) -> list[PairedCase]:
    harnesses = [_harness(k, t) for k, t in zip(kernels, timers, strict=True)]
    return list(compare_shapes(harnesses, SHAPES, settings, random.Random(seed)))


def _paired(cases: list[PairedCase], candidate: int = 1) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    return [(c.results[0].samples_ns, c.results[candidate].samples_ns) for c in cases]


def _fake_clock() -> Callable[[], int]:
    ticks = iter(range(0, 10**15, int(SEPARATE_CLOCK_STEP_S * 1e9)))
    return lambda: next(ticks)


def _separate_run(timer: Any) -> list[Any]:
    return list(protocol.run_benchmark(_harness(torch.geqrf, timer, clock=_fake_clock()), SHAPES))


def test_drift_between_identical_kernels_is_same_paired_and_a_difference_in_separate_runs() -> None:
    """The issue's case: a lab that drifts about 4% over a run's length. Interleaved, the two
    identical kernels share it block by block; run one after the other, the second reads slower."""
    drift = Drift(rate=3e-4)
    cases = _compare([torch.geqrf, torch.geqrf], [drift.timer(), drift.timer()])
    assert all(r.passed for c in cases for r in c.results)
    paired = RULE.geomean_ratio(_paired(cases))
    assert paired.verdict == SAME
    assert paired.low < 1 < paired.high
    assert abs(paired.time_ratio - 1) < 0.002

    drift = Drift(rate=3e-4)
    first, second = _separate_run(drift.timer()), _separate_run(drift.timer())
    assert all(c.passed for c in first + second)
    separate = RULE.geomean_ratio([(a.samples_ns, b.samples_ns) for a, b in zip(first, second, strict=True)],
                                  paired=False)
    assert separate.verdict == SLOWER
    assert separate.time_ratio > 1.02
    # The separate-runs report reads it as slower too, case by case, at a 1% minimum change.
    assert {NoiseRule(min_change=0.01).compare(a.samples_ns, b.samples_ns).verdict
            for a, b in zip(first, second, strict=True)} == {"slower"}


@pytest.mark.parametrize(("factor", "verdict"), [(1.03, SLOWER), (1 / 1.03, FASTER), (1.0, SAME)])
def test_a_fixed_change_is_read_through_the_drift(factor: float, verdict: str) -> None:
    drift = Drift(rate=3e-4)
    cases = _compare([torch.geqrf, torch.geqrf], [drift.timer(), drift.timer(factor)])
    estimate = RULE.geomean_ratio(_paired(cases))
    assert estimate.verdict == verdict
    assert estimate.time_ratio == pytest.approx(factor, rel=0.003)
    assert {RULE.case_ratio(*pair).verdict for pair in _paired(cases)} == {verdict}


class Recorder:
    """An honest kernel that keeps the content of every call."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen.append(a.clone())
        return torch.geqrf(a)


def test_every_block_hands_the_same_fresh_content_to_all_in_a_random_order() -> None:
    kernels = [Recorder(), Recorder(), Recorder()]
    drift = Drift(rate=0.0)
    settings = PairedSettings(max_blocks=12, budget_s=1e3, warmup_blocks=1)
    cases = _compare(kernels, [drift.timer() for _ in kernels], settings)
    calls_per_case = 1 + settings.warmup_blocks + settings.max_blocks  # correctness pass, warm-up, blocks
    assert [len(k.seen) for k in kernels] == [calls_per_case * len(SHAPES.benchmarks)] * 3
    for call in range(len(kernels[0].seen)):
        assert torch.equal(kernels[0].seen[call], kernels[1].seen[call])
        assert torch.equal(kernels[0].seen[call], kernels[2].seen[call])
        if call % calls_per_case:  # no two blocks (nor a block and the correctness pass) share content
            assert not torch.equal(kernels[0].seen[call], kernels[0].seen[call - 1])
    for case in cases:
        assert len(case.orders) == settings.max_blocks
        assert all(sorted(order) == [0, 1, 2] for order in case.orders)
        assert all(len(r.samples_ns) == settings.max_blocks for r in case.results)
    assert len({order for case in cases for order in case.orders}) > 3  # drawn per block


def test_the_block_rule_ends_a_quiet_case_and_the_budget_a_noisy_one() -> None:
    quiet = Drift(rate=0.0, noise=1e-4)
    cases = _compare([torch.geqrf, torch.geqrf], [quiet.timer(), quiet.timer()],
                     PairedSettings(max_blocks=500, budget_s=1e3, rule=BlockRule(min_blocks=10)))
    assert {len(c.orders) for c in cases} == {10}
    noisy = Drift(rate=0.0, noise=0.05)
    harnesses = [_harness(torch.geqrf, noisy.timer(), clock=_fake_clock()) for _ in range(2)]
    settings = PairedSettings(max_blocks=500, budget_s=0.25)  # the clock reads 10 ms later after each block
    cases = list(compare_shapes(harnesses, SHAPES, settings, random.Random(0)))
    assert {len(c.orders) for c in cases} == {26}  # the first block past 0.25 s


def _wrong_after(calls: int) -> Callable[[torch.Tensor], object]:
    count = [0]

    def kernel(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count[0] += 1
        h, tau = torch.geqrf(a)
        return (h, tau) if count[0] <= calls else (h * 0, tau)

    return kernel


def test_a_failing_candidate_leaves_its_case_and_the_others_go_on() -> None:
    drift = Drift(rate=0.0)
    cases = _compare([torch.geqrf, _wrong_after(4), torch.geqrf], [drift.timer() for _ in range(3)],
                     PairedSettings(max_blocks=8, budget_s=1e3))
    first = cases[0]
    assert first.results[1].status == "fail"
    assert first.results[1].message.startswith("[rule fresh-inputs]")
    assert first.results[0].passed
    assert first.results[2].passed
    assert len(first.results[0].samples_ns) == len(first.results[2].samples_ns) == 8
    assert len(first.orders) == 8
    assert any(1 not in order for order in first.orders)
    assert all(c.results[1].status == "fail" for c in cases)  # wrong from then on, in every case


def test_a_failing_baseline_leaves_nothing_to_pair() -> None:
    drift = Drift(rate=0.0)
    cases = _compare([lambda a: (a, a[..., 0]), torch.geqrf], [drift.timer(), drift.timer()])
    for case in cases:
        assert case.results[0].status == "fail"
        assert case.results[1].status == "skipped"
        assert case.orders == ()


class Gone:
    """A timer whose worker goes away at its ``after``-th repeat."""

    def __init__(self, after: int) -> None:
        self.kind = "cpu-clock"
        self.after = after

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        self.after -= 1
        if self.after < 0:
            raise WorkerGone("crash", "the worker was killed by SIGKILL before finishing")
        return Measurement(1e6), run()


@pytest.mark.parametrize("who", [0, 1])
def test_a_worker_that_goes_away_leaves_the_comparison(who: int) -> None:
    timers: list[Any] = [Drift(rate=0.0).timer(), Drift(rate=0.0).timer(), Drift(rate=0.0).timer()]
    timers[who] = Gone(after=3)
    cases = _compare([torch.geqrf] * 3, timers, PairedSettings(max_blocks=5, budget_s=1e3))
    assert cases[0].results[who].status == "crash"
    assert set(cases[0].gone) == {who}
    later = [c.results for c in cases[1:]]
    assert all(r[who].status == "skipped" and "its worker stopped in case 1" in r[who].message for r in later)
    if who == 0:  # no baseline: nothing is compared any more
        assert all(r[j].status == "skipped" and "the baseline left" in r[j].message for r in later for j in (1, 2))
    else:
        assert all(r[0].passed and r[2].passed for r in later)


def test_a_comparison_needs_two_contestants_and_every_repeat() -> None:
    drift = Drift(rate=0.0)
    with pytest.raises(ValueError, match="at least two"):
        list(compare_shapes([_harness(torch.geqrf, drift.timer())], SHAPES, SETTINGS, random.Random(0)))
    harnesses = [_harness(torch.geqrf, drift.timer(), discard_throttled=True) for _ in range(2)]
    with pytest.raises(ValueError, match="keeps every repeat"):
        list(compare_shapes(harnesses, SHAPES, SETTINGS, random.Random(0)))


# ---- the command: workers, the comparison file, its Markdown and pytest-benchmark ----------------

FIXTURES = Path(__file__).parent / "contestants"
TINY = Path(__file__).parent / "shapes_tiny.yaml"
SLOWED = FIXTURES / "blocked_wy_slowed.py"


def _qrbench(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evaluator", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One real comparison on the CPU: geqrf against the 3%-slowed blocked_wy (its own QR under the
    Triton interpreter, then a host sleep), two tiny cases, a few blocks each."""
    cwd = tmp_path_factory.mktemp("compare")
    proc = _qrbench(cwd, "compare", "geqrf", str(SLOWED), "--shapes", str(TINY), "--budget", "60", "--repeats", "3",
                    "--json", "cmp.json", "--benchmark-json", "pb.json")
    return cwd, proc


@pytest.mark.slow
def test_the_command_compares_in_workers_and_writes_its_files(compared: tuple[Path, Any]) -> None:
    cwd, proc = compared
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = load_comparison(cwd / "cmp.json")
    assert comparison.labels == ("geqrf", "blocked_wy_slowed")
    assert comparison.passed  # the slowed copy passes every check: its outputs are blocked_wy's
    assert [len(case) for case in comparison.orders] == [3, 3]
    assert comparison.settings["max_blocks"] == 3
    assert comparison.breakdown_s["kernel"] > 0
    (summary,) = comparison.summary(RULE)
    assert summary.geomean is not None
    assert summary.geomean.blocks == 3
    assert [len(r.stage("benchmark").cases[0].samples_ns) for r in comparison.runs] == [3, 3]
    assert "# Paired comparison on tiny: geqrf, blocked_wy_slowed" in proc.stdout
    assert (cwd / "cmp.md").read_text() == render_comparison(comparison, RULE)
    assert "compare · case 2/2 2x16 rankdef (3 blocks): blocked_wy_slowed: " in proc.stderr
    # An ordinary results file too: `qrbench report` reads its runs.
    assert [r.contestant["name"] for r in load_results(cwd / "cmp.json")] == ["geqrf", "blocked_wy_slowed"]


@pytest.mark.slow
def test_pytest_benchmark_compare_reads_the_paired_samples(compared: tuple[Path, Any]) -> None:
    cwd, proc = compared
    assert proc.returncode == 0, proc.stdout + proc.stderr
    comparison = load_comparison(cwd / "cmp.json")
    doc = json.loads((cwd / "pb.json").read_text())
    benches = {(b["params"]["contestant"], b["params"]["case"]): b for b in doc["benchmarks"]}
    case_ids = ("case1-2x8", "case2-2x16-rankdef")
    assert set(benches) == {(label, case) for label in comparison.labels for case in case_ids}
    for run in comparison.runs:
        for case in run.stage("benchmark").cases:
            bench = benches[(run.contestant["name"], f"case{case.index + 1}-{case.case.label.replace(' ', '-')}")]
            assert bench["stats"]["data"] == [ns / 1e9 for ns in case.samples_ns]
    slowed = benches[("blocked_wy_slowed", "case1-2x8")]["extra_info"]
    assert slowed["time_ratio"] == comparison.summary(RULE)[0].cases[0].time_ratio
    assert slowed["baseline"] == "geqrf"
    shown = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", "pb.json", "--group-by", "group"],
                           cwd=cwd, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "benchmark 'tiny case1-2x8': 2 tests" in shown.stdout
    assert "compare[blocked_wy_slowed-case2-2x16-rankdef]" in shown.stdout


def test_a_refused_contestant_leaves_nothing_to_compare(tmp_path: Path) -> None:
    proc = _qrbench(tmp_path, "compare", "geqrf", str(REPO / "tests" / "exploits" / "side_stream.py"),
                    "--shapes", str(TINY), "--json", "cmp.json")
    assert proc.returncode == EXIT_FAILED, proc.stdout + proc.stderr
    comparison = load_comparison(tmp_path / "cmp.json")
    assert comparison.reason == "too few contestants passed the submission gates"
    assert comparison.runs[1].status == "refused"
    assert comparison.orders == ()
    assert "- **side_stream** (refused): precheck: [rule stream-word]" in proc.stdout
    assert "**geqrf** (" not in proc.stdout  # never started: the comparison's own reason says why


@pytest.mark.parametrize(("args", "message"), [
    (["geqrf"], "at least two contestants"),
    (["geqrf", "geqrf", "--compat"], "--compat: a comparison runs hardened only"),
    (["geqrf", "geqrf", "--discard-on-throttle"], "--discard-on-throttle: a comparison keeps every repeat"),
    (["geqrf", "geqrf", "--min-change", "-1"], "--min-change: min_change must be non-negative"),
    (["geqrf", "no_such_kernel"], "no_such_kernel: no such contestant"),
    (["geqrf", "geqrf", "--cases", "999"], "--cases 999: no benchmark case of smoke matches"),
])
def test_bad_command_lines_are_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["compare", *args, "--device", "cpu"]) == EXIT_USAGE
    assert message in capsys.readouterr().err


KNOBBED = str(FIXTURES / "knobbed.py")


def test_a_setting_names_a_contestant_at_some_knob_values() -> None:
    assert split_setting("blocked_wy[nb=32, two_columns=on]") == ("blocked_wy", {"nb": ("32",), "two_columns": ("on",)})
    assert split_setting("blocked_wy") == ("blocked_wy", {})
    assert split_setting("x/submission.py") == ("x/submission.py", {})
    for bad, message in (("k[nb]", "expected NAME[KNOB=VALUE"), ("k[=3]", "expected NAME[KNOB=VALUE"),
                         ("[nb=3]", "expected NAME[KNOB=VALUE"), ("k[nb=]", "expected NAME[KNOB=VALUE"),
                         ("k[nb=3,nb=4]", "knob nb is given twice")):
        with pytest.raises(AxisError, match=re.escape(message)):
            split_setting(bad)


@pytest.mark.slow
def test_a_kernel_is_compared_with_itself_at_other_knob_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """NAME[KNOB=VALUE] sets the knobs in that contestant's worker only: the sleeping variant
    reads slower than the same file at its own plan, on the one case --cases keeps."""
    monkeypatch.chdir(tmp_path)
    code = main(["compare", KNOBBED, f"{KNOBBED}[sleep_ms=20]", "--shapes", str(TINY), "--cases", "2x8",
                 "--device", "cpu", "--no-precheck", "--budget", "5", "--repeats", "4", "--json", "cmp.json.gz"])
    out = capsys.readouterr().out
    assert code == 0, out
    comparison = load_comparison(tmp_path / "cmp.json.gz")
    assert [(r.contestant["name"], r.params) for r in comparison.runs] == [
        ("knobbed", {}), ("knobbed[sleep_ms=20]", {"sleep_ms": 20})]
    assert [c.case.label for c in comparison.runs[0].stage("benchmark").cases] == ["2x8"]
    (summary,) = comparison.summary(RatioRule())
    assert summary.geomean.verdict == SLOWER
    assert "| knobbed[sleep_ms=20] | pass" in (tmp_path / "cmp.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize(("knob", "code", "message"), [
    ("sleep=5", EXIT_USAGE, "knobbed[sleep=5]: no axis 'sleep' (its PLAN_AXES: sleep_ms)"),
    ("sleep_ms=7", EXIT_USAGE, "knobbed[sleep_ms=7]: axis sleep_ms: '7' is not one of 0, 5, 20, -1"),
    ("sleep_ms", EXIT_USAGE, "expected NAME[KNOB=VALUE,...]"),
    ("sleep_ms=-1", EXIT_FAILED, "configure raised: ValueError: sleep_ms must not be negative, got -1"),
])
def test_a_setting_the_kernel_does_not_take_is_refused(knob: str, code: int, message: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["compare", KNOBBED, f"{KNOBBED}[{knob}]", "--shapes", str(TINY), "--device", "cpu",
                 "--no-precheck", "--budget", "1", "--repeats", "2", "--json", "cmp.json"]) == code
    captured = capsys.readouterr()
    assert message in captured.err + captured.out


def test_a_kernel_compared_with_itself_is_two_contestants() -> None:
    geqrf = resolve_contestant("geqrf")
    assert unique_labels([geqrf, geqrf, geqrf]) == ["geqrf", "geqrf-2", "geqrf-3"]


def _run(name: str, cases: list[CaseResult], sha256: str = "0" * 64) -> RunResult:
    stage = StageResult("benchmark", "benchmark", "pass", tuple(cases))
    return RunResult({"name": name, "path": f"/x/{name}.py", "sha256": sha256}, "benchmark",
                     {"name": "fake", "path": "fake.yaml"}, "cpu", "cpu-clock", False, (stage,),
                     {"device": "cpu", "cpu": "test"})


def _comparison(factors: tuple[float, ...] = (1.0, 1.05), names: tuple[str, ...] = ("base", "cand"),
                drift: float = 0.0, blocks: int = 6) -> Comparison:
    """A comparison of made-up kernels, each ``factor`` times the first's time (the first
    two share a file when their names match up to a ``-2``)."""
    shared = Drift(rate=drift)
    cases = _compare([torch.geqrf] * len(factors), [shared.timer(f) for f in factors],
                     PairedSettings(max_blocks=blocks, budget_s=1e3))
    runs = [_run(name, [c.results[j] for c in cases], hashlib.sha256(name.removesuffix("-2").encode()).hexdigest())
            for j, name in enumerate(names)]
    return Comparison(tuple(runs), tuple(c.orders for c in cases), {"max_blocks": blocks, "budget_s": 1e3})


def test_the_comparison_file_round_trips_and_is_checked(tmp_path: Path) -> None:
    comparison = _comparison()
    path = tmp_path / "cmp.json"
    write_comparison(path, comparison, RULE)
    assert load_comparison(path) == comparison
    compressed = tmp_path / "cmp.json.gz"  # as committed under reports/
    write_comparison(compressed, comparison, RULE)
    assert load_comparison(compressed) == comparison
    (summary,) = comparison.summary(RULE)
    assert summary.geomean.verdict == SLOWER
    assert summary.count(SLOWER) == 3
    written = json.loads(path.read_text())["comparison"]["summary"]["candidates"]["cand"]["geomean"]
    assert written == summary.geomean.to_dict()

    doc = json.loads(path.read_text())
    doc["comparison"]["orders"][0] = doc["comparison"]["orders"][0][:-1]  # a block lost
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="case 1: base has 6 samples but ran in 5 blocks"):
        load_comparison(path)
    doc["comparison"]["schema_version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="comparison schema_version 99"):
        load_comparison(path)
    write_results(path, list(comparison.runs))
    with pytest.raises(ResultsError, match="without a comparison"):
        load_comparison(path)


def test_the_markdown_gives_the_ratio_interval_and_verdict_of_every_case() -> None:
    comparison = _comparison()
    text = render_comparison(comparison, RULE)
    (summary,) = comparison.summary(RULE)
    assert ratio_text(summary.geomean) in text
    assert ratio_text(summary.geomean).endswith(" slower")
    for estimate in summary.cases:
        assert ratio_text(estimate) in text
    (row,) = [line for line in text.splitlines() if line.startswith("| cand ")]
    assert [cell.strip() for cell in row.strip("|").split("|")] == [
        "cand", "pass", format_s(comparison.runs[1].score_s), ratio_text(summary.geomean),
        "0 / 3 / 0"]  # faster / slower / same, by case


@pytest.mark.parametrize(("slowdown", "held"), [(1.03, 0), (1.0, 1)])
def test_the_gpu_check_script_judges_the_issues_three_checks(slowdown: float, held: int, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/compare_h200.py on made-up files: a drifting lab, blocked_wy compared with itself
    and with a copy slowed by ``slowdown``, and two separate runs."""
    comparison = _comparison((1.0, 1.0, slowdown), ("blocked_wy", "blocked_wy-2", "slowed"), drift=3e-4, blocks=30)
    write_comparison(tmp_path / "cmp.json", comparison, RULE)
    drift = Drift(rate=3e-4)
    separate = [_run("blocked_wy", _separate_run(drift.timer())), _run("blocked_wy", _separate_run(drift.timer()))]
    write_results(tmp_path / "separate.json", separate)
    assert compare_h200.main([str(tmp_path / "cmp.json"), str(tmp_path / "separate.json")]) == held
    out = capsys.readouterr().out
    assert "holds: blocked_wy against itself: the interval holds 1" in out
    assert "holds: ... and is narrower than the separate runs'" in out
    assert ("holds" if slowdown > 1 else "FAILS") + ": the 3%-slowed copy reads slower" in out
    for i, run in enumerate(separate):  # the separate runs from two files, the first run of each
        write_results(tmp_path / f"run{i}.json", [run, separate[1 - i]])
    assert compare_h200.main([str(tmp_path / "cmp.json"), str(tmp_path / "run0.json"), str(tmp_path / "run1.json")]) \
        == held
    assert capsys.readouterr().out == out
