"""The worker's OS containment (evaluator/hardening/sandbox): each test mounts one of issue #17's attacks,
or one thing an honest kernel does, against the real mechanism (processes, /proc, audit hooks)."""

from __future__ import annotations

import dis
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from evaluator.hardening.sandbox import (
    EXIT_UNREPORTED,
    ProjectSnapshot,
    Scratch,
    contained_children,
    drop_ptrace_capability,
    has_ptrace_capability,
    install_audit_hook,
    is_child_subreaper,
    is_dumpable,
    no_bytecode,
    set_dumpable,
    worker_env,
)
from evaluator.hardening.sandbox.children import children
from evaluator.hardening.sandbox.landlock import WRITES_ABI, landlock_abi

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's containment is Linux's"),
    pytest.mark.alone,  # real attacks on processes, /proc and files (tests/machine_share.py)
]

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534


def _python(code: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                          timeout=timeout, cwd="/")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- descendants die with the worker ---------------------------------------------------------

ESCAPE = """
    import os, sys, time
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write, f"{os.getpid()}\\n".encode())
            time.sleep(120)
        os._exit(0)
    print(os.read(read, 64).decode().strip(), flush=True)
"""


def test_a_double_forked_setsid_grandchild_is_swept() -> None:
    with contained_children() as report:
        worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(ESCAPE)], stdout=subprocess.PIPE, text=True,
                                  start_new_session=True)
        assert worker.stdout is not None
        grandchild = int(worker.stdout.readline())  # the grandchild holds stdout open: no communicate()
        worker.wait(timeout=30)
        worker.stdout.close()
        assert _alive(grandchild), "the escape did not outlive its worker"
    assert report.subreaper
    assert is_child_subreaper()
    assert grandchild in [pid for pid, _ in report.killed]
    assert "killed" in report.describe()
    assert not _alive(grandchild)  # killed and reaped (a zombie would still answer)


def test_the_sweep_spares_children_from_before_the_stage() -> None:
    earlier = subprocess.Popen(["sleep", "30"])
    try:
        with contained_children() as report:
            pass
        assert report.killed == []
        assert _alive(earlier.pid)
        assert earlier.pid in children()
    finally:
        earlier.kill()
        earlier.wait()


# -- other processes' descriptors ------------------------------------------------------------

def _wait_ok(pid: int) -> bool:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _pipe_opened(prepare_target: Callable[[], None], prepare_attacker: Callable[[], None]) -> bool:
    """Whether one forked process can open, through ``/proc/<pid>/fd``, a pipe another holds;
    each runs its ``prepare_*`` first (a uid, the dumpable flag, a capability). Fork without
    exec: python itself may not be readable by the uid a side switches to."""
    ready_r, ready_w = os.pipe()
    target = os.fork()
    if target == 0:  # the "parent" being attacked: holds a pipe of its own
        try:
            prepare_target()
            _, pipe_w = os.pipe()
            os.write(ready_w, f"{pipe_w:4d}".encode())
            time.sleep(10)
        finally:
            os._exit(0)
    pipe_w = int(os.read(ready_r, 4))
    attacker = os.fork()
    if attacker == 0:
        try:
            prepare_attacker()
            os.close(os.open(f"/proc/{target}/fd/{pipe_w}", os.O_WRONLY))
            os._exit(0)
        except (OSError, RuntimeError):
            os._exit(1)
    opened = _wait_ok(attacker)
    os.kill(target, signal.SIGKILL)
    os.waitpid(target, 0)
    os.close(ready_r)
    os.close(ready_w)
    return opened


def _fd_open_by_same_uid(dumpable: bool) -> bool:
    """Whether an unprivileged process can open a pipe of another process of its own uid."""
    def target() -> None:
        os.setuid(NOBODY)
        set_dumpable(dumpable)

    return _pipe_opened(target, lambda: os.setuid(NOBODY))


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root")
def test_a_non_dumpable_process_keeps_its_descriptors_from_its_own_uid() -> None:
    assert _fd_open_by_same_uid(dumpable=True), "the control failed: /proc/<pid>/fd was not reachable at all"
    assert not _fd_open_by_same_uid(dumpable=False)


def _fd_open_by_root(drop_capability: bool) -> bool:
    """Whether a root process can open a pipe of a non-dumpable root process, having given up
    ``CAP_SYS_PTRACE`` first or not."""
    def attacker() -> None:
        if drop_capability and not drop_ptrace_capability():
            raise RuntimeError("the capability could not be dropped")

    return _pipe_opened(lambda: set_dumpable(False), attacker)


@pytest.mark.skipif(os.geteuid() != 0 or not has_ptrace_capability(), reason="needs root with CAP_SYS_PTRACE")
def test_without_the_ptrace_capability_root_cannot_open_a_non_dumpable_processs_descriptors() -> None:
    """What the audit hook only refuses in Python, the kernel refuses once the capability is gone
    (ctypes, a second interpreter, anything)."""
    assert _fd_open_by_root(drop_capability=False), "the control failed: root could not open them at all"
    assert not _fd_open_by_root(drop_capability=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="capabilities are Linux's")
def test_dropping_the_ptrace_capability_holds_for_the_programs_started_after() -> None:
    """Dropped from the bounding set too: a program the worker starts does not get it back."""
    code = ("from evaluator.hardening.sandbox import drop_ptrace_capability; import subprocess, sys; "
            "assert drop_ptrace_capability(); "
            "sys.exit(subprocess.run([sys.executable, '-c', 'from evaluator.hardening.sandbox import "
            "has_ptrace_capability as h; import sys; sys.exit(3 if h() else 0)']).returncode)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr[-2000:]


def test_set_dumpable_sets_the_flag() -> None:
    before = is_dumpable()  # a runner in this process may have cleared it already
    child = os.fork()
    if child == 0:
        os._exit(0 if set_dumpable(False) and not is_dumpable() else 1)
    assert _wait_ok(child)
    assert is_dumpable() == before  # only the child changed


# -- scratch directory and environment -------------------------------------------------------

def test_the_environment_points_every_cache_into_scratch(tmp_path: Path) -> None:
    scratch = Scratch.for_contestant("0123456789abcdef" * 4, root=tmp_path)
    env = worker_env({"PATH": "/bin", "PYTHONPYCACHEPREFIX": "/somewhere", "HOME": "/root"}, scratch)
    for name in ("TMPDIR", "HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
                 "CUDA_CACHE_PATH", "XDG_CACHE_HOME"):
        assert Path(env[name]).is_relative_to(scratch.path), name
    assert scratch.path == tmp_path / "0123456789abcdef"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONSAFEPATH"] == "1"
    assert env["PATH"] == "/bin"
    assert "PYTHONPYCACHEPREFIX" not in env


def test_tmp_is_emptied_per_stage_and_caches_are_kept(tmp_path: Path) -> None:
    scratch = Scratch.for_contestant("ab" * 32, root=tmp_path)
    (scratch.tmp / "left").write_text("x")
    (scratch.path / "triton" / "kept").write_text("x")
    scratch.reset_tmp()
    assert list(scratch.tmp.iterdir()) == []
    assert (scratch.path / "triton" / "kept").exists()
    with pytest.raises(ValueError, match="SHA-256"):
        Scratch.for_contestant("../../etc", root=tmp_path)



def test_two_runs_of_one_contestant_keep_their_own_tmp(tmp_path: Path) -> None:
    """Two evaluator processes on one contestant at once (pytest-xdist makes them): a stage's
    reset empties only its own process's tmp/, and removes those of processes that are gone."""
    mine = Scratch.for_contestant("ef" * 32, root=tmp_path)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = Scratch(mine.path, owner=alive.pid)
        other.tmp.mkdir()
        (other.tmp / "in-use").write_text("x")
        gone = Scratch(mine.path, owner=_a_dead_pid())
        gone.tmp.mkdir()
        (gone.tmp / "left").write_text("x")
        (mine.tmp / "left").write_text("x")
        (mine.tmp.parent / "from-the-shared-tmp").write_text("x")  # tmp/ as it was before it was per process
        mine.reset_tmp()
        assert list(mine.tmp.iterdir()) == []
        assert (other.tmp / "in-use").exists()
        assert not gone.tmp.exists()
        assert not (mine.tmp.parent / "from-the-shared-tmp").exists()
        assert worker_env({}, mine)["TMPDIR"] == str(mine.tmp)
    finally:
        alive.kill()
        alive.wait()


def _a_dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def test_the_compile_caches_state_changes_when_something_compiles(tmp_path: Path) -> None:
    """--estimate tells a pilot that compiled from one that loaded from the caches: a file
    written or rewritten in a compile cache changes the state; temporary files do not, nor does
    anything behind a link (never followed)."""
    scratch = Scratch.for_contestant("cd" * 32, root=tmp_path)
    empty = scratch.compile_cache_state()
    (scratch.tmp / "scratch-file").write_text("x")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (scratch.path / "inductor" / "link").symlink_to(outside, target_is_directory=True)
    before = scratch.compile_cache_state()
    (outside / "behind-the-link").write_text("x")
    assert scratch.compile_cache_state() == before == empty
    kernel = scratch.path / "triton" / "cache" / "abc" / "kernel.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"1")
    compiled = scratch.compile_cache_state()
    assert compiled != before
    assert scratch.compile_cache_state() == compiled  # listing changes nothing
    kernel.write_bytes(b"22")
    assert scratch.compile_cache_state() != compiled

# -- the audit hook --------------------------------------------------------------------------

ATTEMPTS = """
    import gc, json, os, pathlib, signal, subprocess, sys, threading
    scratch, outside = sys.argv[1], sys.argv[2]
    from evaluator.hardening.sandbox import install_audit_hook
    refusals = install_audit_hook([scratch])
    results = {}
    def attempt(name, action):
        try:
            action()
            results[name] = "allowed"
        except PermissionError as exc:
            results[name] = "refused" if str(exc).startswith("[rule sandbox]") else f"error {exc}"
    attempt("setprofile", lambda: sys.setprofile(lambda *a: None))
    attempt("settrace", lambda: sys.settrace(lambda *a: None))
    attempt("gc.get_objects", gc.get_objects)
    attempt("gc.get_referrers", lambda: gc.get_referrers(results))
    attempt("os.fork", os.fork)
    attempt("write outside", lambda: open(os.path.join(outside, "pyc"), "wb").close())
    attempt("os.open outside", lambda: os.open(os.path.join(outside, "x"), os.O_WRONLY | os.O_CREAT))
    attempt("rename outside", lambda: os.rename(os.path.join(scratch, "x"), os.path.join(outside, "x")))
    attempt("symlink outside", lambda: os.symlink(outside, os.path.join(scratch, "link")))
    attempt("hard link outside", lambda: os.link(sys.executable, os.path.join(scratch, "hard")))
    attempt("dir fd outside", lambda: os.open(outside, os.O_RDONLY))
    attempt("parent's fds", lambda: open(f"/proc/{os.getppid()}/fd/0", "rb"))
    attempt("list the parent's fds", lambda: os.listdir(f"/proc/{os.getppid()}/fd"))
    attempt("scan the parent's fds", lambda: list(os.scandir(f"/proc/{os.getppid()}/fd")))
    attempt("iterdir the parent's fds", lambda: list(pathlib.Path(f"/proc/{os.getppid()}/fd").iterdir()))
    attempt("list own fds", lambda: os.listdir("/proc/self/fd"))
    attempt("iterdir scratch", lambda: list(pathlib.Path(scratch).iterdir()))
    attempt("SIGSTOP the parent", lambda: os.kill(os.getppid(), signal.SIGSTOP))
    attempt("write scratch", lambda: open(os.path.join(scratch, "x"), "w").close())
    attempt("read anywhere", lambda: open("/etc/hostname" if os.path.exists("/etc/hostname") else sys.executable,
                                          "rb").close())
    attempt("remove in scratch", lambda: os.remove(os.path.join(scratch, "x")))
    attempt("subprocess", lambda: subprocess.run(["true"], check=True))
    attempt("signal own child", lambda: subprocess.Popen(["sleep", "10"]).kill())
    attempt("probe the parent", lambda: os.kill(os.getppid(), 0))
    hooked = []
    sys.addaudithook(lambda *a: hooked.append(a))  # torch.compile adds one: allowed, it cannot remove ours
    open(os.path.join(scratch, "y"), "w").close()
    results["addaudithook"] = "allowed" if hooked else "refused"
    results["recorded"] = len(refusals())
    print(json.dumps(results))
"""
REFUSED = ["setprofile", "settrace", "gc.get_objects", "gc.get_referrers", "os.fork", "write outside",
           "os.open outside", "rename outside", "symlink outside", "hard link outside", "dir fd outside",
           "parent's fds", "list the parent's fds", "scan the parent's fds", "iterdir the parent's fds",
           "SIGSTOP the parent"]
ALLOWED = ["write scratch", "read anywhere", "remove in scratch", "subprocess", "signal own child",
           "probe the parent", "addaudithook", "list own fds", "iterdir scratch"]


@pytest.fixture(scope="module")
def attempts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    scratch, outside = tmp_path_factory.mktemp("scratch"), tmp_path_factory.mktemp("outside")
    (scratch / "x").write_text("x")
    full = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(ATTEMPTS), str(scratch), str(outside)], env=full,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", REFUSED)
def test_the_hook_refuses(attempts: dict[str, object], name: str) -> None:
    assert attempts[name] == "refused"


@pytest.mark.parametrize("name", ALLOWED)
def test_the_hook_allows(attempts: dict[str, object], name: str) -> None:
    assert attempts[name] == "allowed"


def test_every_refusal_is_recorded(attempts: dict[str, object]) -> None:
    assert attempts["recorded"] == len(REFUSED)


def test_a_worker_that_cannot_report_a_refusal_ends(tmp_path: Path) -> None:
    done = _python(f"""
        import os, sys
        from evaluator.hardening.sandbox import install_audit_hook
        read, write = os.pipe()
        install_audit_hook([{str(tmp_path)!r}], report_fd=write)
        os.close(write)
        try:
            sys.settrace(None)
        except PermissionError:
            pass
        print("still running")
    """)
    assert done.returncode == EXIT_UNREPORTED
    assert "still running" not in done.stdout


def test_the_hook_looks_nothing_up_when_called() -> None:
    """A kernel that rebinds ``os.lstat``, a builtin or a module global cannot run code inside it."""

    def nested(code: types.CodeType) -> list[types.CodeType]:
        inner = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        return inner + [deeper for c in inner for deeper in nested(c)]

    for code in nested(install_audit_hook.__code__):
        names = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        assert names == [], f"{code.co_name} looks up {names}"


HONEST = """
    import os, sys
    import torch
    from evaluator.hardening.sandbox import install_audit_hook
    refusals = install_audit_hook([os.environ["SCRATCH"]])
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

    x = torch.randn(100)
    y = torch.empty(100)
    add_one[(4,)](x, y, 100, BLOCK=32)
    assert torch.equal(y, x + 1)
    compiled = torch.compile(lambda a: (a.sin() * 2 + 1).sum(0))
    a = torch.randn(64, 64)
    assert torch.allclose(compiled(a), (a.sin() * 2 + 1).sum(0), atol=1e-4)
    assert refusals() == (), refusals()
    print("ok")
"""


@pytest.mark.slow
def test_honest_kernels_run_under_the_hook(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """torch.compile (inductor, gcc) and a Triton interpreter kernel, in the worker's environment.
    The scratch lives in pytest's cache, so compile caches make later runs faster, as in real use
    (in a temporary folder under ``-p no:cacheprovider``)."""
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("qrbench-sandbox")) if cache is not None else tmp_path
    scratch = Scratch.for_contestant("5a" * 32, root=root)
    scratch.reset_tmp()
    env = worker_env(os.environ, scratch) | {"SCRATCH": str(scratch.path), "TRITON_INTERPRET": "1"}
    done = _python(HONEST, env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


# -- project integrity -----------------------------------------------------------------------

def test_the_snapshot_finds_planted_bytecode_and_a_rewritten_shape_file(tmp_path: Path) -> None:
    tree = tmp_path / "evaluator"
    (tree / "__pycache__").mkdir(parents=True)
    (tree / "runner.py").write_text("x = 1\n")
    genuine = tree / "__pycache__" / "runner.cpython-311.pyc"
    genuine.write_bytes(b"genuine")
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("n: 16\n")
    snapshot = ProjectSnapshot.take([tree], files=[shapes], shallow=[])

    planted = tree / "__pycache__" / "worker.cpython-311.pyc"
    planted.write_bytes(b"forged")
    before = shapes.stat()
    shapes.write_text("n: 99\n")  # same size, and the old mtime put back: only ctime tells
    os.utime(shapes, ns=(before.st_atime_ns, before.st_mtime_ns))

    found = {(change.path, change.kind) for change in snapshot.changes()}
    assert found == {(planted, "added"), (shapes, "changed")}
    assert snapshot.restore() == [planted]
    assert not planted.exists()
    assert genuine.exists()
    assert {change.path for change in snapshot.changes()} == {shapes}


def test_the_snapshot_of_the_project_takes_milliseconds() -> None:
    started = time.perf_counter()
    snapshot = ProjectSnapshot.take()
    changes = snapshot.changes()
    elapsed = time.perf_counter() - started
    assert len(snapshot.states) > 50
    assert changes == []
    assert elapsed < 0.5, f"{elapsed:.3f} s"


def test_no_bytecode_holds_only_inside() -> None:
    before = sys.dont_write_bytecode
    with no_bytecode():
        assert sys.dont_write_bytecode
    assert sys.dont_write_bytecode == before


_LANDLOCKED = """
import ctypes, os, subprocess, sys
from pathlib import Path
from evaluator.hardening.sandbox.landlock import confine, landlock_abi
ok, out = Path(sys.argv[1]), Path(sys.argv[2])
assert confine([ok], [Path("/dev/null")], signals=True) == (True, landlock_abi() >= 6)  # as a worker asks
(ok / "python.txt").write_text("x")
(ok / "tmp").mkdir()
(ok / "tmp" / "built.so").write_text("x")
os.replace(ok / "tmp" / "built.so", ok / "built.so")  # how Triton's cache puts a file in place
for attempt in ("python", "libc", "child"):
    try:
        if attempt == "python":
            (out / "python.txt").write_text("x")
        elif attempt == "libc":
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.open(str(out / "libc.txt").encode(), os.O_WRONLY | os.O_CREAT, 0o644) < 0:
                raise PermissionError(ctypes.get_errno(), "libc")
        else:
            subprocess.run(["sh", "-c", f"echo x > {out / 'child.txt'}"], check=True, capture_output=True)
        print(attempt, "wrote")
    except (PermissionError, subprocess.CalledProcessError):
        print(attempt, "refused")
with open("/dev/null", "w") as null:
    null.write("x")
print(open("/etc/hostname").read() is not None)
"""


@pytest.mark.skipif(landlock_abi() < WRITES_ABI, reason="this kernel cannot restrict writes (Landlock ABI 2)")
def test_landlock_refuses_writes_outside_the_folders_to_python_libc_and_children(tmp_path: Path) -> None:
    ok, out = tmp_path / "ok", tmp_path / "out"
    ok.mkdir()
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", _LANDLOCKED, str(ok), str(out)], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["python", "refused", "libc", "refused", "child", "refused", "True"]
    assert (ok / "python.txt").exists()
    assert (ok / "built.so").exists()
    assert not any(out.iterdir())


_ABI_1 = """
import sys
from pathlib import Path
from evaluator.hardening.sandbox import landlock
landlock.landlock_abi = lambda: 1  # a kernel of Linux 5.13-5.18
print(landlock.confine([Path(sys.argv[1])], [Path("/dev/null")], signals=True))
Path(sys.argv[2]).write_text("x")
"""


@pytest.mark.skipif(landlock_abi() < WRITES_ABI, reason="this kernel cannot restrict writes (Landlock ABI 2)")
def test_landlock_abi_1_leaves_writes_unrestricted(tmp_path: Path) -> None:
    """ABI 1 refuses every rename across directories whatever the rules say, which would break
    Triton's cache in the scratch directory: there the worker is left to the audit hook and the
    snapshot, and the results file's ABI says so."""
    ok, out = tmp_path / "ok", tmp_path / "elsewhere.txt"
    ok.mkdir()
    done = subprocess.run([sys.executable, "-c", _ABI_1, str(ok), str(out)], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Confinement(writes=False, signals=False)"
    assert out.read_text() == "x"


_SCOPED = """
import os, signal, subprocess, sys
from evaluator.hardening.sandbox.landlock import confine
outside = int(sys.argv[1])
assert confine() == (False, True)
for target, name in ((outside, "outside"), (os.getppid(), "parent")):
    try:
        os.kill(target, signal.SIGCONT)
        print(name, "signalled")
    except PermissionError:
        print(name, "refused")
own = subprocess.Popen(["sleep", "30"])
own.terminate()
print("own child", own.wait())
"""


@pytest.mark.skipif(landlock_abi() < 6, reason="this kernel cannot scope signals (Landlock ABI 6)")
def test_a_scoped_process_signals_only_what_it_started() -> None:
    outside = subprocess.Popen(["sleep", "30"])
    try:
        done = subprocess.run([sys.executable, "-c", _SCOPED, str(outside.pid)], capture_output=True, text=True,
                              check=False)
    finally:
        outside.kill()
        outside.wait()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["outside refused", "parent refused", f"own child {-signal.SIGTERM}"]
