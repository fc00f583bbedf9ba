"""CholeskyQR with an FP64 first pass and a per-matrix accuracy test: A = Q R, Q orthonormal.

Pass 1 runs entirely in FP64: G = A^T A, G = R1^T R1, Q1 = A R1^-1. Its loss of orthogonality
E = Q1^T Q1 - I grows like eps64 * kappa(A)^2 instead of eps32 * kappa(A)^2, so for well-conditioned
matrices (dense, band, clustered: observed ||E||_F ~ 1e-9) Q1 rounded to FP32 is already as
orthonormal as the checker asks and pass 2 is skipped. The factor residual needs no test: Q1 R1 = A
to FP64 accuracy whatever E is (Q1^T A - R1 = E R1 = -R1^-T dG, of order eps64 * kappa * ||A||).

The test estimates ||E||_F from ``PROBES`` fixed Gaussian vectors (two skinny products, not a
k^3 Gram matrix): at most ``tight_loss(k)`` ends the matrix; up to ``LOOSE`` it takes a second FP64
pass, which is tested the same way; anything else (a Cholesky pivot that is not positive, a loss
too large: nearrank, exactly dependent columns) is reported as failed for the caller to route
elsewhere. Every decision is made per matrix from its own numbers.

Cholesky and the triangular inverse are one recursion on column halves: the leaves are Triton
kernels, everything else is a batched product (cuBLAS), because cuSOLVER's batched Cholesky and
triangular solves run several times slower than a product of the same size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reference_kernels.cholesky_orhr.kernels import cholesky_block
from reference_kernels.cholesky_orhr.plan import DEFAULT_PLAN, Plan
from reference_kernels.cholesky_orhr.products import gram_upper, left_triangular, right_triangular, split_point

__all__ = ["LOOSE", "PROBES", "CholQR", "cholesky_inverse", "cholesky_qr", "orthogonality_loss", "tight_loss"]

# Probe vectors of the orthogonality estimate: E[estimate^2] = ||E||_F^2, and with 16 probes the
# estimate falls below a quarter of ||E||_F with probability ~1e-8 (chi-square, 16 degrees).
PROBES = 16
# Loss up to which a second pass restores orthogonality (kappa(Q1)^2 <= 3, far inside FP64's reach).
LOOSE = 0.5
_EPS32 = torch.finfo(torch.float32).eps


def tight_loss(k: int) -> float:
    """||E||_F at or below which Q is final. The checker's orthogonality measure is
    ||E||_1 / (n eps32) <= sqrt(n) ||E||_F / (n eps32): this keeps it at 4 or less (gate: 100)."""
    return 4.0 * math.sqrt(k) * _EPS32


def orthogonality_loss(q: torch.Tensor) -> torch.Tensor:
    """Estimate of ||Q^T Q - I||_F for every Q of ``q`` (b x m x k, FP64): ||(Q^T Q - I) W||_F /
    sqrt(PROBES) for a fixed k x PROBES Gaussian W. Non-finite Q reads as an infinite loss."""
    k = q.shape[-1]
    generator = torch.Generator(device=q.device).manual_seed(20240601)
    probes = torch.randn((k, PROBES), generator=generator, dtype=q.dtype, device=q.device)
    residual = torch.bmm(q.mT, torch.matmul(q, probes)) - probes
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


@dataclass
class CholQR:
    """Outcome of :func:`cholesky_qr`: ``index``, the positions in the input batch of the matrices
    that succeeded, their Q (b' x m x k) and R (b' x k x k) in FP64, and the passes each took."""

    index: list[int]
    q: torch.Tensor
    r: torch.Tensor
    passes: list[int]


def _gram(a: torch.Tensor, plan: Plan) -> torch.Tensor:
    g = torch.empty((a.shape[0], a.shape[2], a.shape[2]), dtype=a.dtype, device=a.device)
    gram_upper(a, g, block=plan.block)
    return g


def _times_upper(a: torch.Tensor, x: torch.Tensor, plan: Plan) -> torch.Tensor:
    out = torch.empty((a.shape[0], a.shape[1], x.shape[2]), dtype=a.dtype, device=a.device)
    right_triangular(a, x, out, upper=True, block=plan.block)
    return out


def cholesky_qr(a: torch.Tensor, plan: Plan = DEFAULT_PLAN) -> CholQR:
    """QR of every matrix of ``a`` (b x m x k, m >= k, FP32) by CholeskyQR, see the module notes.

    Matrices that fail are left out of the result. Synchronises with the host twice (which
    matrices go on after each test), three times if any matrix takes the second pass.
    """
    a64 = a.to(torch.float64, memory_format=torch.contiguous_format)
    tight = tight_loss(a64.shape[-1])
    r, x, failed = cholesky_inverse(_gram(a64, plan), plan)
    alive = torch.nonzero(~failed).flatten()
    index = alive.tolist()
    if len(index) < a64.shape[0]:
        a64, r, x = a64[alive], r[alive], x[alive]
    q = _times_upper(a64, x, plan)
    loss = orthogonality_loss(q).tolist()
    passes = [1 if value <= tight else 0 for value in loss]

    redo = [i for i, value in enumerate(loss) if tight < value <= LOOSE]
    if redo:
        rows = torch.tensor(redo, device=a.device)
        q1 = q[rows]
        r2, x2, failed2 = cholesky_inverse(_gram(q1, plan), plan)
        q2 = _times_upper(q1, x2, plan)
        good = (~failed2 & (orthogonality_loss(q2) <= tight)).tolist()
        q[rows] = q2
        r[rows] = _times_upper(r2, r[rows], plan)
        for i, ok in zip(redo, good, strict=True):
            passes[i] = 2 if ok else 0

    ok = [i for i, p in enumerate(passes) if p > 0]
    if len(ok) < len(index):
        rows = torch.tensor(ok, dtype=torch.long, device=a.device)  # from an empty list: float
        q, r = q[rows], r[rows]
    return CholQR([index[i] for i in ok], q, r, [passes[i] for i in ok])
