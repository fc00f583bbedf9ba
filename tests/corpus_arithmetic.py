"""Which published messages this machine's arithmetic can reproduce.

The published checker prints its residuals to three figures, and they come from
``torch.linalg.householder_product``: LAPACK's float32 ``orgqr``, whose rounding follows the
instruction set the BLAS library picks for the CPU (MKL on torch's x86 wheels). The same checker
code on another CPU prints other last digits for the same verdict, so an exact message is only
defined together with the machine's rounding. We name that rounding by a fingerprint, a hash of the
Q that ``householder_product`` gives on every corpus entry the checker reaches it with, and keep the
published checker's messages per fingerprint (recorded by ``tests/golden/record_published_messages.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

RECORDS = Path(__file__).parent / "golden" / "published_messages"


def _reaches_q(a: torch.Tensor, output: object) -> bool:
    """Whether the published checker gets as far as materialising Q for this output."""
    if not (isinstance(output, tuple) and len(output) == 2):
        return False
    h, tau = output
    return (
        isinstance(h, torch.Tensor) and isinstance(tau, torch.Tensor)
        and h.dtype == tau.dtype == torch.float32
        and tuple(h.shape) == tuple(a.shape) and tuple(tau.shape) == tuple(a.shape[:-1])
        and bool(torch.isfinite(h).all()) and bool(torch.isfinite(tau).all())
    )


def fingerprint(entries: list[dict]) -> str:
    """A hash of this machine's ``householder_product`` on every corpus entry that reaches it."""
    digest = hashlib.sha256()
    for entry in entries:
        if _reaches_q(entry["A"], entry["output"]):
            q = torch.linalg.householder_product(*entry["output"])
            digest.update(q.contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def recorded_messages(entries: list[dict], print_: str) -> list[tuple[bool, str]] | None:
    """The published checker's (verdict, message) per entry on machines of this fingerprint, or None."""
    for path in sorted(RECORDS.glob("*.json")):
        record = json.loads(path.read_text())
        if record["fingerprint"] != print_:
            continue
        messages = [(bool(p), str(m)) for p, m in record["messages"]]
        if len(messages) != len(entries):
            raise ValueError(f"{path}: {len(messages)} messages for a corpus of {len(entries)} entries")
        return messages
    return None
