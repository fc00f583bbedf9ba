"""GPU development loop for the reference kernels: correctness on every qr_v2 case, then timings.

    python benchmarks/kernel_dev.py [--kernels blocked_wy,cholesky_orhr,geqrf] [--cases 640x512,mixed]
                                    [--nb 32,64] [--leaf 16] [--whole-max 64,128] [--update torch,tf32x3]
                                    [--inner torch,triton] [--one-reduction on,off] [--top-tile on,off]
                                    [--two-columns on,off] [--panel-warps 2,4] [--graph on,off]
                                    [--skip-geqrf-timing]
    python benchmarks/kernel_dev.py --sweep [--budget-s 200]

``--sweep`` compares blocked_wy plans size by size (``wy_sweep.py``): the previous default, the current
``DEFAULT_PLANS`` and variants of it, each on every test and benchmark spec of its size, and prints
the fastest passing plan per size with a ``DEFAULT_PLANS`` table to paste.

Every kernel (blocked_wy once per combination of the knobs given, cholesky_orhr when importable,
torch.geqrf) first runs every test and benchmark case of ``shapes/qr_v2.yaml`` once and prints the
checker's scaled residuals; then each benchmark case is timed (CUDA events around one call, an L2
flush by a 256 MiB fill before each, median of ``--repeats`` after two warm-up calls; a kernel
slower than 0.1 s per call is timed twice). A failure or exception is printed and the run goes on.
The last lines are a table: ms per kernel, speedup over geqrf, worst scaled factor residual, and the
geometric mean over the benchmark cases. With ``$OUT`` set, everything printed also goes to
``$OUT/kernel_dev.log`` as it happens. This is a development tool, not the evaluator: one input
per case, no process isolation, no recheck.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reference import generate_input, verdict  # noqa: E402

Kernel = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

# torch.geqrf through the published evaluator on an H200 (docs/problem.md §6), for --skip-geqrf-timing.
GEQRF_ANCHOR_MS = {
    "20x32": 0.2809,
    "40x176": 15.12,
    "40x352": 40.18,
    "640x512": 997.1,
    "60x1024": 228.2,
    "8x2048": 71.79,
    "2x4096": 45.97,
    "640x512 mixed": 996.4,
    "60x1024 mixed": 227.9,
    "640x512 rankdef": 983.5,
    "640x512 clustered": 997.3,
    "60x1024 nearrank": 228.1,
}
FLUSH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    kind: str  # "test" or "bench"
    batch: int
    n: int
    cond: int
    seed: int
    case: str = "dense"

    @property
    def label(self) -> str:
        return f"{self.batch}x{self.n}" + ("" if self.case == "dense" else f" {self.case}")

    def make(self) -> torch.Tensor:
        return generate_input(self.batch, self.n, self.cond, self.seed, self.case)


@dataclass
class Result:
    residual: dict[str, float] = field(default_factory=dict)  # label -> worst scaled factor residual
    failed: dict[str, str] = field(default_factory=dict)  # label -> message
    ms: dict[str, float] = field(default_factory=dict)  # benchmark label -> median ms


class Log:
    """Print, and append to $OUT/kernel_dev.log as it goes (a run cut short keeps its log)."""

    def __init__(self) -> None:
        out = os.environ.get("OUT")
        self.file = open(Path(out) / "kernel_dev.log", "w") if out else None  # noqa: SIM115 (lives for the run)

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        if self.file is not None:
            self.file.write(text + "\n")
            self.file.flush()


def load_cases(path: Path) -> list[Case]:
    """Test and benchmark specs of a shape file (flow-style entries; no YAML library needed)."""
    cases, kind = [], None
    for line in path.read_text().splitlines():
        if line.startswith(("tests:", "benchmarks:")):
            kind = "test" if line.startswith("tests") else "bench"
        elif kind and (m := re.match(r"\s*-\s*\{(.*)\}", line)):
            fields = dict(item.split(":", 1) for item in m.group(1).split(","))
            spec = {k.strip(): v.strip() for k, v in fields.items()}
            ints = {k: int(spec[k]) for k in ("batch", "n", "cond", "seed")}
            cases.append(Case(kind, **ints, case=spec.get("case", "dense")))
    return cases


def blocked_wy_variants(args: argparse.Namespace) -> dict[str, Kernel]:
    from reference_kernels.blocked_wy import qr

    knobs = {
        "nb": [int(v) for v in args.nb.split(",")] if args.nb else None,
        "leaf": [int(v) for v in args.leaf.split(",")] if args.leaf else None,
        "whole_max": [int(v) for v in args.whole_max.split(",")] if args.whole_max else None,
        "update": args.update.split(",") if args.update else None,
        "inner": args.inner.split(",") if args.inner else None,
        "panel_warps": [int(v) for v in args.panel_warps.split(",")] if args.panel_warps else None,
    }
    for knob in ("one_reduction", "top_tile", "two_columns", "graph"):
        given_values = getattr(args, knob)
        knobs[knob] = [v == "on" for v in given_values.split(",")] if given_values else None
    given = {k: v for k, v in knobs.items() if v}
    variants = {}
    for values in itertools.product(*given.values()):
        plan = dict(zip(given, values, strict=True))
        name = "blocked_wy" + (f"[{','.join(f'{k}={v}' for k, v in plan.items())}]" if plan else "")
        variants[name] = lambda a, plan=plan: qr(a, **plan)
    return variants


def kernels(args: argparse.Namespace, log: Log) -> dict[str, Kernel]:
    chosen = args.kernels.split(",")
    found: dict[str, Kernel] = {}
    if "geqrf" in chosen:
        found["geqrf"] = torch.geqrf
    if "blocked_wy" in chosen:
        found |= blocked_wy_variants(args)
    if "cholesky_orhr" in chosen:
        try:
            from reference_kernels.cholesky_orhr import qr as cholesky_qr
        except Exception as error:  # noqa: BLE001 (report and go on without it)
            log(f"cholesky_orhr not importable: {error!r}")
        else:
            found["cholesky_orhr"] = cholesky_qr
    return found


def sticky(error: BaseException) -> bool:
    """A CUDA error that poisons the context: nothing after it can run in this process."""
    text = str(error)
    return "CUDA error" in text or "illegal memory access" in text or "device-side assert" in text


def check_case(name: str, kernel: Kernel, case: Case, result: Result, log: Log) -> None:
    a = case.make()
    pristine = a.clone()
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = kernel(a)
    torch.cuda.synchronize()
    first_ms = 1e3 * (time.perf_counter() - start)
    v = verdict(a, out)
    d = v.diagnostics
    label = f"{case.kind}:{case.label}"
    contract = contract_breach(a, pristine, out)
    if contract:
        result.failed[label] = contract
        log(f"  {label:<24} FAIL  {contract}")
    elif v.passed:
        result.residual[label] = max(result.residual.get(label, 0.0), d["scaled_factor_residual"])  # labels can repeat
        factor, orth = d["scaled_factor_residual"], d["scaled_orthogonality_residual"]
        log(f"  {label:<24} pass  factor {factor:7.3f}  orth {orth:7.3f}  first call {first_ms:9.1f} ms")
    else:
        result.failed[label] = v.message
        log(f"  {label:<24} FAIL  {v.message}")


def contract_breach(a: torch.Tensor, pristine: torch.Tensor, out: tuple[torch.Tensor, ...]) -> str:
    """What the evaluator would refuse besides the checker's gates ('' when nothing)."""
    if not torch.equal(a, pristine):
        return "the input was modified"
    if any(type(t) is not torch.Tensor for t in out):
        return "an output is not exactly a torch.Tensor"
    storages = {t.untyped_storage().data_ptr() for t in (a, *out)}
    return "" if len(storages) == len(out) + 1 else "an output aliases the input or another output"


def l2_flush_buffer() -> torch.Tensor:
    """256 MiB to overwrite before each timed call (the H200's L2 is 50 MiB)."""
    return torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def time_case(kernel: Kernel, case: Case, repeats: int, flush: torch.Tensor) -> float:
    """Median ms of one call, L2 flushed before each; two timed calls for slow kernels."""
    a = case.make()
    kernel(a)
    torch.cuda.synchronize()
    start = time.perf_counter()
    kernel(a)
    torch.cuda.synchronize()
    if time.perf_counter() - start > 0.1:
        repeats = 2
    times = []
    for i in range(repeats):
        flush.fill_(i)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        kernel(a)
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def compiled_kernel_report(log: Callable[[str], None]) -> list[str]:
    """Log registers and spills of every Triton kernel variant blocked_wy compiled (best effort);
    return the variants that spill."""
    import triton

    import reference_kernels.blocked_wy.kernels as k
    import reference_kernels.blocked_wy.products as p

    spilling = []
    for fn in (obj for mod in (k, p) for obj in vars(mod).values() if isinstance(obj, triton.runtime.jit.JITFunction)):
        for cache, *_ in getattr(fn, "device_caches", {}).values():
            for compiled in cache.values():
                try:
                    consts = {fn.arg_names[i[0]]: v for i, v in compiled.src.constants.items() if v is not None}
                    shown = {key: v for key, v in consts.items() if key.isupper() and key != "INTERPRETED"}
                    line = (
                        f"{fn.__name__} {shown} warps={compiled.metadata.num_warps}"
                        f" regs={compiled.n_regs} spills={compiled.n_spills} smem={compiled.metadata.shared}"
                    )
                    log(f"  {line}")
                    if compiled.n_spills:
                        spilling.append(line)
                except Exception as error:  # noqa: BLE001 (diagnostics only)
                    log(f"  {fn.__name__}: {error!r}")
    return spilling


def table(results: dict[str, Result], benches: list[Case], reference_ms: dict[str, float], log: Log) -> None:
    names = list(results)
    header = f"{'case':<20}" + "".join(f" | {name[:34]:>34}" for name in names)
    log(header)
    log(f"{'':<20}" + "".join(f" | {'ms':>10} {'x geqrf':>9} {'resid':>6}    " for _ in names))
    log("-" * len(header))
    for case in benches:
        row = f"{case.label:<20}"
        for name in names:
            r = results[name]
            label = f"bench:{case.label}"
            if label in r.failed:
                row += f" | {'FAIL':>34}"
                continue
            ms = r.ms.get(case.label)
            ref = reference_ms.get(case.label)
            speed = f"{ref / ms:8.3g}x" if ms and ref else f"{'':>9}"
            ms_text = f"{ms:10.3f}" if ms else f"{'-':>10}"
            resid = r.residual.get(label)
            row += f" | {ms_text} {speed} {resid if resid is None else round(resid, 2)!s:>6}    "
        log(row)
    log("-" * len(header))
    row = f"{'geomean':<20}"
    for name in names:
        ms = [results[name].ms.get(c.label) for c in benches]
        got = [t for t in ms if t]
        if not got:
            row += f" | {'-':>34}"
            continue
        gm = math.exp(sum(math.log(t) for t in got) / len(got))
        refs = [reference_ms[c.label] for c, t in zip(benches, ms, strict=True) if t and c.label in reference_ms]
        speed = f"{math.exp(sum(math.log(t) for t in refs) / len(refs)) / gm:8.3g}x" if len(refs) == len(got) else ""
        note = "" if len(got) == len(benches) else f" ({len(got)}/{len(benches)})"
        row += f" | {gm:10.3f} {speed:>9}{note:>10} "
    log(row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="blocked_wy,cholesky_orhr,geqrf")
    parser.add_argument("--cases", help="comma-separated substrings of case labels (e.g. 640x512,mixed)")
    parser.add_argument("--shapes", type=Path, default=REPO / "shapes" / "qr_v2.yaml")
    parser.add_argument("--nb", help="blocked_wy panel widths to try, e.g. 32,64")
    parser.add_argument("--leaf", help="blocked_wy widest leaf, e.g. 16,32")
    parser.add_argument("--whole-max", help="blocked_wy largest n for one program per matrix, e.g. 64,128")
    parser.add_argument("--update", help="blocked_wy trailing update: torch, tf32x3")
    parser.add_argument("--inner", help="blocked_wy products inside a panel: torch, triton")
    parser.add_argument("--one-reduction", help="blocked_wy panel column step with one reduction: on, off")
    parser.add_argument("--top-tile", help="blocked_wy top-tile column step on tall panels: on, off")
    parser.add_argument("--two-columns", help="blocked_wy column steps taking columns in pairs: on, off")
    parser.add_argument("--panel-warps", help="blocked_wy panel-kernel warps, e.g. 2,4,8")
    parser.add_argument("--sweep", action="store_true", help="compare blocked_wy plans per size (see wy_sweep.py)")
    parser.add_argument("--graph", help="blocked_wy CUDA graphs: on, off")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-tests", action="store_true", help="skip the correctness pass over the test cases")
    parser.add_argument("--skip-geqrf-timing", action="store_true", help="use docs/problem.md §6 figures for geqrf")
    parser.add_argument("--budget-s", type=float, default=230.0, help="stop timing once this much wall time passed")
    args = parser.parse_args()
    log = Log()
    if not torch.cuda.is_available():
        log("kernel_dev needs a CUDA device")
        return 2
    import triton

    log(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__}")
    began = time.perf_counter()
    if args.sweep:
        from wy_sweep import sweep

        sweep(load_cases(args.shapes), args, log, began)
        return 0
    cases = load_cases(args.shapes)
    if args.cases:
        wanted = args.cases.split(",")
        cases = [c for c in cases if any(w in c.label for w in wanted)]
    if args.no_tests:
        cases = [c for c in cases if c.kind == "bench"]
    benches = [c for c in cases if c.kind == "bench"]
    chosen = kernels(args, log)
    results = {name: Result() for name in chosen}
    poisoned = False

    log("\n== correctness (one input per case; scaled residuals in n*eps units, gates 20 and 100)")
    for name, kernel in chosen.items():
        log(f"{name}")
        for case in cases:
            if poisoned:
                break
            try:
                check_case(name, kernel, case, results[name], log)
            except Exception as error:  # noqa: BLE001 (report and go on)
                results[name].failed[f"{case.kind}:{case.label}"] = repr(error)
                log(f"  {case.kind}:{case.label:<19} ERROR {error!r}\n{traceback.format_exc(limit=-3)}")
                poisoned = sticky(error)
        if name.startswith("blocked_wy"):
            from reference_kernels.blocked_wy import clear_graphs

            clear_graphs()
    log("\nblocked_wy compiled kernels:")
    compiled_kernel_report(log)

    log("\n== timing (median ms per call, L2 flushed before each call)")
    flush = l2_flush_buffer()
    for name, kernel in chosen.items():
        if name == "geqrf" and args.skip_geqrf_timing:
            continue
        for case in benches:
            if poisoned or f"bench:{case.label}" in results[name].failed:
                continue
            if time.perf_counter() - began > args.budget_s:
                log(f"  {name} {case.label}: skipped (budget of {args.budget_s:.0f} s spent)")
                continue
            try:
                results[name].ms[case.label] = time_case(kernel, case, args.repeats, flush)
                log(f"  {name:<40} {case.label:<20} {results[name].ms[case.label]:10.3f} ms")
            except Exception as error:  # noqa: BLE001 (report and go on)
                log(f"  {name} {case.label}: ERROR {error!r}")
                poisoned = sticky(error)
        if name.startswith("blocked_wy"):
            from reference_kernels.blocked_wy import clear_graphs

            clear_graphs()
    if poisoned:
        log("a CUDA error poisoned the context: the remaining work was skipped")

    measured = "geqrf" in results and results["geqrf"].ms and not args.skip_geqrf_timing
    reference_ms = {**GEQRF_ANCHOR_MS, **(results["geqrf"].ms if measured else {})}
    source = "measured" if measured else "docs/problem.md §6"
    log(f"\n== summary (speedups over {source} geqrf; {time.perf_counter() - began:.0f} s)")
    table(results, benches, reference_ms, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
