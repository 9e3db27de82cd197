"""The store's own schema: its version, what wrote it, and moving an older store forward once.

Every store records, besides its events, a small ``shep_meta`` table:

- ``schema_version`` (the shared store; a SQLite file keeps it in its header,
  ``PRAGMA user_version``, where shep 0.1.0 already put it),
- ``schema_written_by``: the shep that made or last migrated the schema,
- ``newest_writer``: the newest shep that opened the store to write. An event a
  shep cannot read was written by a shep at most that new, so a refusal names
  it ("written by shep 0.3.0; this is shep 0.2.0: upgrade shep").

A table rather than a version in every event: a store is read by many
versions of shep over years, but written by a new one only a few times, so
recording the writer when it first opens the store costs one small write per
upgrade instead of bytes on every event; and it works the same on SQLite and
PostgreSQL. Each event's own version is in its stored state (``events.catalog``).

Opening a store (``EventStore``) checks its schema version:

- the same as ours: used as it is (``newest_writer`` is raised to us once);
- older: migrated forward once, under the write lock. A SQLite file is first
  copied aside (``shep.db.bak-<the old shep version>``, with SQLite's backup API,
  to a temporary name renamed when complete); then every step runs in one
  transaction with the new version. A kill at any moment leaves the old store
  (and perhaps a copy) or the new one, never half of it. On the shared store
  the steps run in one PostgreSQL transaction holding the events table's lock;
  copying a server's database aside is its operator's job (``pg_dump``);
- newer: read as it is, never written: appends are refused with one line
  (``StoreTooNewError``), as a home older than its shared store must.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from events import versions
from events.errors import StoreTooNewError, StoreUnavailableError

if TYPE_CHECKING:
    import apsw

    from events.postgres import PgDatastore, PgProcessRecorder
    from events.sqlite import ApswProcessRecorder
    from events.sqlite_datastore import ApswDatastore

#: Told one line at a time what an upgrade does (the CLI prints it on stderr).
Notice = Callable[[str], None]

META_TABLE = "shep_meta"

#: The shep release that wrote each schema version made before ``shep_meta`` said so.
SCHEMA_WRITERS = {1: "0.1.0"}

#: From this size on, an upgrade says before it starts how big the copy is, and after
#: it how long it took.
LARGE_STORE_BYTES = 256_000_000

_SQLITE_META_DDL = (
    "CREATE TABLE IF NOT EXISTS shep_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
)

#: What each schema version adds to the one before, on SQLite (schema 1: the
#: events and tracking tables, made by the recorder).
SQLITE_STEPS: dict[int, tuple[str, ...]] = {2: (_SQLITE_META_DDL,)}

_UPSERT = (
    "INSERT INTO shep_meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


@dataclass(frozen=True)
class StoreSchema:
    """What an opened store's schema is, and whether this shep may write to it."""

    version: int
    #: The newest shep that opened the store to write (None: not recorded).
    newest_writer: str | None
    #: Set when the store's schema is newer than ours: every write raises it.
    too_new: StoreTooNewError | None = None


def too_new(where: str, version: int, written_by: str | None) -> StoreTooNewError:
    """The refusal to write to a store whose schema is newer than this shep's."""
    by = f", written by shep {written_by}" if written_by else ""
    return StoreTooNewError(
        f"{where} has schema {version}{by}; this is shep {versions.SHEP_VERSION} "
        f"(schema {versions.STORE_SCHEMA_VERSION}), which does not write to a newer "
        "store: upgrade shep."
    )


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


# --- SQLite ---------------------------------------------------------------------------


def read_meta(conn: apsw.Connection) -> dict[str, str]:
    """The store's ``shep_meta`` rows (none before schema 2)."""
    import apsw

    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM shep_meta")}
    except apsw.SQLError:
        return {}


def user_version(conn: apsw.Connection) -> int:
    """The SQLite store's schema version (0: none recorded yet)."""
    return cast(int, conn.execute("PRAGMA user_version").fetchall()[0][0])


def recorded_schema(conn: apsw.Connection) -> int | None:
    """The SQLite store's schema as the file is, not only as its header says.

    ``None``: no schema yet. A command that only reads (``shep status`` on a fresh home)
    makes the file with empty tables to read from; the schema is written (``user_version``,
    ``shep_meta``) when the first writer opens it. A log with events but no version is from
    before versions were recorded: schema 1.
    """
    version = user_version(conn)
    if version == 0:
        return 1 if _has_events(conn) else None
    return version


def written_by(conn: apsw.Connection) -> str | None:
    """The newest shep that wrote to the SQLite store on ``conn``, as far as it says."""
    meta = read_meta(conn)
    if "newest_writer" in meta:
        return meta["newest_writer"]
    return SCHEMA_WRITERS.get(user_version(conn))


def open_sqlite(
    datastore: ApswDatastore, recorder: ApswProcessRecorder, notice: Notice | None
) -> StoreSchema:
    """Check the SQLite store's schema; create it, or migrate it forward, as needed."""
    import apsw

    from events.sqlite_datastore import translate

    try:
        return _open_sqlite(datastore, recorder, notice)
    except apsw.Error as e:
        raise translate(e) from e


def _open_sqlite(
    datastore: ApswDatastore, recorder: ApswProcessRecorder, notice: Notice | None
) -> StoreSchema:
    with datastore.borrow() as conn:
        version = user_version(conn)
        meta = read_meta(conn) if version >= 2 else {}
    current = versions.STORE_SCHEMA_VERSION
    writer = meta.get("newest_writer") or SCHEMA_WRITERS.get(version)
    if version > current:
        return StoreSchema(
            version, writer, too_new(f"The event store {datastore.db_name}", version, writer)
        )
    if version < current:
        if not _writable(datastore.db_name):
            # Read as it is (an audit of an old, read-only home); a write fails as on any
            # read-only store, and the next shep that can write migrates it.
            return StoreSchema(version, writer)
        return _upgrade_sqlite(datastore, recorder, notice)
    if versions.is_newer(versions.SHEP_VERSION, writer or "0"):
        with datastore.transaction(commit=True) as c:
            found = read_meta(c.connection).get("newest_writer")
            if not versions.is_newer(found, versions.SHEP_VERSION):
                c.execute(_UPSERT, ("newest_writer", versions.SHEP_VERSION))
        writer = versions.SHEP_VERSION
    return StoreSchema(version, writer)


def _upgrade_sqlite(
    datastore: ApswDatastore, recorder: ApswProcessRecorder, notice: Notice | None
) -> StoreSchema:
    """Create a new store's tables, or migrate an older one (copied aside first)."""
    current = versions.STORE_SCHEMA_VERSION
    with datastore.hold(), datastore.transaction(commit=True) as c:
        # Under the write lock now: another process may have done it meanwhile.
        version = recorded_schema(c.connection) or 0
        if version >= current:
            meta = read_meta(c.connection)
            writer = meta.get("newest_writer") or SCHEMA_WRITERS.get(version)
            if version > current:
                return StoreSchema(
                    version,
                    writer,
                    too_new(f"The event store {datastore.db_name}", version, writer),
                )
            return StoreSchema(version, writer)
        old_writer = read_meta(c.connection).get("newest_writer") or SCHEMA_WRITERS.get(version)
        copied: tuple[str, int, float] | None = None
        if version == 0:
            recorder.create_table()  # runs in the held transaction
        else:
            copied = _copy_aside(datastore.db_name, old_writer or f"schema-{version}", notice)
        for step in range(max(version, 1) + 1, current + 1):
            for statement in SQLITE_STEPS[step]:
                c.execute(statement)
        c.execute(_UPSERT, ("schema_written_by", versions.SHEP_VERSION))
        c.execute(_UPSERT, ("newest_writer", versions.SHEP_VERSION))
        c.execute(f"PRAGMA user_version={current}")
    if copied is not None and notice is not None:
        backup, size, seconds = copied
        took = f" ({_size(size)}, copied in {seconds:.1f} s)" if size >= LARGE_STORE_BYTES else ""
        notice(
            f"upgraded the event store from schema {version} to {current} "
            f"(shep {old_writer} -> {versions.SHEP_VERSION}); the old store is kept "
            f"as {backup}{took}."
        )
    return StoreSchema(current, versions.SHEP_VERSION)


def _writable(db_name: str) -> bool:
    """Whether this process may write the store, and a copy of it beside it."""
    return os.access(db_name, os.W_OK) and os.access(
        os.path.dirname(os.path.abspath(db_name)), os.W_OK
    )


def _has_events(conn: apsw.Connection) -> bool:
    import apsw

    try:
        return conn.execute("SELECT 1 FROM stored_events LIMIT 1").fetchone() is not None
    except apsw.SQLError:
        return False


def backup_path(db_name: str, version: str) -> str:
    """Where an upgrade from shep ``version`` keeps the old store."""
    return f"{db_name}.bak-{version}"


def _copy_aside(db_name: str, old_version: str, notice: Notice | None) -> tuple[str, int, float]:
    """Copy the store, as last committed, to ``shep.db.bak-<old_version>``.

    Called holding the write lock, so what is copied is what is migrated. The
    copy is made under a temporary name and renamed once complete and synced:
    a kill leaves either no copy, a temporary file the next try replaces, or
    the whole copy.
    """
    import apsw

    final = backup_path(db_name, old_version)
    partial = final + ".tmp"
    size = os.path.getsize(db_name) + (
        os.path.getsize(db_name + "-wal") if os.path.exists(db_name + "-wal") else 0
    )
    if size >= LARGE_STORE_BYTES and notice is not None:
        notice(
            f"upgrading the event store: copying it first to {final} ({_size(size)}); "
            "other shep commands wait for it, or say the store is locked: run them again."
        )
    started = time.monotonic()
    try:
        for leftover in (partial, partial + "-journal", partial + "-wal", partial + "-shm"):
            if os.path.lexists(leftover):
                os.unlink(leftover)  # a copy a killed upgrade left
        _backup(db_name, partial)
        os.replace(partial, final)
        _sync_directory(final)
    except (OSError, apsw.Error) as e:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise StoreUnavailableError(
            f"Could not copy the event store to {final} before upgrading it ({reason}); "
            "nothing was changed. Free some space, or make its directory writable, and "
            "run the command again."
        ) from e
    return final, size, time.monotonic() - started


def _backup(db_name: str, partial: str) -> None:
    """Copy the store's committed pages to ``partial``, as private as the store, synced."""
    import apsw

    from events.sqlite_file import connect

    source = connect(db_name, readonly=True)
    try:
        dest = apsw.Connection(partial)
        try:
            with dest.backup("main", source, "main") as backup:
                while not backup.done:
                    backup.step(4096)
            # One self-contained file (the store's WAL mode came with its pages).
            dest.execute("PRAGMA journal_mode=DELETE")
        finally:
            dest.close()
    finally:
        source.close()
    os.chmod(partial, os.stat(db_name).st_mode & 0o777)
    fd = os.open(partial, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_directory(path: str) -> None:
    """Make a rename in ``path``'s directory durable."""
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# --- PostgreSQL -----------------------------------------------------------------------


def open_postgres(
    datastore: PgDatastore, recorder: PgProcessRecorder, where: str, notice: Notice | None
) -> StoreSchema:
    """Check the shared store's schema; create it, or migrate it forward, as needed."""
    version, meta = _pg_schema(datastore, recorder)
    current = versions.STORE_SCHEMA_VERSION
    writer = meta.get("newest_writer") or SCHEMA_WRITERS.get(version)
    if version > current:
        return StoreSchema(
            version, writer, too_new(f"The shared store at {where}", version, writer)
        )
    if version < current:
        if version == 0:
            recorder.create_table()
        found = _upgrade_postgres(datastore, recorder)
        if found > current:  # another home, of a newer shep, got there first
            writer = _pg_schema(datastore, recorder)[1].get("newest_writer")
            refusal = too_new(f"The shared store at {where}", found, writer)
            return StoreSchema(found, writer, refusal)
        if notice is not None and version > 0 and found < current:
            notice(
                f"upgraded the shared store at {where} from schema {found} to {current} "
                f"(shep {writer} -> {versions.SHEP_VERSION}), in one transaction; "
                "its events are untouched."
            )
        return StoreSchema(current, versions.SHEP_VERSION)
    if versions.is_newer(versions.SHEP_VERSION, writer or "0"):
        with datastore.transaction(commit=True) as curs:
            row = curs.execute(
                _pg(datastore, "SELECT value FROM {meta} WHERE key = 'newest_writer' FOR UPDATE")
            ).fetchone()
            if not versions.is_newer(row["value"] if row else None, versions.SHEP_VERSION):
                curs.execute(_pg(datastore, _PG_UPSERT), ("newest_writer", versions.SHEP_VERSION))
        writer = versions.SHEP_VERSION
    return StoreSchema(version, writer)


_PG_UPSERT = (
    "INSERT INTO {meta} VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

#: What each schema version adds to the one before, on the shared store.
PG_STEPS: dict[int, tuple[str, ...]] = {
    2: ("CREATE TABLE IF NOT EXISTS {meta} (key text PRIMARY KEY, value text NOT NULL)",),
}


def _pg(datastore: PgDatastore, statement: str) -> Any:
    """``statement`` with ``{meta}`` as the schema-qualified meta table."""
    from psycopg.sql import SQL, Identifier

    return SQL(statement).format(meta=Identifier(datastore.schema, META_TABLE))


def _pg_schema(datastore: PgDatastore, recorder: PgProcessRecorder) -> tuple[int, dict[str, str]]:
    """The shared store's schema version (0: no tables yet) and its meta rows."""
    with datastore.transaction(commit=False) as curs:
        row = curs.execute(
            "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL "
            "AND to_regproc(%s) IS NOT NULL AS ok, to_regclass(%s) IS NOT NULL AS meta",
            (
                f"{datastore.schema}.{recorder.events_table_name}",
                f"{datastore.schema}.{recorder.tracking_table_name}",
                f"{datastore.schema}.{recorder.append_function}",
                f"{datastore.schema}.{META_TABLE}",
            ),
        ).fetchone()
        if row is None or not row["meta"]:
            return (1 if row and row["ok"] else 0), {}
        meta = {r["key"]: r["value"] for r in curs.execute(_pg(datastore, "SELECT * FROM {meta}"))}
    return int(meta.get("schema_version", 1)), meta


def read_postgres_schema(url: str, *, connect_timeout: float) -> tuple[int, dict[str, str]]:
    """The shared store's schema version (0: no tables yet) and its ``shep_meta`` rows,
    read without changing anything (``shep --version``, ``shep doctor``).

    Raises the shep error a user can act on (``events.postgres_url.store_error``) when
    the server cannot be reached within ``connect_timeout`` s or refuses us.
    """
    from events.postgres import PgDatastore, PgProcessRecorder
    from events.postgres_url import store_error

    try:
        datastore = PgDatastore(url, pool_size=1, max_overflow=0, connect_timeout=connect_timeout)
    except Exception as e:
        raise store_error(e, url) from e
    try:
        return _pg_schema(datastore, PgProcessRecorder(datastore))
    except Exception as e:
        raise store_error(e, url) from e
    finally:
        datastore.close()


def _upgrade_postgres(datastore: PgDatastore, recorder: PgProcessRecorder) -> int:
    """Migrate the shared store to our schema in one transaction; return the version it
    was at (another home may have migrated it meanwhile, or past us)."""
    from psycopg.sql import SQL, Identifier

    current = versions.STORE_SCHEMA_VERSION
    events = SQL("{}.{}").format(
        Identifier(datastore.schema), Identifier(recorder.events_table_name)
    )
    with datastore.transaction(commit=True) as curs:
        # The lock creating the tables takes, then the appenders' lock: no append meanwhile.
        curs.execute("SELECT pg_advisory_xact_lock(7364657)")
        curs.execute(SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(events))
        has_meta = curs.execute(
            "SELECT to_regclass(%s) IS NOT NULL AS meta", (f"{datastore.schema}.{META_TABLE}",)
        ).fetchone()
        version = 1
        if has_meta and has_meta["meta"]:
            row = curs.execute(
                _pg(datastore, "SELECT value FROM {meta} WHERE key = 'schema_version'")
            ).fetchone()
            version = int(row["value"]) if row else 1
        if version >= current:
            return version
        for step in range(version + 1, current + 1):
            for statement in PG_STEPS[step]:
                curs.execute(_pg(datastore, statement))
        upsert = _pg(datastore, _PG_UPSERT)
        curs.execute(upsert, ("schema_version", str(current)))
        curs.execute(upsert, ("schema_written_by", versions.SHEP_VERSION))
        curs.execute(upsert, ("newest_writer", versions.SHEP_VERSION))
    return version
