"""The arena's votes: a small SQLite file that keeps every vote and tallies them per pair.

A vote names the contestants of one arena round (each "model · preset") and the outcome: one
winner (it beats every other contestant of the round) or a tie (every pair of the round ties).
Each vote is one transaction, committed before `add` returns, in a database in WAL mode, so no
acknowledged vote is lost when the app stops or restarts. The file is
`$SCRIPTORIUM_VOTES`, by default `arena-votes.sqlite` in `$SCRIPTORIUM_CACHE` (default
`~/.cache/scriptorium`). Connections are opened per call, so any thread may vote. This module
builds no UI and runs no model.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,          -- unix time of the vote
    a TEXT NOT NULL,           -- the pair's contestants, a < b
    b TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('a', 'b', 'tie'))
)
"""


def default_path() -> Path:
    """`$SCRIPTORIUM_VOTES`, else `arena-votes.sqlite` in `$SCRIPTORIUM_CACHE`
    (default ~/.cache/scriptorium)."""
    chosen = os.environ.get("SCRIPTORIUM_VOTES")
    if chosen:
        return Path(chosen).expanduser()
    cache = os.environ.get("SCRIPTORIUM_CACHE") or "~/.cache/scriptorium"
    return Path(cache).expanduser() / "arena-votes.sqlite"


@dataclass(frozen=True)
class PairTally:
    """The votes between two contestants (a < b)."""

    a: str
    b: str
    a_wins: int
    b_wins: int
    ties: int

    @property
    def votes(self) -> int:
        return self.a_wins + self.b_wins + self.ties


def pair_outcomes(contestants: list[str], winner: int | None) -> list[tuple[str, str, str]]:
    """The (a, b, outcome) rows of one vote: `winner` (an index into `contestants`) beats each
    other contestant; None is a tie between every pair. Pairs are ordered a < b.

    >>> pair_outcomes(["y", "x", "z"], 0)
    [('x', 'y', 'b'), ('y', 'z', 'a')]
    >>> pair_outcomes(["x", "y"], None)
    [('x', 'y', 'tie')]
    """
    if len(contestants) < 2:
        raise ValueError(f"`contestants` must name at least 2, got {len(contestants)}")
    if len(set(contestants)) != len(contestants):
        raise ValueError(f"`contestants` must be different, got {contestants}")
    if winner is not None and not 0 <= winner < len(contestants):
        raise ValueError(f"`winner` must be in [0, {len(contestants) - 1}] or None, got {winner}")
    rows = []
    for i, j in combinations(range(len(contestants)), 2):
        if winner is not None and winner not in (i, j):
            continue  # the vote says nothing about two losers
        a, b = sorted((contestants[i], contestants[j]))
        if winner is None:
            outcome = "tie"
        else:
            outcome = "a" if contestants[winner] == a else "b"
        rows.append((a, b, outcome))
    return rows


class VoteStore:
    """Votes in the SQLite file at `path` (created with its folder on first use)."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
            db.commit()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.execute("PRAGMA synchronous=FULL")  # a committed vote survives a power cut too
        return db

    def add(self, contestants: list[str], winner: int | None) -> int:
        """Record one vote (see `pair_outcomes`), committed before returning; the rows added."""
        rows = pair_outcomes(contestants, winner)
        now = time.time()
        with closing(self._connect()) as db:
            with db:  # one transaction: the whole vote or nothing
                db.executemany(
                    "INSERT INTO votes (at, a, b, outcome) VALUES (?, ?, ?, ?)",
                    [(now, *row) for row in rows],
                )
        return len(rows)

    def tally(self) -> list[PairTally]:
        """Every pair that has votes, the most voted first."""
        with closing(self._connect()) as db:
            found = db.execute(
                "SELECT a, b, SUM(outcome = 'a'), SUM(outcome = 'b'), SUM(outcome = 'tie') "
                "FROM votes GROUP BY a, b"
            ).fetchall()
        tallies = [PairTally(a, b, int(x), int(y), int(t)) for a, b, x, y, t in found]
        return sorted(tallies, key=lambda t: (-t.votes, t.a, t.b))
