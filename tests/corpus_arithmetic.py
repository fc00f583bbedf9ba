"""Which published messages this machine's arithmetic can reproduce.

The published checker prints its residuals to three figures, and they come from
``torch.linalg.householder_product``: LAPACK's float32 ``orgqr``, whose rounding follows the
instruction set the BLAS library picks for the CPU and its thread count (MKL on torch's x86
wheels: one thread, two or three, four and more round differently). The same checker code
elsewhere prints other last digits for the same verdict, so an exact message is only defined
together with that rounding. We name it by a fingerprint, a hash of the Q that
``householder_product`` gives on every corpus entry the checker reaches it with, and keep the
published checker's messages per fingerprint and thread count (recorded by
``tests/golden/record_published_messages.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

RECORDS = Path(__file__).parent / "golden" / "published_messages"


@dataclass(frozen=True)
class Record:
    """The published checker's (verdict, message) per corpus entry, on one rounding."""

    name: str
    fingerprint: str
    threads: int
    messages: tuple[tuple[bool, str], ...]


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Torch's CPU thread count (LAPACK's too) set to ``count`` for the block."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    """A hash of ``householder_product`` here, at torch's thread count, on every entry that reaches it."""
    digest = hashlib.sha256()
    for entry in entries:
        if _reaches_q(entry["A"], entry["output"]):
            q = torch.linalg.householder_product(*entry["output"])
            digest.update(q.contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def records(corpus_size: int) -> list[Record]:
    """Every recorded message set, each checked to cover a corpus of ``corpus_size`` entries."""
    found = []
    for path in sorted(RECORDS.glob("*.json")):
        record = json.loads(path.read_text())
        messages = tuple((bool(p), str(m)) for p, m in record["messages"])
        if len(messages) != corpus_size:
            raise ValueError(f"{path}: {len(messages)} messages for a corpus of {corpus_size} entries")
        found.append(Record(path.stem, record["fingerprint"], int(record["threads"]), messages))
    return found


def fingerprint_at(entries: list[dict], threads: int) -> str:
    """This machine's fingerprint with torch on ``threads`` threads."""
    with torch_threads(threads):
        return fingerprint(entries)
