"""What a container costs per second on Modal, and so what a ranking is likely to cost.

Modal bills a container by the second for its GPU, its CPU cores and its memory. The GPU rates
below are modal.com/pricing's list prices as transcribed on 2026-05-25 in the README of
github.com/api-evangelist/modal-com ("GPU Pricing"); the H100 figure ($0.001097/s) also matches
techbytes.app's reading of modal.com/pricing on 2026-05-07. They leave out region and
non-preemptible multipliers, plan fees and credits. Prices change: pass ``--gpu-price`` to bill
at another rate, or for a GPU type not listed (``B200+``, a bare ``A100``).
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluator.cloud import container

__all__ = ["PRICE_SOURCE", "ContainerPrice", "container_price"]

PRICE_SOURCE = "modal.com/pricing list prices as of 2026-05-25, via github.com/api-evangelist/modal-com"
GPU_USD_PER_S = {
    "B200": 0.001736,
    "H200": 0.001261,
    "H100": 0.001097,
    "RTX-PRO-6000": 0.000842,
    "A100-80GB": 0.000694,
    "A100-40GB": 0.000583,
    "L40S": 0.000542,
    "A10": 0.000306,
    "L4": 0.000222,
    "T4": 0.000164,
}
CPU_USD_PER_CORE_S = 0.0000131
MEMORY_USD_PER_GIB_S = 0.00000222


@dataclass(frozen=True)
class ContainerPrice:
    """One container's rate: ``gpu_usd_per_s`` for all its GPUs, plus its CPU cores and memory."""

    gpu: str
    gpu_usd_per_s: float
    source: str

    @property
    def host_usd_per_s(self) -> float:
        return container.CPU_CORES * CPU_USD_PER_CORE_S + container.MEMORY_MIB / 1024 * MEMORY_USD_PER_GIB_S

    @property
    def usd_per_s(self) -> float:
        return self.gpu_usd_per_s + self.host_usd_per_s

    def describe(self) -> str:
        return (f"{self.gpu}: ${self.gpu_usd_per_s:.6f}/s GPU + ${self.host_usd_per_s:.6f}/s for "
                f"{container.CPU_CORES:g} CPU cores and {container.MEMORY_MIB // 1024} GiB "
                f"= ${self.usd_per_s:.6f}/s per container ({self.source})")


def container_price(gpu: str, gpu_usd_per_s: float | None = None) -> ContainerPrice | None:
    """The rate of a container with Modal GPU request ``gpu`` (``B200``, ``H100!``, ``H200:2``),
    at ``gpu_usd_per_s`` per GPU when given, else at the listed price; None if none is known."""
    name, _, count = gpu.upper().partition(":")
    gpus = int(count) if count.isdigit() else 1
    if gpu_usd_per_s is not None:
        return ContainerPrice(gpu, gpu_usd_per_s * gpus, "--gpu-price")
    listed = GPU_USD_PER_S.get(name.rstrip("!"))  # "H100!" is an H100 that is never upgraded
    return None if listed is None else ContainerPrice(gpu, listed * gpus, PRICE_SOURCE)
