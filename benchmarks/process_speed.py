"""Is a case's speed a property of the process? The same case timed in several fresh processes.

``python -m benchmarks.process_speed [CONTESTANT] [--case 20x32] [--processes 8] [--pin]
[--shapes NAME] [--device auto|cpu|cuda] [--out PATH]`` starts one process after another; each
loads the contestant, times the case's first benchmark spec as a hardened worker's timer does
(L2 flush and device drain on CUDA, the host clock on the CPU; the case's inputs cycled per
repeat as the contest does) and reports where it ran: the CPU it started and ended on, that
CPU's NUMA node, and the GPU's. ``--pin`` binds process i to the i-th CPU it may use, to see
whether a fixed placement gives a fixed speed. On an H200 host the host-bound 20x32 case ran
at 21 to 45 us per call depending on the process (reports/h200/2026-12-01-20x32-between-processes.md);
this is the probe that asks whether placement explains it. Prints the table and, with
``--out``, writes it as Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tabulate import tabulate

from benchmarks.note import machine_line, publish

REPEATS = 60
DISCARDED = 10


def current_cpu() -> int:
    """The CPU this process last ran on (field 39 of ``/proc/self/stat``)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])


def cpu_node(cpu: int) -> str:
    """The NUMA node of ``cpu``, or '?' where the kernel does not say."""
    nodes = sorted(Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node[0-9]*"))
    return nodes[0].name.removeprefix("node") if nodes else "?"


def gpu_node() -> str:
    """The NUMA node of CUDA device 0's PCI slot, or '?'."""
    import torch

    props = torch.cuda.get_device_properties(0)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return "?"
    slot = f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    path = Path(f"/sys/bus/pci/devices/{slot}/numa_node")
    return path.read_text().strip() if path.is_file() else "?"


def _child(args: argparse.Namespace) -> int:
    """One process's measurement, printed as one JSON line."""
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    import torch

    from evaluator.contestant import contest_modules, load_kernel, resolve_contestant
    from evaluator.measure.timing import make_timer
    from evaluator.shapes import Timing, resolve_shapes
    from reference import generate_input

    device = torch.device(args.device)
    case = next(c for c in resolve_shapes(args.shapes).benchmarks if c.label == args.case)
    contestant = resolve_contestant(args.contestant)
    timer = make_timer(device)
    start_cpu = current_cpu()
    with contest_modules(contestant.path.parent):
        kernel = load_kernel(contestant)
        inputs = [generate_input(**case.with_seed(case.seed + 42 * (k + 1)).generator_args()).to(device)
                  for k in range(Timing().input_count(case))]
        for a in inputs:
            kernel(a)
        times = []
        for _ in range(REPEATS):
            measurement, _ = timer.time(lambda: [kernel(a) for a in inputs])
            times.append(measurement.elapsed_ns / len(inputs) / 1e3)
    kept = times[DISCARDED:]
    print(json.dumps({"cpu_start": start_cpu, "cpu_end": current_cpu(), "mean_us": statistics.mean(kept),
                      "median_us": statistics.median(kept)}))
    return 0


def _measure(args: argparse.Namespace, pin_cpu: int | None) -> dict[str, float | int]:
    command = [sys.executable, "-m", "benchmarks.process_speed", args.contestant, "--child", "--case", args.case,
               "--shapes", args.shapes, "--device", args.device]
    if pin_cpu is not None:
        command += ["--pin-cpu", str(pin_cpu)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"process_speed: a measuring process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contestant", nargs="?", default="blocked_wy")
    parser.add_argument("--case", default="20x32", help="a benchmark case's label in the shape set")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--pin", action="store_true", help="bind process i to the i-th CPU this one may use")
    parser.add_argument("--shapes", default=None, help="default: qr_v2 on a GPU, smoke on the CPU")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--out", type=Path, help="Markdown file to write the table to")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pin-cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.shapes = args.shapes or ("qr_v2" if args.device == "cuda" else "smoke")
    if args.child:
        return _child(args)

    allowed = sorted(os.sched_getaffinity(0))
    rows = []
    for i in range(args.processes):
        pin = allowed[i % len(allowed)] if args.pin else None
        result = _measure(args, pin)
        rows.append([i, "-" if pin is None else pin, f"{result['cpu_start']} -> {result['cpu_end']}",
                     cpu_node(int(result["cpu_start"])), f"{result['mean_us']:.2f}", f"{result['median_us']:.2f}"])
        print(f"process {i}: {rows[-1][4]} us per call on CPU {rows[-1][2]}", flush=True)
    table = tabulate(rows, headers=["process", "pinned to", "CPU (start -> end)", "CPU's node", "mean (us per call)",
                                    "median"], tablefmt="github")
    where = f"GPU's node {gpu_node()}; " if args.device == "cuda" else ""
    header = (f"{args.contestant} at {args.case} ({args.shapes}), {args.processes} fresh processes"
              f"{', pinned' if args.pin else ''}, mean of {REPEATS - DISCARDED} repeats after {DISCARDED}; "
              f"{where}{machine_line(args.device)}.")
    publish("Speed per process", header, table, "python -m benchmarks.process_speed", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
