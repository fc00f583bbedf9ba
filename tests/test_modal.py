"""Cloud ranking runs without Modal: the app builds offline, the dry run bills, the job bodies
run in-process and give a local ranking's results, and only the machinery's failures are retried."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evaluator.cli import main
from evaluator.cloud import container
from evaluator.cloud.dispatch import InfrastructureError, LocalDispatcher, run_ranking
from evaluator.cloud.jobs import Job, RunRequest, combine, pack_contestant, plan_jobs
from evaluator.cloud.pricing import CPU_USD_PER_CORE_S, MEMORY_USD_PER_GIB_S, container_price
from evaluator.cloud.remote import execute
from evaluator.contestant import resolve_contestant
from evaluator.results import RunResult, StageResult, load_results
from evaluator.runner import RunOptions
from evaluator.shapes import ShapeFileError, ShapeSet, load_shapes, resolve_shapes
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "contestants"
TINY = Path(__file__).parent / "shapes_tiny.yaml"
CPU = RunOptions(device="cpu")


def _jobs(refs: list[str | Path], mode: str, split_secret: bool = True) -> list[Job]:
    return plan_jobs([resolve_contestant(r) for r in refs], mode, load_shapes(TINY), CPU, split_secret)


class _Counting(LocalDispatcher):
    """The local dispatcher, counting calls, failing the first ``failures`` with ``error``."""

    def __init__(self, failures: int = 0, error: Exception | None = None, infra: bool = False) -> None:
        self.calls = 0
        self.failures = failures
        self.error = error
        self.infra = infra

    def run(self, request: RunRequest, timeout_s: int) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.failures and self.error is not None:
            raise self.error
        return super().run(request, timeout_s)

    def is_infrastructure(self, error: BaseException) -> bool:
        return self.infra or super().is_infrastructure(error)


def test_app_module_builds_offline_without_credentials(tmp_path: Path) -> None:
    script = """
import modal, modal.exception
from evaluator.cloud import container
from evaluator.cloud.dispatch import DispatchError
from evaluator.cloud.modal_app import FUNCTION_OPTIONS, ModalDispatcher, image, run_on_gpu
assert isinstance(run_on_gpu, modal.Function) and isinstance(image, modal.Image)
assert FUNCTION_OPTIONS["block_network"] and FUNCTION_OPTIONS["single_use_containers"]
assert FUNCTION_OPTIONS["gpu"] == container.DEFAULT_GPU == "B200"
d = ModalDispatcher("H100!")
assert isinstance(d.function(1680), modal.Function) and d.function(1680) is d.function(1680)
assert d.is_infrastructure(modal.exception.InternalFailure("lost"))
assert d.is_infrastructure(modal.exception.RemoteError("container died"))
assert not d.is_infrastructure(modal.exception.ImageBuildError("bad pin", "im-1"))
assert not d.is_infrastructure(ValueError("our bug"))
try:
    with d.session():
        raise AssertionError("a session started without credentials")
except DispatchError as exc:
    assert "modal setup" in str(exc)
print("built")
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env["HOME"] = str(tmp_path)  # no ~/.modal.toml
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "built"


def test_the_cli_does_not_import_modal() -> None:
    script = "import sys, evaluator.cli as c; c._parser(); print('modal' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.stdout.strip() == "False", proc.stderr


def test_dry_run_prints_containers_limits_and_the_bill(capsys, tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    code = main(["modal", "rank", "geqrf", "--dry-run", "--shapes", "qr_v2", "--gpu", "H200", "--json", str(results)])
    out = capsys.readouterr().out
    assert code == 0
    assert not results.exists()
    jobs = plan_jobs([resolve_contestant("geqrf")], "leaderboard", resolve_shapes("qr_v2"), RunOptions(device="cuda"))
    price = container_price("H200")
    assert price is not None
    assert price.usd_per_s == pytest.approx(0.001261 + 4 * CPU_USD_PER_CORE_S + 16 * MEMORY_USD_PER_GIB_S)
    assert "$0.001261/s GPU" in out
    assert "2 containers on Modal H200" in out
    # qr_v2's limits: test 240 + benchmark 480 + leaderboard 900 s, and 900 s for the secret pass.
    assert [job.timeout_s for job in jobs] == [240 + 480 + 900 + 60, 900 + 60]
    for text in ("1680 s", "960 s", "22 + 12 + 12", "ranked-secret"):
        assert text in out
    estimate = sum(job.estimate_s for job in jobs)
    assert f"estimate {estimate / 3600:.2f} h (${estimate * price.usd_per_s:.2f})" in out
    assert f"{container.CUDA_BASE_IMAGE}, Python {container.PYTHON_VERSION}, torch {container.TORCH_VERSION}" in out


def test_dry_run_without_a_listed_price_asks_for_one(capsys) -> None:
    assert main(["modal", "rank", "geqrf", "--dry-run", "--shapes", "qr_v2", "--gpu", "B200+", "--one-container"]) == 0
    out = capsys.readouterr().out
    assert "pass --gpu-price" in out
    assert "1 container on Modal B200+" in out
    assert f"{240 + 480 + 900 + 900 + 60} s" in out
    assert main(["modal", "rank", "geqrf", "--dry-run", "--shapes", "qr_v2", "--gpu", "B200+",
                 "--gpu-price", "0.002"]) == 0
    assert "$0.002000/s GPU" in capsys.readouterr().out


def test_prices_of_gpu_requests() -> None:
    host = 4 * CPU_USD_PER_CORE_S + 16 * MEMORY_USD_PER_GIB_S
    assert container_price("H100!").usd_per_s == pytest.approx(0.001097 + host)
    assert container_price("b200:2").usd_per_s == pytest.approx(2 * 0.001736 + host)
    assert container_price("A100") is None


def _shape(doc: dict[str, Any]) -> Any:
    """A document's structure: its keys, recursively (lists by their first element)."""
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items() if k not in ("environment", "timing")}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else []
    return type(doc).__name__


def _verdicts(run: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    return [(s["name"], s["status"], [c["status"] for c in s["cases"]]) for s in run["stages"]]


@pytest.mark.slow
def test_local_modal_path_gives_a_local_rankings_results(capsys, tmp_path: Path) -> None:
    zeros = str(FIXTURES / "zeros.py")
    common = ["geqrf", zeros, "--device", "cpu", "--shapes", str(TINY)]
    plain_code = main(["rank", *common, "--json", str(tmp_path / "plain.json"), "--out", str(tmp_path / "plain")])
    cloud_code = main(["modal", "rank", *common, "--local", "--json", str(tmp_path / "cloud.json"),
                       "--out", str(tmp_path / "cloud")])
    out = capsys.readouterr().out
    assert plain_code == cloud_code == 112  # zeros fails its tests
    plain = json.loads((tmp_path / "plain.json").read_text())
    cloud = json.loads((tmp_path / "cloud.json").read_text())
    assert _shape(cloud) == _shape(plain)
    assert [_verdicts(r) for r in cloud["runs"]] == [_verdicts(r) for r in plain["runs"]]
    assert _verdicts(cloud["runs"][0])[-1][0] == "ranked-secret"
    for p, c in zip(plain["runs"], cloud["runs"], strict=True):
        assert c["contestant"] == p["contestant"]
        assert c["shapes"] == p["shapes"]
        assert c["stages"][0]["cases"][0]["message"] == p["stages"][0]["cases"][0]["message"]
        assert set(p["environment"]) <= set(c["environment"])
    assert cloud["runs"][0]["score_s"] > 0
    assert cloud["runs"][1]["score_s"] is None
    assert [r.contestant["name"] for r in load_results(tmp_path / "cloud.json")] == ["geqrf", "zeros"]
    assert "| 1   | geqrf" in (tmp_path / "cloud" / "leaderboard-tiny-cpu.md").read_text()
    assert "unranked: test: 2x8: R - Q.T @ A is too large" in out


def test_infrastructure_errors_are_retried() -> None:
    dispatcher = _Counting(failures=1, error=InfrastructureError("container lost"))
    warnings: list[str] = []
    runs = run_ranking(_jobs(["geqrf"], "test"), dispatcher, attempts=2, backoff_s=0, warn=warnings.append)
    assert dispatcher.calls == 2
    assert [r.status for r in runs] == ["pass"]
    assert warnings == ["geqrf · all: infrastructure error on attempt 1 of 2: InfrastructureError: container lost"]


def test_kernel_failures_are_results_not_retried() -> None:
    dispatcher = _Counting(infra=True)  # would retry any exception; a failing kernel raises none
    runs = run_ranking(_jobs([FIXTURES / "zeros.py"], "test"), dispatcher, attempts=3, backoff_s=0)
    assert dispatcher.calls == 1
    assert runs[0].status == "fail"
    assert "R - Q.T @ A is too large" in runs[0].reason


def test_errors_of_our_own_are_raised_at_once() -> None:
    dispatcher = _Counting(failures=5, error=ValueError("a bug in the harness"))
    with pytest.raises(ValueError, match="a bug in the harness"):
        run_ranking(_jobs(["geqrf"], "test"), dispatcher, attempts=3, backoff_s=0)
    assert dispatcher.calls == 1


def test_a_run_whose_attempts_all_break_down_fails_and_its_secret_pass_is_skipped() -> None:
    dispatcher = _Counting(failures=99, error=InfrastructureError("no capacity"))
    jobs = _jobs(["geqrf"], "leaderboard")
    assert [job.part for job in jobs] == ["public", "secret"]
    seen: list[tuple[int, RunResult]] = []
    runs = run_ranking(jobs, dispatcher, attempts=3, backoff_s=0, on_run=lambda i, r: seen.append((i, r)))
    assert dispatcher.calls == 3  # the public job three times; the secret pass never
    assert runs[0].status == "error"
    assert runs[0].reason == ("test: infrastructure failure on every one of 3 attempts: "
                              "InfrastructureError: no capacity")
    assert [stage.name for stage in runs[0].stages] == ["test"]
    assert seen == [(0, runs[0])]


def test_combine_keeps_the_secret_pass_only_after_public_stages_passed() -> None:
    job = _jobs(["geqrf"], "leaderboard")[1]
    secret = job.failed_run("x")
    public_ok = RunResult.from_dict({**secret.to_dict(), "stages": [
        {"name": n, "mode": n, "status": "pass"} for n in ("test", "benchmark", "ranked")]})
    public_bad = public_ok.with_stage(StageResult("benchmark", "benchmark", "fail"))
    secret = RunResult.from_dict({**secret.to_dict(), "environment": {"hostname": "b"}})
    assert [s.name for s in combine([public_ok, secret]).stages][-1] == "ranked-secret"
    assert combine([public_ok, secret]).environment["secret_pass_environment"] == {"hostname": "b"}
    assert combine([public_bad, secret]) == public_bad


def test_a_folder_contestant_ships_its_helpers_and_runs_from_them() -> None:
    contestant = resolve_contestant(FIXTURES / "contest_format")
    entry, files = pack_contestant(contestant)
    assert entry == "submission.py"
    assert sorted(files) == ["helper.py", "submission.py"]
    job = _jobs([FIXTURES / "contest_format"], "test")[0]
    assert pickle.loads(pickle.dumps(job.request)) == job.request  # what a Modal call sends
    run = RunResult.from_dict(execute(job.request))
    assert run.passed, run.reason
    assert run.contestant == contestant.to_dict()
    assert run.shapes["path"] == str(TINY)


def test_a_job_ships_its_shape_set_as_json_data_validated_in_the_container() -> None:
    request = _jobs(["geqrf"], "test")[0].request
    assert ShapeSet.from_dict(json.loads(json.dumps(request.shapes))) == load_shapes(TINY)
    with pytest.raises(ShapeFileError, match="unknown key"):
        execute(replace(request, shapes={**request.shapes, "timings": {}}))


def test_the_container_pins_the_kernelguard_pyproject_pins() -> None:
    """Every container runs the submission gates: its kernelguard must be the project's."""
    pinned = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
                  if d.startswith("kernelguard"))
    assert pinned in container.PYPI_PACKAGES
