"""Which of qrbench's Triton launches compile for which GPUs, under the installed Triton: no GPU needed.

Run from the repo root: ``python -m benchmarks.compile_targets [--archs 80,90,100] [--out FILE.md]``.

The launches are recorded on meta tensors (:mod:`reference_kernels.blocked_wy.offline`) and built
by Triton's own compiler and ptxas for each target: every launch of the fast checker's residual
kernels at qr_v2's sizes, with 32-row and 64-row tiles and with the tile
``reference.checker_kernels.largest_tile`` picks for the target, and every launch of blocked_wy's
default plans and of its Gram-route plans (cholesky_orhr's kernels are compiled for sm_90 and sm_100
by its test). A launch that compiles can still be wrong or slow on the device; one that does not is
a crash there, as is one that asks for more shared memory per program than the GPU gives (each
cell says the most any launch asks). Run it under each Triton to compare (``pip install --target
DIR triton==X`` and ``PYTHONPATH=DIR``). Findings: reports/cpu/2026-12-05-compile-targets.md.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
import triton
from tabulate import tabulate

import reference.checker_kernels as checker_kernels
from benchmarks.note import machine_line, publish
from reference_kernels.blocked_wy import default_plan
from reference_kernels.blocked_wy.offline import Launch, compile_launch, record_calls, record_launches

SIZES = (32, 176, 352, 512, 1024, 2048, 4096)
# sm_75 T4, sm_80 A100, sm_86 A10 and RTX 3090, sm_89 L4 and RTX 4090, sm_90 H100 and H200,
# sm_100 B200, sm_103 B300, sm_120 RTX 5090.
ARCHS = (75, 80, 86, 89, 90, 100, 103, 120)
_CHECKER_KERNELS = ("_factor_kernel", "_orthogonality_kernel", "_reconstruction_kernel")


@contextmanager
def _patched(name: str, value: object) -> Iterator[None]:
    saved = getattr(checker_kernels, name)
    setattr(checker_kernels, name, value)
    try:
        yield
    finally:
        setattr(checker_kernels, name, saved)


def checker_launches(largest: Callable[[tuple[int, int] | None], int], arch: int) -> dict[str, Launch]:
    """The residual kernels' launches at every size, tiles capped by ``largest`` for a GPU of ``arch``."""

    def run() -> None:
        for n in SIZES:
            meta = torch.empty(1, n, n, device="meta")
            checker_kernels.residual_norms(meta, meta, meta)

    with _patched("_capability", lambda device: divmod(arch, 10)), _patched("largest_tile", largest):
        return record_calls(run, [(checker_kernels, name) for name in _CHECKER_KERNELS])


def blocked_wy_launches(gram: bool) -> dict[str, Launch]:
    """Every launch of blocked_wy's default plans on qr_v2's sizes, or of its Gram-route plans
    (leaves of 32 at n >= 1024, and of 64 at 1024)."""
    if not gram:
        return record_launches(((1, n), default_plan(n)) for n in SIZES)
    plans = [((1, n), replace(default_plan(n), panel="gram", leaf=32)) for n in (1024, 2048, 4096)]
    plans.append(((1, 1024), replace(default_plan(1024), panel="gram", nb=64, leaf=64, two_columns=False)))
    return record_launches(plans)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The compiler's C++ side writes a failing pass's whole module to file descriptor 2: keep it
    off the terminal (``compile_launch`` on the launch shows it)."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _shared_memory(launch: Launch, arch: int) -> int | None:
    """The launch's shared memory per program in bytes for ``sm_<arch>``, or None where it does not compile."""
    try:
        with _quiet_stderr():
            return compile_launch(launch, arch).metadata.shared
    except Exception:  # noqa: BLE001 (the table's subject: any compiler failure, whatever its type)
        return None


def tally(launches: dict[str, Launch], arch: int) -> str:
    """'N, K KB' (all N compile, the largest asks K KB of shared memory a program: a GPU that gives
    a block less cannot launch it) or 'F of N fail: kernel names', for ``sm_<arch>``."""
    shared = [(fn.__name__, _shared_memory((fn, spec), arch)) for fn, spec in launches.values()]
    failed = sorted({name for name, size in shared if size is None})
    if failed:
        count = sum(size is None for _, size in shared)
        return f"{count} of {len(shared)} fail: {', '.join(failed)}"
    return f"{len(shared)}, {math.ceil(max(size for _, size in shared) / 1024)} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(map(str, ARCHS)), help="compute capabilities as 90, 100, ...")
    parser.add_argument("--out", type=Path, help="also write the table as a Markdown note")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("the compiler does not run under TRITON_INTERPRET=1")
    archs = [int(a) for a in args.archs.split(",")]
    groups = {
        "checker, 32-row tiles": lambda arch: checker_launches(lambda capability: 32, arch),
        "checker, 64-row tiles": lambda arch: checker_launches(lambda capability: 64, arch),
        "checker, the tile it picks": lambda arch: checker_launches(checker_kernels.largest_tile, arch),
        "blocked_wy, default plans": lambda arch: blocked_wy_launches(gram=False),
        "blocked_wy, Gram-route plans": lambda arch: blocked_wy_launches(gram=True),
    }
    rows = []
    for arch in archs:
        rows.append([f"sm_{arch}", *(tally(launches(arch), arch) for launches in groups.values())])
        print(f"sm_{arch}: done", flush=True)
    table = tabulate(rows, headers=["target", *groups], tablefmt="github")
    header = (f"Launches compiled by Triton {triton.__version__}'s compiler and ptxas per target, no GPU "
              f"(a cell: how many compile and the most shared memory one asks a program, or which fail); "
              f"{machine_line('cpu')}.")
    publish("Compile targets", header, table, "python -m benchmarks.compile_targets", args.out)


if __name__ == "__main__":
    main()
