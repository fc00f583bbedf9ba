"""Materialise Q from compact Householder factors ``(H, tau)`` for a whole batch at once.

``torch.linalg.householder_product`` (what the contest's checker calls) loops over the batch
on CUDA, one cuSOLVER call per matrix, which makes it the slowest part of a check once a
kernel is fast (0.24 s at 640x512 on an H200, docs/problem.md §6). Here Q is built as LAPACK's
blocked ``orgqr`` does, but for the whole batch in a fixed number of launches: reflectors are
grouped in blocks of ``block`` columns, each block becomes ``I - V T V^T`` (compact WY, T as
in ``larft``), and the blocks are applied right to left with batched matrix products.
Everything stays in float32, as in the contest.
"""

from __future__ import annotations

import torch

__all__ = ["default_block", "householder_q", "triangles_from_gram", "wy_triangles"]


def default_block(n: int) -> int:
    """Reflectors per block: a power of two near n/8, at most 128.

    Small blocks at small n keep the rounding of Q close to LAPACK's unblocked ``org2r``
    (what the contest's checker runs there); wide ones keep the products large at big n. The cap
    of 128: the fastest block on an H200 at every size timed, with the corpus's verdicts unchanged
    (reports/h200/2026-12-03-checker-q-variants.md).
    """
    target = max(1, min(128, n // 8))
    return 1 << (target.bit_length() - 1)


def wy_triangles(v: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Upper-triangular T of each block, with ``H_1 ... H_k = I - V T V^T`` (larft, forward).

    ``v`` is ``... x m x k`` (unit lower trapezoidal), ``tau`` is ``... x k``, k a power of two.
    """
    return triangles_from_gram(v.transpose(-1, -2) @ v, tau)


def triangles_from_gram(gram: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """:func:`wy_triangles` from the blocks' ``V^T V`` (``... x k x k``) instead of V.

    T is built by recursive doubling, ``T = [[T1, -T1 (V1^T V2) T2], [0, T2]]``: log2(k) rounds,
    each merging every pair of neighbouring diagonal blocks at once. A zero tau (an identity
    reflector) simply gives a zero row and column.
    """
    k = gram.shape[-1]
    if k & (k - 1):
        raise ValueError(f"block width must be a power of two, got {k}")
    lead = gram.shape[:-2]
    t = torch.diag_embed(tau).contiguous()
    width = 1
    while width < k:
        pairs = k // (2 * width)
        shape = (*lead, pairs, 2 * width, pairs, 2 * width)
        # Diagonal blocks of size 2*width, as views: ... x pairs x (2w) x (2w).
        t_blocks = t.view(shape).diagonal(dim1=-4, dim2=-2).movedim(-1, -3)
        g_blocks = gram.view(shape).diagonal(dim1=-4, dim2=-2).movedim(-1, -3)
        t1 = t_blocks[..., :width, :width]
        t2 = t_blocks[..., width:, width:]
        t_blocks[..., :width, width:] = -(t1 @ g_blocks[..., :width, width:] @ t2)
        width *= 2
    return t


def _unit_lower(h: torch.Tensor, width: int) -> torch.Tensor:
    """V: the strictly lower triangle of ``h`` with a unit diagonal, zero-padded to ``width``
    columns, in two passes over memory (the triangle, then the diagonal in place)."""
    batch, n, _ = h.shape
    if width == n:
        v = torch.tril(h, diagonal=-1)
    else:
        v = h.new_zeros(batch, n, width)
        v[:, :, :n] = torch.tril(h, diagonal=-1)
    v[:, :, :n].diagonal(dim1=-2, dim2=-1).fill_(1.0)
    return v


def _padded_tau(tau: torch.Tensor, width: int) -> torch.Tensor:
    """tau with zeros (identity reflectors) appended up to ``width`` reflectors per matrix."""
    extra = width - tau.shape[-1]
    return tau if extra == 0 else torch.cat([tau, tau.new_zeros(tau.shape[0], extra)], dim=1)


def _identity_like(h: torch.Tensor) -> torch.Tensor:
    """A batch of identities shaped as ``h``, row-major whatever h's layout (geqrf's is column-major)."""
    q = h.new_zeros(h.shape)
    q.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    return q


def _block_gram(v: torch.Tensor, j0: int, block: int) -> torch.Tensor:
    """``V_j^T V_j`` of the block of columns ``j0 .. j0 + block`` from its rows ``j0:`` only (those
    above are zero), as one strided batched product (no copy of V)."""
    vj = v[:, j0:, j0:j0 + block]
    return torch.bmm(vj.transpose(1, 2), vj)


def householder_q(h: torch.Tensor, tau: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """Q = H_1 H_2 ... H_n for each matrix of the batch, in float32 (the contract of
    ``torch.linalg.householder_product(h, tau)`` for square ``h``)."""
    if h.dim() != 3 or h.shape[-1] != h.shape[-2]:
        raise ValueError(f"h must be batch x n x n, got {tuple(h.shape)}")
    if tau.shape != h.shape[:2]:
        raise ValueError(f"tau must be {tuple(h.shape[:2])}, got {tuple(tau.shape)}")
    batch, n, _ = h.shape
    block = default_block(n) if block is None else block
    if block <= 0 or block & (block - 1):
        raise ValueError(f"block must be a positive power of two, got {block}")

    blocks = -(-n // block)
    width = blocks * block  # pad with identity reflectors (v = 0, tau = 0) to whole blocks
    v = _unit_lower(h, width)
    tau_padded = _padded_tau(tau, width)
    # Rows above a block's first column are zero in V, so each block's Gram matrix (for T) and
    # product below need only the rows from that column down.
    v_blocks = v.view(batch, n, blocks, block).movedim(2, 1)  # batch x blocks x n x block (a view)
    grams = torch.stack([_block_gram(v, j * block, block) for j in range(blocks)], dim=1)
    t = triangles_from_gram(grams, tau_padded.view(batch, blocks, block))

    q = _identity_like(h)
    # Right to left: Q <- (I - V T V^T) Q touches rows and columns j0: only, since every block
    # to the right has already been folded into Q[j0:, j0:].
    for j in reversed(range(blocks)):
        j0 = j * block
        vj = v_blocks[:, j, j0:, :]
        trailing = q[:, j0:, j0:]
        trailing.baddbmm_(vj, t[:, j] @ (vj.transpose(-1, -2) @ trailing), alpha=-1.0)  # in place, no temporary
    return q
