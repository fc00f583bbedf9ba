"""The knobs of one factorisation, in one place (``benchmarks/orhr_dev.py`` sweeps them)."""

from __future__ import annotations

from dataclasses import dataclass

from reference_kernels.cholesky_orhr.kernels import DEFAULT_LEAF, MAX_LEAF
from reference_kernels.cholesky_orhr.products import BLOCK

__all__ = ["DEFAULT_PLAN", "Plan"]


@dataclass(frozen=True)
class Plan:
    """- ``leaf``: width of the diagonal blocks the Triton kernels factor (Cholesky and LU leaves).
    - ``block``: narrowest operand the block-skipping products of ``products.py`` still split.
    """

    leaf: int = DEFAULT_LEAF
    block: int = BLOCK

    def __post_init__(self) -> None:
        if not 1 <= self.leaf <= MAX_LEAF:
            raise ValueError(f"leaf must be in [1, {MAX_LEAF}], got {self.leaf}")
        if self.block < 1:
            raise ValueError(f"block must be positive, got {self.block}")


DEFAULT_PLAN = Plan()
