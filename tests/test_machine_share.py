"""Under ``pytest -n``, a test marked ``alone`` runs while no other test does (tests/machine_share.py)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import machine_share
from tests.conftest import REPO

RECORDING_TEST = '''
import json, os, time
from pathlib import Path

import pytest

{mark}


@pytest.mark.parametrize("i", range({count}))
def test_{name}(i):
    start = time.monotonic()
    time.sleep(0.3)
    record = {{"name": "{name}", "worker": os.environ["PYTEST_XDIST_WORKER"], "start": start, "end": time.monotonic()}}
    with open(Path(__file__).parent / "log.jsonl", "a") as log:
        log.write(json.dumps(record) + "\\n")
'''


def test_alone_tests_overlap_no_other_test(tmp_path: Path) -> None:
    (tmp_path / "test_alone.py").write_text(RECORDING_TEST.format(mark="pytestmark = pytest.mark.alone",
                                                                  count=3, name="alone"))
    (tmp_path / "test_shared.py").write_text(RECORDING_TEST.format(mark="", count=8, name="shared"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "tests.conftest",
                          "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(records) == 11
    assert {r["worker"] for r in records} == {"gw0", "gw1"}
    alone = [r for r in records if r["name"] == "alone"]
    for test in alone:
        overlapping = [r for r in records if r is not test and r["start"] < test["end"] and test["start"] < r["end"]]
        assert overlapping == [], f"{test} ran beside {overlapping}"


def test_a_session_a_test_starts_takes_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest session started by a worker's test inherits the worker's variables. Were it to queue
    for the lock, it could wait behind an alone test that waits for the very test that started it."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv(machine_share.LOCK_DIR_VARIABLE, str(tmp_path))
    item = SimpleNamespace(config=SimpleNamespace(), get_closest_marker=lambda name: None)  # no workerinput
    ran = threading.Event()

    def session_test() -> None:
        with machine_share.holding_the_machine(item, None):
            ran.set()

    with (tmp_path / "turnstile.lock").open("a") as turnstile:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # another worker's alone test, queued for the machine
        threading.Thread(target=session_test, daemon=True).start()
        assert ran.wait(timeout=10), "the nested session queued for the lock"
