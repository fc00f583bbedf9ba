"""torch.geqrf plus a host sleep on every call: a correct contestant that a report must call
slower than geqrf. The sleep is QRBENCH_SLOWED_MS milliseconds (default 20; 0 makes it plain
geqrf), so one contestant can be saved fast and compared slow under the same test ids."""

import os
import time

import torch

_SLEEP_S = float(os.environ.get("QRBENCH_SLOWED_MS", "20")) / 1000


def custom_kernel(data):
    time.sleep(_SLEEP_S)
    return torch.geqrf(data)
