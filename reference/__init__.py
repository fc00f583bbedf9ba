"""The qr_v2 problem: input generator, checker and reference kernel, as the contest defines them.

Contest submissions that ``from reference import ...`` get these same names.
"""

from __future__ import annotations

import torch

from reference.checker import Verdict, check, check_implementation, verdict
from reference.inputs import CASES, MIXED_PROFILES, default_device, generate_input

__all__ = [
    "CASES",
    "MIXED_PROFILES",
    "Verdict",
    "check",
    "check_implementation",
    "default_device",
    "generate_input",
    "ref_kernel",
    "verdict",
]


def ref_kernel(data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The contest's reference solution: LAPACK-convention ``geqrf``."""
    return torch.geqrf(data)
