"""Operating-system containment of a worker (issue #17): what a kernel cannot reach or leave behind.

Each module has one job: :mod:`.prctl` (Linux process switches), :mod:`.children` (kill what a
stage left running), :mod:`.scratch` (the worker's only writable directory and environment),
:mod:`.audit` (the worker's audit hook), :mod:`.landlock` (writes outside the worker's folders
and signals to processes it did not start, refused by the operating system), :mod:`.snapshot`
(what a stage changed in the project).

The parent, around each stage::

    scratch = Scratch.for_contestant(contestant.sha256); scratch.reset_tmp(); set_dumpable(False)
    snapshot = ProjectSnapshot.take(files=[shapes.path])
    with contained_children() as swept, no_bytecode():  # spawn with env=worker_env(env, scratch)
        ...  # run the worker and wait for it
    changed = snapshot.changes(); snapshot.restore(changed)  # then report swept.killed, changed

The worker, after its own imports and before the kernel's::

    set_dumpable(False); drop_ptrace_capability()
    confine([scratch_dir, Path("/dev/shm"), handover_folder], [Path("/dev/null")], signals=True)
    refusals = install_audit_hook([scratch_dir])
"""

from evaluator.hardening.sandbox.audit import EXIT_UNREPORTED, RULE, install_audit_hook
from evaluator.hardening.sandbox.children import SweepReport, contained_children, sweep
from evaluator.hardening.sandbox.prctl import (
    drop_ptrace_capability,
    has_ptrace_capability,
    is_child_subreaper,
    is_dumpable,
    set_child_subreaper,
    set_dumpable,
)
from evaluator.hardening.sandbox.scratch import Scratch, parent_cache, scratch_root, worker_env
from evaluator.hardening.sandbox.snapshot import Change, ProjectSnapshot, no_bytecode, project_paths

__all__ = [
    "EXIT_UNREPORTED",
    "RULE",
    "Change",
    "ProjectSnapshot",
    "Scratch",
    "SweepReport",
    "contained_children",
    "drop_ptrace_capability",
    "has_ptrace_capability",
    "install_audit_hook",
    "is_child_subreaper",
    "is_dumpable",
    "no_bytecode",
    "parent_cache",
    "project_paths",
    "scratch_root",
    "set_child_subreaper",
    "set_dumpable",
    "sweep",
    "worker_env",
]
