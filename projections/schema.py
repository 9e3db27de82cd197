"""The projections' tables: which projections exist, and making their schema.

Imported only by writers (catch-up, rebuild) and when a store's schema is
missing or of another version, so that reading a current store imports no
projection module.
"""

from __future__ import annotations

import apsw

from events.schema import TRACKING_DDL, events_table_ddl, immediate_transaction
from projections.base import Projection
from projections.checkpoints import CHECKPOINTS
from projections.decisions import DECISIONS
from projections.features import FEATURES
from projections.inbox import INBOX
from projections.logs import LOGS
from projections.runs import RUNS
from projections.tables import (
    PROJECTION_INDEXES,
    PROJECTION_NAMES,
    PROJECTION_SCHEMA,
    PROJECTION_TABLES,
    SCHEMA_TABLE,
)

PROJECTIONS: tuple[Projection, ...] = (RUNS, LOGS, INBOX, DECISIONS, CHECKPOINTS, FEATURES)
assert tuple(p.name for p in PROJECTIONS) == PROJECTION_NAMES
assert tuple(t for p in PROJECTIONS for t in p.tables) == PROJECTION_TABLES
INDEX_DDL = tuple(s for p in PROJECTIONS for s in p.ddl if s.startswith("CREATE INDEX"))
assert tuple(s.split()[5] for s in INDEX_DDL) == PROJECTION_INDEXES
assert all(s.startswith("CREATE INDEX IF NOT EXISTS ") for s in INDEX_DDL)


def create_tables(conn: apsw.Connection) -> None:
    """Create the event tables and every projection's tables and indexes (idempotent).

    Projections made in another shape (``PROJECTION_SCHEMA``) are dropped with
    their tracking positions: the next catch-up rebuilds them from the log.
    """
    with immediate_transaction(conn):
        for statement in (*events_table_ddl("stored_events"), TRACKING_DDL):
            conn.execute(statement)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version INTEGER NOT NULL)")
        (found,) = conn.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone() or (None,)
        if found != PROJECTION_SCHEMA:
            for projection in PROJECTIONS:
                for table in projection.tables:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute("DELETE FROM tracking WHERE application_name=?", (projection.name,))
            conn.execute(f"DELETE FROM {SCHEMA_TABLE}")
            conn.execute(f"INSERT INTO {SCHEMA_TABLE} VALUES (?)", (PROJECTION_SCHEMA,))
        for projection in PROJECTIONS:
            for statement in projection.ddl:
                conn.execute(statement)
