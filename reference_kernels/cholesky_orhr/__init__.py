"""Cholesky-based QR with Householder reconstruction: ``qr(a) -> (H, tau)`` (``torch.geqrf`` semantics).

FP64 CholeskyQR (one pass, a second one where the matrix's own accuracy test asks for it) gives an
orthonormal Q; an LU of Q - S (LAPACK xORHR_COL) turns it into compact Householder factors.
Matrices the Gram route cannot handle go to blocked Householder QR; see :mod:`.qr`.
``EXPORT_MODULES`` lists, in dependency order, the modules ``reference_kernels.export`` inlines
into a one-file contest submission, blocked_wy's (the fallback) first.
"""

from reference_kernels.blocked_wy import EXPORT_MODULES as _BLOCKED_WY_MODULES
from reference_kernels.cholesky_orhr.plan import Plan, default_plan
from reference_kernels.cholesky_orhr.qr import Route, clear_graphs, qr, qr_routed

EXPORT_MODULES = (
    *_BLOCKED_WY_MODULES,
    "reference_kernels.cholesky_orhr.kernels",
    "reference_kernels.cholesky_orhr.products",
    "reference_kernels.cholesky_orhr.plan",
    "reference_kernels.cholesky_orhr.cholqr",
    "reference_kernels.cholesky_orhr.orhr",
    "reference_kernels.cholesky_orhr.pipeline",
    "reference_kernels.cholesky_orhr.graphs",
    "reference_kernels.cholesky_orhr.qr",
)

__all__ = ["EXPORT_MODULES", "Plan", "Route", "clear_graphs", "default_plan", "qr", "qr_routed"]
