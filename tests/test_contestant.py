"""Finding and loading contestants: names, folders, files; contest modules; clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from evaluator.contestant import (
    ContestantError,
    contest_modules,
    discover_contestants,
    load_kernel,
    resolve_contestant,
)
from reference import check

FIXTURES = Path(__file__).parent / "contestants"


def _load(ref: str | Path):
    c = resolve_contestant(ref)
    with contest_modules(c.path.parent):
        return load_kernel(c)


def test_resolve_by_name_folder_and_file(tmp_path: Path) -> None:
    by_name = resolve_contestant("geqrf")
    assert by_name.name == "geqrf"
    assert by_name.path.name == "submission.py"
    assert resolve_contestant(by_name.path.parent) == by_name
    assert resolve_contestant(by_name.path) == by_name
    assert resolve_contestant(FIXTURES / "zeros.py").name == "zeros"
    assert len(by_name.sha256) == 64


def test_bundled_contestants_are_discovered() -> None:
    assert "geqrf" in [c.name for c in discover_contestants()]


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("no_such_contestant", "no_such_contestant: no such contestant"),
        (FIXTURES, "holds no submission.py"),
        (FIXTURES / "README.md", "is not a Python file"),
    ],
)
def test_unresolvable_contestants(ref: object, fragment: str) -> None:
    with pytest.raises(ContestantError, match=fragment):
        resolve_contestant(ref)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("syntax_error.py", r"syntax_error: syntax error in .*syntax_error.py, line 1"),
        ("no_kernel.py", r"no_kernel: .* defines no callable custom_kernel"),
        ("import_fails.py", r"import_fails: importing .* raised ModuleNotFoundError"),
    ],
)
def test_unloadable_contestants_name_themselves(name: str, fragment: str) -> None:
    with pytest.raises(ContestantError, match=fragment):
        _load(FIXTURES / name)


def test_contest_format_submission_runs_unmodified() -> None:
    c = resolve_contestant(FIXTURES / "contest_format")
    a = torch.randn(2, 6, 6)
    with contest_modules(c.path.parent):  # as in the worker, which stays inside for its life
        assert check(a, load_kernel(c)(a))[0]


def test_contest_modules_leave_no_trace() -> None:
    before = {name: sys.modules.get(name) for name in ("task", "utils", "helper")}
    path_before = list(sys.path)
    _load(FIXTURES / "contest_format")
    assert {name: sys.modules.get(name) for name in ("task", "utils", "helper")} == before
    assert sys.path == path_before


def test_two_contestants_never_share_helper_modules() -> None:
    _load(FIXTURES / "contest_format")
    second = _load(FIXTURES / "other_helper")
    second(torch.randn(1, 4, 4))  # raises if it got contest_format's helper.py


def test_changed_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.py"
    path.write_text("def custom_kernel(a):\n    return a\n")
    c = resolve_contestant(path)
    path.write_text("def custom_kernel(a):\n    return None\n")
    with pytest.raises(ContestantError, match="changed since it was resolved"):
        load_kernel(c)
