"""Our checker gives the published checker's verdict on every entry of the public corpus."""

from __future__ import annotations

import re
from functools import cache

import pytest
import torch

from reference import check, check_implementation, verdict
from tests.conftest import GOLDEN
from tests.corpus_arithmetic import Record, fingerprint_at, records, torch_threads

DIAGNOSTICS = (
    "scaled_factor_residual",
    "scaled_reconstruction_residual",
    "scaled_triangular_residual",
    "scaled_orthogonality_residual",
)
# Absolute slacks (in the diagnostics' unit, n·eps; the gates are 20 and 100) under which two
# float32 materialisations of Q cannot be told apart. On the CPU, the blocked Q and LAPACK's
# differ by at most 0.05 on this corpus. Across arithmetics the contest's own checker moves more:
# cuSOLVER's orgqr on an H200 gives an orthogonality of 1.10 where LAPACK gave 0.708 for the
# same exact factors (measured 2026-11-29), and on an AVX-512 Xeon (MKL 2024.2, two threads) the
# published checker's n=2 factor residual reads 0.451 where the corpus's machine printed 0.339
# (tests/golden/published_messages/3d03a9a37ee17cc9.json), so other arithmetics are held to 0.5.
ROUNDING_LEVEL = 0.05
CROSS_ARITHMETIC_ROUNDING_LEVEL = 0.5


@cache
def _entries() -> list[dict]:
    return torch.load(GOLDEN / "check_corpus_public.pt", weights_only=True)["entries"]


def _ids() -> list[str]:
    return [f"{i}-{e['spec'].get('case', 'dense')}-n{e['spec']['n']}-{e['variant']}" for i, e in enumerate(_entries())]


def _published_numbers(message: str) -> dict[str, float]:
    return {k: float(v) for k, v in (kv.split("=") for kv in message.split("; "))}


def _matrix(message: str) -> str | None:
    m = re.search(r"matrix=(\d+)", message)
    return m[1] if m else None


@cache
def _records() -> list[Record]:
    return records(len(_entries()))


@cache
def _fingerprint_at(threads: int) -> str:
    return fingerprint_at(_entries(), threads)


def _reproduced(record: Record) -> Record:
    """The record, where this machine's LAPACK rounds as its machine's did at its thread count; else a skip."""
    here = _fingerprint_at(record.threads)
    if here != record.fingerprint:
        pytest.skip(
            f"the published messages of {record.name}.json need its LAPACK rounding; at {record.threads} "
            f"threads this machine's fingerprint is {here}. Verdicts and diagnostics are still checked; "
            "record this machine's with tests/golden/record_published_messages.py"
        )
    return record


def _record_ids() -> list[str]:
    return [f"{r.name}@{r.threads}t" for r in _records()]


def _assert_same_diagnostics(v, entry: dict, level: float) -> None:
    """Same verdict; a failure names the corpus's gate and matrix, a pass its diagnostics within level."""
    assert v.passed == entry["passed"]
    if not v.passed:
        assert v.message.split(":")[0] == entry["message"].split(":")[0]
        assert _matrix(v.message) == _matrix(entry["message"])
        return
    published = _published_numbers(entry["message"])
    for key in DIAGNOSTICS:
        ours, theirs = v.diagnostics[key], published[key]
        assert abs(ours - theirs) <= max(0.25 * abs(theirs), level), key


@pytest.mark.parametrize("index", range(len(_entries())), ids=_ids())
def test_published_path_gives_verdict_and_close_diagnostics(index: int) -> None:
    """On any machine: the corpus's verdict, gate and matrix, and its figures up to another LAPACK's rounding."""
    entry = _entries()[index]
    _assert_same_diagnostics(verdict(entry["A"], entry["output"], q_method="published"), entry,
                             CROSS_ARITHMETIC_ROUNDING_LEVEL)


@pytest.mark.parametrize("record", _records(), ids=_record_ids())
def test_published_path_reproduces_every_recorded_message(record: Record) -> None:
    """Where a record's rounding is reproduced here: every message the same to the character."""
    record = _reproduced(record)
    with torch_threads(record.threads):
        ours = [check(e["A"], e["output"], q_method="published") for e in _entries()]
    assert _differences(ours, record) == []


@pytest.mark.parametrize("record", _records(), ids=_record_ids())
def test_default_check_reproduces_every_recorded_message(record: Record) -> None:
    """The default ("auto") path is what the evaluator uses; on the CPU it is the published one."""
    record = _reproduced(record)
    with torch_threads(record.threads):
        ours = [check_implementation(e["A"], e["output"]) for e in _entries()]
    assert _differences(ours, record) == []


def _differences(ours: list[tuple[bool, str]], record: Record) -> list[str]:
    return [f"{name}: ours {mine!r}, published {theirs!r}"
            for name, mine, theirs in zip(_ids(), ours, record.messages, strict=True) if mine != theirs]


def test_every_record_keeps_the_corpus_verdicts_and_gates() -> None:
    """A record is the published checker's on the corpus's inputs: only printed figures may differ."""
    assert _records()
    for record in _records():
        assert [p for p, _ in record.messages] == [e["passed"] for e in _entries()], record.name
        for (_, message), entry in zip(record.messages, _entries(), strict=True):
            assert message.split(":")[0].split("=")[0] == entry["message"].split(":")[0].split("=")[0]


@pytest.mark.parametrize("index", range(len(_entries())), ids=_ids())
def test_blocked_q_gives_same_verdict_and_close_diagnostics(index: int) -> None:
    entry = _entries()[index]
    _assert_same_diagnostics(verdict(entry["A"], entry["output"], q_method="blocked"), entry, ROUNDING_LEVEL)


def test_corpus_covers_passes_and_every_kind_of_failure() -> None:
    messages = [e["message"] for e in _entries() if not e["passed"]]
    assert any(e["passed"] for e in _entries())
    for fragment in ("R - Q.T @ A is too large", "Q is not orthogonal enough", "contains NaN or Inf",
                     "dtype must be", "shape must be", "output must be a tuple"):
        assert any(fragment in m for m in messages), fragment


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["published", "fast"])
def test_cuda_checker_gives_the_corpus_verdicts(method: str) -> None:
    """On the GPU the published path runs cuSOLVER and the fast path batched products: both
    must give every corpus verdict, and name the same gate and matrix on a failure."""
    for entry in _entries():
        a = entry["A"].cuda()
        out = entry["output"]
        if isinstance(out, tuple):
            out = tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in out)
        _assert_same_diagnostics(verdict(a, out, q_method=method), entry, CROSS_ARITHMETIC_ROUNDING_LEVEL)
