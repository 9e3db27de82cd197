"""The runtime a face wires once and passes down: where the store is, and how to open it.

Opening is lazy: ``shep --help`` opens nothing, ``shep status`` opens only the
read side (apsw and msgspec), and only writing commands import eventsourcing.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

import apsw

from events.errors import HomePathError, ShepError, StoreError, StoreUnavailableError
from events.run_status import RunStatus
from events.sqlite_file import ensure_home, home_from_env
from events.words import counted
from projections.database import open_database
from projections.queries import inbox_has_work
from projections.state import has_schema, lag

#: Statuses whose run needs a live process: orphan detection looks only at these.
_NEED_A_WORKER = (RunStatus.RUNNING.value, RunStatus.PENDING.value)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from events.store import EventStore
    from projections.state import Progress


def _discard(line: str) -> None:
    """Where a runtime's notices go when its face gave no ``say``."""


def require_usable_home(home: str) -> None:
    """Refuse, in one line, a ``SHEP_HOME`` no command can use: a file, or a directory this
    user may not enter. One that does not exist yet is fine: reading finds it empty, and the
    first command that writes makes it.

    Every command's runtime is made through here, so all of them say the same thing,
    rather than each the first thing that failed inside (a file in it, a table).
    """
    try:
        info = os.stat(home)
    except FileNotFoundError:
        return
    except NotADirectoryError as e:
        raise HomePathError(
            f"SHEP_HOME {home} is not a directory: a part of its path is a file. "
            "Point SHEP_HOME at a directory."
        ) from e
    except OSError as e:
        raise StoreUnavailableError(
            f"Cannot reach SHEP_HOME {home} ({e.strerror}). Check the permissions of its "
            "parent directories, or point SHEP_HOME elsewhere."
        ) from e
    if not stat.S_ISDIR(info.st_mode):
        raise HomePathError(f"SHEP_HOME {home} is not a directory. Point SHEP_HOME at a directory.")
    if not os.access(home, os.X_OK):  # nothing in it can be opened, not even to read
        raise StoreUnavailableError(
            f"Cannot open SHEP_HOME {home} ({os.strerror(errno.EACCES)}, mode "
            f"{stat.S_IMODE(info.st_mode):04o}). Make it yours (chmod u+rwx {home}), or point "
            "SHEP_HOME elsewhere."
        )


class Runtime:
    """Paths and lazily opened handles of one shep invocation.

    A plain class over string paths: ``shep status`` pays for neither
    dataclasses nor pathlib; ``home``/``db_path`` give ``Path``s to those who need them.
    """

    def __init__(
        self,
        home: str | os.PathLike[str],
        *,
        debug: bool = False,
        store_url: str | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.home_dir = os.fspath(home)
        #: How the core tells a person something while it works (a worker started, a
        #: deadline applied, an upgrade of the store): the face decides where the line
        #: goes (the CLI: stderr). The core never prints.
        self.say: Callable[[str], None] = say or _discard
        #: The shared store's URL (PostgreSQL), or None: the log is this home's shep.db.
        self.store_url = store_url
        if store_url is None:
            self.db_file = os.path.join(self.home_dir, "shep.db")
        else:
            # This home's verified copy of the shared log, with its projections.
            from projections.mirror import copy_file, register

            self.db_file = copy_file(self.home_dir, store_url)
            register(self.db_file, store_url, on_offline=self.say)
        self.debug = debug
        self._read: apsw.Connection | None = None
        self._store: EventStore | None = None
        #: A damaged ``$SHEP_HOME/store`` (see ``from_environment(repairing=True)``).
        self.store_file_error: ShepError | None = None
        #: Runs (hex ids) this invocation started a worker for before its own work.
        self.resumed: dict[str, int] = {}
        #: Told how a rebuild of projections this shep changed goes (the CLI draws a line).
        self.on_progress: Progress | None = None
        #: On a shared store: this command only reads, so the copy is read as it is while a
        #: keeper keeps it current (``projections.keeper``), and a keeper is started when
        #: none runs. A command that writes asks the server first, as before.
        self.reads_only = False

    @classmethod
    def from_environment(
        cls,
        *,
        debug: bool = False,
        repairing: bool = False,
        say: Callable[[str], None] | None = None,
    ) -> Runtime:
        """The home of ``$SHEP_HOME``, on the store it is pointed at.

        ``repairing``: a damaged ``$SHEP_HOME/store`` is kept in ``store_file_error``
        instead of raised, for the command that rewrites it (``shep settings store``).
        """
        from events.errors import SecretsError
        from shep.home.secrets import configured_store_url

        home = home_from_env()
        require_usable_home(home)
        try:
            url = configured_store_url(home)
        except SecretsError as e:
            if not repairing:
                raise
            runtime = cls(home, debug=debug, say=say)
            runtime.store_file_error = e
            return runtime
        return cls(home, debug=debug, store_url=url, say=say)

    @property
    def shared(self) -> bool:
        """Whether the log is a shared store (PostgreSQL) rather than this home's file."""
        return self.store_url is not None

    @property
    def home(self) -> Path:
        from pathlib import Path

        return Path(self.home_dir)

    @property
    def db_path(self) -> Path:
        from pathlib import Path

        return Path(self.db_file)

    def read_db(self, *, catch_up: bool = True) -> apsw.Connection:
        """The database, with projections caught up to the log when it can be written.

        A store that cannot be written (a read-only file or home) that already
        has its projections is opened read-only: they are read as they are, and
        one line on stderr says how far behind the log they are.
        """
        if self._read is None:
            ensure_home(self.home_dir)
            try:
                conn = open_database(self.db_file, progress=self.on_progress)
            except StoreUnavailableError as e:
                if not isinstance(
                    e.__cause__, apsw.CantOpenError | apsw.ReadOnlyError | apsw.PermissionsError
                ):
                    raise
                try:
                    conn = open_database(self.db_file, readonly=True)
                except StoreError:
                    raise e from e.__cause__
                if not has_schema(conn, indexes=False):
                    conn.close()
                    raise
            self._read = conn
            if self.store_url is not None and not conn.readonly("main"):
                self._refresh_copy(conn, self.store_url)
            behind = lag(conn)
            if behind > 0 and conn.readonly("main"):
                self.say(
                    "shep: the event store is read-only: projections are "
                    f"{counted(behind, 'event')} behind the log, shown as they are."
                )
            elif behind > 0 and catch_up:
                from projections.catch_up import catch_up as run_catch_up

                try:
                    run_catch_up(conn, pull=False)  # pulled just above
                except StoreUnavailableError as e:
                    if not isinstance(e.__cause__, apsw.BusyError):
                        raise
                    # A writer holds the lock (a worker stopped mid-transaction): read
                    # the projections as they are rather than fail the command.
                    self.say(
                        f"shep: the event store is locked by another process: projections "
                        f"are {counted(behind, 'event')} behind the log, shown as they are."
                    )
        return self._read

    def _refresh_copy(self, conn: apsw.Connection, url: str) -> None:
        """Bring the copy of the shared log up to date, unless a keeper does (a reader)."""
        from projections import keeper

        if self.reads_only:
            from events.postgres_url import where

            word = keeper.kept(conn, self.db_file, where(url))
            if word is not None:
                if not word.online:
                    self.say(
                        f"shep: {word.error} Showing this machine's copy of the log as of "
                        f"{keeper.as_of(word.synced_at)}."
                    )
                return
        from projections.mirror import pull_registered

        pull_registered(conn)
        if self.reads_only and keeper.autostart() and not keeper.keeper_holds(self.db_file):
            self._start_keeper()

    def _start_keeper(self) -> None:
        from pathlib import Path

        from projections.keeper import linger_words
        from shep.home.procs import spawn_shep

        log = Path(self.home_dir) / "logs" / "keeper.log"
        pid = spawn_shep(Path(self.home_dir), ["_keep"], log)
        self.say(
            f"shep: started a process (pid {pid}) that keeps this machine's copy of the shared "
            "log current, so that reading it need not wait for the server; it stops "
            f"{linger_words()} after the last read (`shep doctor` shows it)."
        )

    def _note_own_writes(self) -> None:
        """After appending to the shared store, note how far: this home's next read pulls
        unless its copy holds that position already (it reads its own writes even before
        its keeper applied them)."""
        if self._store is None or self.store_url is None or not self._store.last_appended:
            return
        from events.postgres_url import where
        from projections.keeper import note_written

        note_written(self.db_file, where(self.store_url), self._store.last_appended)

    def store(self) -> EventStore:
        """The event store commands append to (imports eventsourcing on first use)."""
        if self._store is None:
            from events.store import EventStore

            ensure_home(self.home_dir)
            self._store = EventStore(self.store_url or self.db_file, on_notice=self._notice)
        return self._store

    def _notice(self, line: str) -> None:
        """What an upgrade of the store does (``events.migrations``), as one line."""
        self.say(f"shep: {line}")

    def has_store(self) -> bool:
        """Whether this home has an event store yet (an empty home has none; a shared one has)."""
        return self.store_url is not None or os.path.exists(self.db_file)

    def may_have_orphans(self) -> bool:
        """Whether a run here needs a live process (running, or never started) and the store
        can be written: one indexed read, so that a face imports the recovery only then."""
        if not self.has_store():
            return False
        conn = self.read_db()
        if conn.readonly("main"):
            return False  # nothing can be marked; status and logs show the store as it is
        query = "SELECT 1 FROM runs WHERE status IN (?, ?) LIMIT 1"
        return conn.execute(query, _NEED_A_WORKER).fetchone() is not None

    def inbox_busy(self) -> bool:
        """Whether anything waits in the inbox, or a decided item waits for its run to go on:
        one indexed look, so that most commands, most of the time, import nothing for it."""
        if not self.has_store():
            return False
        return inbox_has_work(self.read_db())

    def require_home(self) -> None:
        if not os.path.isdir(self.home_dir):
            raise StoreUnavailableError(f"SHEP_HOME {self.home} does not exist.")

    def close(self) -> None:
        self._note_own_writes()
        if self._read is not None:
            self._read.close()
            self._read = None
        if self._store is not None:
            self._store.close()
            self._store = None
