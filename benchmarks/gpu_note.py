"""One Markdown note per GPU benchmark: what was measured, on which GPU and versions, when."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from evaluator.environment import fingerprint


def machine_line() -> str:
    """The GPU, driver, torch, CUDA and triton this process runs on, and today's date."""
    env = fingerprint("cuda")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    return (f"{env.get('gpu_name')}, driver {env.get('driver_version')}, torch {env['torch']}, CUDA {env['cuda']}, "
            f"triton {env['triton']}, {stamp}")


def publish(title: str, header: str, table: str, command: str, out: Path | None) -> None:
    """Print the header and table; with ``out``, also write them as a Markdown note."""
    print(header)
    print(table)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"# {title}\n\n{header}\n\n{table}\n\nProduced by `{command}`.\n")
