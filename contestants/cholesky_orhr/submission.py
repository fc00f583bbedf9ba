"""Reference contestant: CholeskyQR + Householder reconstruction (reference_kernels.cholesky_orhr).

Runs from the repository; ``python -m reference_kernels.export cholesky_orhr -o FILE`` writes the
same kernel as one self-contained file for the contest.
"""

from task import input_t, output_t

from reference_kernels.cholesky_orhr import qr


def custom_kernel(data: input_t) -> output_t:
    return qr(data)
