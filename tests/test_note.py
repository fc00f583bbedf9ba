"""The Markdown note the GPU benchmarks write (benchmarks.note.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.note import publish


def test_publish_prints_and_writes_the_note(tmp_path: Path, capsys) -> None:
    out = tmp_path / "notes" / "speed.md"
    publish("Checker speed", "H200, 2026-12-01.", "| a |\n|---|", "python -m benchmarks.checker_speed", out)
    assert capsys.readouterr().out == "H200, 2026-12-01.\n| a |\n|---|\n"
    assert out.read_text() == ("# Checker speed\n\nH200, 2026-12-01.\n\n| a |\n|---|\n\n"
                               "Produced by `python -m benchmarks.checker_speed`.\n")


def test_publish_without_a_file_only_prints(tmp_path: Path, capsys) -> None:
    publish("T", "header", "table", "cmd", None)
    assert capsys.readouterr().out == "header\ntable\n"
    assert list(tmp_path.iterdir()) == []
