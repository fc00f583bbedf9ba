"""One Markdown note per benchmark: what was measured, on which machine and versions, when."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from evaluator.environment import fingerprint


def machine_line(device: str = "cuda") -> str:
    """The GPU (driver, CUDA) or the CPU this process measures on, torch and triton, and today's date."""
    env = fingerprint(device)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    if device == "cuda":
        machine = f"{env.get('gpu_name')}, driver {env.get('driver_version')}, torch {env['torch']}, CUDA {env['cuda']}"
    else:
        machine = f"{env.get('cpu')} ({env.get('cpu_count')} CPUs), torch {env['torch']}"
    return f"{machine}, triton {env['triton']}, {stamp}"


def publish(title: str, header: str, table: str, command: str, out: Path | None) -> None:
    """Print the header and table; with ``out``, also write them as a Markdown note."""
    print(header)
    print(table)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"# {title}\n\n{header}\n\n{table}\n\nProduced by `{command}`.\n")
