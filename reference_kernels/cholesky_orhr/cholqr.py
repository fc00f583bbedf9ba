"""One FP64 CholeskyQR pass and its per-matrix accuracy test, without a host synchronisation.

A pass is G = A^T A, G = R^T R, Q = A R^-1, all in FP64. Its loss of orthogonality E = Q^T Q - I
grows like eps64 * kappa(A)^2 instead of eps32 * kappa(A)^2, so for well-conditioned matrices
(dense, band, clustered: observed ||E||_F ~ 1e-9) one pass, rounded to FP32, is as orthonormal as
the checker asks. The factor residual needs no test: Q R = A to FP64 accuracy whatever E is
(Q^T A - R = E R = -R^-T dG, of order eps64 * kappa * ||A||).

The test estimates ||E||_F from ``PROBES`` fixed Gaussian vectors (two skinny products, not a
k^3 Gram matrix). The caller compares it with ``tight_loss`` (final) and ``LOOSE`` (a second pass
on Q restores orthogonality); anything above, or a pivot that is not positive, goes elsewhere.

Exact zero columns past a matrix's width (rankdef) would make G singular: their diagonal entries
of G become 1, so R = diag(R1, I), Q = [Q1, 0], and the test ignores them. A whole batch therefore
runs at one shape, whatever each matrix's width: the pass can be captured in a CUDA graph.

Cholesky and the triangular inverse are one recursion on column halves: the leaves are Triton
kernels, everything else is a batched product (cuBLAS), because cuSOLVER's batched Cholesky and
triangular solves run several times slower than a product of the same size.
"""

from __future__ import annotations

import math

import torch

from reference_kernels.cholesky_orhr.kernels import cholesky_block
from reference_kernels.cholesky_orhr.plan import DEFAULT_PLAN, Plan
from reference_kernels.cholesky_orhr.products import gram_upper, left_triangular, right_triangular, split_point

__all__ = [
    "LOOSE",
    "PROBES",
    "cholesky_inverse",
    "cholesky_pass",
    "orthogonality_loss",
    "probe_matrix",
    "tight_loss",
    "times_upper",
]

# Probe vectors of the orthogonality estimate: E[estimate^2] = ||E||_F^2, and with 16 probes the
# estimate falls below a quarter of ||E||_F with probability ~1e-8 (chi-square, 16 degrees).
PROBES = 16
# Loss up to which a second pass restores orthogonality (kappa(Q1)^2 <= 3, far inside FP64's reach).
LOOSE = 0.5
_EPS32 = torch.finfo(torch.float32).eps


def tight_loss(k: int | torch.Tensor) -> float | torch.Tensor:
    """||E||_F at or below which Q (k columns) is final. The checker's orthogonality measure is
    ||E||_1 / (n eps32) <= sqrt(n) ||E||_F / (n eps32): this keeps it at 4 or less (gate: 100)."""
    if isinstance(k, torch.Tensor):
        return 4.0 * _EPS32 * k.to(torch.float64).sqrt()
    return 4.0 * math.sqrt(k) * _EPS32


def probe_matrix(k: int, device: torch.device) -> torch.Tensor:
    """The fixed k x PROBES FP64 Gaussian probes (drawn on the CPU: the same on every device, and
    made once outside any graph capture)."""
    generator = torch.Generator().manual_seed(20240601)
    return torch.randn((k, PROBES), generator=generator, dtype=torch.float64).to(device)


def orthogonality_loss(q: torch.Tensor, probes: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
    """Estimate of ||Q^T Q - I||_F for every Q of ``q`` (b x m x k, FP64), over the columns ``live``
    (b x k bool; default all): ||D (Q^T Q - I) D W||_F / sqrt(PROBES) for the probes W (k x PROBES)
    and D = diag(live), with the columns of Q outside ``live`` zero. Non-finite Q reads as infinite."""
    identity = probes if live is None else live[:, :, None].to(probes.dtype) * probes
    residual = torch.bmm(q.mT, torch.matmul(q, probes)) - identity
    loss = torch.linalg.vector_norm(residual, dim=(1, 2)) / math.sqrt(PROBES)
    return torch.nan_to_num(loss, nan=math.inf)


def _cholesky_inverse(g: torch.Tensor, x: torch.Tensor, failed: torch.Tensor, lo: int, hi: int, plan: Plan) -> None:
    """Recursive step of :func:`cholesky_inverse` on the diagonal block [lo, hi)."""
    if hi - lo <= plan.leaf:
        cholesky_block(g, x, failed, lo, hi - lo)
        return
    mid = split_point(lo, hi, plan.leaf)
    _cholesky_inverse(g, x, failed, lo, mid, plan)
    x11 = x[:, lo:mid, lo:mid]
    r12 = torch.empty((g.shape[0], mid - lo, hi - mid), dtype=g.dtype, device=g.device)
    left_triangular(x11.mT, g[:, lo:mid, mid:hi], r12, upper=False, block=plan.block)
    g[:, lo:mid, mid:hi] = r12
    g[:, mid:hi, lo:mid] = 0.0
    x[:, mid:hi, lo:mid] = 0.0
    gram_upper(r12, g[:, mid:hi, mid:hi], beta=1.0, alpha=-1.0, block=plan.block)
    _cholesky_inverse(g, x, failed, mid, hi, plan)
    x11_r12 = torch.empty_like(r12)
    left_triangular(x11, r12, x11_r12, upper=True, block=plan.block)
    right_triangular(x11_r12, x[:, mid:hi, mid:hi], x[:, lo:mid, mid:hi], upper=True, alpha=-1.0, block=plan.block)


def cholesky_inverse(g: torch.Tensor, plan: Plan = DEFAULT_PLAN) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, R^-1, failed) for every symmetric positive definite matrix of ``g`` (b x k x k), G = R^T R.

    Only the upper triangle of ``g`` is read (by blocks: see ``products.gram_upper``); ``g`` is
    overwritten by R (zeros below the diagonal). ``failed`` (b, bool) marks matrices where a pivot
    was not positive; their R and R^-1 are meaningless (possibly not finite).
    """
    g = g.contiguous()
    x = torch.empty_like(g)
    failed = torch.zeros(g.shape[0], dtype=torch.int32, device=g.device)
    _cholesky_inverse(g, x, failed, 0, g.shape[-1], plan)
    return g, x, failed.bool()


def times_upper(a: torch.Tensor, x: torch.Tensor, plan: Plan) -> torch.Tensor:
    """A X for X upper triangular, into a fresh tensor."""
    out = torch.empty((a.shape[0], a.shape[1], x.shape[2]), dtype=a.dtype, device=a.device)
    right_triangular(a, x, out, upper=True, block=plan.block)
    return out


def cholesky_pass(
    a: torch.Tensor, dead: torch.Tensor, plan: Plan = DEFAULT_PLAN
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Q, R, failed) of one CholeskyQR pass over every matrix of ``a`` (b x m x k, FP64), where
    ``dead`` (b x k bool) marks exact zero columns (all after the matrix's last non-zero one): they
    get R = I on their diagonal block and Q = 0. Queues work only; no host synchronisation."""
    g = torch.empty((a.shape[0], a.shape[2], a.shape[2]), dtype=a.dtype, device=a.device)
    gram_upper(a, g, block=plan.block)
    g.diagonal(dim1=1, dim2=2).add_(dead.to(g.dtype))
    r, x, failed = cholesky_inverse(g, plan)
    return times_upper(a, x, plan), r, failed
