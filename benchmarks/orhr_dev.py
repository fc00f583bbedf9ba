"""GPU development loop for cholesky_orhr's knobs: routes, residuals, timings and where the time goes.

    python benchmarks/orhr_dev.py [--cases 640x512,4096] [--leaf 32,64] [--block 256] [--whole-max 32]
                                  [--repeats 5] [--no-breakdown] [--budget-s 170]

1. FP32 / FP64 batched-product throughput at the benchmark shapes (the FP64 first pass assumes
   cuBLAS DGEMM runs near FP32 speed on this GPU).
2. For every plan (``auto``: qr's default per shape, then each ``--leaf`` x ``--block`` x
   ``--whole-max``) and benchmark case of ``shapes/qr_v2.yaml``: the checker's scaled residuals, how
   many matrices took each route, and the median time of one call (L2 flushed before each, as
   ``kernel_dev.py`` times).
3. For ``auto``, a torch.profiler breakdown of one call per case: GPU time in cuBLAS
   products, in each Triton kernel, in copies and other elementwise work, in blocked_wy (the
   fallback), against the call's wall time (the gap is host time: launches and synchronisations).

Errors are printed per case and the run goes on. The last lines are the tables. With ``$OUT`` set,
everything printed also goes to ``$OUT/orhr_dev.log``. A development tool, not the evaluator.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from kernel_dev import Case, l2_flush_buffer, load_cases, time_case  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from reference import verdict  # noqa: E402
from reference_kernels.cholesky_orhr import Plan, Route, qr, qr_routed  # noqa: E402

# Profiler kernel names -> the part of the algorithm they belong to (first match wins).
CATEGORIES = [
    ("leaf: cholesky", r"_cholesky_kernel"),
    ("leaf: lu", r"_lu_kernel"),
    ("whole-matrix", r"_whole_kernel"),
    ("classify+assemble", r"_classify_kernel|_assemble_kernel"),
    ("blocked_wy", r"_panel_kernel|_wy_update_kernel"),
    ("products (cuBLAS)", r"(?i)gemm|sm90|cutlass|xmma"),
    ("copies/elementwise", r"(?i)copy|memcpy|memset|elementwise|fill|index|gather|scatter|where|reduce"),
]


class Log:
    """Print, and append to $OUT/orhr_dev.log as it goes (a run cut short keeps its log)."""

    def __init__(self) -> None:
        out = os.environ.get("OUT")
        self.file = open(Path(out) / "orhr_dev.log", "w") if out else None  # noqa: SIM115 (lives for the run)

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        if self.file is not None:
            self.file.write(text + "\n")
            self.file.flush()


def product_rates(log: Log) -> None:
    """TFLOP/s of b x n x n batched products in FP32 (IEEE) and FP64 at the benchmark shapes."""
    log("== batched products (TFLOP/s, median of 5)")
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    for batch, n in [(640, 512), (60, 1024), (8, 2048), (2, 4096)]:
        rates = []
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(batch, n, n, device="cuda", dtype=dtype)
            times = []
            for _ in range(6):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                torch.bmm(x, x)
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end))
            ms = sorted(times[1:])[2]
            rates.append(2 * batch * n**3 / ms / 1e9)
            del x
        log(f"  {batch:>4} x {n:<5} FP32 {rates[0]:6.1f}   FP64 {rates[1]:6.1f}")


def plans(args: argparse.Namespace) -> dict[str, Plan | None]:
    """``auto`` (qr's own choice per shape, ``default_plan``) and every ``--leaf`` x ``--block`` x
    ``--whole-max``."""
    knobs = [[int(v) for v in text.split(",") if v] for text in (args.leaf, args.block, args.whole_max)]
    return {"auto": None} | {
        f"leaf={leaf},block={block},whole={whole}": Plan(leaf=leaf, block=block, whole_max=whole)
        for leaf, block, whole in itertools.product(*knobs)
    }


def check(case: Case, plan: Plan | None, log: Log) -> tuple[float | None, str]:
    """(worst scaled factor residual or None on failure, route counts) for one input of ``case``."""
    a = case.make()
    h, tau, routes = qr_routed(a, plan)
    torch.cuda.synchronize()
    counts = collections.Counter(Route(int(r)).name.lower() for r in routes)
    shown = " ".join(f"{name}={count}" for name, count in sorted(counts.items()))
    v = verdict(a, (h, tau))
    if not v.passed:
        log(f"    {case.label:<22} FAIL {v.message}  routes: {shown}")
        return None, shown
    d = v.diagnostics
    log(
        f"    {case.label:<22} pass factor {d['scaled_factor_residual']:6.3f} "
        f"orth {d['scaled_orthogonality_residual']:6.3f}  routes: {shown}"
    )
    return d["scaled_factor_residual"], shown


def breakdown(case: Case, plan: Plan | None) -> dict[str, float]:
    """GPU ms per category for one call (after a warm-up call), plus 'wall' and 'gpu total'."""
    a = case.make()
    qr(a, plan)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        qr(a, plan)
        torch.cuda.synchronize()
        wall = 1e3 * (time.perf_counter() - start)
    parts: dict[str, float] = collections.defaultdict(float)
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = event.time_range.elapsed_us() / 1e3
        name = next((label for label, pattern in CATEGORIES if re.search(pattern, event.name)), "other")
        parts[name] += ms
        parts["gpu total"] += ms
    parts["wall"] = wall
    return dict(parts)


def summary(
    log: Log,
    names: list[str],
    benches: list[Case],
    ms: dict[str, dict[str, float]],
    routes: dict[str, str],
    parts: dict[str, dict[str, float]],
) -> None:
    """The closing tables: ms per plan and case with geometric means, then the time breakdown."""
    width = max(12, *(len(n) for n in names))
    log(f"{'case':<22}" + "".join(f" {n:>{width}}" for n in names) + "  routes")
    for case in benches:
        cells = "".join(
            f" {ms[n][case.label]:{width}.3f}" if case.label in ms[n] else f" {'-':>{width}}" for n in names
        )
        log(f"{case.label:<22}{cells}  {routes.get(case.label, '')}")
    geo = ""
    for n in names:
        got = [ms[n][c.label] for c in benches if c.label in ms[n]]
        text = f"{math.exp(sum(map(math.log, got)) / len(got)):.3f}" if got else "-"
        geo += f" {text + ('' if len(got) == len(benches) else f' ({len(got)}/{len(benches)})'):>{width}}"
    log(f"{'geomean':<22}{geo}")
    if parts:
        columns = ["wall", "gpu total", *(label for label, _ in CATEGORIES), "other"]
        log(f"\nwhere one call's time goes (ms; auto plan; wall - gpu total ~ host time):\n{'case':<22}"
            + "".join(f" {c[:13]:>13}" for c in columns))  # fmt: skip
        for label, p in parts.items():
            log(f"{label:<22}" + "".join(f" {p.get(c, 0.0):13.3f}" for c in columns))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated substrings of benchmark labels (e.g. 640x512,4096)")
    parser.add_argument("--shapes", type=Path, default=HERE.parent / "shapes" / "qr_v2.yaml")
    parser.add_argument("--leaf", default="32,64", help="leaf widths to try (<= 64)")
    parser.add_argument("--block", default="256", help="product split thresholds to try")
    parser.add_argument("--whole-max", default="32", help="largest n for the one-kernel path (0: off), e.g. 0,32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--budget-s", type=float, default=170.0, help="stop timing once this much wall time passed")
    args = parser.parse_args()
    log = Log()
    if not torch.cuda.is_available():
        log("orhr_dev needs a CUDA device")
        return 2
    import triton

    began = time.perf_counter()
    log(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__}")
    benches = [c for c in load_cases(args.shapes) if c.kind == "bench"]
    if args.cases:
        benches = [c for c in benches if any(w in c.label for w in args.cases.split(","))]
    product_rates(log)

    variants = plans(args)
    ms: dict[str, dict[str, float]] = {name: {} for name in variants}
    routes: dict[str, str] = {}
    flush = l2_flush_buffer()
    for name, plan in variants.items():
        log(f"\n== {name}")
        for case in benches:
            if time.perf_counter() - began > args.budget_s:
                log(f"    {case.label}: skipped (budget of {args.budget_s:.0f} s spent)")
                continue
            try:
                residual, routes[case.label] = check(case, plan, log)
                if residual is not None:
                    ms[name][case.label] = time_case(lambda a, plan=plan: qr(a, plan), case, args.repeats, flush)
                    log(f"    {case.label:<22} {ms[name][case.label]:10.3f} ms")
            except Exception as error:  # noqa: BLE001 (report and go on)
                log(f"    {case.label}: ERROR {error!r}\n{traceback.format_exc(limit=-3)}")

    parts: dict[str, dict[str, float]] = {}
    if not args.no_breakdown:
        for case in benches:
            try:
                parts[case.label] = breakdown(case, None)
            except Exception as error:  # noqa: BLE001 (report and go on)
                log(f"  breakdown {case.label}: ERROR {error!r}")

    log(f"\n== summary ({time.perf_counter() - began:.0f} s): median ms per call")
    summary(log, list(variants), benches, ms, routes, parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
