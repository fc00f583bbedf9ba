"""The environment fingerprint's source digest: it names the code a run measured with where git cannot."""

from __future__ import annotations

from pathlib import Path

from evaluator.environment import digest_of_sources, fingerprint, source_digest
from evaluator.report.markdown import _commit


def _tree(root: Path) -> None:
    for name, text in (("evaluator/a.py", "x = 1\n"), ("evaluator/sub/b.py", "y = 2\n"), ("reference/c.py", "z\n")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_digest_follows_every_byte_and_name_of_the_sources(tmp_path: Path) -> None:
    _tree(tmp_path)
    packages = ("evaluator", "reference")
    first = digest_of_sources(tmp_path, packages)
    assert digest_of_sources(tmp_path, packages) == first
    (tmp_path / "evaluator" / "notes.txt").write_text("not code")
    assert digest_of_sources(tmp_path, packages) == first
    (tmp_path / "evaluator" / "sub" / "b.py").write_text("y = 3\n")
    changed = digest_of_sources(tmp_path, packages)
    assert changed != first
    (tmp_path / "evaluator" / "sub" / "b.py").rename(tmp_path / "evaluator" / "sub" / "b2.py")
    assert digest_of_sources(tmp_path, packages) not in (first, changed)


def test_every_fingerprint_carries_the_digest_and_reports_show_it() -> None:
    env = fingerprint("cpu")
    assert env["source_sha256"] == source_digest()
    assert len(env["source_sha256"]) == 64
    assert _commit(env).endswith(f"sources {env['source_sha256'][:8]}")
    assert _commit({"git_commit": "a" * 40, "git_dirty": True}) == "aaaaaaaaaa (dirty)"  # files of older runs
