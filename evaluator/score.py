"""Scores and ranking: geometric mean of per-case means, lowest wins.

A run is ranked only if every stage passed (for a leaderboard run: tests, benchmark, the
ranked pass and the secret-seed ranked pass); otherwise it is listed unranked with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from evaluator.results import RunResult

__all__ = ["Standing", "rank"]


@dataclass(frozen=True)
class Standing:
    """One line of a leaderboard: ``place`` is None for an unranked run."""

    place: int | None
    run: RunResult

    @property
    def name(self) -> str:
        return self.run.contestant["name"]

    @property
    def score_s(self) -> float | None:
        return self.run.score_s


def rank(runs: Iterable[RunResult]) -> list[Standing]:
    """Ranked runs by score (ties share a place), then unranked runs in the given order."""
    runs = list(runs)
    scored = sorted((r for r in runs if r.score_s is not None), key=lambda r: r.score_s)
    standings: list[Standing] = []
    for i, run in enumerate(scored):
        tied = i > 0 and run.score_s == scored[i - 1].score_s
        standings.append(Standing(standings[-1].place if tied else i + 1, run))
    standings.extend(Standing(None, r) for r in runs if r.score_s is None)
    return standings
