"""How far each way of building Q moves the checker's figures from the published one's.

Run from the repo root: ``python -m benchmarks.q_rounding [--device cpu|cuda] [--out FILE]``. For
each size and case type the output of ``torch.geqrf`` on one generated batch is turned into Q
three ways: ``torch.linalg.householder_product`` (what the contest's checker calls: LAPACK's
``orgqr`` on the CPU, cuSOLVER's on a GPU), the float32 blocked product (``householder_q``, the
``blocked`` method) and the fast path's (:func:`reference.checker.fast_q`: float64 block steps
from n = 128). Each Q gets the published gates' two figures in float64 (scaled factor residual
and orthogonality, n·eps; the gates are 20 and 100). The table gives the published figures and
each other Q's difference from them; the last row the largest magnitude of each column.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.note import machine_line, publish
from reference import generate_input
from reference.checker import fast_q
from reference.householder import householder_q

SIZES = ((4, 128), (4, 176), (3, 352), (3, 512), (2, 1024), (1, 2048))
CASES = ("dense", "rankdef", "clustered", "nearrank", "band", "rowscale", "nearcollinear", "mixed")
LARGE_CASES = ("dense", "nearrank", "mixed")  # from 1024 on, to keep a CPU run to minutes
_EPS32 = torch.finfo(torch.float32).eps


def figures(a: torch.Tensor, h: torch.Tensor, q: torch.Tensor) -> tuple[float, float]:
    """The worst scaled factor residual and the orthogonality figure, as the published gates compute them."""
    n = a.shape[-1]
    a64, q64 = a.double(), q.double()
    a_norms = a64.abs().sum(-2).amax(-1)
    factor = (h.double().triu() - q64.mT @ a64).abs().sum(-2).amax(-1) / (_EPS32 * n * a_norms.clamp_min(1e-30))
    gram = q64.mT @ q64
    gram.diagonal(dim1=-2, dim2=-1).sub_(1.0)
    return factor.amax().item(), (gram.abs().sum(-2).amax(-1).amax() / (_EPS32 * n)).item()


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
            h, tau = torch.geqrf(a)
            published = figures(a, h, torch.linalg.householder_product(h, tau))
            diffs = [mine - theirs for q in (householder_q(h, tau), fast_q(h, tau))
                     for mine, theirs in zip(figures(a, h, q), published, strict=True)]
            worst = [max(w, abs(d)) for w, d in zip(worst, diffs, strict=True)]
            rows.append([f"{batch}x{n}", case, f"{published[0]:.3f}", f"{published[1]:.3f}",
                         *(f"{d:+.3f}" for d in diffs)])
            print(*rows[-1], file=sys.stderr, flush=True)
    rows.append(["largest", "", "", "", *(f"{w:.3f}" for w in worst)])
    headers = ["shape", "case", "published factor", "published orth.", "float32 blocked: factor", "orth.",
               "fast path: factor", "orth."]
    table = tabulate(rows, headers=headers, tablefmt="github")
    header = (f"Checker figures (n·eps) of three Qs of the same geqrf factors, as differences from the "
              f"published Q's, {machine_line(args.device)}.")
    publish("Q's rounding in the checker's figures", header, table,
            f"python -m benchmarks.q_rounding --device {args.device}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
