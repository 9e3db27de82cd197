"""Keeps the read models current: catch up from the tracked position, or rebuild from scratch.

Each batch of events updates every projection's tables and its tracking row
in one transaction, so an event is applied exactly once even when several
processes catch up at the same time or one is killed mid-batch. Each event is
decoded once and handed to every projection that reads its type.

A rebuild replays the log into new tables beside the current ones, in batches
that each commit (writers are not held up meanwhile, and readers go on reading
the current tables), then swaps them in within one transaction: a rebuild
killed at any point leaves a projection as it was or rebuilt, never half.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from datetime import datetime
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

import apsw

from events.catalog import EVENT_CLASSES, decode_event
from events.errors import StoreError, UnknownEventError
from events.sqlite_file import connect, immediate_transaction, store_error
from projections.base import Batch, Folded, Handler, Projection, SegmentHandler, Writer
from projections.fold import iso_time, views_of
from projections.mirror import pull_registered
from projections.schema import PROJECTIONS, create_tables, record_version
from projections.state import (
    Progress,
    RebuildProgress,
    fold_cache,
    head_position,
    lag,
    positions,
    schema_current,
    stored_versions,
)
from projections.tables import PROJECTION_VERSIONS

if TYPE_CHECKING:
    from concurrent.futures import Future

_TRACK = (
    "INSERT INTO tracking VALUES (?, ?) ON CONFLICT (application_name) DO UPDATE "
    "SET notification_id = excluded.notification_id "
    "WHERE tracking.notification_id < excluded.notification_id RETURNING notification_id"
)
_SELECT = (
    "SELECT notification_id, originator_id, topic, state, chain_hash FROM stored_events "
    "WHERE notification_id > ? ORDER BY notification_id LIMIT ?"
)
#: A rebuild writes its new tables under this prefix until they are swapped in.
SHADOW_PREFIX = "rebuilding_"

Row = tuple[int, str, str, bytes, bytes]


def catch_up(conn: apsw.Connection, *, batch_size: int = 5000, pull: bool = True) -> int:
    """Apply every event past the tracked positions; return how many events were read.

    Missing tables or indexes are created first, and a projection of another
    version rebuilt (``migrate``). A read-only store is left as it is: its
    projections are read as they are, and this returns 0. A home's copy of a
    shared log (``projections.mirror``) is brought up to date from the server first,
    unless the caller has just done so (``pull=False``).
    """
    if pull:
        pull_registered(conn)  # a copy of a shared log; nothing otherwise
    try:
        if conn.readonly("main") or lag(conn) <= 0:
            return 0
        if not schema_current(conn):
            migrate(conn)
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    total = 0
    try:
        with fold_cache(conn):
            while True:
                with immediate_transaction(conn):
                    read = _catch_up_batch(conn, PROJECTIONS, batch_size)
                total += read
                if read < batch_size:
                    return total
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    except UnknownEventError as e:
        # An event a newer shep wrote: the refusal names it (the store says which).
        raise _naming_writer(conn, e) from None


def migrate(conn: apsw.Connection, progress: Progress | None = None) -> None:
    """Bring the store's projections to this shep: create what is missing, then rebuild
    each projection built by another version, alone (``rebuild``: a kill leaves it as it
    was or rebuilt, never half).

    ``projections.database.open_database`` calls this only when the store's schema is
    not current (``projections.state.schema_current``).
    """
    if changed := create_tables(conn):
        rebuild(conn, changed, progress=progress, reason="changed", only_changed=True)


def _catch_up_batch(
    conn: apsw.Connection, projections: Sequence[Projection], batch_size: int
) -> int:
    """In the caller's transaction: apply the next batch past the tracked positions."""
    names = [p.name for p in projections]
    tracked = positions(conn, names)
    cursor = conn.cursor()
    read, last = _apply_next(conn, cursor, projections, tracked, batch_size)
    for name in names:
        if last > tracked[name] and not cursor.execute(_TRACK, (name, last)).fetchall():
            raise StoreError(f"projection {name} was updated concurrently")
    return read


def _apply_next(
    conn: apsw.Connection,
    cursor: Writer,
    projections: Sequence[Projection],
    tracked: dict[str, int],
    batch_size: int,
) -> tuple[int, int]:
    """Apply the events past the slowest of ``tracked`` to the projections behind each;
    return how many were read and the last one's position (0: none).
    """
    rows = _read(conn, min(tracked.values()), batch_size)
    _apply_rows(cursor, projections, tracked, rows)
    return len(rows), rows[-1][0] if rows else 0


def _read(conn: apsw.Connection, after: int, count: int) -> list[Row]:
    """The next ``count`` events of the log past position ``after``."""
    return cast(list[Row], conn.execute(_SELECT, (after, count)).fetchall())


def _apply_rows(
    cursor: Writer, projections: Sequence[Projection], tracked: dict[str, int], rows: list[Row]
) -> None:
    if rows:
        batch = Batch(cursor)
        _apply(batch, rows, projections, tracked)
        batch.flush()


def _apply(
    batch: Batch, rows: Sequence[Row], projections: Sequence[Projection], tracked: dict[str, int]
) -> None:
    lagging = [p for p in projections if tracked[p.name] < rows[-1][0]]
    if len(set(tracked.values())) != 1:
        # Projections at different positions: which handle an event depends on its position.
        _apply_each(
            batch, rows, lambda topic, position: _handlers(lagging, topic, tracked, position)
        )
        return
    # Usually every projection is at the same position: then the handlers for an event
    # type are the same for the whole batch, and consecutive events of a type most of
    # the log is made of are folded a segment at a time.
    plans: dict[str, tuple[list[Handler], list[SegmentHandler] | None]] = {}
    for topic, group in groupby(rows, itemgetter(2)):
        plan = plans.get(topic)
        if plan is None:
            plan = plans[topic] = _plan(lagging, topic)
        handlers, segments = plan
        if not handlers:
            # Most events of a run (checkpoints, heartbeats) concern few projections:
            # decode only what some handler reads.
            continue
        segment = list(group)
        if segments is None or not _fold_segment(batch, segment, segments):
            _apply_each(batch, segment, lambda topic, position: plans[topic][0])


def _plan(
    projections: Sequence[Projection], topic: str
) -> tuple[list[Handler], list[SegmentHandler] | None]:
    """The handlers of ``topic`` in ``projections``, and their segment handlers when each
    of them folds the type a segment at a time (else None)."""
    kind = EVENT_CLASSES.get(topic)
    if kind is None:
        raise UnknownEventError(topic)
    handlers = [h for p in projections if (h := p.handlers.get(kind)) is not None]
    segments = [s for p in projections if (s := p.segments.get(kind)) is not None]
    return handlers, segments if segments and len(segments) == len(handlers) else None


def _handlers(
    projections: Sequence[Projection], topic: str, tracked: dict[str, int], position: int
) -> list[Handler]:
    kind = EVENT_CLASSES.get(topic)
    if kind is None:
        raise UnknownEventError(topic)
    return [
        handler
        for projection in projections
        if position > tracked[projection.name]
        and (handler := projection.handlers.get(kind)) is not None
    ]


def _fold_segment(batch: Batch, rows: list[Row], segments: list[SegmentHandler]) -> bool:
    """Fold ``rows`` (of one type) as fold views through ``segments``; False, having folded
    nothing, when some state is not of the type's current form."""
    views = views_of(EVENT_CLASSES[rows[0][2]]).decode([row[3] for row in rows])
    if views is None:
        return False
    items: list[Folded] = []
    last_time = last_at = ""
    for (position, stream, _, _, _), view in zip(rows, views, strict=True):
        if view.timestamp != last_time:
            # Events appended together share their timestamp: format it once.
            last_time = view.timestamp
            last_at = iso_time(last_time)
        items.append((position, stream, last_at, view))
    for segment in segments:
        segment(batch, items)
    return True


def _apply_each(
    batch: Batch, rows: Iterable[Row], handlers_of: Callable[[str, int], list[Handler]]
) -> None:
    """Fold ``rows`` event by event, through the handlers ``handlers_of(topic, position)``."""
    last_time: datetime | None = None
    last_at = ""
    for position, stream, topic, state, chain in rows:
        handlers = handlers_of(topic, position)
        if not handlers:
            continue
        event = decode_event(topic, state)
        batch.position = position
        if event.timestamp != last_time:
            last_time = event.timestamp
            last_at = last_time.isoformat()
        batch.at = last_at
        batch.stream = stream
        batch.chain = chain
        for handler in handlers:
            handler(batch, event)


def _naming_writer(conn: apsw.Connection, error: UnknownEventError) -> UnknownEventError:
    """The refusal to read a newer shep's event, naming the newest shep that wrote the log:
    this file's, or for a copy of a shared log, the server's."""
    from events.migrations import written_by
    from events.postgres_url import where
    from projections.mirror import newest_writer, url_of

    url = url_of(conn)
    if url is None:
        return error.naming(written_by(conn), where=f"The event store {conn.filename}")
    return error.naming(newest_writer(url), where=f"The shared store at {where(url)}")


def rebuild(
    conn: apsw.Connection,
    names: Iterable[str] | None = None,
    *,
    batch_size: int = 20_000,
    progress: Progress | None = None,
    reason: str = "",
    only_changed: bool = False,
) -> int:
    """Replay the whole log into new tables of the named projections (all by default) and
    swap them in; return how many events were replayed.

    The new tables are filled beside the current ones, in transactions of
    ``batch_size`` events (``progress`` is told after each); one last transaction
    applies what was appended meanwhile, replaces the tables, builds their
    indexes (cheaper once over a full table than kept through every insert) and
    records the projections' versions. Killed before that commits, the
    projections are as they were; the next rebuild drops what the killed one
    left. One process rebuilds at a time: another waits for it, and with
    ``only_changed`` then rebuilds only what is still of another version.
    """
    wanted = tuple(names) if names is not None else tuple(p.name for p in PROJECTIONS)
    unknown = sorted(set(wanted) - set(PROJECTION_VERSIONS))
    if unknown:
        raise StoreError(
            f"No projection named {', '.join(unknown)}. "
            f"Projections: {', '.join(PROJECTION_VERSIONS)}."
        )
    try:
        with _rebuild_lock(conn, wanted, progress, reason), fold_cache(conn):
            if only_changed:
                stored = stored_versions(conn)
                wanted = tuple(n for n in wanted if stored.get(n) != PROJECTION_VERSIONS[n])
            projections = tuple(p for p in PROJECTIONS if p.name in wanted)
            if not projections:
                return 0
            return _rebuild(conn, projections, batch_size, progress, reason)
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    except UnknownEventError as e:
        raise _naming_writer(conn, e) from None


def _rebuild(
    conn: apsw.Connection,
    projections: tuple[Projection, ...],
    batch_size: int,
    progress: Progress | None,
    reason: str,
) -> int:
    names = tuple(p.name for p in projections)
    shadow = ShadowWriter(conn.cursor(), [t for p in projections for t in p.tables])
    with immediate_transaction(conn):
        _drop_shadows(conn)
        for projection in projections:
            for statement in projection.ddl:
                if not statement.startswith("CREATE INDEX"):
                    shadow.execute(statement)
    # A thread of its own reads the next batch while this connection commits the last,
    # and copies what the commits appended to the WAL into the file (a checkpoint) while
    # this one folds, instead of these commits doing it in turn.
    with _pragma(conn, "wal_autocheckpoint", 0), closing(_Ahead(conn.filename)) as ahead:
        position = replayed = 0
        total = head_position(conn)
        rows = ahead.read(position, batch_size).result()
        while True:
            with immediate_transaction(conn):
                _apply_rows(shadow, projections, dict.fromkeys(names, position), rows)
                later = ahead.read(rows[-1][0], batch_size) if len(rows) == batch_size else None
            ahead.checkpoint()
            replayed += len(rows)
            position = rows[-1][0] if rows else position
            total = max(total, position)
            if progress is not None:
                progress(RebuildProgress(names, position, total, reason=reason))
            if later is None:
                break
            rows = later.result()
        with immediate_transaction(conn):
            while True:  # what was appended since the last batch, under the write lock
                read, last = _apply_next(
                    conn, shadow, projections, dict.fromkeys(names, position), batch_size
                )
                replayed += read
                position = last or position
                if read < batch_size:
                    break
            _swap(conn, projections, position)
        if progress is not None:
            progress(RebuildProgress(names, position, position, finished=True, reason=reason))
    return replayed


#: How many pages (of 4 KiB) a rebuild lets the WAL grow to before it starts over.
_RESTART_WAL_PAGES = 16_384


class _Ahead:
    """A thread and connection of a rebuild's own, for its calls into SQLite that need not
    hold it up: reading the log's next batch while the rebuild's connection commits
    the last, and checkpointing while it folds the next.

    SQLite runs both without Python's lock, so they take the machine's other core.
    The reads see the log as committed, which is all a batch reads; what is
    appended meanwhile, the rebuild applies under the write lock at its end. The
    checkpoints are PASSIVE: they never wait for a writer or a reader, nor hold
    one up, and only save time. One that fails leaves its pages to the next, or to
    the automatic checkpoint the rebuild restores when it ends.
    """

    def __init__(self, filename: str) -> None:
        from concurrent.futures import ThreadPoolExecutor  # a rebuild's alone: not on every read

        self._filename = filename
        self._conn: apsw.Connection | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="shep-rebuild")
        #: The pages the WAL held at the end of the last checkpoint since it started over.
        self._wal_pages = 0

    def read(self, after: int, count: int) -> Future[list[Row]]:
        """The next ``count`` events past position ``after``, read in the thread."""
        return self._pool.submit(lambda: _read(self._connection(), after, count))

    def checkpoint(self) -> None:
        """Checkpoint what the WAL holds, in the thread (after what it was given before).

        The WAL starts over only at a write transaction that finds all of it copied
        into the file. So once it holds ``_RESTART_WAL_PAGES``, this waits for the
        checkpoint (the last batch's pages: the rest was copied while it was folded),
        and the rebuild's next transaction writes the WAL from its start again.
        """
        done = self._pool.submit(self._checkpoint)
        if self._wal_pages >= _RESTART_WAL_PAGES:
            done.result()
            self._wal_pages = 0

    def close(self) -> None:
        """Wait for the call under way, drop the rest, and close the connection."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> apsw.Connection:
        if self._conn is None:
            self._conn = connect(self._filename)
        return self._conn

    def _checkpoint(self) -> None:
        with suppress(apsw.Error):
            for _, pages, _ in self._connection().execute("PRAGMA wal_checkpoint(PASSIVE)"):
                self._wal_pages = int(pages)


def _swap(conn: apsw.Connection, projections: Sequence[Projection], position: int) -> None:
    """In the caller's transaction: put the new tables in place of the current ones.

    The indexes are made here, on the filled tables: one sort each, and SQLite sorts
    a big one (the logs', a million rows and more) about a fifth faster with a helper
    thread.
    """
    with _pragma(conn, "threads", 1):
        for projection in projections:
            for table in projection.tables:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute(f"ALTER TABLE {SHADOW_PREFIX}{table} RENAME TO {table}")
            for statement in projection.ddl:
                if statement.startswith("CREATE INDEX"):
                    conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO tracking VALUES (?, ?)", (projection.name, position)
            )
            record_version(conn, projection)


@contextmanager
def _pragma(conn: apsw.Connection, name: str, value: int) -> Iterator[None]:
    """The connection's integer setting ``name`` at ``value`` for the block, then as it was
    (even when the block fails)."""
    (before,) = conn.execute(f"PRAGMA {name}").fetchone() or (value,)
    conn.execute(f"PRAGMA {name}={value}")
    try:
        yield
    finally:
        with suppress(apsw.Error):
            conn.execute(f"PRAGMA {name}={int(before)}")


def _drop_shadows(conn: apsw.Connection) -> None:
    """Drop the new tables a killed rebuild left (in the caller's transaction)."""
    left = [
        str(name)
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE ? ESCAPE '!'",
            (SHADOW_PREFIX.replace("_", "!_") + "%",),
        )
    ]
    for table in left:
        conn.execute(f"DROP TABLE {table}")


@contextmanager
def _rebuild_lock(
    conn: apsw.Connection, names: tuple[str, ...], progress: Progress | None, reason: str
) -> Iterator[None]:
    """Hold the store's rebuild lock (a file beside it) for the block; wait for another
    process's rebuild to end first, telling ``progress``.
    """
    path = f"{conn.filename}-rebuild.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress is not None:
                progress(RebuildProgress(names, 0, 0, waiting=True, reason=reason))
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class ShadowWriter:
    """Writes what handlers write to a rebuild's new tables instead of the current ones.

    Each statement's table names are replaced, as whole words, by the new tables'
    (``SHADOW_PREFIX`` + name); the rewritten statement is kept, so each is
    rewritten once per rebuild. Statements name their tables plainly (no table
    name is a word of any string literal in them): the rebuilt-equals-caught-up
    test holds this.
    """

    __slots__ = ("_cursor", "_pattern", "_rewritten")

    def __init__(self, cursor: apsw.Cursor, tables: Sequence[str]) -> None:
        self._cursor = cursor
        self._pattern = re.compile(r"\b(" + "|".join(map(re.escape, tables)) + r")\b")
        self._rewritten: dict[str, str] = {}

    def _shadowed(self, statement: str) -> str:
        rewritten = self._rewritten.get(statement)
        if rewritten is None:
            rewritten = self._pattern.sub(SHADOW_PREFIX + r"\1", statement)
            self._rewritten[statement] = rewritten
        return rewritten

    def execute(self, statement: str, bindings: Any = None, /) -> apsw.Cursor:
        return self._cursor.execute(self._shadowed(statement), bindings)

    def executemany(self, statement: str, rows: Iterable[Any], /) -> apsw.Cursor:
        return self._cursor.executemany(self._shadowed(statement), rows)
