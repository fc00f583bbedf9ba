"""How far the fast checker's Q moves the checker's figures from the published Q's.

Run from the repo root: ``python -m benchmarks.q_rounding [--device cpu|cuda] [--out FILE]``. For
each size and case type the output of ``torch.geqrf`` on one generated batch is turned into Q
two ways: ``torch.linalg.householder_product`` (what the contest's checker calls: LAPACK's
``orgqr`` on the CPU, cuSOLVER's on a GPU) and the float32 blocked product the fast path and the
``blocked`` method use (:func:`reference.householder.householder_q`). Each Q gets the published
gates' two figures in float64 (scaled factor residual and orthogonality, n·eps; the gates are 20
and 100): the fast path trusts a pass under half a gate, so these differences are its margin's
measure at the sizes the corpus does not reach (it stops at n = 96). The table gives the
published figures and the blocked Q's difference from them; the last row the largest magnitudes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.note import machine_line, publish
from reference import generate_input
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
    rows, worst = [], [0.0] * 2
    for batch, n in SIZES:
        for case in LARGE_CASES if n >= 1024 else CASES:
            cond = 2 if case in ("dense", "mixed") else 0
            a = generate_input(batch, n, cond, 11, case=case, device=args.device)
            h, tau = torch.geqrf(a)
            published = figures(a, h, torch.linalg.householder_product(h, tau))
            blocked = figures(a, h, householder_q(h, tau))
            diffs = [mine - theirs for mine, theirs in zip(blocked, published, strict=True)]
            worst = [max(w, abs(d)) for w, d in zip(worst, diffs, strict=True)]
            rows.append([f"{batch}x{n}", case, f"{published[0]:.3f}", f"{published[1]:.3f}",
                         *(f"{d:+.3f}" for d in diffs)])
            print(*rows[-1], file=sys.stderr, flush=True)
    rows.append(["largest", "", "", "", *(f"{w:.3f}" for w in worst)])
    headers = ["shape", "case", "published factor", "published orth.", "blocked Q: factor", "blocked Q: orth."]
    table = tabulate(rows, headers=headers, tablefmt="github")
    header = (f"Checker figures (n·eps) of the published and the blocked Q of the same geqrf factors, "
              f"{machine_line(args.device)}.")
    publish("Q's rounding in the checker's figures", header, table,
            f"python -m benchmarks.q_rounding --device {args.device}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
