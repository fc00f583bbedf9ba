"""How far the fast checker's Q moves the checker's figures from the published Q's.

Run from the repo root: ``python -m benchmarks.q_rounding [--device cpu|cuda] [--out FILE]``. For
each size and case type the output of ``torch.geqrf`` on one generated batch is turned into Q
two ways: ``torch.linalg.householder_product`` (what the contest's checker calls: LAPACK's
``orgqr`` on the CPU, cuSOLVER's on a GPU) and the float32 blocked product the fast path and the
``blocked`` method use (:func:`reference.householder.householder_q`); a third set of figures is
the fast path's own (``verdict`` with ``fast``: on CUDA its split-TF32 Q, :mod:`reference.q_kernels`,
and float64 residual kernels; on the CPU the blocked Q again). Each Q gets the published
gates' two figures from the checker's own diagnostics (``verdict`` with that Q method: scaled
factor residual and orthogonality in float64, n·eps; the gates are 20 and 100): the fast path
trusts a pass under half a gate, so these differences are its margin's measure at the sizes the
corpus does not reach (it stops at n = 96). The table gives the published figures and the blocked
Q's difference from them; the last row the largest magnitudes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.note import machine_line, publish
from reference import generate_input, verdict

SIZES = ((4, 128), (4, 176), (3, 352), (3, 512), (2, 1024), (1, 2048))
CASES = ("dense", "rankdef", "clustered", "nearrank", "band", "rowscale", "nearcollinear", "mixed")
LARGE_CASES = ("dense", "nearrank", "mixed")  # from 1024 on, to keep a CPU run to minutes
FIGURES = ("scaled_factor_residual", "scaled_orthogonality_residual")


def figures(a: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor], q_method: str) -> tuple[float, ...]:
    """The gates' two figures of a pass, with Q materialised by ``q_method`` (the checker's own)."""
    checked = verdict(a, out, q_method)  # type: ignore[arg-type]
    if not checked.passed:
        raise RuntimeError(f"geqrf's output failed the {q_method} check: {checked.message}")
    return tuple(checked.diagnostics[key] for key in FIGURES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, help="Markdown file to write the table to")
    args = parser.parse_args()
    rows, worst = [], [0.0] * 4
    for batch, n in SIZES:
        for case in LARGE_CASES if n >= 1024 else CASES:
            cond = 2 if case in ("dense", "mixed") else 0
            a = generate_input(batch, n, cond, 11, case=case, device=args.device)
            out = torch.geqrf(a)
            published = figures(a, out, "published")
            diffs = [mine - theirs for method in ("blocked", "fast")
                     for mine, theirs in zip(figures(a, out, method), published, strict=True)]
            worst = [max(w, abs(d)) for w, d in zip(worst, diffs, strict=True)]
            rows.append([f"{batch}x{n}", case, f"{published[0]:.3f}", f"{published[1]:.3f}",
                         *(f"{d:+.3f}" for d in diffs)])
            print(*rows[-1], file=sys.stderr, flush=True)
    rows.append(["largest", "", "", "", *(f"{w:.3f}" for w in worst)])
    headers = ["shape", "case", "published factor", "published orth.", "blocked Q: factor", "blocked Q: orth.",
               "fast path: factor", "fast path: orth."]
    table = tabulate(rows, headers=headers, tablefmt="github")
    header = (f"Checker figures (n·eps) of the published Q, the blocked Q and the fast path of the same geqrf factors, "
              f"{machine_line(args.device)}.")
    publish("Q's rounding in the checker's figures", header, table,
            f"python -m benchmarks.q_rounding --device {args.device}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
