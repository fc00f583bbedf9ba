"""The knobs of one factorisation, in one place (``qrbench sweep cholesky_orhr`` sweeps them: knobs.py)."""

from __future__ import annotations

from dataclasses import dataclass

from reference_kernels.cholesky_orhr.kernels import DEFAULT_LEAF, MAX_LEAF, MAX_WHOLE
from reference_kernels.cholesky_orhr.products import BLOCK

__all__ = ["DEFAULT_PLAN", "Plan", "default_plan"]


@dataclass(frozen=True)
class Plan:
    """- ``leaf``: width of the diagonal blocks the Triton kernels factor (Cholesky and LU leaves).
    - ``block``: narrowest operand the block-skipping products of ``products.py`` still split.
    - ``whole_max``: matrices with n <= whole_max first try the one-kernel path (0: never).
    - ``graph``: on CUDA, replay the fixed-shape passes as CUDA graphs (False: launch them eagerly,
      to compare or profile).
    - ``second_pass_min``: the fewest matrices worth a second CholeskyQR pass. Pass 2 and ORHR are
      a chain of dependent launches whose time hardly depends on how many matrices go through it;
      when fewer need it, they join the fallback's sub-batch instead (blocked_wy, one chain).
    """

    leaf: int = DEFAULT_LEAF
    block: int = BLOCK
    whole_max: int = MAX_WHOLE
    graph: bool = True
    second_pass_min: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.leaf <= MAX_LEAF:
            raise ValueError(f"leaf must be in [1, {MAX_LEAF}], got {self.leaf}")
        if self.block < 1:
            raise ValueError(f"block must be positive, got {self.block}")
        if not 0 <= self.whole_max <= MAX_WHOLE:
            raise ValueError(f"whole_max must be in [0, {MAX_WHOLE}], got {self.whole_max}")
        if self.second_pass_min < 1:
            raise ValueError(f"second_pass_min must be positive, got {self.second_pass_min}")


# Rule: the fastest geomean of `qrbench sweep cholesky_orhr --axis second_pass_min=1,32,128` over the
# cases with matrices that may need a second CholeskyQR pass (the 60x1024 cases and 640x512 mixed),
# under the evaluator's protocol on the H200 (2026-12-01):
# reports/h200/2026-12-01-cholesky_orhr-sweep-second_pass_min-qr_v2.json.gz. A second pass for 128
# matrices or more, fewer going to blocked_wy: geomean 16.02 ms, against 16.79 for 32 and 18.21 for 1
# (640x512 mixed, 86 matrices to pass twice: 24.98 ms against 29.42 and 30.20). The first sweep
# (docs/kernel-log.md §C2) found the same; the committed ranked results of this plan:
# reports/h200/2026-11-30-cholesky_orhr-leaderboard-qr_v2.json.gz (7.850 ms ranked).
DEFAULT_PLAN = Plan(second_pass_min=128)


def default_plan(batch: int, n: int) -> Plan:
    """The plan ``qr`` uses when given none: one plan for every size. Rule: the fastest plan per
    qr_v2 benchmark size in ``benchmarks/orhr_dev.py`` (since replaced by ``qrbench sweep``) on an
    H200 (2026-11-29; its output was never committed: what remains is quoted here and in
    docs/kernel-log.md §C2): 32-wide leaves with products split down to 256, graphed, at every size
    but 20x32 (0.16 ms against 0.12 ms eager), and widening leaves for small, host-bound problems
    lost once the passes were graphed. Committed results of this plan:
    reports/h200/2026-11-30-cholesky_orhr-leaderboard-qr_v2.json.gz."""
    return DEFAULT_PLAN
