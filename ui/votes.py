"""The arena's votes: a small SQLite file that keeps every vote and tallies them per pair.

A vote names the contestants of one arena round (each "model · preset") and the outcome: one
winner (it beats every other contestant of the round) or a tie (every pair of the round ties).
Each vote is one transaction, committed before `add` returns, in a database in WAL mode, so no
acknowledged vote is lost when the app stops or restarts. The file is
`$SCRIPTORIUM_VOTES`, by default `arena-votes.sqlite` in `$SCRIPTORIUM_CACHE` (default
`~/.cache/scriptorium`). Connections are opened per call, so any thread may vote. A file already
at that path is checked when the store is opened: one that is no votes database (garbage bytes, a
corrupted database, another program's tables, a folder) is kept aside, renamed
`<name>.corrupt-<time>`, and a fresh database takes its place; the store's `problem` and
`notice` say what happened (one line in the log, a message for the Arena's visitors). Where even
that cannot be done, every vote is refused with the reason. This module builds no UI and runs no
model.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict, deque
from contextlib import closing
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

LOG = logging.getLogger("scriptorium.app")
SCHEMA = """
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,          -- unix time of the vote
    a TEXT NOT NULL,           -- the pair's contestants, a < b
    b TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('a', 'b', 'tie'))
)
"""
COLUMNS = ["id", "at", "a", "b", "outcome"]
# SQLite's answers for a file that is no database, or a damaged one: such a file is kept aside
# and replaced. Others (busy, read-only, no permission) leave the file alone and refuse votes.
DAMAGED = ("SQLITE_NOTADB", "SQLITE_CORRUPT")
SIDECARS = ("-wal", "-shm", "-journal")  # SQLite's files beside a database, moved with it


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


class NotVotes(sqlite3.DatabaseError):
    """The file at the votes path is readable but is no votes database."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """`error`'s message on one line of at most `limit` characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


class VoteStore:
    """Votes in the SQLite file at `path` (created with its folder by the first vote). A file
    already there that is no votes database is renamed `<name>.corrupt-<time>` (`kept_as`) and
    a fresh one made in its place."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.problem: str | None = None  # what was wrong with the file found at `path`
        self.kept_as: Path | None = None  # where that file was moved
        self.refusal: str | None = None  # why no vote can be kept (None: votes are kept)
        self._made = False  # the database exists with its schema
        if os.path.lexists(self.path):
            try:
                self._make()
            except (sqlite3.Error, OSError) as error:
                self._replace(error)

    @property
    def notice(self) -> str | None:
        """What visitors should know about the votes file (Markdown), None when all is well."""
        if self.refusal:
            return f"**Voting is off:** {self.refusal}."
        if self.kept_as:
            return (
                f"**The votes file could not be read** ({self.problem}). It was kept aside as "
                f"`{self.kept_as.name}`, and votes now go to a new, empty file: the tally starts "
                "again."
            )
        return None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.execute("PRAGMA synchronous=FULL")  # a committed vote survives a power cut too
        return db

    def _make(self) -> None:
        """Open (or create) the database and check that it is a sound votes database; NotVotes
        or a sqlite3 error if not."""
        if self.path.is_dir():
            raise NotVotes("it is a folder")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db:
            (check,) = db.execute("PRAGMA quick_check").fetchone()
            if check != "ok":
                raise NotVotes(f"damaged: {check}")
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master")]
            columns = [row[1] for row in db.execute("PRAGMA table_info(votes)")]
            if tables and not columns:
                raise NotVotes(f"it holds other tables ({', '.join(tables[:5])}), not votes")
            if columns and columns != COLUMNS:
                raise NotVotes(f"its votes table has columns {columns}, not {COLUMNS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
            db.commit()
        self._made = True

    def _replace(self, error: BaseException) -> None:
        """Keep the unusable file aside and start a fresh database, or refuse votes saying why."""
        self.problem = one_line(error)
        damaged = isinstance(error, NotVotes) or getattr(error, "sqlite_errorname", "") in DAMAGED
        if not damaged or not (self.path.is_file() or self.path.is_dir()):
            self.refusal = f"the votes file {self.path.name} cannot be used ({self.problem})"
            LOG.warning("votes database %s cannot be used, votes are off: %s", self.path, error)
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept_as = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{os.getpid()}")
        try:
            for suffix in ("", *SIDECARS):
                if os.path.lexists(f"{self.path}{suffix}"):
                    os.rename(f"{self.path}{suffix}", f"{kept_as}{suffix}")
            self.kept_as = kept_as
            self._make()
        except (sqlite3.Error, OSError) as again:
            self.refusal = (
                f"the votes file {self.path.name} cannot be used ({self.problem}) nor replaced "
                f"({one_line(again)})"
            )
            LOG.warning("votes database %s: %s", self.path, self.refusal)
            return
        LOG.warning(
            "votes database %s could not be read (%s): kept as %s, votes go to a new one",
            self.path,
            self.problem,
            kept_as.name,
        )

    def add(self, contestants: list[str], winner: int | None) -> int:
        """Record one vote (see `pair_outcomes`), committed before returning; the rows added."""
        rows = pair_outcomes(contestants, winner)
        if self.refusal:
            raise ValueError(f"the vote was not kept: {self.refusal}")
        now = time.time()
        try:
            if not self._made:
                self._make()
            with closing(self._connect()) as db:
                with db:  # one transaction: the whole vote or nothing
                    db.executemany(
                        "INSERT INTO votes (at, a, b, outcome) VALUES (?, ?, ?, ?)",
                        [(now, *row) for row in rows],
                    )
        except (sqlite3.Error, OSError) as error:
            raise ValueError(f"the vote was not kept: {one_line(error)}") from error
        return len(rows)

    def tally(self) -> list[PairTally]:
        """Every pair that has votes, the most voted first (none before the first vote)."""
        if self.refusal or not self.path.is_file():
            return []
        try:
            with closing(self._connect()) as db:
                found = db.execute(
                    "SELECT a, b, SUM(outcome = 'a'), SUM(outcome = 'b'), SUM(outcome = 'tie') "
                    "FROM votes GROUP BY a, b"
                ).fetchall()
        except sqlite3.Error as error:
            raise ValueError(f"the tally could not be read: {one_line(error)}") from error
        tallies = [PairTally(a, b, int(x), int(y), int(t)) for a, b, x, y, t in found]
        return sorted(tallies, key=lambda t: (-t.votes, t.a, t.b))


class RateLimit:
    """At most `limit` events per `window_s` seconds for each key (an arena session): a sliding
    window of each key's recent event times. The `max_keys` keys seen last are remembered (the
    oldest forgotten first), so memory stays bounded however many sessions come and go.

    >>> clock = iter([0.0, 1.0, 2.0, 61.0]).__next__
    >>> limit = RateLimit(2, 60.0, clock=clock)
    >>> [limit.wait("s") for _ in range(4)]
    [0.0, 0.0, 58.0, 0.0]
    """

    def __init__(self, limit: int, window_s: float, max_keys: int = 10_000, clock=time.monotonic):
        if limit < 1 or window_s <= 0:
            raise ValueError(f"`limit` must be >= 1 and `window_s` > 0, got {limit}, {window_s}")
        self.limit, self.window_s, self.max_keys, self.clock = limit, window_s, max_keys, clock
        self._times: OrderedDict[str, deque] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, key: str) -> float:
        """0.0, counting one event for `key`, when it is within the limit; else the seconds
        until it would be (and nothing is counted)."""
        with self._lock:
            now = self.clock()
            times = self._times.pop(key, None) or deque()
            while times and times[0] <= now - self.window_s:
                times.popleft()
            self._times[key] = times  # now the most recent key
            while len(self._times) > self.max_keys:
                self._times.popitem(last=False)
            if len(times) >= self.limit:
                return times[0] + self.window_s - now
            times.append(now)
            return 0.0
