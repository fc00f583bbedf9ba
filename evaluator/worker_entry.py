"""A worker's first statements: close the process to other processes, then run :mod:`evaluator.worker`.

A worker may be started before its stage and wait while another stage's kernel runs
(:mod:`evaluator.workers`). Had it stayed dumpable through its imports (seconds), that kernel could
open its memory through ``/proc`` and be the next stage's worker before that worker's sandbox
closes. Non-dumpable from here (``execve`` resets the flag, so the process sets it on itself), it is
out of reach of a kernel without ``CAP_SYS_PTRACE``, which every worker gives up before it imports
one. This module imports nothing heavy before the switch: ``tests/test_workers.py`` checks that.
"""

from __future__ import annotations

import sys

from evaluator.hardening.sandbox.prctl import set_dumpable


def main() -> int:
    set_dumpable(False)
    from evaluator.worker import main as worker_main  # only once the process is closed

    return worker_main()


if __name__ == "__main__":
    sys.exit(main())
