"""How far the projections of an open shep.db are, and of which version: light queries.

Kept free of the event catalog and projection modules so that a reader whose
projections are current (the usual ``shep status``) imports nothing else. Below
both the opener (``projections.database``) and the writers (``projections.catch_up``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import apsw

from events.sqlite_file import store_error
from projections.tables import (
    PROJECTION_INDEXES,
    PROJECTION_NAMES,
    PROJECTION_TABLES,
    PROJECTION_VERSIONS,
    VERSIONS_TABLE,
)

# Tables and indexes share one namespace in SQLite: one IN list finds both.
_REQUIRED = ("stored_events", "tracking", VERSIONS_TABLE, *PROJECTION_TABLES, *PROJECTION_INDEXES)


class RebuildProgress(NamedTuple):
    """How far a rebuild of ``projections`` is: ``done`` of ``total`` events of the log.

    ``waiting``: another process is rebuilding them; this one waits for it.
    ``finished``: the new tables are in place (the last report of a rebuild).
    ``reason``: why they are rebuilt (``"changed"``: this shep changed them).
    """

    projections: tuple[str, ...]
    done: int
    total: int
    waiting: bool = False
    finished: bool = False
    reason: str = ""


#: Told how a rebuild goes, after each batch of events (see ``projections.catch_up.rebuild``).
Progress = Callable[[RebuildProgress], None]


#: The page cache (KiB) of a connection while it folds the log into the projections.
FOLD_CACHE_KIB = 65536


@contextmanager
def fold_cache(conn: apsw.Connection) -> Iterator[None]:
    """A 64 MiB page cache (used only as needed) while the log is folded, the connection's
    own size again after.

    Catching up a long log touches many pages of the projection tables and their
    indexes, and the cache keeps them hot. A reader keeps SQLite's small default: a
    command that reads a run of a million lines holds a page of them, not 64 MiB of
    the pages it went through.
    """
    (before,) = conn.execute("PRAGMA cache_size").fetchone() or (-2000,)
    conn.execute(f"PRAGMA cache_size=-{FOLD_CACHE_KIB}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size={int(before)}")


def has_schema(conn: apsw.Connection, *, indexes: bool = True) -> bool:
    """Whether every table (and index) of the store and its projections exists."""
    names = _REQUIRED if indexes else _REQUIRED[: -len(PROJECTION_INDEXES)]
    try:
        row = conn.execute(
            f"SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'index') "
            f"AND name IN ({','.join('?' * len(names))})",
            names,
        ).fetchone()
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return row is not None and row[0] == len(names)


def stored_versions(conn: apsw.Connection) -> dict[str, int]:
    """The version each projection's tables were built by (empty before any was recorded)."""
    try:
        return {
            str(name): int(version)
            for name, version in conn.execute(f"SELECT name, version FROM {VERSIONS_TABLE}")
        }
    except apsw.SQLError:
        return {}
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e


def positions(conn: apsw.Connection, names: Sequence[str] = PROJECTION_NAMES) -> dict[str, int]:
    """Each projection's tracked position (0 when it has seen nothing)."""
    try:
        found = {
            str(name): int(position)
            for name, position in conn.execute(
                f"SELECT application_name, notification_id FROM tracking "
                f"WHERE application_name IN ({','.join('?' * len(names))})",
                tuple(names),
            )
        }
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return {name: found.get(name, 0) for name in names}


def head_position(conn: apsw.Connection) -> int:
    """The newest event's position, 0 for an empty store."""
    try:
        row = conn.execute("SELECT max(notification_id) FROM stored_events").fetchone()
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return int(row[0]) if row and row[0] is not None else 0


def lag(conn: apsw.Connection) -> int:
    """How many events the slowest projection is behind the log."""
    return head_position(conn) - min(positions(conn).values())


def schema_current(conn: apsw.Connection) -> bool:
    """Whether there is nothing for ``ensure_schema`` to do: every table and index exists
    and each projection is of this shep's version, or the store is read-only (an archived
    copy the file system will not let this process write is read as it is).
    """
    return (has_schema(conn) and stored_versions(conn) == PROJECTION_VERSIONS) or conn.readonly(
        "main"
    )
