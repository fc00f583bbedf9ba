"""Batched compact Householder QR by CholeskyQR + Householder reconstruction, routed per matrix.

Every matrix is routed on its own structure and its own numbers:

- ``TRIANGULAR``: nothing below the diagonal (upper, diagonal, zero). geqrf's answer is exact and
  free: every reflector is the identity, H = A, tau = 0.
- ``CHOLESKY`` / ``CHOLESKY2``: CholeskyQR (one or two FP64 passes, ``cholqr.py``), then ORHR
  (``orhr.py``). A matrix whose only zero columns are trailing (rankdef) is, for geqrf, the QR of
  its leading k non-zero columns followed by identity reflectors; it goes this way with width k,
  so exact zero columns never reach a Gram matrix.
- ``FALLBACK``: blocked Householder QR, for a zero column followed by non-zero ones, and for
  matrices whose CholeskyQR broke down or failed the accuracy test (nearrank: kappa ~ 1e8).

Matrices of one route and width are processed as one batch. Small matrices (n <= ``Plan.whole_max``)
first try the whole algorithm in one kernel (``kernels.whole_qr``: one FP64 CholeskyQR pass, the
exact orthogonality test, ORHR); only those it declines take the routes above. The routing
decisions synchronise with the host a few times per call; all work is on the current stream and
complete on return.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from enum import IntEnum

import torch

from reference_kernels.blocked_wy import qr as blocked_wy_qr
from reference_kernels.cholesky_orhr.cholqr import cholesky_qr, tight_loss
from reference_kernels.cholesky_orhr.kernels import assemble, classify, whole_qr
from reference_kernels.cholesky_orhr.orhr import orhr
from reference_kernels.cholesky_orhr.plan import Plan, default_plan

__all__ = ["Route", "qr", "qr_routed"]


class Route(IntEnum):
    """How one matrix was factored (see the module notes)."""

    TRIANGULAR = 0
    CHOLESKY = 1
    CHOLESKY2 = 2
    FALLBACK = 3


@contextmanager
def _call_state(device: torch.device) -> Iterator[None]:
    """The process state a call needs, restored afterwards: FP32 products at full precision whatever
    the process chose (TF32 fails the factor gate), and on CUDA the input's device as the current
    one (Triton launches on the current device)."""
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    saved = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = "ieee"
        with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
            yield
    finally:
        for b, value in zip(backends, saved, strict=True):
            b.fp32_precision = value


def _structure(a: torch.Tensor) -> tuple[list[bool], list[bool], list[int]]:
    """Per matrix: (upper triangular, a zero column before a non-zero one, 1 + last non-zero column)."""
    nonzero, below = classify(a)
    n = a.shape[-1]
    position = torch.arange(1, n + 1, device=a.device)
    width = torch.where(nonzero, position, 0).amax(dim=1)
    gap = (~nonzero & (position <= width[:, None])).any(dim=1)
    triangular = ~below.any(dim=1)
    flags = torch.stack([triangular.long(), gap.long(), width]).cpu()
    return flags[0].bool().tolist(), flags[1].bool().tolist(), flags[2].tolist()


def _cholesky_orhr(
    a: torch.Tensor, index: list[int], k: int, plan: Plan, h: torch.Tensor, tau: torch.Tensor, routes: torch.Tensor
) -> list[int]:
    """Factor matrices ``index`` of ``a`` through their first k columns into ``h``/``tau``; returns
    the indices that failed the CholeskyQR tests."""
    sub = a if len(index) == a.shape[0] else a[torch.tensor(index, device=a.device)]
    result = cholesky_qr(sub[:, :, :k], plan)
    done = [index[i] for i in result.index]
    if done:
        w, tau_k, sign = orhr(result.q.to(torch.float32), plan)
        assemble(w, result.r, sign, tau_k, torch.tensor(done, device=a.device), h, tau)
        routes[done] = torch.tensor(result.passes, dtype=routes.dtype)
    done_set = set(done)
    return [i for i in index if i not in done_set]


def _route(
    a: torch.Tensor, rows: list[int], plan: Plan, h: torch.Tensor, tau: torch.Tensor, routes: torch.Tensor
) -> None:
    """Route matrices ``rows`` of ``a`` by structure and numbers; write their factors into ``h`` and
    ``tau`` and their routes into ``routes``."""
    sub = a if len(rows) == a.shape[0] else a[torch.tensor(rows, device=a.device)]
    triangular, gap, width = _structure(sub)
    groups: dict[int, list[int]] = {}
    fallback: list[int] = []
    upper: list[int] = []
    for i, row in enumerate(rows):
        if triangular[i]:
            upper.append(row)
        elif gap[i]:
            fallback.append(row)
        else:
            groups.setdefault(width[i], []).append(row)
    for k, index in groups.items():
        fallback += _cholesky_orhr(a, index, k, plan, h, tau, routes)
    if fallback:
        index = torch.tensor(sorted(fallback), device=a.device)
        # A gathered sub-batch whose size varies from call to call: no CUDA graphs.
        h[index], tau[index] = blocked_wy_qr(a[index], graph=False)
    if upper:
        routes[upper] = Route.TRIANGULAR
        index = torch.tensor(upper, device=a.device)
        h[index] = a[index]
        tau[index] = 0.0


def qr_routed(a: torch.Tensor, plan: Plan | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(H, tau, routes): :func:`qr` plus each matrix's :class:`Route` (a CPU int8 tensor)."""
    if a.dim() != 3 or a.shape[1] != a.shape[2] or a.dtype != torch.float32:
        raise ValueError(f"expected a batch x n x n float32 tensor, got {tuple(a.shape)} {a.dtype}")
    a = a.contiguous()
    batch, n, _ = a.shape
    plan = plan or default_plan(batch, n)
    h = torch.empty_like(a)
    tau = torch.empty((batch, n), dtype=a.dtype, device=a.device)
    routes = torch.full((batch,), int(Route.FALLBACK), dtype=torch.int8)
    if a.numel() == 0:
        return h, tau, routes
    with _call_state(a.device):
        rows = list(range(batch))
        if n <= plan.whole_max:
            done = whole_qr(a, h, tau, tight_loss(n)).cpu()
            routes[done] = Route.CHOLESKY
            rows = torch.nonzero(~done).flatten().tolist()
        if rows:
            _route(a, rows, plan, h, tau, routes)
    return h, tau, routes


def qr(a: torch.Tensor, plan: Plan | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Compact Householder QR of every matrix of ``a`` (b x n x n float32), ``torch.geqrf`` semantics.

    Returns fresh tensors (H b x n x n, tau b x n); ``a`` is not modified. ``plan``: see :class:`Plan`
    (default: :func:`default_plan` for the batch and size).
    """
    h, tau, _ = qr_routed(a, plan)
    return h, tau
