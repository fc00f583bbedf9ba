"""blocked_wy's Gram-route panels on qr_v2's large cases: how many panels take the fallback, and on a
GPU the verdicts and times of the default plans against Householder-panel and Gram-route variants.

Run from the repo root: ``python -m benchmarks.gram_panel [--min-n 1024] [--out FILE.md]``.

The fallback count needs no GPU: each spec's panels as the factorisation meets them (the earlier
reflectors of a float64 QR applied by ``ormqr``) go through :func:`fallback_flags`, the
column-step program's decision in float64 torch (tests/test_gram_panel.py holds it to the
kernel's flags). On a GPU each spec is also factored by the
default plan and by each variant of ``VARIANTS`` (captured graphs, back-to-back calls timed by CUDA events,
median after a warm-up: a quick look, not the evaluator's protocol, which ``qrbench sweep`` is),
with the contest's verdict and the worst scaled factor residual.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.note import machine_line, publish
from evaluator.shapes import Case, resolve_shapes
from reference import generate_input, verdict
from reference_kernels.blocked_wy import Plan, default_plan, qr
from reference_kernels.blocked_wy.gram_panel import GRAM_ERROR_LIMIT, error_scale

# Variants per size, laid over its default plan: at 1024 (Householder panels) Gram leaves of 32 and
# of 16 at four warps; at 2048 and 4096 (Gram leaves of 32 at four warps since §W21) the former
# Householder plans, and the Gram leaves at eight warps with pairs.
VARIANTS: dict[int, tuple[dict[str, object], ...]] = {
    1024: ({"panel": "gram", "leaf": 32, "panel_warps": 4, "two_columns": False},
           {"panel": "gram", "leaf": 16, "panel_warps": 4, "two_columns": False}),
    2048: ({"panel": "householder", "leaf": 16, "panel_warps": None},
           {"panel": "gram", "panel_warps": 8, "two_columns": True}),
    4096: ({"panel": "householder", "leaf": 8, "panel_warps": 8, "two_columns": True},
           {"panel": "gram", "panel_warps": 8, "two_columns": True}),
}


def fallback_flags(p: torch.Tensor, error_limit: float = GRAM_ERROR_LIMIT) -> torch.Tensor:
    """Which panels of the batch ``p`` (b x m x w) the column-step program sends down the fallback:
    its column steps on the top block and ``P2 @ M`` in float64, with the bound on each squared
    norm's rounding it checks (:mod:`reference_kernels.blocked_wy.gram_panel`)."""
    batch, m, w = p.shape
    p = p.double()
    top, low_rows = p[:, :w].clone(), p[:, w:]
    gram = low_rows.transpose(1, 2) @ low_rows
    lower_norms = gram.diagonal(dim1=1, dim2=2).sqrt()
    mix = torch.eye(w, dtype=torch.float64, device=p.device).repeat(batch, 1, 1)
    scale_of_error = error_scale(m, error_limit)
    shaky = torch.zeros(batch, dtype=torch.bool, device=p.device)
    for k in range(w):
        mk = mix[:, :, k]
        low = (mix * (gram @ mk.unsqueeze(-1))).sum(1)
        reach = (mix[:, :, k].abs() * lower_norms).sum(1)
        ak_below = top[:, :, k].clone()
        ak_below[:, : k + 1] = 0.0
        high = (top * ak_below.unsqueeze(-1)).sum(1)
        alpha, sig = top[:, k, k], high[:, k] + low[:, k]
        shaky |= reach * reach * scale_of_error > alpha * alpha + sig
        norm = (alpha * alpha + sig).sqrt()
        beta = torch.where(alpha >= 0, -norm, norm)
        reflect = sig > 0
        tau = torch.where(reflect, (beta - alpha) / torch.where(reflect, beta, 1.0), 0.0)
        scale = torch.where(reflect, 1.0 / torch.where(reflect, alpha - beta, 1.0), 0.0)
        u = top[:, k] + scale.unsqueeze(-1) * (high + low)
        u[:, : k + 1] = 0.0
        v_top = scale.unsqueeze(-1) * ak_below
        v_top[:, k] = 1.0
        top -= (tau.unsqueeze(-1) * v_top).unsqueeze(-1) * u.unsqueeze(1)
        mix -= (tau * scale).view(-1, 1, 1) * mk.unsqueeze(-1) * u.unsqueeze(1)
        top[:, k, k] = torch.where(reflect, beta, alpha)
        top[:, k + 1 :, k] = scale.unsqueeze(-1) * top[:, k + 1 :, k]
        mix[:, :, k] *= scale.unsqueeze(-1)
    return shaky


def fallback_panels(a: torch.Tensor, w: int = 32) -> tuple[int, int]:
    """(panels that would take the fallback, panels) over the batch ``a``, w-column panels."""
    batch, n, _ = a.shape
    a = a.double()
    h, tau = torch.geqrf(a)
    falls = 0
    for j0 in range(0, n - w, w):  # the last panel has no rows below its top: it never falls back
        panel = a[:, :, j0 : j0 + w]
        if j0:
            panel = torch.ormqr(h[:, :, :j0], tau[:, :j0], panel, transpose=True)
        falls += int(fallback_flags(panel[:, j0:]).sum())
    return falls, batch * -(-n // w)


def _time_ms(plan: Plan, a: torch.Tensor, calls: int) -> float:
    for _ in range(3):
        qr(a, plan=plan)  # capture and warm-up
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        qr(a, plan=plan)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _plans(n: int) -> list[tuple[str, Plan]]:
    """(label, plan): n's default plan, then each variant laid over it."""
    base = default_plan(n)
    return [("default", base), *((str(v), replace(base, **v)) for v in VARIANTS[n])]


def _gpu_cells(case: Case, a: torch.Tensor, calls: int) -> list[str]:
    """'ms, passed, worst scaled factor residual' of the default plan and of every variant."""
    cells = []
    for _, plan in _plans(case.n):
        result = verdict(a, qr(a, plan=plan))
        residual = result.diagnostics.get("scaled_factor_residual", float("nan"))
        verdict_text = "pass" if result.passed else "FAIL"
        cells.append(f"{_time_ms(plan, a, calls):.3f} ms, {verdict_text}, {residual:.3f}")
    return cells


def _kernel_rows(case: Case, a: torch.Tensor, calls: int) -> list[list[str]]:
    """Per plan, the GPU time per call of each kernel (torch profiler over ``calls`` graphed calls
    after a warm-up): where the panels' time goes, launch by launch kind."""
    rows = []
    for label, plan in _plans(case.n):
        qr(a, plan=plan)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                qr(a, plan=plan)
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        for event in sorted(events, key=lambda e: -e.self_device_time_total)[:8]:
            per_call = event.self_device_time_total / calls / 1e3
            rows.append([case.label, label, event.key[:60], f"{event.count // calls}", f"{per_call:.3f}"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-n", type=int, default=1024, help="smallest n of the specs taken (default 1024)")
    parser.add_argument("--calls", type=int, default=20, help="timed calls per plan on a GPU (default 20)")
    parser.add_argument("--profile", action="store_true",
                        help="on a GPU, also each plan's kernels by GPU time per call (torch profiler)")
    parser.add_argument("--out", type=Path, help="Markdown file to write the table to")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    shapes = resolve_shapes("qr_v2")
    headers = ["mode", "spec", "panels falling back"]
    if gpu:
        headers += ["default plan", *(f"variant {i + 1}" for i in range(max(map(len, VARIANTS.values()))))]
    rows: list[list[str]] = []
    kernel_rows: list[list[str]] = []
    for mode in ("test", "benchmark"):
        for case in shapes.cases(mode):
            if case.n < args.min_n or case.n not in VARIANTS:
                continue
            a = generate_input(**case.generator_args())
            falls, panels = fallback_panels(a)
            row = [mode, case.label, f"{falls} of {panels}"]
            if gpu:
                cells = _gpu_cells(case, a, args.calls)
                row += cells + [""] * (len(headers) - len(row) - len(cells))
                if args.profile and mode == "benchmark":
                    kernel_rows += _kernel_rows(case, a, args.calls)
            rows.append(row)
            print(" | ".join(row), flush=True)
    where = "cuda" if gpu else "cpu"
    header = (f"Gram-route panels of blocked_wy (fallback past a rounding bound of {GRAM_ERROR_LIMIT:g}) on qr_v2's "
              f"specs of n >= {args.min_n}, inputs made on the {where.upper()}; {machine_line(where)}.")
    if gpu:
        header += (" GPU cells: median ms of back-to-back graphed calls, the contest's verdict, the worst"
                   " scaled factor residual; the variants per size, in order: " + str(VARIANTS) + ".")
    table = tabulate(rows, headers, tablefmt="github")
    if kernel_rows:
        table += "\n\nGPU time per call of each plan's eight costliest kernels (torch profiler, graphed calls):\n\n"
        table += tabulate(kernel_rows, ["spec", "plan", "kernel", "launches a call", "ms a call"], tablefmt="github")
    publish("Gram-route panels", header, table, "python -m benchmarks.gram_panel", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
