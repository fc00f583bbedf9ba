"""torch.geqrf with one knob, for the sweep's tests (the hook of evaluator/axes.py): ``sleep_ms``
sleeps on the host in every call, so a sweep over it has a variant that a report must call slower
than the kernel's own plan (no sleep); -1 is listed but refused by ``configure``."""

import time

import torch

PLAN_AXES = {"sleep_ms": (0, 5, 20, -1)}
_sleep_s = 0.0


def configure(sleep_ms: int = 0) -> None:
    global _sleep_s
    if sleep_ms < 0:
        raise ValueError(f"sleep_ms must not be negative, got {sleep_ms}")
    _sleep_s = sleep_ms / 1000


def custom_kernel(data):
    if _sleep_s:
        time.sleep(_sleep_s)
    return torch.geqrf(data)
