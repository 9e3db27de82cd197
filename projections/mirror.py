"""A home on a shared store keeps a verified copy of the log, and its projections, in SQLite.

The shared log lives in PostgreSQL; ``$SHEP_HOME/shared-cache-<store>.db`` holds,
position for position, a copy of its ``stored_events`` and, beside it, the same
projections a home on SQLite keeps. Each store has its own copy (``copy_file``): a home
pointed at another store reads that store's copy, and finds the first one as it was when
it comes back. Everything that reads (status, logs, the inbox, replay, audit) reads the
copy, so it stays fast and works, as of the last copy, while the server is away.

``pull`` copies what the server has past the copy's head. Nothing is taken on trust:
each row's chain hash is computed again from the one before it and must equal the
server's, and the server's hash at the copy's head must equal the copy's, so a copy is
never continued from another store's log.

Only psycopg is imported, not eventsourcing: ``shep status`` on a shared store pays for
one connection and one query when nothing is new.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import apsw

from events.chain import GENESIS_HASH, chain_hash
from events.errors import ChainBrokenError, StoreError, StoreUnavailableError
from events.postgres_url import store_error, where
from events.sqlite_file import immediate_transaction
from events.words import counted

#: Seconds to wait for the server before reading the copy as it is.
CONNECT_TIMEOUT = 3

_SYNC_DDL = (
    "CREATE TABLE IF NOT EXISTS shared_log ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), url_where TEXT NOT NULL, synced_at REAL NOT NULL)"
)
_SELECT_AFTER = (
    "SELECT notification_id, originator_id, originator_version, topic, state, chain_hash "
    "FROM stored_events WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
)
_INSERT = "INSERT INTO stored_events VALUES (?, ?, ?, ?, ?, ?)"

#: What the copy of a shared store is called, before the store's name (``copy_file``).
COPY_PREFIX = "shared-cache-"
#: The one copy an older shep kept, whichever store the home was on.
LEGACY_COPY = "shared-cache.db"

#: Copies this process keeps: database file -> URL of the shared store.
_copies: dict[str, str] = {}
#: Open connections, one per URL.
_connections: dict[str, Any] = {}
#: URLs found unreachable by this process: not tried again until ``forget_offline``.
_offline: set[str] = set()
#: Who is told, per URL, that its server is away (a face's ``say``).
_notices: dict[str, Callable[[str], None]] = {}


def copy_file(home_dir: str, url: str) -> str:
    """The file of this home's copy of the store at ``url``:
    ``shared-cache-<host>-<port>-<database>-<hash>.db``, the hash telling apart names that
    read alike. A copy an older shep kept as ``shared-cache.db`` is taken over when it is
    a copy of this store (``_adopt``)."""
    path = os.path.join(home_dir, copy_name(url))
    if not os.path.exists(path) and os.path.exists(os.path.join(home_dir, LEGACY_COPY)):
        _adopt(os.path.join(home_dir, LEGACY_COPY), path, where(url))
    return path


def copy_name(url: str) -> str:
    """The name of a home's copy of the store at ``url`` (``copy_file``)."""
    import hashlib

    server = where(url)
    name = "".join(c if c.isalnum() or c in "._" else "-" for c in server).strip("-")[:80]
    digest = hashlib.sha256(server.encode()).hexdigest()[:8]
    return f"{COPY_PREFIX}{name}-{digest}.db"


def _adopt(legacy: str, path: str, server: str) -> None:
    """Copy an older shep's ``shared-cache.db`` to ``path`` when it is a copy of ``server``,
    then remove it (and the files beside it): the log it holds needs no copying again, and
    reads work at once even with the server away.

    Nothing is taken while that shep's keeper still keeps it (its lock is held): the copy is
    then made anew from the server. SQLite's backup copies a consistent state whoever has
    the file open, into a name of its own renamed into place, so no reader sees half of it.
    """
    import fcntl

    fd = os.open(lock_path(legacy), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        if os.path.exists(path) or not os.path.exists(legacy):
            return  # another process took it over first
        partial = path + ".adopting"
        try:
            source = apsw.Connection(legacy, flags=apsw.SQLITE_OPEN_READONLY)
            try:
                row = source.execute("SELECT url_where FROM shared_log WHERE id = 1").fetchone()
                if row is None or row[0] != server:
                    return  # a copy of another store: left as it is
                target = apsw.Connection(partial)
                try:
                    with target.backup("main", source, "main") as backup:
                        backup.step(-1)
                finally:
                    target.close()
            finally:
                source.close()
        except apsw.Error:
            with contextlib.suppress(OSError):
                os.remove(partial)
            return  # not readable as a copy: made anew from the server
        os.replace(partial, path)
        with contextlib.suppress(OSError):
            os.replace(written_path(legacy), written_path(path))
        for leftover in (legacy, legacy + "-wal", legacy + "-shm", lock_path(legacy)):
            with contextlib.suppress(OSError):
                os.remove(leftover)
    finally:
        os.close(fd)


def lock_path(db_file: str) -> str:
    """``shared-cache-<store>.keeper`` beside ``shared-cache-<store>.db``: the keeper's lock
    (``projections.keeper``)."""
    return os.path.splitext(db_file)[0] + ".keeper"


def written_path(db_file: str) -> str:
    """The ``.written`` file beside the copy: how far this home's last write went."""
    return os.path.splitext(db_file)[0] + ".written"


def register(path: str, url: str, on_offline: Callable[[str], None] | None = None) -> None:
    """Make ``catch_up`` of the database at ``path`` pull from ``url`` first; ``on_offline``
    is told in one line when the server cannot be reached."""
    _copies[os.path.abspath(path)] = url
    if on_offline is not None:
        _notices[url] = on_offline


def url_of(conn: apsw.Connection) -> str | None:
    """The shared store this database is a copy of, or None for a home's own store."""
    return _copies.get(os.path.abspath(conn.filename)) if _copies else None


def is_offline(url: str) -> bool:
    return url in _offline


def forget_offline() -> None:
    """Try unreachable servers again (a follower polling for their return)."""
    _offline.clear()


def _connect(url: str) -> Any:
    conn = _connections.get(url)
    if conn is not None and not conn.closed:
        return conn
    import psycopg

    conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
    _connections[url] = conn
    return conn


def _drop(url: str) -> None:
    conn = _connections.pop(url, None)
    if conn is not None:
        # A broken connection may fail to close; it is gone either way.
        with contextlib.suppress(Exception):
            conn.close()


def pull(conn: apsw.Connection, url: str, *, batch_size: int = 5000) -> int:
    """Copy the server's events past the copy's head into it; return how many were copied.

    Raises ``StoreUnavailableError`` when the server can't be reached (and marks
    it offline for this process), ``ChainBrokenError`` when a row's hash does not
    follow, ``StoreError`` when the copy was made from another store.
    """
    import psycopg

    copied = 0
    try:
        server = _connect(url)
        while True:
            with immediate_transaction(conn):
                head = conn.execute(
                    "SELECT notification_id, chain_hash FROM stored_events "
                    "ORDER BY notification_id DESC LIMIT 1"
                ).fetchone()
                position, previous = (int(head[0]), bytes(head[1])) if head else (0, GENESIS_HASH)
                if head is not None and copied == 0:
                    _check_same_log(conn, server, url, position, previous)
                rows = server.execute(_SELECT_AFTER, (position, batch_size)).fetchall()
                checked = []
                for nid, oid, version, topic, raw_state, raw_hash in rows:
                    position += 1
                    state, stored_hash = bytes(raw_state), bytes(raw_hash)
                    expected = chain_hash(
                        previous, position, oid.encode(), version, topic.encode(), state
                    )
                    if nid != position or expected != stored_hash:
                        raise ChainBrokenError(
                            f"The shared store at {where(url)} breaks its hash chain at "
                            f"position {position}: not copied. Run `shep audit verify`."
                        )
                    previous = stored_hash
                    checked.append((nid, oid, version, topic, state, stored_hash))
                conn.executemany(_INSERT, checked)
                _mark_synced(conn, url)
            copied += len(rows)
            if len(rows) < batch_size:
                return copied
    except psycopg.errors.UndefinedTable:
        # The server has no log yet: nothing to copy, unless the copy holds another log.
        head = conn.execute("SELECT max(notification_id) FROM stored_events").fetchone()
        if head and head[0]:
            raise _other_store(conn, int(head[0]), url) from None
        _mark_synced_now(conn, url)
        return copied
    except psycopg.Error as e:
        _drop(url)
        _offline.add(url)
        raise store_error(e, url) from e
    except apsw.Error as e:
        from events.sqlite_file import store_error as sqlite_error

        raise sqlite_error(e, conn.filename) from e


def newest_writer(url: str) -> str | None:
    """The newest shep that wrote to the shared store, as it says (None: it cannot say)."""
    import psycopg

    try:
        row = (
            _connect(url)
            .execute("SELECT value FROM shep_meta WHERE key = 'newest_writer'")
            .fetchone()
        )
    except psycopg.Error:
        return None
    return str(row[0]) if row else None


def _check_same_log(
    conn: apsw.Connection, server: Any, url: str, position: int, head_hash: bytes
) -> None:
    row = server.execute(
        "SELECT chain_hash FROM stored_events WHERE notification_id = %s", (position,)
    ).fetchone()
    if row is None or bytes(row[0]) != head_hash:
        raise _other_store(conn, position, url)


def _other_store(conn: apsw.Connection, position: int, url: str) -> StoreError:
    name = os.path.basename(conn.filename)
    return StoreError(
        f"This home's copy of the log ({name}, {counted(position, 'event')}) was made "
        f"from another store than {where(url)}. Move it aside; the next command "
        "copies the log anew."
    )


def _mark_synced(conn: apsw.Connection, url: str) -> None:
    conn.execute(_SYNC_DDL)
    conn.execute(
        "INSERT INTO shared_log VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE "
        "SET url_where = excluded.url_where, synced_at = excluded.synced_at",
        (where(url), time.time()),
    )


def _mark_synced_now(conn: apsw.Connection, url: str) -> None:
    with immediate_transaction(conn):
        _mark_synced(conn, url)


def staleness(conn: apsw.Connection) -> tuple[float | None, int]:
    """Seconds since the copy was last brought up to date (None: never), and its event count."""
    try:
        row = conn.execute("SELECT synced_at FROM shared_log WHERE id = 1").fetchone()
    except apsw.SQLError:
        row = None
    count = conn.execute("SELECT coalesce(max(notification_id), 0) FROM stored_events").fetchone()
    age = time.time() - float(row[0]) if row else None
    return age, int(count[0]) if count else 0


def describe_staleness(conn: apsw.Connection) -> str:
    """``copied 12s ago, 340 events`` (or ``never copied``), for the offline notice."""
    age, count = staleness(conn)
    if age is None:
        return f"never copied, {counted(count, 'event')}"
    return f"copied {_ago(age)} ago, {counted(count, 'event')}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))}s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)}m"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)}h"
    return f"{round(seconds / 86400)}d"


def pull_registered(conn: apsw.Connection) -> bool:
    """``pull`` if ``conn`` is a registered copy; False when its server can't be reached.

    The first time a process finds the server away it says so in one line (to the
    ``on_offline`` registered with it), with how old the copy it reads instead is;
    later calls read the copy as it is without trying again (``forget_offline``).
    """
    url = url_of(conn)
    if url is None:
        return True
    if url in _offline:
        return False
    try:
        pull(conn, url)
    except StoreUnavailableError as e:
        say = _notices.get(url)
        if say is not None:
            say(f"shep: {e} Showing this machine's copy of the log ({describe_staleness(conn)}).")
        return False
    return True


__all__ = [
    "CONNECT_TIMEOUT",
    "COPY_PREFIX",
    "LEGACY_COPY",
    "copy_file",
    "copy_name",
    "describe_staleness",
    "forget_offline",
    "is_offline",
    "lock_path",
    "pull",
    "pull_registered",
    "register",
    "staleness",
    "url_of",
    "written_path",
]
