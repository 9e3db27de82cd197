"""The SQLite datastore under shep's eventsourcing recorders: connections (one per thread,
WAL, a busy timeout), transactions (writes in ``BEGIN IMMEDIATE`` behind a per-file lock,
so threads of one process queue instead of spinning in SQLite's busy handler), the file it
opened (a later connection to another file at the path is refused), and the one place an
apsw error is translated into eventsourcing's PEP 249 names (``translate``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from uuid import UUID

import apsw
from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
)

from events.sqlite_file import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    connect,
    file_write_lock,
)


def translate(error: apsw.Error) -> PersistenceError:
    """The library's PEP 249-named error for an apsw error (the cause is kept)."""
    if isinstance(error, apsw.ConstraintError):
        return IntegrityError(error)
    if isinstance(error, apsw.CorruptError | apsw.NotADBError):
        return DatabaseError(error)
    if isinstance(error, apsw.TooBigError | apsw.MismatchError | apsw.RangeError):
        return DataError(error)
    if isinstance(error, apsw.InternalError):
        return InternalError(error)
    if isinstance(
        error,
        apsw.MisuseError
        | apsw.ConnectionClosedError
        | apsw.CursorClosedError
        | apsw.ThreadingViolationError,
    ):
        return InterfaceError(error)
    if isinstance(error, apsw.SQLError | apsw.BindingsError):
        return ProgrammingError(error) if "no such" not in str(error) else OperationalError(error)
    if isinstance(error, apsw.ExecutionCompleteError):
        return ProgrammingError(error)
    if isinstance(error, apsw.Error):
        return OperationalError(error)
    return PersistenceError(error)


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class ApswDatastore:
    """One database file: a small pool of apsw connections and explicit transactions.

    A transaction borrows a connection for its duration and gives it back, so
    short-lived threads (LangGraph runs each invoke on a fresh pool) reuse
    connections instead of opening one each and leaving it behind. File
    databases only: every connection to ``:memory:`` would be a database of its own.
    """

    max_idle = 8

    def __init__(
        self,
        db_name: str,
        *,
        synchronous: str = DEFAULT_SYNCHRONOUS,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        originator_id_type: str = "uuid",
    ) -> None:
        self.db_name = db_name
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.originator_id_type = originator_id_type
        self._idle: list[apsw.Connection] = []
        self._guard = threading.Lock()
        self._closed = False
        self._write_lock = file_write_lock(db_name)
        self._listeners: set[threading.Event] = set()
        self._held = threading.local()
        #: (device, inode) of the file the first connection opened: every later one must
        #: open that same file, not whatever the path names now (see ``file_moved``).
        self._file_id: tuple[int, int] | None = None

    def file_moved(self) -> str | None:
        """None while the path names the file this datastore opened, else ``"deleted"`` or
        ``"replaced"`` (the home was removed, a new store or a restored copy put there).
        """
        if self._file_id is None:
            return None
        now = _file_id(self.db_name)
        if now == self._file_id:
            return None
        return "deleted" if now is None else "replaced"

    @contextmanager
    def borrow(self) -> Iterator[apsw.Connection]:
        """A connection for this caller alone until the block ends."""
        with self._guard:
            if self._closed:
                raise InterfaceError("datastore is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self.new_connection()
        try:
            yield conn
        finally:
            with self._guard:
                keep = not self._closed and len(self._idle) < self.max_idle
                if keep:
                    self._idle.append(conn)
            if not keep:
                with suppress(apsw.Error):
                    conn.close()

    def new_connection(self) -> apsw.Connection:
        """A new connection with shep's pragmas (the caller closes it), to the same file as
        the first: once the path names another file, ``OperationalError`` instead of a
        connection that would write into the other log.
        """
        try:
            conn = connect(
                self.db_name, synchronous=self.synchronous, busy_timeout_ms=self.busy_timeout_ms
            )
        except apsw.Error as e:
            raise translate(e) from e
        opened = _file_id(self.db_name)
        if self._file_id is None:
            self._file_id = opened
        elif opened != self._file_id:
            with suppress(apsw.Error):
                conn.close()
            raise OperationalError(
                f"{self.db_name} is no longer the file this store opened (it was deleted "
                "or replaced)"
            )
        return conn

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[apsw.Cursor]:
        """A transaction on a borrowed connection: IMMEDIATE, behind the file's lock, to write.

        Inside ``hold`` on this thread, it is the held transaction (commit: at its end).
        """
        held: apsw.Cursor | None = getattr(self._held, "cursor", None)
        if held is not None:
            try:
                yield held
            except apsw.Error as e:
                raise translate(e) from e
            return
        with self.borrow() as conn:
            if commit:
                with self._write_lock:
                    yield from self._run(conn, "BEGIN IMMEDIATE")
                for listener in list(self._listeners):
                    listener.set()
            else:
                yield from self._run(conn, "BEGIN")

    @contextmanager
    def hold(self) -> Iterator[None]:
        """One write transaction for the whole block: this thread's reads and writes in it
        see and make one state, and no other writer, in any process, commits until it ends.
        """
        with self.transaction(commit=True) as cursor:
            self._held.cursor = cursor
            try:
                yield
            finally:
                self._held.cursor = None

    @staticmethod
    def _run(conn: apsw.Connection, begin: str) -> Iterator[apsw.Cursor]:
        try:
            cursor = conn.cursor()
            cursor.execute(begin)
        except apsw.Error as e:
            raise translate(e) from e
        try:
            yield cursor
        except BaseException as e:
            with suppress(apsw.Error):
                conn.execute("ROLLBACK")
            if isinstance(e, apsw.Error):
                raise translate(e) from e
            raise
        else:
            try:
                conn.execute("COMMIT")
            except apsw.Error as e:
                with suppress(apsw.Error):
                    conn.execute("ROLLBACK")
                raise translate(e) from e

    def add_listener(self, event: threading.Event) -> None:
        """Set ``event`` after every commit made through this datastore."""
        self._listeners.add(event)

    def remove_listener(self, event: threading.Event) -> None:
        self._listeners.discard(event)

    def close(self) -> None:
        """Close the idle connections; borrowed ones close when given back."""
        with self._guard:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            with suppress(apsw.Error):
                conn.close()

    def encode_id(self, originator_id: UUID | str) -> str:
        return originator_id.hex if isinstance(originator_id, UUID) else originator_id

    def decode_id(self, value: str) -> UUID | str:
        return UUID(value) if self.originator_id_type == "uuid" else value
