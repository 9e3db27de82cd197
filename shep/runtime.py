"""The runtime the CLI wires once and passes down: where the store is, and how to open it.

Opening is lazy: ``shep --help`` opens nothing, ``shep status`` opens only the
read side (apsw and msgspec), and only writing commands import eventsourcing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from events.errors import StoreUnavailableError
from events.schema import ensure_home, home_from_env
from projections.database import lag, open_database

if TYPE_CHECKING:
    from events.store import EventStore


@dataclass
class Runtime:
    """Paths and lazily opened handles of one shep invocation."""

    home: Path
    debug: bool = False
    _read: apsw.Connection | None = field(default=None, repr=False)
    _store: EventStore | None = field(default=None, repr=False)

    @classmethod
    def from_environment(cls, *, debug: bool = False) -> Runtime:
        return cls(home=home_from_env(), debug=debug)

    @property
    def db_path(self) -> Path:
        return self.home / "shep.db"

    def read_db(self, *, catch_up: bool = True) -> apsw.Connection:
        """The database, with projections caught up to the log (when it can be written)."""
        if self._read is None:
            ensure_home(self.home)
            self._read = open_database(self.db_path)
            if catch_up and lag(self._read) > 0:
                from projections.runner import catch_up as run_catch_up

                run_catch_up(self._read)
        return self._read

    def store(self) -> EventStore:
        """The event store commands append to (imports eventsourcing on first use)."""
        if self._store is None:
            from events.store import EventStore

            ensure_home(self.home)
            self._store = EventStore(self.db_path)
        return self._store

    def require_home(self) -> None:
        if not self.home.exists():
            raise StoreUnavailableError(f"SHEP_HOME {self.home} does not exist.")

    def close(self) -> None:
        if self._read is not None:
            self._read.close()
            self._read = None
        if self._store is not None:
            self._store.close()
            self._store = None
