import torch
from helper import ORIGIN


def custom_kernel(data):
    if ORIGIN != "other_helper":
        raise RuntimeError(f"got another contestant's helper module: {ORIGIN}")
    return torch.geqrf(data)
