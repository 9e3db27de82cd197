"""The keeper: one process per home that keeps its copy of the shared log current.

A home on a shared store reads its copy of it (``projections.mirror.copy_file``). Asking
the server what is new before every read costs importing psycopg and a round trip,
more than the read itself; so, while a keeper runs, readers do not ask.

The keeper (``shep _keep``, started detached by the first read that finds none)
``LISTEN``s to the server's notification of each append, copies what is new into
the copy and folds it into the projections; with nothing notified it asks the
server anyway every ``HEARTBEAT`` seconds (a notification lost with a connection
costs no more than that). After each check it records the time and whether the
server answered in the copy's ``shared_keeper`` row. It holds an exclusive
``flock`` on the ``.keeper`` file beside the copy as long as it lives, and
leaves ``LINGER`` seconds after the last read (each read touches that file), at
once when the file is gone (the home was removed), and when a newer shep rebuilt
the projections it folds (the next read starts a keeper of that shep).

A reader (``kept``) trusts the copy as it is when a keeper holds the lock and
checked within ``FRESH`` seconds; it imports nothing for that (``fcntl``, one
``SELECT``). Otherwise it pulls as it would without a keeper. So the copy read
without asking can be behind the server by what the keeper has not applied yet:
the notification's way (milliseconds), up to ``HEARTBEAT`` seconds if a
notification is lost, and, while the server is away, since the last copy: the
reader then says so, with the time of that copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import apsw

from events.errors import StoreUnavailableError
from projections.mirror import lock_path, written_path

#: Seconds between the keeper's checks with the server when nothing was notified.
HEARTBEAT = 5.0
#: A keeper's check older than this is not trusted: the reader asks the server itself.
FRESH = 3 * HEARTBEAT
#: Seconds a keeper stays after the last read of the copy.
LINGER = 30 * 60
#: Set to ``0``: a read never starts a keeper (one already running is still trusted).
AUTOSTART_ENV = "SHEP_SHARED_KEEPER"

_STATE_DDL = (
    "CREATE TABLE IF NOT EXISTS shared_keeper (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "pid INTEGER NOT NULL, url_where TEXT NOT NULL, checked_at REAL NOT NULL, "
    "online INTEGER NOT NULL, error TEXT)"
)


class Kept(NamedTuple):
    """A live keeper's last word on the copy."""

    pid: int
    #: The store it keeps the copy of (``where(url)``).
    server: str
    #: When it last checked with the server (``time.time()``).
    checked_at: float
    #: Whether the server answered that check.
    online: bool
    #: Why it did not (the store's one-line error), or None.
    error: str | None
    #: When the copy was last found equal to the server's log (None: never).
    synced_at: float | None


def linger_words() -> str:
    """How long a keeper stays after the last read, in words (``30 minutes``)."""
    from events.words import counted

    return counted(round(LINGER / 60), "minute")


def autostart() -> bool:
    """Whether a read that finds no keeper starts one (``SHEP_SHARED_KEEPER=0``: no)."""
    return os.environ.get(AUTOSTART_ENV, "") != "0"


def keeper_holds(db_file: str) -> bool:
    """Whether a keeper holds the lock beside the copy (a shared lock cannot be had)."""
    try:
        fd = os.open(lock_path(db_file), os.O_RDONLY)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def keeper_pid(db_file: str) -> int | None:
    """The pid of the keeper holding the lock, or None when none does."""
    if not keeper_holds(db_file):
        return None
    try:
        with open(lock_path(db_file)) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def last_word(conn: apsw.Connection) -> Kept | None:
    """What the copy's keeper last recorded (it may be gone since), or None."""
    try:
        row = conn.execute(
            "SELECT k.pid, k.url_where, k.checked_at, k.online, k.error, "
            "(SELECT synced_at FROM shared_log WHERE id = 1) FROM shared_keeper k WHERE k.id = 1"
        ).fetchone()
    except apsw.SQLError:  # no keeper ever ran on this copy
        return None
    if row is None:
        return None
    pid, server, checked_at, online, error, synced_at = row
    return Kept(int(pid), str(server), float(checked_at), bool(online), error, synced_at)


def note_written(db_file: str, server: str, position: int) -> None:
    """A command of this home appended up to ``position`` of the store at ``server``
    (``where(url)``): its next read must not miss it (``kept``)."""
    path = written_path(db_file)
    temporary = f"{path}.{os.getpid()}"
    try:
        with open(temporary, "w") as f:
            f.write(f"{position} {server}\n")
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # a read-only home: its reads pull, as before


def _behind_own_write(conn: apsw.Connection, db_file: str, server: str) -> bool:
    """Whether this home wrote, to this store, past what the copy holds."""
    try:
        with open(written_path(db_file)) as f:
            position, _, written_to = f.read().strip().partition(" ")
    except OSError:
        return False
    if written_to != server or not position.isdigit():
        return False
    head = conn.execute("SELECT max(notification_id) FROM stored_events").fetchone()
    return int(position) > int(head[0] or 0 if head else 0)


def kept(conn: apsw.Connection, db_file: str, server: str) -> Kept | None:
    """The keeper's word if one holds the lock and checked within ``FRESH`` seconds (read
    the copy as it is), else None (ask the server): also when this home wrote to
    ``server`` (``where(url)``) past the copy's head. Tells the keeper a read happened."""
    if not keeper_holds(db_file):
        return None
    with contextlib.suppress(OSError):  # a read-only home: the keeper leaves sooner
        os.utime(lock_path(db_file))
    word = last_word(conn)
    if word is None or word.server != server:  # a keeper of the store this home was on
        return None
    # A check from the future (the clock went back) is not trusted either.
    if not -1.0 <= time.time() - word.checked_at <= FRESH:
        return None
    if word.online and _behind_own_write(conn, db_file, server):
        return None
    return word


def as_of(synced_at: float | None) -> str:
    """``14:02:11`` (today), ``2026-11-26 14:02:11`` (before), or ``never``."""
    if synced_at is None:
        return "never"
    when = time.localtime(synced_at)
    if time.strftime("%Y-%m-%d", when) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", when)
    return time.strftime("%Y-%m-%d %H:%M:%S", when)


def _take(fd: int) -> bool:
    """The keeper's lock, waited for a moment (a reader may hold a shared one briefly)."""
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.05)
    return False


def _record(conn: apsw.Connection, url: str, *, online: bool, error: str | None) -> None:
    from events.postgres_url import where

    with conn:
        conn.execute(_STATE_DDL)
        conn.execute(
            "INSERT INTO shared_keeper VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET pid = excluded.pid, url_where = excluded.url_where, "
            "checked_at = excluded.checked_at, online = excluded.online, error = excluded.error",
            (os.getpid(), where(url), time.time(), int(online), error),
        )


def keep(
    db_file: str,
    url: str,
    *,
    linger: float = LINGER,
    heartbeat: float = HEARTBEAT,
    on_notice: Callable[[str], None] | None = None,
) -> bool:
    """Keep the copy at ``db_file`` current with ``url`` until ``linger`` seconds pass
    without a read; False at once when another keeper holds the lock.

    Raises what a pull raises but the server's absence (a copy made from another store,
    a broken chain): the keeper then leaves, and readers pull and say it themselves.
    """
    from projections.database import open_database

    say = on_notice or (lambda line: None)
    path = lock_path(db_file)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if not _take(fd):
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.utime(path)  # the lingering counts from now
        conn = open_database(db_file)
        try:
            _loop(conn, url, path, os.fstat(fd).st_ino, linger, heartbeat, say)
        finally:
            with contextlib.suppress(apsw.Error), conn:
                conn.execute("DELETE FROM shared_keeper")  # no keeper's word outlives it
            conn.close()
        return True
    finally:
        os.close(fd)  # releases the lock


def _loop(
    conn: apsw.Connection,
    url: str,
    path: str,
    inode: int,
    linger: float,
    heartbeat: float,
    say: Callable[[str], None],
) -> None:
    import psycopg

    from events.postgres_url import store_error
    from projections.catch_up import catch_up
    from projections.follow import CHANNEL
    from projections.mirror import CONNECT_TIMEOUT, pull

    listener: Any = None
    away = False
    try:
        while _wanted(conn, path, inode, linger):
            try:
                if listener is None:
                    listener = psycopg.connect(
                        url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
                    )
                    listener.execute(f'LISTEN "{CHANNEL}"')
                # Listening: whatever was appended before is copied now, after by the next.
                pull(conn, url)
                catch_up(conn, pull=False)
                _record(conn, url, online=True, error=None)
                if away:
                    say("the shared store is back.")
                    away = False
                for _ in listener.notifies(timeout=heartbeat, stop_after=1):
                    pass
            except (psycopg.Error, StoreUnavailableError) as e:
                error = e if isinstance(e, StoreUnavailableError) else store_error(e, url)
                if isinstance(error.__cause__, apsw.BusyError):
                    time.sleep(0.1)  # a reader of this home folds the same events: again
                    continue
                if listener is not None:
                    with contextlib.suppress(Exception):
                        listener.close()
                    listener = None
                _record(conn, url, online=False, error=str(error))
                if not away:
                    say(f"{error} Trying again every {heartbeat:g}s.")
                    away = True
                time.sleep(heartbeat)
    finally:
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()


def _wanted(conn: apsw.Connection, path: str, inode: int, linger: float) -> bool:
    """Whether the keeper is still wanted: its file is there (the same one), read lately,
    and the projections are those this shep folds (a newer shep rebuilt them: it starts a
    keeper of its own)."""
    from projections.state import stored_versions
    from projections.tables import PROJECTION_VERSIONS

    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_ino != inode or time.time() - st.st_mtime > linger:
        return False
    return stored_versions(conn) == dict(PROJECTION_VERSIONS)


__all__ = [
    "AUTOSTART_ENV",
    "FRESH",
    "HEARTBEAT",
    "LINGER",
    "Kept",
    "as_of",
    "autostart",
    "keep",
    "keeper_holds",
    "keeper_pid",
    "kept",
    "last_word",
    "linger_words",
    "lock_path",
    "note_written",
    "written_path",
]
