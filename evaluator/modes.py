"""The run modes, defined once: their names and the stages each runs.

Every door (the CLI, the popcorn drop-in, the pytest plugin, the cloud runner) and both ends of a
worker's job read them here, so no two places can spell a mode differently. A :class:`Mode` is a
``str``: JSON, results files and comparisons with plain strings see its name.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MODE_NAMES", "SECRET_STAGE", "STAGES_BY_MODE", "Mode", "stage_mode"]


class Mode(StrEnum):
    """A run mode (docs/problem.md §4): what a stage generates, checks and times."""

    TEST = "test"
    BENCHMARK = "benchmark"
    LEADERBOARD = "leaderboard"
    PROFILE = "profile"


# For argparse choices and membership tests (``"test" in Mode`` is a TypeError before Python 3.12).
MODE_NAMES: tuple[str, ...] = tuple(mode.value for mode in Mode)

# A leaderboard run's second ranked pass, on a seed drawn for the run (the contest's secret seed).
SECRET_STAGE = "ranked-secret"

# The stages each mode runs, in order (the runner plans exactly these).
STAGES_BY_MODE: dict[str, tuple[str, ...]] = {
    Mode.TEST: ("test",),
    Mode.BENCHMARK: ("benchmark",),
    Mode.PROFILE: ("profile",),
    Mode.LEADERBOARD: ("test", "benchmark", "ranked", SECRET_STAGE),
}


def stage_mode(stage: str) -> Mode:
    """The mode a stage runs in: the ranked passes are leaderboard passes, the others are named
    after their mode."""
    return Mode.LEADERBOARD if stage.startswith("ranked") else Mode(stage)
