"""The leaderboard page ``qrbench rank`` and ``qrbench modal rank`` write to ``reports/`` (of the
current directory, or ``--out``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evaluator.cli_args import unused_path
from evaluator.report.tables import render_leaderboard, timing_label
from evaluator.results import RunResult
from evaluator.score import Standing

__all__ = ["write_leaderboard"]


def write_leaderboard(runs: Sequence[RunResult], standings: Sequence[Standing], results: Path, out: Path,
                      force: bool = False) -> Path:
    """Write ``leaderboard-<shapes>-<device>.md`` under ``out``: the environment, then the table.
    An existing page is kept (the new one gets a suffix, ``-2``, ``-3``, ...) unless ``force``."""
    first = runs[0]
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"leaderboard-{first.shapes['name']}-{first.device}.md"
    md = md if force else unused_path(md)
    md.write_text(
        f"# Leaderboard: {first.shapes['name']} on {first.device}\n\n"
        f"{timing_label(first)}; torch {first.environment.get('torch')}, triton {first.environment.get('triton')}; "
        f"run {first.started_at}; results `{results.name}`.\n\n{render_leaderboard(standings, fmt='github')}\n"
    )
    return md
