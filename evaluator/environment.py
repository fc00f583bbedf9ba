"""The environment fingerprint stored with every result, so figures are never compared blind.

Fields (all optional except ``device`` and the versions):
- ``device``: "cuda" or "cpu"; ``gpu_name``, ``sm_count``, ``compute_capability``,
  ``gpu_memory_bytes``, ``l2_bytes`` from the device properties;
- ``driver_version``, ``sm_clock_mhz``, ``mem_clock_mhz``, ``sm_clock_max_mhz``: from
  ``nvidia-smi`` when it answers (clocks at the moment of the reading);
- ``cpu``, ``cpu_count``, ``hostname``, ``platform``;
- ``python``, ``torch``, ``cuda``, ``triton``, ``numpy``: versions;
- ``git_commit``, ``git_dirty``: the qrbench checkout the run came from;
- ``source_sha256``: qrbench's own Python sources as this process found them (:func:`source_digest`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from evaluator.hardening.sandbox.landlock import landlock_abi

__all__ = ["digest_of_sources", "fingerprint", "git_state", "gpu_key", "source_digest"]

_REPO = Path(__file__).resolve().parents[1]
# The packages whose code decides a run's inputs, verdicts, timings and the reference kernels.
_SOURCE_PACKAGES = ("evaluator", "reference", "reference_kernels")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(args: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=cwd, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> dict[str, Any]:
    """The commit of the qrbench checkout and whether tracked files differ from it."""
    commit = _run(["git", "rev-parse", "HEAD"], cwd=_REPO)
    if commit is None:
        return {}
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_REPO)
    return {"git_commit": commit, "git_dirty": bool(dirty)}


def digest_of_sources(root: Path, packages: tuple[str, ...] = _SOURCE_PACKAGES) -> str:
    """sha256 over every ``*.py`` file of ``packages`` under ``root``: each file's path relative to
    ``root``, then its bytes, in path order."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def source_digest() -> str:
    """The digest of qrbench's own sources, taken once per process: it names the code a run
    measured with where git cannot (a copied tree without ``.git``, git metadata that trails the
    files, an installed package), so two results files with one digest ran the same evaluator,
    checker and reference kernels."""
    return digest_of_sources(_REPO)


def _nvidia_smi(index: int) -> dict[str, Any]:
    fields = "driver_version,clocks.sm,clocks.mem,clocks.max.sm"
    out = _run(["nvidia-smi", f"--id={index}", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    if not out:
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    keys = ("driver_version", "sm_clock_mhz", "mem_clock_mhz", "sm_clock_max_mhz")
    info: dict[str, Any] = {}
    for key, value in zip(keys, values, strict=False):
        info[key] = int(value) if value.isdigit() else value
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: torch.device | str) -> dict[str, Any]:
    """Describe the machine, device and software a run measures on."""
    device = torch.device(device)
    env: dict[str, Any] = {
        "device": device.type,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _version("triton"),
        "numpy": _version("numpy"),
        # 0: the OS refuses no write or signal of a worker's own (docs/hardening.md, Landlock)
        "landlock_abi": landlock_abi(),
        **git_state(),
        "source_sha256": source_digest(),
    }
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        env.update(
            gpu_name=props.name,
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
            gpu_memory_bytes=props.total_memory,
            l2_bytes=getattr(props, "L2_cache_size", None),
            **_nvidia_smi(index),
        )
    return env


def gpu_key(env: dict[str, Any]) -> str:
    """What must match for two results to be comparable: the GPU model, or the CPU."""
    if env.get("device") == "cuda":
        return f"{env.get('gpu_name')} (sm {env.get('compute_capability')})"
    return f"CPU: {env.get('cpu')}"
