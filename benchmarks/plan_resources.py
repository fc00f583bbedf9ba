"""What each Triton launch of a blocked_wy plan costs a GPU's multiprocessor, without a GPU.

``python -m benchmarks.plan_resources N [SETTING ...] [--batch B] [--arch 90] [--kernel NAME]``
records the launches ``qr`` makes on a B x N x N batch (meta tensors:
:mod:`reference_kernels.blocked_wy.offline`) under each SETTING, a compare-style label such as
``'blocked_wy[top_tile=on]'`` (``blocked_wy`` alone: the size's own plan, the default), compiles
each with Triton's compiler and ptxas for ``sm_<arch>``, and prints per launch its registers a
thread and the stack a thread spills to (the wheel's ``cuobjdump``), the shared memory a program
asks for (Triton's metadata), how many programs of it fit on one multiprocessor at once, its
SASS instructions, and among them its tensor-core instructions of two kinds (static counts): warp
MMAs (``HMMA``, ``mma.sync``) and asynchronous MMAs (Hopper's warpgroup ``HGMMA``, Blackwell's
``UTC*MMA``). Triton gives a ``tl.dot`` the asynchronous units only from 64 rows of output up, so a
product that shows as warp MMAs is one to reshape (docs/kernel-log.md, §W33).

A knob setting that spills where the plan does not, or grows the instruction count, is a long shot
worth knowing before a device lease is spent timing it (docs/kernel-log.md, §W28-§W30).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate
from triton import knobs

from evaluator.axes import AxisError, plain_axes, resolve, split_setting
from reference_kernels.blocked_wy.knobs import PLAN_AXES, configure, configured_plan
from reference_kernels.blocked_wy.offline import compile_launch, record_launches
from reference_kernels.blocked_wy.qr import Plan, default_plan

CONTESTANT = "blocked_wy"
_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)")
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+\S", re.MULTILINE)
# An instruction's opcode, after its address and any predicate (@P0, @!UPT, ...).
_OPCODE = re.compile(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9]*)", re.MULTILINE)
_WARP_MMA = {"HMMA"}
_ASYNC_MMA = re.compile(r"^(HGMMA|UTC[A-Z]*MMA)$")
# Per multiprocessor, by compute capability: 32-bit registers, shared memory bytes, resident warps
# and programs (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
_SM_LIMITS = {80: (65536, 167936, 64, 32), 90: (65536, 233472, 64, 32), 100: (65536, 233472, 64, 32)}
_SHARED_RESERVED = 1024  # bytes the runtime reserves per program, from compute capability 8.0


@dataclass(frozen=True)
class LaunchCost:
    """One compiled launch: its kernel, the compile-time constants that tell it from the kernel's
    other launches, and what it takes per thread and per program."""

    kernel: str
    constants: str
    warps: int
    registers: int
    stack_bytes: int
    shared_bytes: int
    instructions: int
    warp_mmas: int
    async_mmas: int


def programs_per_sm(registers: int, warps: int, shared: int, arch: int) -> int | None:
    """How many programs of a launch fit on one multiprocessor at once (registers are handed out in
    units of 256 a warp), or None for a compute capability without limits listed here."""
    if arch not in _SM_LIMITS:
        return None
    register_file, shared_memory, max_warps, max_programs = _SM_LIMITS[arch]
    per_warp = -(-registers * 32 // 256) * 256
    return min(register_file // (per_warp * warps), shared_memory // (shared + _SHARED_RESERVED),
               max_warps // warps, max_programs)


def _tool(name: str) -> str:
    return getattr(knobs.nvidia, name).path


def _cubin_costs(cubin: bytes) -> tuple[int, int, int, int, int]:
    """(registers, stack bytes, SASS instructions, warp MMAs, asynchronous MMAs) of a one-kernel cubin."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "launch.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run([_tool("cuobjdump"), "-res-usage", "-sass", str(path)], capture_output=True,
                                 text=True, check=True).stdout
    found = _USAGE.search(listing)
    if found is None:
        raise RuntimeError(f"cuobjdump -res-usage printed no REG/STACK line:\n{listing}")
    registers, stack = map(int, found.groups())
    opcodes = _OPCODE.findall(listing)
    return (registers, stack, len(_INSTRUCTION.findall(listing)), sum(op in _WARP_MMA for op in opcodes),
            sum(bool(_ASYNC_MMA.match(op)) for op in opcodes))


def _plan(n: int, setting: str) -> Plan:
    """The size's plan with a compare-style setting's knob values laid over it."""
    name, requested = split_setting(setting)
    if name != CONTESTANT:
        raise AxisError(f"{setting!r}: only {CONTESTANT}'s plans are recorded here")
    values = {knob: chosen[0] for knob, chosen in resolve(name, requested, plain_axes(PLAN_AXES)).items()}
    configure(**values)
    try:
        return configured_plan(n) or default_plan(n)
    finally:
        configure()


def launch_costs(n: int, batch: int, setting: str, arch: int, kernel: str | None = None) -> list[LaunchCost]:
    """Every distinct launch of ``setting``'s plan on a ``batch`` x n x n input, compiled for ``sm_<arch>``."""
    launches = list(record_launches([((batch, n), _plan(n, setting))]).values())
    names = {fn.__name__ for fn, _ in launches}
    if kernel is not None and kernel not in names:
        raise SystemExit(f"plan_resources: {setting} at n = {n} launches no {kernel} (it launches "
                         f"{', '.join(sorted(names))})")
    costs = []
    for fn, spec in launches:
        if kernel is not None and fn.__name__ != kernel:
            continue
        constants = spec[1]
        siblings = [s[1] for f, s in launches if f is fn]
        varying = {k: v for k, v in constants.items() if any(other.get(k) != v for other in siblings)}
        compiled = compile_launch((fn, spec), arch)
        registers, stack, instructions, warp_mmas, async_mmas = _cubin_costs(compiled.asm["cubin"])
        costs.append(LaunchCost(fn.__name__, ", ".join(f"{k}={v}" for k, v in varying.items()),
                                int(spec[3].get("num_warps", 4)), registers, stack, compiled.metadata.shared,
                                instructions, warp_mmas, async_mmas))
    return costs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="matrix size")
    parser.add_argument("settings", nargs="*", default=[CONTESTANT],
                        help=f"compare-style labels, e.g. '{CONTESTANT}[top_tile=on]' (default: {CONTESTANT})")
    parser.add_argument("--batch", type=int, default=1, help="matrices in the batch (default: %(default)s)")
    parser.add_argument("--arch", type=int, default=90, help="compute capability as 90, 100 (default: %(default)s)")
    parser.add_argument("--kernel", help="only this kernel's launches, e.g. _panel_kernel")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: the interpreter's process cannot compile")
    if args.n < 1 or args.batch < 1:
        parser.error("n and --batch must be positive")
    for setting in args.settings:
        try:
            costs = launch_costs(args.n, args.batch, setting, args.arch, args.kernel)
        except AxisError as exc:
            parser.error(str(exc))
        rows = [[c.kernel, c.constants, c.warps, c.registers, c.stack_bytes, c.shared_bytes,
                 programs_per_sm(c.registers, c.warps, c.shared_bytes, args.arch) or "-", c.instructions,
                 c.warp_mmas, c.async_mmas]
                for c in costs]
        print(f"\n{setting} at {args.batch}x{args.n}, sm_{args.arch}:")
        print(tabulate(rows, headers=["kernel", "constants", "warps", "registers", "stack B", "shared B",
                                      "programs / SM", "SASS instructions", "warp MMAs", "async MMAs"],
                       tablefmt="github"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
