"""reference_kernels.export: the one-file submission runs without the repository, passes the
contest service's submission gates, and names that collide between inlined modules are renamed
without touching parameters or locals."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (see test_blocked_wy)

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

import reference_kernels
from evaluator.hardening.precheck import RULES, precheck_source
from reference import generate_input, verdict
from reference_kernels.export import ExportError, export_source, main

TASK_STUB = """import torch
input_t = torch.Tensor
output_t = tuple[torch.Tensor, torch.Tensor]
"""

# Run in a process whose path holds only the exported file and the task stub: no repository.
CHILD = """import sys, torch
import submission
device = "cuda" if torch.cuda.is_available() else "cpu"
inputs = torch.load(sys.argv[1])
outputs = [tuple(t.cpu() for t in submission.custom_kernel(a.to(device))) for a in inputs]
torch.save(outputs, sys.argv[2])
"""


def _inputs() -> list[torch.Tensor]:
    specs = ((2, 8, 1, 1, "dense"), (2, 40, 2, 2, "mixed"), (2, 24, 0, 3, "rankdef"))
    return [generate_input(*spec, device="cpu") for spec in specs]  # the child moves each to its device


def test_exported_blocked_wy_runs_standalone(tmp_path: Path) -> None:
    assert main(["blocked_wy", "-o", str(tmp_path / "submission.py")]) == 0
    (tmp_path / "task.py").write_text(TASK_STUB)
    (tmp_path / "child.py").write_text(CHILD)
    inputs = _inputs()
    torch.save(inputs, tmp_path / "inputs.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "child.py", "inputs.pt", "outputs.pt"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    for a, out in zip(inputs, torch.load(tmp_path / "outputs.pt"), strict=True):
        v = verdict(a, out)
        assert v.passed, v.message
        assert v.diagnostics["scaled_factor_residual"] <= 4.0


@pytest.mark.parametrize("package", ["blocked_wy", "cholesky_orhr"])
def test_exported_reference_kernels_pass_the_contest_services_gates(package: str) -> None:
    """No "stream" anywhere (the service refuses the word), and kernelguard does not filter them."""
    gates = precheck_source(export_source(package).encode(), f"{package}.py", "leaderboard")
    assert gates.passed, gates.reason
    assert gates.outcomes == dict.fromkeys(RULES, "pass")
    assert gates.kernelguard["result"]["should_filter"] is False


def _probe_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, core: str) -> str:
    """A package ``reference_kernels.<name>`` built on blocked_wy, living in ``tmp_path``."""
    name = "_probe_" + re.sub(r"\W", "_", tmp_path.name)  # unique per test: imported packages stay cached
    package = tmp_path / name
    package.mkdir()
    (package / "core.py").write_text(textwrap.dedent(core))
    (package / "__init__.py").write_text(
        f"from reference_kernels.blocked_wy import EXPORT_MODULES as _BASE\n"
        f"from reference_kernels.{name}.core import qr\n"
        # blocked_wy.qr twice, as when two dependencies both list it: inlined once
        f"EXPORT_MODULES = (*_BASE, 'reference_kernels.blocked_wy.qr', 'reference_kernels.{name}.core')\n"
    )
    monkeypatch.setattr(reference_kernels, "__path__", [*reference_kernels.__path__, str(tmp_path)])
    return name


def _load_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    task = ModuleType("task")
    exec(TASK_STUB, task.__dict__)
    monkeypatch.setitem(sys.modules, "task", task)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


def test_colliding_names_are_renamed_in_the_later_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _probe_package(
        tmp_path,
        monkeypatch,
        """
        from __future__ import annotations

        from reference_kernels.blocked_wy import qr as blocked_qr
        from reference_kernels.blocked_wy.kernels import MAX_TILE


        def _warps(tile: int) -> int:  # blocked_wy.kernels has a _warps too
            return -1


        def echo(qr: int = 0) -> int:  # a parameter named like a renamed global stays as it is
            return qr


        def qr(a):  # blocked_wy.qr has a qr too
            assert _warps(0) == -1 and echo(qr=5) == 5 and MAX_TILE > 0
            return blocked_qr(a)
        """,
    )
    text = export_source(name)
    assert "def _warps__" in text
    assert "def echo(qr: int = 0) -> int:" in text
    assert "echo(qr=5) == 5" in text
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "exported_probe.py").write_text(text)
    module = _load_file(out_dir / "exported_probe.py", monkeypatch)
    a = generate_input(2, 20, 1, 4)
    v = verdict(a, module.custom_kernel(a))
    assert v.passed, v.message


@pytest.mark.parametrize(
    ("core", "problem"),
    [
        (
            """
            try:
                from reference_kernels.blocked_wy import qr
            except ImportError:
                qr = None
            """,
            "must be at module level",
        ),
        ("import reference_kernels.blocked_wy\nqr = reference_kernels.blocked_wy.qr\n", "use `from reference_kernels"),
        ("from os.path import join as panel_tile\nfrom reference_kernels.blocked_wy import qr\n", "would rebind"),
    ],
)
def test_refuses_what_it_cannot_flatten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, core: str, problem: str
) -> None:
    name = _probe_package(tmp_path, monkeypatch, core)
    with pytest.raises(ExportError, match=problem):
        export_source(name)
