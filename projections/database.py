"""Opening shep.db for the read side.

Kept free of the event catalog and projection modules so that a reader whose
projections are current (the usual ``shep status``) imports nothing else: the
catch-up that creates or rebuilds projections is imported only when one is due.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import apsw

from events.sqlite_file import connect, store_error
from projections.state import schema_current

if TYPE_CHECKING:
    from pathlib import Path

    from projections.state import Progress


def open_database(
    path: str | Path, *, readonly: bool = False, progress: Progress | None = None
) -> apsw.Connection:
    """Open shep.db for the read side; create missing tables and indexes unless read-only.

    A projection built by another version of shep is rebuilt from the log first,
    alone, telling ``progress`` how far it is (see ``ensure_schema``).

    Projections can always be rebuilt, so their transactions run with
    ``synchronous=NORMAL``: a power cut can only roll them back together
    with their tracking position.
    """
    try:
        conn = connect(path, synchronous="NORMAL", readonly=readonly)
    except apsw.Error as e:
        raise store_error(e, path) from e
    try:
        # SQLite's small page cache: a 64 MiB one only while the log is folded (fold_cache).
        if not readonly:
            ensure_schema(conn, progress)
    except BaseException as e:
        conn.close()
        if isinstance(e, apsw.Error):
            raise store_error(e, path) from e
        raise
    return conn


def ensure_schema(conn: apsw.Connection, progress: Progress | None = None) -> None:
    """Create whatever table or index is missing, and rebuild each projection of another
    version: one query of sqlite_master and one of the versions when nothing is to do.

    Indexes are checked, not assumed: a killed rebuild or a damaged file may lack them.
    Only when something is to do are the projection modules imported
    (``projections.catch_up.migrate``): a reader of a current store never pays.
    """
    if not schema_current(conn):
        from projections.catch_up import migrate

        migrate(conn, progress)
