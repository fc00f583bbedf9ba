"""Our checker gives the published checker's verdict on every entry of the public corpus."""

from __future__ import annotations

import re
from functools import cache

import pytest
import torch

from reference import check, check_implementation, verdict
from tests.conftest import GOLDEN

DIAGNOSTICS = (
    "scaled_factor_residual",
    "scaled_reconstruction_residual",
    "scaled_triangular_residual",
    "scaled_orthogonality_residual",
)
# Absolute slacks (in the diagnostics' unit, n·eps; the gates are 20 and 100) under which two
# float32 materialisations of Q cannot be told apart. On the CPU, the blocked Q and LAPACK's
# differ by at most 0.05 on this corpus. Across devices the contest's own checker moves more:
# cuSOLVER's orgqr on an H200 gives an orthogonality of 1.10 where LAPACK gave 0.708 for the
# same exact factors (measured 2026-11-29), so GPU results are held to 0.5.
ROUNDING_LEVEL = 0.05
CROSS_DEVICE_ROUNDING_LEVEL = 0.5


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


@pytest.mark.parametrize("index", range(len(_entries())), ids=_ids())
def test_published_path_reproduces_verdict_and_message(index: int) -> None:
    entry = _entries()[index]
    passed, message = check(entry["A"], entry["output"], q_method="published")
    assert passed == entry["passed"]
    assert message == entry["message"]


@pytest.mark.parametrize("index", range(len(_entries())), ids=_ids())
def test_default_check_reproduces_verdict_and_message(index: int) -> None:
    """The default ("auto") path is what the evaluator uses; on the CPU it is the published one."""
    entry = _entries()[index]
    assert check_implementation(entry["A"], entry["output"]) == (entry["passed"], entry["message"])


@pytest.mark.parametrize("index", range(len(_entries())), ids=_ids())
def test_blocked_q_gives_same_verdict_and_close_diagnostics(index: int) -> None:
    entry = _entries()[index]
    v = verdict(entry["A"], entry["output"], q_method="blocked")
    assert v.passed == entry["passed"]
    if not v.passed:
        # Same gate, same worst matrix.
        assert v.message.split(":")[0] == entry["message"].split(":")[0]
        assert _matrix(v.message) == _matrix(entry["message"])
        return
    published = _published_numbers(entry["message"])
    for key in DIAGNOSTICS:
        ours, theirs = v.diagnostics[key], published[key]
        assert abs(ours - theirs) <= max(0.25 * abs(theirs), ROUNDING_LEVEL), key


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
        v = verdict(a, out, q_method=method)
        assert v.passed == entry["passed"], entry["variant"]
        if not v.passed:
            assert v.message.split(":")[0] == entry["message"].split(":")[0]
            assert _matrix(v.message) == _matrix(entry["message"])
        else:
            published = _published_numbers(entry["message"])
            for key in DIAGNOSTICS:
                slack = max(0.25 * abs(published[key]), CROSS_DEVICE_ROUNDING_LEVEL)
                assert abs(v.diagnostics[key] - published[key]) <= slack, (entry["variant"], key)
