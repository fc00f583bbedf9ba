"""Householder reconstruction (LAPACK xORHR_COL) of an orthonormal Q: Q S = H_1 ... H_k (first k
columns), as an LU without pivoting of Q - S.

With S = diag(s) and Q - S = L U (L unit lower m x k, U upper k x k), set V = L and
T = -U S V1^-T (V1 the top k x k block of V). Then I - V T V1^T = Q S on the first k columns, so
(V, diag(T)) are compact Householder factors of Q S, and A = Q R = (Q S)(S R): R_out = S R.
diag(T)_j = -U_jj s_j; choosing s_j = -sign(d_j) for the running diagonal d_j makes
|U_jj| = 1 + |d_j| >= 1 (every pivot is at least 1, so the LU is stable without pivoting) and
tau_j = 1 + |d_j|. For a square Q the last running diagonal is +-1 and its reflector would have
an empty tail; taking s = sign(d) there gives U ~ 0 and tau = 0, geqrf's convention.

The LU is a recursion on column halves, in place: the left half is factored (its leaves by the
Triton kernel, with the panel below each leaf a product with U^-1), U12 = L11^-1 A12 and the Schur
complement A22 - L21 U12 are batched products, then the right half. L11^-1 is assembled on the way
up from the leaves' inverses, only where a parent needs it.
"""

from __future__ import annotations

import torch

from reference_kernels.cholesky_orhr.kernels import lu_block
from reference_kernels.cholesky_orhr.plan import DEFAULT_PLAN, Plan
from reference_kernels.cholesky_orhr.products import left_triangular, right_triangular, split_point

__all__ = ["orhr"]


def _lu(
    w: torch.Tensor, linv: torch.Tensor, tau: torch.Tensor, sign: torch.Tensor,
    lo: int, hi: int, need_inverse: bool, plan: Plan,
) -> None:
    """Factor columns [lo, hi) of ``w`` (rows lo..m) in place; with ``need_inverse`` also leave
    L^-1 of the diagonal block [lo, hi) in ``linv``."""
    batch, m, k = w.shape
    if hi - lo <= plan.leaf:
        uinv = lu_block(w, linv, tau, sign, lo, hi - lo, zero_last=m == k and hi == k)
        if hi < m:
            w[:, hi:, lo:hi] = torch.bmm(w[:, hi:, lo:hi], uinv)
        return
    mid = split_point(lo, hi, plan.leaf)
    _lu(w, linv, tau, sign, lo, mid, True, plan)
    linv11 = linv[:, lo:mid, lo:mid]
    u12 = torch.empty((batch, mid - lo, hi - mid), dtype=w.dtype, device=w.device)
    left_triangular(linv11, w[:, lo:mid, mid:hi], u12, upper=False, block=plan.block)
    w[:, lo:mid, mid:hi] = u12
    # Operands and result share w, so the Schur complement goes through a fresh tensor.
    w[:, mid:, mid:hi] = torch.baddbmm(w[:, mid:, mid:hi], w[:, mid:, lo:mid], u12, alpha=-1.0)
    _lu(w, linv, tau, sign, mid, hi, need_inverse, plan)
    if need_inverse:
        l21 = torch.empty((batch, hi - mid, mid - lo), dtype=w.dtype, device=w.device)
        left_triangular(linv[:, mid:hi, mid:hi], w[:, mid:hi, lo:mid], l21, upper=False, block=plan.block)
        right_triangular(l21, linv11, linv[:, mid:hi, lo:mid], upper=False, alpha=-1.0, block=plan.block)


def orhr(q: torch.Tensor, plan: Plan = DEFAULT_PLAN) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, tau, s) for every Q of ``q`` (b x m x k, m >= k, orthonormal columns, FP32).

    ``q`` (if contiguous, else a contiguous copy) is overwritten and returned as W: strictly below
    the diagonal the Householder vectors (unit diagonal implied), on and above it U (of no further
    use). ``tau`` and ``s`` are b x k; the caller's R becomes diag(s) R.
    """
    q = q.contiguous()
    batch, _, k = q.shape
    linv = torch.zeros((batch, k, k), dtype=q.dtype, device=q.device)
    tau = torch.empty((batch, k), dtype=q.dtype, device=q.device)
    sign = torch.empty((batch, k), dtype=q.dtype, device=q.device)
    _lu(q, linv, tau, sign, 0, k, False, plan)
    return q, tau, sign
