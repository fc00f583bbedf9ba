"""Reference contestant: CholeskyQR + Householder reconstruction (reference_kernels.cholesky_orhr).

Runs from the repository; ``python -m reference_kernels.export cholesky_orhr -o FILE`` writes the
same kernel as one self-contained file for the contest. ``PLAN_AXES`` and ``configure`` are its
knobs for ``qrbench sweep`` (evaluator/axes.py); unconfigured, ``qr`` picks its own plan.
"""

from task import input_t, output_t

from reference_kernels.cholesky_orhr import qr
from reference_kernels.cholesky_orhr.knobs import PLAN_AXES, configure, configured_plan

__all__ = ["PLAN_AXES", "configure", "custom_kernel"]


def custom_kernel(data: input_t) -> output_t:
    return qr(data, configured_plan(data.shape[0], data.shape[-1]))
