"""blocked_wy with H handed back in LAPACK's column-major layout, as torch.geqrf returns it: an
honest, fast contestant whose hand-over copies H back transposing, which rule parent-clock's
allowance must cover (a slow geqrf hides a dear hand-over behind its long claims; this does not)."""

import torch

from reference_kernels.blocked_wy import qr


def custom_kernel(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, tau = qr(data)
    return h.mT.contiguous().mT, tau
