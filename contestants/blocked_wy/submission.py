"""Reference contestant: blocked Householder QR with compact-WY trailing updates (reference_kernels.blocked_wy).

Runs from the repository; ``python -m reference_kernels.export blocked_wy -o FILE`` writes the same
kernel as one self-contained file for the contest. ``PLAN_AXES`` and ``configure`` are its knobs
for ``qrbench sweep`` (evaluator/axes.py); unconfigured, ``qr`` picks its own plan per size.
"""

from task import input_t, output_t

from reference_kernels.blocked_wy import qr
from reference_kernels.blocked_wy.knobs import PLAN_AXES, configure, configured_plan

__all__ = ["PLAN_AXES", "configure", "custom_kernel"]


def custom_kernel(data: input_t) -> output_t:
    return qr(data, plan=configured_plan(data.shape[-1]))
