"""The helpers of the contest's ``utils`` module that submissions import."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def set_seed(seed: int = 42) -> None:
    """Seed Python's, NumPy's and torch's global generators (CUDA included)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def get_device(use_cuda: bool = True) -> torch.device:
    """CUDA when asked for and present, else the CPU."""
    return torch.device("cuda" if use_cuda and torch.cuda.is_available() else "cpu")


def clear_l2_cache() -> None:
    """Evict the L2 cache by writing 256 MiB, as the contest's runner does between repeats."""
    if torch.cuda.is_available():
        torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda").fill_(42)


class DeterministicContext:
    """Run a block with deterministic cuDNN/cuBLAS settings, restoring them afterwards."""

    def __enter__(self) -> DeterministicContext:
        self._cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
        self._workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True)
        return self

    def __exit__(self, *exc: object) -> None:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = self._cudnn
        if self._workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = self._workspace
        torch.use_deterministic_algorithms(False)
