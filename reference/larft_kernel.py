"""The triangular factor T of every reflector block of a batch, in one Triton launch.

:func:`reference.householder.triangles_from_gram` builds each block's T (LAPACK ``larft``, forward,
columnwise) by recursive doubling in torch: log2(k) rounds of small batched products, which on a
GPU cost more in launches and latency than in arithmetic (about 1.2 ms of a 7.1 ms Q product at
640x512 on an H200, block 64). Here one program per (matrix, block) holds that block's T in
registers and builds it by larft's column recurrence from the block's Gram matrix ``G = V^T V``::

    T[i, i] = tau_i,    T[:i, i] = -tau_i * T[:i, :i] @ G[:i, i]

so the whole batch takes a single launch (not yet timed on a GPU). A zero tau (an identity reflector, the padding of a
last block) gives a zero row and column, as in torch. Runs on CUDA, or on the CPU under
``TRITON_INTERPRET=1`` (the tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference.householder import KERNEL_MAX_BLOCK

__all__ = ["larft_triangles"]


@triton.jit
def _larft_kernel(gram, tau, t, NB: tl.constexpr):
    """T of block ``program_id(0)`` (the blocks of every matrix one after another): NB x NB
    row-major ``gram`` and ``t``, NB taus. Step i is one matrix-vector product on T's first i columns."""
    block = tl.program_id(0).to(tl.int64)  # int64 offsets: no batch size overflows them
    idx = tl.arange(0, NB)
    start = block * NB * NB
    # Only G's strict upper triangle is read (G[:i, i] for every i), so only it is loaded.
    upper = idx[:, None] < idx[None, :]
    g = tl.load(gram + start + idx[:, None] * NB + idx[None, :], mask=upper, other=0.0)
    tt = tl.zeros([NB, NB], dtype=t.dtype.element_ty)
    for i in range(NB):
        tau_i = tl.load(tau + block * NB + i)
        g_i = tl.sum(tl.where(idx[None, :] == i, g, 0.0), axis=1)  # G[:i, i], zero from row i on
        # Rows i: of T[:, :i] are zero, so this column is zero below its diagonal entry.
        column = -tau_i * tl.sum(tt * g_i[None, :], axis=1)
        column = tl.where(idx == i, tau_i, column)
        tt = tl.where(idx[None, :] == i, column[:, None], tt)
    tl.store(t + start + idx[:, None] * NB + idx[None, :], tt)


def larft_triangles(gram: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """:func:`reference.householder.triangles_from_gram` as one launch: ``gram`` is ``... x k x k``
    (``V^T V`` of each block), ``tau`` is ``... x k``, both float32 or both float64, k a power of
    two up to :data:`reference.householder.KERNEL_MAX_BLOCK` (one block's T lives in registers)."""
    k = gram.shape[-1]
    if k & (k - 1) or not 1 <= k <= KERNEL_MAX_BLOCK:
        raise ValueError(f"block width must be a power of two from 1 to {KERNEL_MAX_BLOCK}, got {k}")
    if gram.shape[-2] != k or tau.shape != gram.shape[:-1]:
        raise ValueError(f"gram must be ... x k x k and tau ... x k, got {tuple(gram.shape)} and {tuple(tau.shape)}")
    if gram.dtype not in (torch.float32, torch.float64) or tau.dtype != gram.dtype:
        raise ValueError(f"gram and tau must both be float32 or both float64, got {gram.dtype} and {tau.dtype}")
    g = gram.reshape(-1, k, k).contiguous()
    t = torch.empty_like(g)
    if g.shape[0]:
        warps = 4 if k >= 32 else 1  # a warp holds a 16 x 16 block's T whole (not tuned on a GPU yet)
        _larft_kernel[(g.shape[0],)](g, tau.reshape(-1, k).contiguous(), t, NB=k, num_warps=warps)
    return t.view(gram.shape)
