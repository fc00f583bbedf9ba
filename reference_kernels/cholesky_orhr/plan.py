"""The knobs of one factorisation, in one place (``benchmarks/orhr_dev.py`` sweeps them)."""

from __future__ import annotations

from dataclasses import dataclass

from reference_kernels.cholesky_orhr.kernels import DEFAULT_LEAF, MAX_LEAF, MAX_WHOLE
from reference_kernels.cholesky_orhr.products import BLOCK

__all__ = ["DEFAULT_PLAN", "Plan", "default_plan"]

# batch * n^3 below which a call is bound by host launch time rather than GPU work when launched
# eagerly: about 4 flops per unit, so 1e10 is ~1 ms of products at ~50 TFLOP/s, against ~100-200
# launches. Kept for the graphed path until orhr_dev.py's leaf sweep says otherwise.
_HOST_BOUND_WORK = 1e10


@dataclass(frozen=True)
class Plan:
    """- ``leaf``: width of the diagonal blocks the Triton kernels factor (Cholesky and LU leaves).
    - ``block``: narrowest operand the block-skipping products of ``products.py`` still split.
    - ``whole_max``: matrices with n <= whole_max first try the one-kernel path (0: never).
    - ``graph``: on CUDA, replay the fixed-shape passes as CUDA graphs (False: launch them eagerly,
      to compare or profile).
    """

    leaf: int = DEFAULT_LEAF
    block: int = BLOCK
    whole_max: int = MAX_WHOLE
    graph: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.leaf <= MAX_LEAF:
            raise ValueError(f"leaf must be in [1, {MAX_LEAF}], got {self.leaf}")
        if self.block < 1:
            raise ValueError(f"block must be positive, got {self.block}")
        if not 0 <= self.whole_max <= MAX_WHOLE:
            raise ValueError(f"whole_max must be in [0, {MAX_WHOLE}], got {self.whole_max}")


DEFAULT_PLAN = Plan()


def default_plan(batch: int, n: int) -> Plan:
    """The plan ``qr`` uses when given none. Small problems (40 x 352 and below) are bound by the host:
    the widest leaf and unsplit products give the fewest launches. Large ones are bound by products
    and leaf latency: 32-wide leaves run several programs per SM, and products split down to 256
    skip the zero halves of triangular operands."""
    if batch * n**3 <= _HOST_BOUND_WORK:
        return Plan(leaf=MAX_LEAF, block=max(n, 1))
    return DEFAULT_PLAN
