"""blocked_wy plans compared size by size, for ``benchmarks/kernel_dev.py --sweep`` (one GPU run).

Per matrix size n of qr_v2: the current ``DEFAULT_PLANS`` entry (``new``), variants of it that
change a knob or two, and the first default plan (``old``). Each runs every test and benchmark spec
of its size (checker residuals, input unchanged, fresh outputs) and is timed on the benchmark specs.
Order: ``new`` on every size, then size by size (those that weigh most in the geomean first)
``new`` again, whose second figure replaces its first, and its variants, then ``old`` (measured in
the first sweeps), while ``--budget-s`` lasts. Then a profile of one eager call
of ``new`` and its other update at the large sizes (GPU time per kernel). Before any of it, a child
process compiles every kernel the sweep will launch, in parallel, into Triton's cache (``--prewarm``).

The last lines: per size, each plan's ms per benchmark and worst residual; then ``old``, ``new``
and ``best`` (the fastest plan per size whose every spec passed with a residual <= 4) over the 12
benchmarks with their geometric means; then ``DEFAULT_PLANS`` written out for the best plans.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reference_kernels.blocked_wy import DEFAULT_PLANS, Plan, default_plan  # noqa: E402
from reference_kernels.blocked_wy.products import UpdateTiles  # noqa: E402

RESIDUAL_LIMIT = 4.0  # tests/test_blocked_wy.py's bound: five times under the contest's gate
# Panel warps tried per size (more warps lost everywhere else, fewer spill at 1024 and above;
# docs/kernel-log.md §W4, §W-sweeps). An entry equal to the current plan is dropped.
WARPS_TRIED = {32: (1, 4), 176: (2,), 352: (8,)}
# Other variants per size, the ones the last sweeps timed against the plans (what each gave:
# docs/kernel-log.md §W10, §W11, §W-sweeps). The first entry is also profiled.
OTHERS_TRIED: dict[int, dict[str, dict[str, object]]] = {
    512: {
        "mixed": {"update": "mixed", "tiles": UpdateTiles(block_n=32)},
        "fused,pbm=32": {"tiles": UpdateTiles(fused=True)},
        "fused,pbm=128": {"tiles": UpdateTiles(project_bm=128, fused=True)},
        "fused,pbm=64,stages=4": {"tiles": UpdateTiles(project_bm=64, stages=4, fused=True)},
    },
    1024: {
        "two-launch": {"tiles": UpdateTiles(warps=2)},
        "fused,pbm=32": {"tiles": UpdateTiles(fused=True)},
        "fused,pbm=128": {"tiles": UpdateTiles(project_bm=128, fused=True)},
        "fused,pbm=64,stages=4": {"tiles": UpdateTiles(project_bm=64, stages=4, fused=True)},
    },
    352: {
        "two-launch": {"tiles": UpdateTiles(subtract_bm=32)},
        "fused,pbm=64": {"tiles": UpdateTiles(project_bm=64, fused=True)},
    },
    176: {
        "two-launch": {"tiles": UpdateTiles(subtract_bm=32)},
        "fused,sbm=64": {"tiles": UpdateTiles(fused=True)},
        "fused,sbm=32,pbm=64": {"tiles": UpdateTiles(subtract_bm=32, project_bm=64, fused=True)},
    },
}
PRIORITY = (512, 1024, 2048, 4096, 352, 176, 32)  # variants of the sizes that weigh most in the geomean first


def previous_default(n: int) -> Plan:
    """The first default plan (its H200 run of 2026-11-29: geomean 4.99 ms, docs/kernel-log.md §W1)."""
    return Plan(nb=32 if n < 512 else 64, leaf=32, update="torch", inner="torch", one_reduction=False, top_tile=False)


def candidates(n: int) -> dict[str, Plan]:
    """``old``, ``new`` and variants of ``new`` (a knob or two) for an n x n size, duplicates dropped."""
    new = default_plan(n)
    plans = {"new": new, "old": previous_default(n)}
    variants: dict[str, dict[str, object]] = {f"warps={w}": {"panel_warps": w} for w in WARPS_TRIED.get(n, ())}
    variants["single" if new.two_columns else "pairs"] = {"two_columns": not new.two_columns}
    if not new.two_columns and new.panel_warps and new.panel_warps <= 8:  # pairs spill at 128 floats
        variants[f"pairs,warps={2 * new.panel_warps}"] = {"two_columns": True, "panel_warps": 2 * new.panel_warps}
    if n > new.whole_max:
        variants["no-top" if new.top_tile else "top"] = {"top_tile": not new.top_tile}
        if new.tiles != UpdateTiles():
            variants["tiles=default"] = {"tiles": UpdateTiles()}
        variants |= OTHERS_TRIED.get(n, {})
    for name, change in variants.items():
        plan = replace(new, **change)
        if plan not in plans.values():
            plans[name] = plan
    return plans


def plan_source(plan: Plan) -> str:
    """``Plan(...)`` with only the fields that differ from the defaults, as DEFAULT_PLANS spells it."""
    parts = [f"nb={plan.nb}", f"leaf={plan.leaf}"]
    for f in fields(Plan):
        value = getattr(plan, f.name)
        if f.name not in ("nb", "leaf") and value != f.default:
            parts.append(f"{f.name}={value!r}")
    return f"Plan({', '.join(parts)})"


_LAUNCHES: list = []


def _compile(index: int) -> None:
    from reference_kernels.blocked_wy.offline import compile_launch

    compile_launch(_LAUNCHES[index])


def prewarm(shapes: list[tuple[int, int]], jobs: int) -> str:
    """Compile every launch of every candidate plan on ``shapes`` in ``jobs`` processes (run in a
    child process that never touches CUDA); returns a one-line report."""
    from reference_kernels.blocked_wy.offline import record_launches

    calls = [((b, n), plan) for b, n in shapes for plan in candidates(n).values()]
    _LAUNCHES[:] = record_launches(calls).values()
    began = time.perf_counter()
    failed = 0
    # Forked workers inherit the launches (Triton's kernel objects do not pickle); the index travels.
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for future in [pool.submit(_compile, i) for i in range(len(_LAUNCHES))]:
            try:
                future.result()
            except Exception:  # noqa: BLE001 (the GPU run compiles it again and reports the error)
                failed += 1
    launches = _LAUNCHES
    return f"prewarm: {len(launches)} kernels compiled in {time.perf_counter() - began:.0f} s, {failed} failed"


def run_prewarm(shapes: list[tuple[int, int]], log: Callable[[str], None], timeout_s: float) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
    arg = ",".join(f"{b}x{n}" for b, n in shapes)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--prewarm", arg, "--jobs", str(min(16, os.cpu_count() or 1))],
            env=env, capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
        log(done.stdout.strip().splitlines()[-1] if done.returncode == 0 else f"prewarm failed: {done.stderr[-800:]}")
    except Exception as error:  # noqa: BLE001 (kernels then compile on first use)
        log(f"prewarm skipped: {error!r}")


def sweep(cases: list, args: argparse.Namespace, log: Callable[[str], None], began: float) -> None:
    """The GPU part; ``cases`` are kernel_dev's Case objects for the shape file."""
    import torch
    from kernel_dev import Result, check_case, compiled_kernel_report, l2_flush_buffer, sticky, time_case

    from reference_kernels.blocked_wy import clear_graphs, qr

    sizes = sorted({c.n for c in cases})
    run_prewarm(sorted({(c.batch, c.n) for c in cases}), log, timeout_s=90)
    work = [(n, "new") for n in sizes]  # every size's current plan first, while the budget lasts
    # Then per size its variants, after `new` again: the first pass reads 5-50% slow at the small
    # sizes (GPU and host still warming up), so `new` is compared with figures of its own pass.
    for n in (n for n in PRIORITY if n in sizes):
        work += [(n, name) for name in candidates(n) if name != "old"]
    work += [(n, "old") for n in sizes]  # measured before: last, while the budget lasts
    results: dict[tuple[int, str], Result] = {}
    flush = l2_flush_buffer()
    poisoned = False
    log("\n== sweep (per size: every spec checked, benchmark specs timed)")
    for n, name in work:
        if poisoned or time.perf_counter() - began > args.budget_s:
            log(f"  n={n} {name}: skipped ({'CUDA context lost' if poisoned else 'budget spent'})")
            continue
        plan = candidates(n)[name]
        result = results[(n, name)] = Result()
        kernel = lambda a, plan=plan: qr(a, plan=plan)  # noqa: E731
        log(f"n={n} {name}: {plan}")
        for case in (c for c in cases if c.n == n):
            label = f"{case.kind}:{case.label}"
            try:
                check_case(name, kernel, case, result, log)
                if case.kind == "bench" and label not in result.failed:
                    result.ms[case.label] = time_case(kernel, case, args.repeats, flush)
                    log(f"  {'':24} {result.ms[case.label]:9.3f} ms")
            except Exception as error:  # noqa: BLE001 (report and go on)
                result.failed[label] = repr(error)
                log(f"  {label} ERROR {error!r}\n{traceback.format_exc(limit=-3)}")
                poisoned = sticky(error)
                break
        clear_graphs()
        torch.cuda.empty_cache()
    if not poisoned:
        for case in (c for c in cases if c.kind == "bench" and c.label in PROFILED):
            other = next(iter(OTHERS_TRIED.get(case.n, {})), "top" if "top" in candidates(case.n) else "no-top")
            for name in ("new", other):
                if (case.n, name) in results and not results[(case.n, name)].failed:
                    log_breakdown(case, name, replace(candidates(case.n)[name], graph=False), log)
    log("\nblocked_wy compiled kernels:")
    spilling = compiled_kernel_report(log)
    summary(cases, results, log)
    log(f"compiled kernels that spill: {len(spilling)}" + "".join(f"\n  {line}" for line in spilling))


PROFILED = ("640x512", "60x1024", "8x2048", "2x4096")


def log_breakdown(case, name: str, plan: Plan, log: Callable[[str], None]) -> None:
    """GPU time of one eager call per kernel name (torch.profiler), after a warm-up call: what the
    graphed call spends its time on, launch gaps aside."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    from reference_kernels.blocked_wy import qr

    a = case.make()
    qr(a, plan=plan)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        qr(a, plan=plan)
        torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = collections.defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name[:48]].append(event.time_range.elapsed_us() / 1e3)
    total = sum(sum(v) for v in per_kernel.values())
    log(f"\n== {case.label} {name} eager: GPU {total:.3f} ms in {sum(map(len, per_kernel.values()))} kernels")
    for kernel, times in sorted(per_kernel.items(), key=lambda kv: -sum(kv[1]))[:8]:
        log(f"  {kernel:<48} {sum(times):8.3f} ms  {len(times):5d} calls  {100 * sum(times) / total:5.1f}%")


def _passed(result, n: int, cases: list) -> bool:
    labels = [f"{c.kind}:{c.label}" for c in cases if c.n == n]
    return not result.failed and all(result.residual.get(label, math.inf) <= RESIDUAL_LIMIT for label in labels)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(cases: list, results: dict, log: Callable[[str], None]) -> None:
    benches = [c for c in cases if c.kind == "bench"]
    sizes = sorted({c.n for c in benches})
    log("\n== per size (ms per benchmark; resid = worst scaled factor residual over every spec of the size)")
    best: dict[int, str] = {}
    for n in sizes:
        labels = [c.label for c in benches if c.n == n]
        log(
            f"n={n:<5} {'plan':<16}"
            + "".join(f"{label:>19}" for label in labels)
            + f"{'geomean':>9}{'resid':>7}  status"
        )
        ranked = []
        for (size, name), r in results.items():
            if size != n:
                continue
            ms = [r.ms.get(label) for label in labels]
            gm = _geomean(ms) if all(ms) else None
            ok = _passed(r, n, cases) and gm is not None
            worst = max(r.residual.values(), default=math.nan)
            status = "ok" if ok else ("FAIL " + "; ".join(f"{k}: {v[:60]}" for k, v in r.failed.items()))[:90]
            cells = "".join(f"{t:19.3f}" if t else f"{'-':>19}" for t in ms)
            log(f"{'':7} {name:<16}{cells}{gm if gm else math.nan:9.3f}{worst:7.2f}  {status}")
            if ok:
                ranked.append((gm, name))
        if ranked:
            best[n] = min(ranked)[1]
    log("\n== summary over the 12 benchmarks (ms per call; r- rows: worst scaled factor residual per benchmark)")
    header = f"{'plan':<7}" + "".join(f"{c.label[:11]:>12}" for c in benches) + f"{'geomean':>10}"
    log(header)
    rows = {"old": {n: "old" for n in sizes}, "new": {n: "new" for n in sizes}, "best": best}
    for row, pick in rows.items():
        picked = [results.get((c.n, pick.get(c.n, ""))) for c in benches]
        times = [r.ms.get(c.label) if r else None for r, c in zip(picked, benches, strict=True)]
        resid = [r.residual.get(f"bench:{c.label}") if r else None for r, c in zip(picked, benches, strict=True)]
        gm = f"{_geomean(times):10.3f}" if all(times) else f"{'-':>10}"
        log(f"{row:<7}" + "".join(f"{t:12.3f}" if t else f"{'-':>12}" for t in times) + gm)
        log(f"{'r-' + row:<7}" + "".join(f"{x:12.2f}" if x is not None else f"{'-':>12}" for x in resid))
        tests = {k: v for (n, name), r in results.items() if name == pick.get(n) for k, v in r.residual.items()}
        tests = {k: v for k, v in tests.items() if k.startswith("test:")}
        failed = [k for (n, name), r in results.items() if name == pick.get(n) for k in r.failed]
        total = len({c.label for c in cases if c.kind == "test"})  # a label shared by two specs keeps the worse
        worst = max(tests.items(), key=lambda kv: kv[1], default=("-", math.nan))
        passed = f"distinct test specs passed {len(tests)}/{total}, worst {worst[1]:.2f} ({worst[0]})"
        log(f"{'':7}{row}: {passed}; failed: {failed or 'none'}")
    log("best per size: " + ", ".join(f"{n}: {name}" for n, name in best.items()))
    log("DEFAULT_PLANS for reference_kernels/blocked_wy/qr.py (sizes without a passing plan keep theirs):")
    for bound, plan in DEFAULT_PLANS:
        chosen = [n for n in best if n <= bound and default_plan(n) is plan]
        if chosen:
            plan = candidates(chosen[0])[best[chosen[0]]]
        log(f"    ({'1 << 30' if bound >= 1 << 30 else bound}, {plan_source(plan)}),")


def main() -> int:
    parser = argparse.ArgumentParser(description="child process: compile a sweep's kernels into Triton's cache")
    parser.add_argument("--prewarm", required=True, help="shapes as BATCHxN,BATCHxN")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in item.split("x")) for item in args.prewarm.split(",")]
    print(prewarm(shapes, args.jobs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
