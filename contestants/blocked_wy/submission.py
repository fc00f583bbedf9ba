"""Reference contestant: blocked Householder QR with compact-WY trailing updates (reference_kernels.blocked_wy).

Runs from the repository; ``python -m reference_kernels.export blocked_wy -o FILE`` writes the same
kernel as one self-contained file for the contest.
"""

from task import input_t, output_t

from reference_kernels.blocked_wy import qr


def custom_kernel(data: input_t) -> output_t:
    return qr(data)
