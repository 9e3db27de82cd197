"""Opening shep.db for reading, and how far the projections are behind the log.

Kept free of the event catalog and projection modules so that a reader whose
projections are current (the usual ``shep status``) imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import apsw

from events.schema import connect, store_error
from projections.tables import (
    PROJECTION_INDEXES,
    PROJECTION_NAMES,
    PROJECTION_SCHEMA,
    PROJECTION_TABLES,
    SCHEMA_TABLE,
)

if TYPE_CHECKING:
    from pathlib import Path

# Tables and indexes share one namespace in SQLite: one IN list finds both.
_REQUIRED = ("stored_events", "tracking", SCHEMA_TABLE, *PROJECTION_TABLES, *PROJECTION_INDEXES)


def open_database(path: str | Path, *, readonly: bool = False) -> apsw.Connection:
    """Open shep.db for the read side; create missing tables and indexes unless read-only.

    Projections can always be rebuilt, so their transactions run with
    ``synchronous=NORMAL``: a power cut can only roll them back together
    with their tracking position.
    """
    try:
        conn = connect(path, synchronous="NORMAL", readonly=readonly)
    except apsw.Error as e:
        raise store_error(e, path) from e
    try:
        # Catching up a long log touches many pages of the projection tables and
        # their indexes; a 64 MiB page cache (used only as needed) keeps them hot.
        conn.execute("PRAGMA cache_size=-65536")
        if not readonly:
            ensure_schema(conn)
    except BaseException as e:
        conn.close()
        if isinstance(e, apsw.Error):
            raise store_error(e, path) from e
        raise
    return conn


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


def ensure_schema(conn: apsw.Connection) -> None:
    """Create whatever table or index is missing: one query of sqlite_master when none is.

    Indexes are checked, not assumed: a rebuild creates them only after its
    replay, so a rebuild killed meanwhile leaves the tables without them.
    """
    if not has_schema(conn) or schema_version(conn) != PROJECTION_SCHEMA:
        # Only now the projection modules are imported: a reader of a current
        # store (the usual `shep status`) never pays for them.
        from projections.schema import create_tables

        create_tables(conn)


def schema_version(conn: apsw.Connection) -> int | None:
    """The shape the projections' tables were made in (None before it was recorded)."""
    try:
        row = conn.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
    except apsw.SQLError:
        return None
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return int(row[0]) if row and row[0] is not None else None


def positions(conn: apsw.Connection) -> dict[str, int]:
    """Each projection's tracked position (0 when it has seen nothing)."""
    try:
        found = {
            str(name): int(position)
            for name, position in conn.execute(
                f"SELECT application_name, notification_id FROM tracking "
                f"WHERE application_name IN ({','.join('?' * len(PROJECTION_NAMES))})",
                PROJECTION_NAMES,
            )
        }
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return {name: found.get(name, 0) for name in PROJECTION_NAMES}


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
