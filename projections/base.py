"""What a projection is: tables it owns and a handler per event type it reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import apsw

from events.base import Event


@dataclass
class Batch:
    """The catch-up transaction a batch of events is applied in.

    The runner sets ``position``, ``at`` (ISO timestamp), ``stream`` (hex id)
    and ``chain`` (hash) for each event before calling handlers, so each is
    computed once. Handlers may write at once through ``cursor`` or queue
    rows with ``defer``; deferred rows are written with ``executemany`` when
    the batch ends, before the tracking positions, in the same transaction.
    """

    cursor: apsw.Cursor
    position: int = 0
    at: str = ""
    stream: str = ""
    chain: bytes = b""
    _deferred: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    _latest: dict[tuple[str, str], tuple[Any, ...] | Callable[[], tuple[Any, ...]]] = field(
        default_factory=dict
    )

    def defer(self, statement: str, row: tuple[Any, ...]) -> None:
        """Queue a row for ``statement``; every queued row is written."""
        self._deferred.setdefault(statement, []).append(row)

    def latest(
        self, statement: str, key: str, row: tuple[Any, ...] | Callable[[], tuple[Any, ...]]
    ) -> None:
        """Queue a row for ``statement`` keyed by ``key``; only the last row per key is written.

        ``row`` may be a function that makes the row: it is called only for the row
        that is written, so costly rows of superseded events are never built.
        """
        self._latest[(statement, key)] = row

    def flush(self) -> None:
        for statement, rows in self._deferred.items():
            self.cursor.executemany(statement, rows)
        by_statement: dict[str, list[tuple[Any, ...]]] = {}
        for (statement, _), row in self._latest.items():
            by_statement.setdefault(statement, []).append(row() if callable(row) else row)
        for statement, rows in by_statement.items():
            self.cursor.executemany(statement, rows)
        self._deferred.clear()
        self._latest.clear()


Handler = Callable[[Batch, Event], None]


@dataclass(frozen=True)
class Projection:
    """A read model: its name (the tracking key), DDL, tables and event handlers.

    Handlers never write events. A handler that reads rows must not depend on
    rows another handler deferred in the same batch.
    """

    name: str
    ddl: tuple[str, ...]
    tables: tuple[str, ...]
    handlers: Mapping[type[Event], Handler]
