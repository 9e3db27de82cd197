"""The SQLite file behind the event store: connections, pragmas, tables, locks.

The write side (``events.sqlite``) and the read side (``projections``)
both open the database through here. ``shep status`` imports it, so it stays
pure apsw: no eventsourcing, no pathlib, no hashlib (the chain is ``events.chain``).

Durability: ``journal_mode=WAL`` with ``synchronous=FULL``. In WAL mode FULL
syncs the log at every commit, so a committed transaction survives power loss;
NORMAL would only protect against application crashes and could lose the last
commits on power loss. Run transitions and decisions must survive power loss,
so FULL is the default. High-volume agent output stays cheap because it is
batched: many events per transaction, one sync per batch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

import apsw

from events.errors import HomePathError, StoreCorruptedError, StoreError, StoreUnavailableError

if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_SYNCHRONOUS = "FULL"
DEFAULT_BUSY_TIMEOUT_MS = 10_000

_SYNCHRONOUS_VALUES = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})


def events_table_ddl(table: str) -> list[str]:
    """DDL of an append-only events table with a gap-free position and a hash chain.

    ``notification_id`` is the rowid: SQLite gives the next integer and a rolled
    back insert leaves no hole, so positions are gap-free. Triggers refuse
    UPDATE and DELETE; ``shep audit verify`` catches edits made around them.
    """
    return [
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "notification_id INTEGER PRIMARY KEY, "
        "originator_id TEXT NOT NULL, "
        "originator_version INTEGER NOT NULL, "
        "topic TEXT NOT NULL, "
        "state BLOB NOT NULL, "
        "chain_hash BLOB NOT NULL, "
        "UNIQUE (originator_id, originator_version))",
        f"CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table} "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table} "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END",
    ]


TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS tracking ("
    "application_name TEXT PRIMARY KEY, "
    "notification_id INTEGER NOT NULL) WITHOUT ROWID"
)


def connect(
    path: str | Path,
    *,
    synchronous: str = DEFAULT_SYNCHRONOUS,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    readonly: bool = False,
    salvage: bool = False,
) -> apsw.Connection:
    """Open the database with shep's pragmas (WAL, synchronous, busy timeout).

    ``salvage`` (read-only connections only) reads as much of a damaged file as
    can be read: a file shorter than its header says is read up to where it
    ends instead of refused whole, so a verifier can name where damage starts.
    """
    sync = synchronous.upper()
    if sync not in _SYNCHRONOUS_VALUES:
        raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS_VALUES)}")
    flags = apsw.SQLITE_OPEN_URI | (
        apsw.SQLITE_OPEN_READONLY
        if readonly
        else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    conn = (
        _open_read_only(str(path), flags, salvage=salvage, busy_timeout_ms=busy_timeout_ms)
        if readonly
        else apsw.Connection(str(path), flags=flags)
    )
    conn.setbusytimeout(busy_timeout_ms)
    if not readonly and ":memory:" not in str(path) and "mode=memory" not in str(path):
        _use_wal(conn, busy_timeout_ms)
    conn.execute(f"PRAGMA synchronous={sync}")
    return conn


def _use_wal(conn: apsw.Connection, busy_timeout_ms: int) -> None:
    """Switch a new database to WAL; retry while another process does the same.

    Changing the journal mode takes an exclusive lock and SQLite reports a
    busy database at once instead of waiting out the busy timeout, so several
    shep processes opening a fresh home together would fail without this.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _open_read_only(
    path: str, flags: int, *, salvage: bool, busy_timeout_ms: int
) -> apsw.Connection:
    """A read-only connection, also to a store in a directory no one may write.

    SQLite reads a WAL database through its -shm file, which it must create when
    it is absent: in a read-only directory it cannot. With no -wal file either,
    no writer can be committing (a WAL writer needs that file), so the file is
    then opened as immutable: read as it is, without a -shm file.
    """
    conn = _salvaging(apsw.Connection(path, flags=flags), salvage)
    # Before the first read: a writer closing the store holds a lock for a moment.
    conn.setbusytimeout(busy_timeout_ms)
    try:
        conn.execute("PRAGMA schema_version").fetchall()
    except apsw.CantOpenError:
        conn.close()
        if path.startswith("file:") or not os.path.exists(path) or os.path.exists(path + "-wal"):
            raise
        from urllib.parse import quote

        uri = f"file:{quote(os.path.abspath(path))}?immutable=1"
        conn = _salvaging(apsw.Connection(uri, flags=flags), salvage)
    except apsw.Error:
        conn.close()
        raise
    return conn


def _salvaging(conn: apsw.Connection, salvage: bool) -> apsw.Connection:
    if salvage:
        # SQLite refuses a file shorter than its header's page count unless the
        # schema is writable; on a read-only connection that writes nothing.
        conn.execute("PRAGMA writable_schema=ON")
    return conn


def store_error(error: BaseException, path: str | Path) -> StoreError:
    """Translate a driver error into the shep error a user can act on."""
    cause: BaseException = error
    while not isinstance(cause, apsw.Error) and cause.__cause__ is not None:
        cause = cause.__cause__
    where = str(path)
    if isinstance(cause, apsw.CorruptError | apsw.NotADBError):
        return StoreCorruptedError(
            f"The event store {where} is damaged or not a shep database ({cause}). "
            "Restore it from a backup or move it aside."
        )
    if isinstance(cause, apsw.ReadOnlyError | apsw.CantOpenError | apsw.PermissionsError):
        return StoreUnavailableError(
            f"Cannot open or write the event store {where} ({cause}). "
            "Check that SHEP_HOME is writable."
        )
    if isinstance(cause, apsw.FullError):
        return StoreUnavailableError(f"The disk holding {where} is full. Free some space.")
    if isinstance(cause, apsw.BusyError):
        return StoreUnavailableError(
            f"The event store {where} stayed locked by another process. Try again."
        )
    return StoreError(f"The event store {where} failed: {cause}")


def ensure_home(home: str | Path) -> str:
    """Create the shep home directory (mode 0700) if needed; return the database path."""
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
    except OSError as e:
        raise StoreUnavailableError(
            f"Cannot create SHEP_HOME {home} ({e.strerror}). "
            "Point SHEP_HOME at a writable directory."
        ) from e
    return os.path.join(home, "shep.db")


def home_from_env() -> str:
    """``$SHEP_HOME``, or ``~/.shep``, as an absolute path; refused unless it is valid UTF-8.

    Absolute once, here: a relative SHEP_HOME names the directory under the one shep was
    started in, and a background worker (which runs inside the home) and every path
    recorded from it must name that same directory.
    Paths are recorded as text (events, SQLite file names); bytes that are not
    UTF-8 reach Python as lone surrogates, which no encoder accepts.
    """
    value = os.environ.get("SHEP_HOME")
    home = os.path.expanduser(value) if value else os.path.join(os.path.expanduser("~"), ".shep")
    try:
        home = os.path.abspath(home)
    except FileNotFoundError as e:  # os.getcwd(): the current directory was removed
        raise HomePathError(
            f"SHEP_HOME {home!r} is relative and the current directory no longer exists. "
            "Change to an existing directory, or make SHEP_HOME absolute."
        ) from e
    try:
        home.encode()
    except UnicodeEncodeError as e:
        raise HomePathError(
            f"SHEP_HOME {os.fsencode(home)!r} is not valid UTF-8. "
            "Point SHEP_HOME at a directory whose path is valid UTF-8."
        ) from e
    return home


_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def file_write_lock(path: str | Path) -> threading.Lock:
    """The process-wide lock writers of one database file take before ``BEGIN IMMEDIATE``.

    Threads of one process then queue on this lock instead of sleeping in
    SQLite's busy handler, which can stall a waiting writer for seconds.
    """
    name = str(path)
    if name.startswith("file:"):
        name = name[5:].split("?", 1)[0]
    key = os.path.realpath(name)
    with _file_locks_guard:
        return _file_locks.setdefault(key, threading.Lock())


@contextmanager
def immediate_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` behind the file's lock, rolled back on any error.

    IMMEDIATE takes the write lock before the first read, so what the
    transaction reads cannot be changed by another writer before it writes.
    """
    with file_write_lock(conn.filename):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            with suppress(apsw.Error):
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
