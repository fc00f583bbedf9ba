"""Run a kernel's compile-for-sm_90 test in a fresh process without the Triton interpreter.

Once ``TRITON_INTERPRET=1`` has run a kernel, Triton cannot compile in that process, so under the
interpreter such a test re-runs itself in a child with the interpreter off and ``flag`` set (the
test module reads ``flag`` to import its kernels for compiling rather than skip without a GPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["rerun_compiled"]


def rerun_compiled(test_file: str, test_name: str, flag: str) -> bool:
    """Under the interpreter, run ``test_file::test_name`` in a child with it off and assert it
    passed, returning True; return False (run the test here) when the interpreter is off."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {flag: "1"}
    test = f"{Path(test_file).resolve()}::{test_name}"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        env=env, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return True
