"""GPU development loop for cholesky_orhr's knobs: routes, residuals, timings and where the time goes.

    python benchmarks/orhr_dev.py [--cases 640x512,4096] [--leaf 32,64] [--block 256] [--whole-max 32]
                                  [--repeats 5] [--no-breakdown] [--budget-s 170]

1. FP32 / FP64 batched-product throughput at the benchmark shapes (the FP64 first pass assumes
   cuBLAS DGEMM runs near FP32 speed on this GPU).
2. For every plan (``auto``: qr's default per shape, CUDA graphs; ``eager``: the same launched
   without graphs; then each ``--leaf`` x ``--block`` x ``--whole-max``, graphed) and benchmark case
   of ``shapes/qr_v2.yaml``: the checker's scaled residuals, how many matrices took each route, and
   the median time of one call (L2 flushed before each, as ``kernel_dev.py`` times). The summary
   adds the 2026-11-29 H200 figures of the code before graphs (``PREVIOUS_MS``) and, per case, the
   fastest plan.
3. For ``eager``, a torch.profiler breakdown of one call per case: GPU time in cuBLAS
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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from kernel_dev import Case, l2_flush_buffer, load_cases, time_case  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from reference import verdict  # noqa: E402
from reference_kernels.cholesky_orhr import Plan, Route, clear_graphs, default_plan, qr, qr_routed  # noqa: E402

# ms per call of ``auto`` before the CUDA graphs (commit 532879f, H200, torch 2.11, 2026-11-29).
PREVIOUS_MS = {
    "20x32": 0.152, "40x176": 3.519, "40x352": 4.029, "640x512": 25.006, "60x1024": 31.660,
    "8x2048": 31.924, "2x4096": 65.113, "640x512 mixed": 34.701, "60x1024 mixed": 60.099,
    "640x512 rankdef": 14.673, "640x512 clustered": 25.020, "60x1024 nearrank": 16.535,
}  # fmt: skip
PlanFor = Callable[[int, int], Plan]

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


def plans(args: argparse.Namespace) -> dict[str, PlanFor]:
    """``auto`` (qr's own choice per shape, ``default_plan``), ``eager`` (the same without CUDA
    graphs: the launch-bound path, for the breakdown; not with ``--no-breakdown``), every ``--leaf`` x ``--block`` x
    ``--whole-max`` (named l<leaf>b<block>w<whole_max>) and each ``--second-pass-min`` on the
    default plan (p2min<k>)."""
    knobs = [[int(v) for v in text.split(",") if v] for text in (args.leaf, args.block, args.whole_max)]
    minimums = [int(v) for v in args.second_pass_min.split(",") if v]
    eager = {} if args.no_breakdown else {"eager": lambda batch, n: replace(default_plan(batch, n), graph=False)}
    return (
        {"auto": default_plan}
        | eager
        | {
            f"l{leaf}b{block}w{whole}": _fixed(Plan(leaf=leaf, block=block, whole_max=whole))
            for leaf, block, whole in itertools.product(*knobs)
        }
        | {
            f"p2min{k}": lambda batch, n, k=k: replace(default_plan(batch, n), second_pass_min=k)
            for k in minimums
        }
    )


def _fixed(plan: Plan) -> PlanFor:
    """The same plan whatever the shape."""
    return lambda _batch, _n: plan


def check(case: Case, plan: Plan, log: Log) -> tuple[float | None, str]:
    """(worst scaled factor residual or None on failure, "f <factor> o <orth> <route counts>") for one
    input of ``case``."""
    a = case.make()
    h, tau, routes = qr_routed(a, plan)
    torch.cuda.synchronize()
    counts = collections.Counter(Route(int(r)).name.lower() for r in routes)
    shown = " ".join(f"{name}={count}" for name, count in sorted(counts.items()))
    v = verdict(a, (h, tau))
    if not v.passed:
        log(f"    {case.label:<22} FAIL {v.message}  routes: {shown}")
        return None, f"FAIL {shown}"
    d = v.diagnostics
    log(
        f"    {case.label:<22} pass factor {d['scaled_factor_residual']:6.3f} "
        f"orth {d['scaled_orthogonality_residual']:6.3f}  routes: {shown}"
    )
    return d["scaled_factor_residual"], (
        f"f {d['scaled_factor_residual']:.3f} o {d['scaled_orthogonality_residual']:.2f} {shown}"
    )


def breakdown(case: Case, plan: Plan) -> dict[str, float]:
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


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def summary(
    log: Log,
    benches: list[Case],
    ms: dict[str, dict[str, float]],
    checked: dict[str, str],
    parts: dict[str, dict[str, float]],
) -> None:
    """The closing tables: the time breakdown, then ms per plan and case (with the pre-graph
    figures, the fastest new plan, and auto's residuals and routes), geometric means, and the plan
    to make the default."""
    if parts:
        columns = ["wall", "gpu total", *(label for label, _ in CATEGORIES), "other"]
        log(f"where one call's time goes (ms; eager plan; wall - gpu total ~ host time):\n{'case':<22}"
            + "".join(f" {c[:13]:>13}" for c in columns))  # fmt: skip
        for label, p in parts.items():
            log(f"{label:<22}" + "".join(f" {p.get(c, 0.0):13.3f}" for c in columns))
        log()
    new = list(ms)
    ms = {"old (11-29)": {c.label: PREVIOUS_MS[c.label] for c in benches if c.label in PREVIOUS_MS}} | ms
    width = max(12, *(len(n) for n in ms))
    log(f"{'case':<18}" + "".join(f" {n:>{width}}" for n in ms) + f"  {'fastest':<{width}}  auto: residuals, routes")
    for case in benches:
        cells = "".join(f" {ms[n][case.label]:{width}.3f}" if case.label in ms[n] else f" {'-':>{width}}" for n in ms)
        timed = {n: ms[n][case.label] for n in new if case.label in ms[n]}
        best = min(timed, key=timed.__getitem__) if timed else "-"
        log(f"{case.label:<18}{cells}  {best:<{width}}  {checked.get(case.label, '')}")
    geo = {n: _geomean(list(ms[n].values())) for n in ms if len(ms[n]) == len(benches)}
    log(f"{'geomean':<18}" + "".join(f" {geo[n]:{width}.3f}" if n in geo else f" {'-':>{width}}" for n in ms))
    complete = [n for n in new if n in geo]
    if complete:
        best = min(complete, key=geo.__getitem__)
        per_case = {c.label: min((ms[n][c.label], n) for n in complete) for c in benches}
        oracle = _geomean([t for t, _ in per_case.values()])
        log(f"default: {best} (geomean {geo[best]:.3f} ms); best plan per case would give {oracle:.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated substrings of benchmark labels (e.g. 640x512,4096)")
    parser.add_argument("--shapes", type=Path, default=HERE.parent / "shapes" / "qr_v2.yaml")
    parser.add_argument("--leaf", default="32,64", help="leaf widths to try (<= 64)")
    parser.add_argument("--block", default="256", help="product split thresholds to try")
    parser.add_argument("--whole-max", default="32", help="largest n for the one-kernel path (0: off), e.g. 0,32")
    parser.add_argument("--second-pass-min", default="", help="fewest matrices worth a second pass, e.g. 1,32")
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
    checked: dict[str, str] = {}
    flush = l2_flush_buffer()
    for name, plan_for in variants.items():
        clear_graphs()
        log(f"\n== {name}")
        for case in benches:
            plan = plan_for(case.batch, case.n)
            if time.perf_counter() - began > args.budget_s:
                log(f"    {case.label}: skipped (budget of {args.budget_s:.0f} s spent)")
                continue
            try:
                residual, text = check(case, plan, log)
                checked.setdefault(case.label, text)
                if residual is not None:
                    ms[name][case.label] = time_case(lambda a, plan=plan: qr(a, plan), case, args.repeats, flush)
                    log(f"    {case.label:<22} {ms[name][case.label]:10.3f} ms")
            except Exception as error:  # noqa: BLE001 (report and go on)
                log(f"    {case.label}: ERROR {error!r}\n{traceback.format_exc(limit=-3)}")

    parts: dict[str, dict[str, float]] = {}
    if not args.no_breakdown:
        for case in benches:
            try:
                parts[case.label] = breakdown(case, variants["eager"](case.batch, case.n))
            except Exception as error:  # noqa: BLE001 (report and go on)
                log(f"  breakdown {case.label}: ERROR {error!r}")

    log(f"\n== summary ({time.perf_counter() - began:.0f} s): median ms per call")
    summary(log, benches, ms, checked, parts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
