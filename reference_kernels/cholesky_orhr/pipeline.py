"""The fixed-shape work of one call, with no host synchronisation inside a step: what ``qr.py``
captures in CUDA graphs. Every matrix gets a per-matrix status the host reads once, then only the
few matrices that need more (a second pass, the fallback) are touched again.

``structure`` classifies every matrix from one read (how many leading columns hold its non-zeros,
a zero column before a non-zero one, nothing below the diagonal) and gives the widest matrix the
Gram route takes. ``first_pass`` then runs one FP64 CholeskyQR pass over the first ``k`` columns
only (k >= that widest: a rankdef batch, whose trailing columns are zero, costs ~(k/n)^2 of a
dense one; zero columns inside the k are made harmless, see ``cholqr.py``) and the accuracy test.
``first_factors`` does ORHR on that Q and the output assembly, which also writes the triangular
route's answer (H = A, tau = 0) and the zero columns past k; it is skipped when no matrix needs it
(nearrank: the whole batch falls back). Matrices that need a second pass or the fallback get a
meaningless H there, overwritten later. ``second_pass`` does the second CholeskyQR pass, its test
and ORHR for a sub-batch, reading the first pass's Q and R.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch

from reference_kernels.cholesky_orhr.cholqr import LOOSE, cholesky_pass, orthogonality_loss, tight_loss, times_upper
from reference_kernels.cholesky_orhr.kernels import assemble, classify
from reference_kernels.cholesky_orhr.orhr import orhr
from reference_kernels.cholesky_orhr.plan import Plan

__all__ = ["FirstPass", "Route", "SecondPass", "Structure", "first_factors", "first_pass", "second_pass", "structure"]


class Route(IntEnum):
    """How one matrix was factored. After the first pass, CHOLESKY2 means "needs the second pass"."""

    TRIANGULAR = 0
    CHOLESKY = 1
    CHOLESKY2 = 2
    FALLBACK = 3


@dataclass
class Structure:
    """``structure``'s results per matrix: ``width`` (b, int64: 1 + last non-zero column), ``gap``
    (b, bool: a zero column before a non-zero one), ``triangular`` (b, bool: nothing below the
    diagonal); ``widest`` (0-dim int64): the largest width among the matrices that are neither."""

    width: torch.Tensor
    gap: torch.Tensor
    triangular: torch.Tensor
    widest: torch.Tensor


@dataclass
class FirstPass:
    """``first_pass``'s results: ``status`` (b, int8 Route), ``width`` (b, int32: 1 + last non-zero
    column, -1 for the triangular route), and the pass's Q (b x n x k) and R (b x k x k), FP64."""

    status: torch.Tensor
    width: torch.Tensor
    q: torch.Tensor
    r: torch.Tensor


@dataclass
class SecondPass:
    """``second_pass``'s H and tau for its sub-batch, and which of them passed the test (b', bool)."""

    h: torch.Tensor
    tau: torch.Tensor
    ok: torch.Tensor


def _dead_columns(width: torch.Tensor, k: int) -> torch.Tensor:
    """b x k bool: the columns at or past each matrix's width (exact zeros)."""
    return torch.arange(k, device=width.device) >= width[:, None]


def _factor(
    q: torch.Tensor, r: torch.Tensor, index: torch.Tensor, width: torch.Tensor, a: torch.Tensor, plan: Plan
) -> tuple[torch.Tensor, torch.Tensor]:
    """ORHR of Q (b x n x k, FP64, rounded to FP32) and the assembly of the b x n x n H and the b x n
    tau (``a[index]`` is read only where ``width`` < 0)."""
    w, tau_k, sign = orhr(q.to(torch.float32), plan)
    batch, n, _ = w.shape
    h = torch.empty((batch, n, n), dtype=w.dtype, device=w.device)
    tau = torch.empty((batch, n), dtype=w.dtype, device=w.device)
    assemble(w, r, sign, tau_k, index, width, a, h, tau)
    return h, tau


def structure(a: torch.Tensor) -> Structure:
    """Route flags and widths of every matrix of ``a`` (b x n x n), from one read of ``a``."""
    n = a.shape[-1]
    nonzero, below = classify(a)
    position = torch.arange(1, n + 1, device=a.device)
    width = torch.where(nonzero, position, 0).amax(dim=1)
    gap = (~nonzero & (position <= width[:, None])).any(dim=1)
    triangular = ~below.any(dim=1)
    widest = torch.where(triangular | gap, 0, width).amax()
    return Structure(width, gap, triangular, widest)


def first_pass(a: torch.Tensor, s: Structure, probes: torch.Tensor, k: int, plan: Plan) -> FirstPass:
    """FP64 CholeskyQR pass 1 over the first ``k`` columns of every matrix of ``a`` (b x n x n; k at
    least ``s.widest``) and its test; ``probes`` are k x PROBES."""
    width = s.width
    dead = _dead_columns(width, k)
    q, r, failed = cholesky_pass(a[:, :, :k].to(torch.float64).contiguous(), dead, plan)
    loss = orthogonality_loss(q, probes, ~dead)
    status = torch.where(loss <= tight_loss(width), int(Route.CHOLESKY), int(Route.CHOLESKY2))
    status = torch.where(failed | s.gap | ~(loss <= LOOSE), int(Route.FALLBACK), status)
    status = torch.where(s.triangular, int(Route.TRIANGULAR), status).to(torch.int8)
    width = torch.where(s.triangular, -1, width).to(torch.int32)
    return FirstPass(status, width, q, r)


def first_factors(first: FirstPass, a: torch.Tensor, plan: Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """(H, tau) of every matrix of ``a`` from ``first`` (final where its status is TRIANGULAR or
    CHOLESKY)."""
    index = torch.arange(a.shape[0], dtype=torch.int32, device=a.device)
    return _factor(first.q, first.r, index, first.width, a, plan)


def second_pass(first: FirstPass, index: torch.Tensor, probes: torch.Tensor, plan: Plan) -> SecondPass:
    """CholeskyQR pass 2 (on pass 1's Q), its test and ORHR for the matrices ``index`` (int64) of
    ``first``, none of them triangular; R = R2 R1. ``probes`` as for ``first_pass``."""
    q1 = first.q.index_select(0, index)
    width = first.width.index_select(0, index)
    dead = _dead_columns(width, q1.shape[-1])
    q, r2, failed = cholesky_pass(q1, dead, plan)
    ok = ~failed & (orthogonality_loss(q, probes, ~dead) <= tight_loss(width))
    r = times_upper(r2, first.r.index_select(0, index), plan)
    unused = torch.empty((1, 1, 1), dtype=torch.float32, device=q.device)  # no triangular matrix here
    h, tau = _factor(q, r, torch.zeros_like(width), width, unused, plan)
    return SecondPass(h, tau, ok)
