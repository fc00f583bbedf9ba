"""Reference contestant kernels: the two algorithm families that decided the qr_v2 contest.

- :mod:`reference_kernels.blocked_wy` — blocked Householder QR with compact-WY trailing updates.
- :mod:`reference_kernels.cholesky_orhr` — Cholesky-based QR with Householder reconstruction.

Each exposes ``qr(A) -> (H, tau)`` with ``torch.geqrf`` semantics; ``contestants/<name>/`` wraps
it as a submission.
"""

from reference_kernels.interpreter import install as _lighter_interpreter

_lighter_interpreter()  # a no-op unless TRITON_INTERPRET=1 under a triton it was checked against (interpreter.py)
