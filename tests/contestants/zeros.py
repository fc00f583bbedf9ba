import torch


def custom_kernel(data):
    return torch.zeros_like(data), torch.zeros(data.shape[:2], device=data.device)
