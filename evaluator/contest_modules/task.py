"""The contest's ``task`` module for qr_v2: the kernel's input and output types."""

from __future__ import annotations

from typing import TypedDict, TypeVar

import torch

input_t = TypeVar("input_t", bound=torch.Tensor)
output_t = TypeVar("output_t", bound=tuple[torch.Tensor, torch.Tensor])


class TestSpec(TypedDict, total=False):
    batch: int
    n: int
    cond: int
    seed: int
    case: str
