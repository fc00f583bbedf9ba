"""``python -m benchmarks.plan_resources``: a plan's launches compiled for sm_90 without a GPU, with
what each takes per thread; run in a child process, since the interpreter's process cannot compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

ROOT = Path(__file__).resolve().parents[1]
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "benchmarks.plan_resources", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _rows(table: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| _")]


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
def test_a_setting_and_the_plan_are_compiled_and_their_costs_printed() -> None:
    run = _run("200", "blocked_wy", "blocked_wy[top_tile=on]", "--batch", "3", "--kernel", "_panel_kernel")
    assert run.returncode == 0, run.stderr[-3000:]
    plan, setting = run.stdout.split("blocked_wy[top_tile=on] at 3x200, sm_90:")
    assert "blocked_wy at 3x200, sm_90:" in plan
    for table in (plan, setting):
        rows = _rows(table)
        assert rows
        assert all(row[0] == "_panel_kernel" for row in rows)
        for row in rows:
            warps, registers, _stack, _shared, programs, instructions, warp_mmas, async_mmas = map(int, row[2:])
            assert warps >= 1
            assert 16 <= registers <= 255
            assert instructions > 100
            assert 1 <= programs <= 64 // warps
            assert warp_mmas == async_mmas == 0  # the panel kernel's column steps are FMA work
    assert any("TOP_TILE=True" in row[1] for row in _rows(setting))  # the knob reached the launches
    assert not any("TOP_TILE=True" in row[1] for row in _rows(plan))  # 176-255: no top tile in the plan


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
@pytest.mark.parametrize("arch", ["90", "100"])
def test_the_trailing_update_counts_its_tensor_core_instructions(arch: str) -> None:
    """The fused update's products run on tensor cores, counted by kind: at 512 its 64-row subtraction
    tiles on the asynchronous units (Hopper's HGMMA, Blackwell's UTC*MMA); at 176 its 32-row tiles,
    under the 64 rows those take, as warp-level HMMA."""
    counts = {}
    for n in ("512", "176"):
        run = _run(n, "--batch", "2", "--kernel", "_fused_update_kernel", "--arch", arch)
        assert run.returncode == 0, run.stderr[-3000:]
        rows = _rows(run.stdout)
        assert rows
        counts[n] = [tuple(map(int, row[-2:])) for row in rows]
    assert all(async_mmas > 0 for _, async_mmas in counts["512"])
    assert all(warp_mmas > 0 for warp_mmas, _ in counts["176"])


def test_bad_settings_are_refused_by_name() -> None:
    run = _run("200", "blocked_wy[top_tile=maybe]")
    assert run.returncode == 2
    assert "top_tile" in run.stderr
    assert "maybe" in run.stderr
    run = _run("200", "cholesky_orhr")
    assert run.returncode == 2
    assert "only blocked_wy's plans" in run.stderr


@pytest.mark.parametrize(("registers", "warps", "shared", "arch", "expected"), [
    (255, 8, 81920, 90, 1),  # 8 x 32 x 256 registers: the whole file
    (239, 4, 81920, 90, 2),  # two by registers (240 a thread) and two by shared memory (81920 + 1024 each)
    (64, 4, 0, 90, 8),  # 64 x 32 x 4 = 8192 registers a program
    (32, 1, 0, 90, 32),  # the 32-program cap
    (32, 4, 100_000, 80, 1),  # 164 KB of shared memory on compute capability 8.0
    (32, 4, 0, 75, None),  # limits not listed
])
def test_programs_per_multiprocessor(registers: int, warps: int, shared: int, arch: int, expected: int | None) -> None:
    from benchmarks.plan_resources import programs_per_sm

    assert programs_per_sm(registers, warps, shared, arch) == expected
