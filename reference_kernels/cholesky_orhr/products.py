"""Batched products that skip the known-zero blocks of triangular and symmetric operands.

CholeskyQR and ORHR spend nearly all their time in products where one factor is triangular
(A R^-1, R2 R1, L^-1 B) or the result is symmetric (A^T A, Schur complements of a Gram matrix).
Full products there do twice the necessary work. Each helper here splits the triangular dimension
in two (at a multiple of ``block`` near the middle), recurses on the diagonal blocks and does the
one off-diagonal block as a plain product, until the operand is at most ``block`` wide: about half
the flops, in products that stay large enough for cuBLAS to run near peak.

Results are written into ``out`` (any view with unit stride along one of its last two
dimensions); ``out`` must not overlap the operands.
"""

from __future__ import annotations

import torch

__all__ = ["BLOCK", "gram_upper", "left_triangular", "right_triangular", "split_point"]

# Narrowest operand the helpers still split: below it a full product is cheaper than two launches.
BLOCK = 256


def split_point(lo: int, hi: int, block: int) -> int:
    """Where a recursion splits [lo, hi) (requires hi - lo > block): a multiple of ``block`` near
    the middle, so every piece but the last is a whole number of blocks."""
    return lo + block * -(-(hi - lo) // (2 * block))


def right_triangular(
    a: torch.Tensor, x: torch.Tensor, out: torch.Tensor, upper: bool, alpha: float = 1.0, block: int = BLOCK
) -> None:
    """out = alpha * a @ x for x triangular (upper or lower, b x k x k); x's other half is not read
    outside the diagonal blocks of width <= ``block``, which must hold zeros there."""
    k = x.shape[-1]
    if k <= block:
        out.baddbmm_(a, x, beta=0.0, alpha=alpha)
        return
    h = split_point(0, k, block)
    right_triangular(a[..., :h], x[:, :h, :h], out[..., :h], upper, alpha, block)
    right_triangular(a[..., h:], x[:, h:, h:], out[..., h:], upper, alpha, block)
    if upper:
        out[..., h:].baddbmm_(a[..., :h], x[:, :h, h:], alpha=alpha)
    else:
        out[..., :h].baddbmm_(a[..., h:], x[:, h:, :h], alpha=alpha)


def left_triangular(
    x: torch.Tensor, b: torch.Tensor, out: torch.Tensor, upper: bool, alpha: float = 1.0, block: int = BLOCK
) -> None:
    """out = alpha * x @ b for x triangular (upper or lower), as (b^T x^T)^T."""
    right_triangular(b.mT, x.mT, out.mT, not upper, alpha, block)


def gram_upper(a: torch.Tensor, out: torch.Tensor, beta: float = 0.0, alpha: float = 1.0, block: int = BLOCK) -> None:
    """out = beta * out + alpha * a^T a on the diagonal blocks (width <= ``block``) and the blocks
    above them; blocks below are left as they are (symmetric: never read by the consumers)."""
    k = a.shape[-1]
    if k <= block:
        out.baddbmm_(a.mT, a, beta=beta, alpha=alpha)
        return
    h = split_point(0, k, block)
    gram_upper(a[..., :h], out[:, :h, :h], beta, alpha, block)
    gram_upper(a[..., h:], out[:, h:, h:], beta, alpha, block)
    out[:, :h, h:].baddbmm_(a[..., :h].mT, a[..., h:], beta=beta, alpha=alpha)
