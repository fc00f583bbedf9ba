"""Host time against GPU time per call of the reference kernels on one case: is the case host-bound?

One GPU run. For each kernel, calls on the case's inputs are issued back to back without
synchronising, as the contest's timed loop does: the host's microseconds per call (``perf_counter``)
and the CUDA events' (what the contest measures) come out alike when the host is the bottleneck;
the GPU time of the call's kernels (``torch.profiler``) says how much faster the call could be.

    python benchmarks/host_time.py [--case 20x32] [--calls 50]

The last lines are a table: per kernel, host us per call, events us per call, GPU kernel us per call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference import generate_input

Kernel = Callable[[torch.Tensor], object]


def kernels() -> dict[str, Kernel]:
    from reference_kernels.blocked_wy import qr as blocked_wy
    from reference_kernels.cholesky_orhr import qr as cholesky_orhr

    return {"blocked_wy": blocked_wy, "cholesky_orhr": cholesky_orhr, "geqrf": torch.geqrf}


def per_call(kernel: Kernel, inputs: list[torch.Tensor], rounds: int = 20) -> tuple[float, float]:
    """Median over ``rounds`` of (host us, events us) per call, each round one call per input."""
    host, events = [], []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        for a in inputs:
            kernel(a)
        end.record()
        host.append((time.perf_counter() - began) * 1e6 / len(inputs))
        torch.cuda.synchronize()
        events.append(start.elapsed_time(end) * 1e3 / len(inputs))
    return statistics.median(host), statistics.median(events)


def gpu_time(kernel: Kernel, inputs: list[torch.Tensor]) -> float:
    """GPU us per call: every kernel the calls ran, summed (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for a in inputs:
            kernel(a)
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == cuda) / len(inputs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="20x32", help="BATCHxN, dense inputs (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=50, help="calls per round, one input each (default: 50)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("host_time needs a CUDA GPU", file=sys.stderr)
        return 2
    batch, n = (int(v) for v in args.case.split("x"))
    inputs = [generate_input(batch, n, 1, 1000 + i).cuda() for i in range(args.calls)]
    rows = []
    for name, kernel in kernels().items():
        for a in inputs[:5]:  # compile, capture, warm up
            kernel(a)
        host, events = per_call(kernel, inputs)
        rows.append([name, f"{host:.1f}", f"{events:.1f}", f"{gpu_time(kernel, inputs):.1f}"])
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | {args.case}, {args.calls} calls per round")
    print(tabulate(rows, headers=["kernel", "host us/call", "events us/call", "GPU kernels us/call"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
