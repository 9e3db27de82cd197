"""The projections' tables: which projections exist, and making their schema.

Imported only by writers (catch-up, rebuild, and ``projections.catch_up.migrate``
when a store's schema is missing or of another version), so that reading a
current store imports no projection module.
"""

from __future__ import annotations

import apsw

from events.sqlite_file import TRACKING_DDL, events_table_ddl, immediate_transaction
from projections.base import Projection
from projections.checkpoints import CHECKPOINTS
from projections.decisions import DECISIONS
from projections.features import FEATURES
from projections.inbox import INBOX
from projections.logs import LOGS
from projections.runs import RUNS
from projections.tables import (
    LEGACY_SCHEMA,
    LEGACY_SCHEMA_TABLE,
    PROJECTION_INDEXES,
    PROJECTION_NAMES,
    PROJECTION_TABLES,
    PROJECTION_VERSIONS,
    VERSIONS_TABLE,
)

PROJECTIONS: tuple[Projection, ...] = (RUNS, LOGS, INBOX, DECISIONS, CHECKPOINTS, FEATURES)
assert tuple(p.name for p in PROJECTIONS) == PROJECTION_NAMES == tuple(PROJECTION_VERSIONS)
assert tuple(t for p in PROJECTIONS for t in p.tables) == PROJECTION_TABLES
INDEX_DDL = tuple(s for p in PROJECTIONS for s in p.ddl if s.startswith("CREATE INDEX"))
assert tuple(s.split()[5] for s in INDEX_DDL) == PROJECTION_INDEXES
assert all(s.startswith("CREATE INDEX IF NOT EXISTS ") for s in INDEX_DDL)

_VERSIONS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} ("
    "name TEXT PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID"
)
_SET_VERSION = f"INSERT OR REPLACE INTO {VERSIONS_TABLE} VALUES (?, ?)"


def create_tables(conn: apsw.Connection) -> tuple[str, ...]:
    """Create the event tables and every current projection's missing tables and indexes;
    return the names of the projections built by another version (left as they are).

    A store whose projections have no versions yet records them: those of the single
    schema number before them (``LEGACY_SCHEMA``) are version 1; a store with no
    projection tables at all gets the current versions (catch-up fills the new tables).
    """
    with immediate_transaction(conn):
        for statement in (*events_table_ddl("stored_events"), TRACKING_DDL, _VERSIONS_DDL):
            conn.execute(statement)
        stored = {
            str(name): int(version)
            for name, version in conn.execute(f"SELECT name, version FROM {VERSIONS_TABLE}")
        }
        if not stored:
            stored = _first_versions(conn)
            conn.executemany(_SET_VERSION, stored.items())
        changed = tuple(n for n in PROJECTION_NAMES if stored.get(n) != PROJECTION_VERSIONS[n])
        for projection in PROJECTIONS:
            if projection.name not in changed:
                for statement in projection.ddl:
                    conn.execute(statement)
    return changed


def _first_versions(conn: apsw.Connection) -> dict[str, int]:
    legacy: int | None = None
    if _exists(conn, LEGACY_SCHEMA_TABLE):
        row = conn.execute(f"SELECT max(version) FROM {LEGACY_SCHEMA_TABLE}").fetchone()
        legacy = row[0] if row else None
    if legacy == LEGACY_SCHEMA:
        return dict.fromkeys(PROJECTION_NAMES, 1)
    if legacy is None and not any(_exists(conn, t) for t in PROJECTION_TABLES):
        return dict(PROJECTION_VERSIONS)
    return dict.fromkeys(PROJECTION_NAMES, 0)  # made by another shep: rebuild them all


def _exists(conn: apsw.Connection, table: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)
        ).fetchone()
        is not None
    )


def record_version(conn: apsw.Connection, projection: Projection) -> None:
    """Record that ``projection``'s tables are now built by this shep (inside a transaction)."""
    conn.execute(_SET_VERSION, (projection.name, PROJECTION_VERSIONS[projection.name]))
