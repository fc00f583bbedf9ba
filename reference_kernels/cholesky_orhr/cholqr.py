"""CholeskyQR with an FP64 first pass and a per-matrix accuracy test: A = Q R, Q orthonormal.

Pass 1 runs entirely in FP64: G = A^T A, G = R1^T R1, Q1 = A R1^-1. Its loss of orthogonality
grows like eps64 * kappa(A)^2 instead of eps32 * kappa(A)^2, so for well-conditioned matrices
(dense, band, clustered: observed max|Q1^T Q1 - I| ~ 1e-9) Q1 rounded to FP32 is already as
orthonormal as FP32 allows and pass 2 is skipped. The test is the next pass's own Gram matrix
G2 = Q1^T Q1 (FP64): max|G2 - I| <= ``TIGHT`` ends the matrix there; up to ``LOOSE`` it takes a
second FP64 pass (rowscale, most nearcollinear); beyond that, or when a Cholesky pivot is not
positive (nearrank, exactly dependent columns), the matrix is reported as failed for the caller to
route elsewhere. Every decision is made per matrix from its own numbers.

Cholesky and the triangular inverse are one recursion on column halves: the leaves are Triton
kernels, everything else is a batched product (cuBLAS), because cuSOLVER's batched Cholesky and
triangular solves run several times slower than a product of the same size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_kernels.cholesky_orhr.kernels import MAX_LEAF, cholesky_block, deviation_from_identity

__all__ = ["LOOSE", "TIGHT", "CholQR", "cholesky_inverse", "cholesky_qr", "split_point"]

# max|Q1^T Q1 - I| at or below which FP64 CholeskyQR's Q1 is final: FP32's own unit roundoff.
TIGHT = float(torch.finfo(torch.float32).eps)
# ... and up to which a second pass restores orthogonality (kappa(Q1)^2 <= 3, far inside FP64's
# reach); beyond it the first pass is not trusted at all.
LOOSE = 0.5


def split_point(lo: int, hi: int, leaf: int) -> int:
    """Where a recursion splits [lo, hi): a multiple of ``leaf`` near the middle, so that every
    leaf but the last is full-width."""
    return lo + leaf * -(-(hi - lo) // (2 * leaf))


def _cholesky_inverse(g: torch.Tensor, x: torch.Tensor, failed: torch.Tensor, lo: int, hi: int, leaf: int) -> None:
    """Recursive step of :func:`cholesky_inverse` on the diagonal block [lo, hi)."""
    if hi - lo <= leaf:
        cholesky_block(g, x, failed, lo, hi - lo)
        return
    mid = split_point(lo, hi, leaf)
    _cholesky_inverse(g, x, failed, lo, mid, leaf)
    x11 = x[:, lo:mid, lo:mid]
    r12 = torch.bmm(x11.mT, g[:, lo:mid, mid:hi])
    g[:, lo:mid, mid:hi] = r12
    g[:, mid:hi, lo:mid] = 0.0
    g[:, mid:hi, mid:hi] = torch.baddbmm(g[:, mid:hi, mid:hi], r12.mT, r12, alpha=-1.0)
    _cholesky_inverse(g, x, failed, mid, hi, leaf)
    x[:, lo:mid, mid:hi] = torch.bmm(x11, r12).bmm(x[:, mid:hi, mid:hi]).neg_()


def cholesky_inverse(g: torch.Tensor, leaf: int = MAX_LEAF) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(R, R^-1, failed) for every symmetric positive definite matrix of ``g`` (b x k x k), G = R^T R.

    ``g`` is overwritten by R (upper triangular, zeros below). ``failed`` (b, bool) marks matrices
    where a pivot was not positive; their R and R^-1 are finite but meaningless.
    """
    if not 1 <= leaf <= MAX_LEAF:
        raise ValueError(f"leaf must be in [1, {MAX_LEAF}], got {leaf}")
    g = g.contiguous()
    x = torch.zeros_like(g)
    failed = torch.zeros(g.shape[0], dtype=torch.int32, device=g.device)
    _cholesky_inverse(g, x, failed, 0, g.shape[-1], leaf)
    return g, x, failed.bool()


@dataclass
class CholQR:
    """Outcome of :func:`cholesky_qr`: the rows ``index`` of the input batch that succeeded, their
    Q (b' x m x k) and R (b' x k x k) in FP64, and how many passes each took (1 or 2)."""

    index: torch.Tensor
    q: torch.Tensor
    r: torch.Tensor
    passes: torch.Tensor


def cholesky_qr(a: torch.Tensor, leaf: int = MAX_LEAF) -> CholQR:
    """QR of every matrix of ``a`` (b x m x k, m >= k, FP32) by CholeskyQR, see the module notes.

    Matrices that fail are left out of the result. Synchronises with the host three times (which
    matrices go on after each test), four if any needs the second pass.
    """
    a64 = a.to(torch.float64, memory_format=torch.contiguous_format)
    r, x, failed = cholesky_inverse(torch.bmm(a64.mT, a64), leaf)
    index = torch.nonzero(~failed).flatten()
    if index.numel() < a64.shape[0]:
        a64, r, x = a64[index], r[index], x[index]
    q = torch.bmm(a64, x)
    g2 = torch.bmm(q.mT, q)
    deviation = deviation_from_identity(g2)
    passes = torch.where(deviation <= TIGHT, 1, torch.where(deviation <= LOOSE, 2, 0)).to(torch.int8)

    redo = torch.nonzero(passes == 2).flatten()
    if redo.numel() > 0:
        r2, x2, failed2 = cholesky_inverse(g2[redo], leaf)
        q[redo] = torch.bmm(q[redo], x2)
        r[redo] = torch.bmm(r2, r[redo])
        passes[redo] = torch.where(failed2, 0, 2).to(torch.int8)

    ok = torch.nonzero(passes > 0).flatten()
    if ok.numel() < index.numel():
        index, q, r, passes = index[ok], q[ok], r[ok], passes[ok]
    return CholQR(index, q, r, passes)
