"""Blocked Householder QR with compact-WY trailing updates: ``qr(a) -> (H, tau)`` (``torch.geqrf`` semantics).

``qr`` takes any batch (a sub-batch gathered by index included); see :mod:`.qr` for the knobs and
for ``graph=False``, which callers with data-dependent sub-batch sizes should pass.
``EXPORT_MODULES`` lists, in dependency order, the modules ``reference_kernels.export`` inlines
into a one-file contest submission; packages building on this one start their list with it.
"""

from reference_kernels.blocked_wy.qr import DEFAULT_PLANS, Plan, clear_graphs, default_plan, qr

EXPORT_MODULES = (
    "reference_kernels.blocked_wy.launch",
    "reference_kernels.blocked_wy.source",
    "reference_kernels.blocked_wy.column_steps",
    "reference_kernels.blocked_wy.kernels",
    "reference_kernels.blocked_wy.gram_panel",
    "reference_kernels.blocked_wy.split_tf32",
    "reference_kernels.blocked_wy.products",
    "reference_kernels.blocked_wy.lookahead",
    "reference_kernels.blocked_wy.gram_lookahead",
    "reference_kernels.blocked_wy.tail",
    "reference_kernels.blocked_wy.qr",
)

__all__ = ["DEFAULT_PLANS", "EXPORT_MODULES", "Plan", "clear_graphs", "default_plan", "qr"]
