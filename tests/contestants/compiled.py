"""An honest kernel built with torch.compile: the library factorises, an inductor-generated
kernel (Triton on a GPU, C++ on the CPU) writes the outputs. It must pass every rule: inductor
compiles in the worker's scratch directory and may start compile workers through subprocess."""

import torch
from task import input_t, output_t


@torch.compile
def _finish(h: torch.Tensor, tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return h * 1.0, tau + 0.0


def custom_kernel(data: input_t) -> output_t:
    return _finish(*torch.geqrf(data))
