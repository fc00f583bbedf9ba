"""The interpreter shortcut of reference_kernels/interpreter.py: same bits, the language restored."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton (see test_blocked_wy)

import triton
import triton.language as tl

from reference import generate_input
from reference_kernels import cholesky_orhr
from reference_kernels.blocked_wy import Plan, qr
from reference_kernels.interpreter import INSTALLED_MARK, VERIFIED, install

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter's own shortcut")

REPO = Path(__file__).resolve().parents[1]
ON_ITS_TRITON = triton.__version__.startswith(VERIFIED)
# The column steps made of helpers (pairs and one column at a time, whole matrices and blocked
# panels with their updates) and cholesky_orhr's kernels.
BLOCKED = Plan(nb=16, leaf=16, whole_max=0, two_columns=False)


def _factors() -> list[torch.Tensor]:
    a = generate_input(batch=2, n=40, cond=1, seed=40, case="nearcollinear")
    mixed = generate_input(batch=2, n=72, cond=1, seed=72, case="mixed")
    return [*qr(a), *qr(a, plan=BLOCKED, graph=False), *cholesky_orhr.qr(a), *qr(mixed)]


@pytest.mark.skipif(not ON_ITS_TRITON, reason="installed on the triton releases it was checked against only")
def test_it_is_installed_when_the_kernels_are_imported() -> None:
    from triton.runtime import interpreter

    assert install() is True
    assert interpreter._patch_lang.__name__ == "reusing_patch_lang"


def test_a_launch_leaves_the_language_as_it_found_it() -> None:
    names = ("sum", "where", "load", "reduce", "arange")
    before = {name: getattr(tl, name) for name in names}
    a = generate_input(batch=2, n=40, cond=1, seed=1)
    qr(a)
    assert {name: getattr(tl, name) for name in names} == before


@pytest.mark.slow
def test_the_kernels_give_the_same_bits_as_the_plain_interpreter(tmp_path: Path) -> None:
    """The same factors from a process where the shortcut is never installed (its marker set on
    Triton's own function first, so install() takes it as done)."""
    plain = tmp_path / "plain.pt"
    code = f"""
        import triton.runtime.interpreter as interpreter
        setattr(interpreter._patch_lang, {INSTALLED_MARK!r}, True)
        import torch
        from tests.test_interpreter import _factors
        assert interpreter._patch_lang.__name__ == "_patch_lang"
        torch.save(_factors(), {str(plain)!r})
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = torch.load(plain, weights_only=True)
    ours = _factors()
    assert len(ours) == len(theirs)
    assert all(torch.equal(x, y) for x, y in zip(ours, theirs, strict=True))
