import sys

import torch


def custom_kernel(data):
    for _ in range(64):
        sys.stdout.write("x" * (1 << 16) + "\n")  # 4 MiB per call
    return torch.geqrf(data)
