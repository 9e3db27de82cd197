"""What a projection is: tables it owns and a handler per event type it reads."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

import apsw

from events.base import Event


class Writer(Protocol):
    """What handlers write through: an apsw cursor, or one that writes a rebuild's tables."""

    def execute(self, statement: str, bindings: Any = None, /) -> apsw.Cursor: ...

    def executemany(self, statement: str, rows: Iterable[Any], /) -> apsw.Cursor: ...


class Fold(Protocol):
    """A projection's rows a batch changed, kept in memory and written when the batch ends."""

    def write(self) -> None: ...


F = TypeVar("F", bound=Fold)


class Lazy(tuple[Callable[[Any, str], tuple[Any, ...]], Any]):
    """``Lazy((make, arg))``: a row ``latest`` makes only if it is the one written, as
    ``make(arg, key)``. A tuple, so that making one per event costs no Python call.
    """

    __slots__ = ()


@dataclass(slots=True)
class Batch:
    """The catch-up transaction a batch of events is applied in.

    The runner sets ``position``, ``at`` (ISO timestamp), ``stream`` (hex id)
    and ``chain`` (hash) for each event before calling handlers, so each is
    computed once. Handlers may write at once through ``cursor``, queue
    rows with ``defer``, or change rows in memory through ``fold``; folds are
    written when the batch ends, then deferred rows (with ``executemany``),
    before the tracking positions, in the same transaction.
    """

    cursor: Writer
    position: int = 0
    at: str = ""
    stream: str = ""
    chain: bytes = b""
    #: What handlers learned in this batch and may reuse in it (keys are theirs to choose).
    memo: dict[Any, Any] = field(default_factory=dict)
    _deferred: defaultdict[str, list[tuple[Any, ...]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    _latest: defaultdict[str, dict[str, tuple[Any, ...] | Lazy]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    _folds: dict[str, Fold] = field(default_factory=dict)

    def fold(self, key: str, make: Callable[[Writer], F]) -> F:
        """The batch's fold under ``key``, made by ``make(cursor)`` on first use."""
        found = self._folds.get(key)
        if found is None:
            found = self._folds[key] = make(self.cursor)
        return cast(F, found)

    def defer(self, statement: str, row: tuple[Any, ...]) -> None:
        """Queue a row for ``statement``; every queued row is written."""
        self._deferred[statement].append(row)

    def latest(self, statement: str, key: str, row: tuple[Any, ...] | Lazy) -> None:
        """Queue a row for ``statement`` keyed by ``key``; only the last row per key is written.

        ``row`` may be ``Lazy``: it is made only if it is the row written, so costly
        rows of superseded events are never built.
        """
        self._latest[statement][key] = row

    def defer_all(self, statement: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """Queue rows for ``statement``, as ``defer`` does each."""
        self._deferred[statement].extend(rows)

    def latest_rows(self, statement: str) -> dict[str, tuple[Any, ...] | Lazy]:
        """The rows queued for ``statement`` by key, for a segment handler to set as
        ``latest`` does (only the last row per key is written)."""
        return self._latest[statement]

    def flush(self) -> None:
        for fold in self._folds.values():
            fold.write()
        for statement, rows in self._deferred.items():
            self.cursor.executemany(statement, rows)
        for statement, latest in self._latest.items():
            self.cursor.executemany(
                statement,
                [row[0](row[1], key) if type(row) is Lazy else row for key, row in latest.items()],
            )
        self._folds.clear()
        self._deferred.clear()
        self._latest.clear()


Handler = Callable[[Batch, Event], None]
#: An event of a segment: its position, stream (hex id), time (ISO text) and the event,
#: or its fold view (``projections.fold``: the same fields, read the same way).
Folded = tuple[int, str, str, Any]
#: Folds a segment: consecutive events of one type, in the log's order.
SegmentHandler = Callable[[Batch, list[Folded]], None]


@dataclass(frozen=True)
class Projection:
    """A read model: its name (the tracking key), DDL, tables and event handlers.

    Handlers never write events, and read and write only their own projection's
    tables (``tables``), naming them plainly in their statements: so a projection
    rebuilds alone (``projections.catch_up.rebuild`` writes new tables under other
    names). A handler that reads rows must not depend on rows another handler
    deferred in the same batch.

    ``segments`` folds the types most of the log is made of a segment at a time
    (consecutive events of the type, decoded as fold views): for each, the
    projection's handler must do what the segment handler does for a segment of
    one event (``one_of`` makes it so). Segment items carry no chain hash.
    """

    name: str
    ddl: tuple[str, ...]
    tables: tuple[str, ...]
    handlers: Mapping[type[Event], Handler]
    segments: Mapping[type[Event], SegmentHandler] = field(default_factory=dict)


def one_of(segment: SegmentHandler) -> Handler:
    """The event handler that folds one event as ``segment`` folds a segment of it."""

    def handle(b: Batch, event: Event) -> None:
        segment(b, [(b.position, b.stream, b.at, event)])

    return handle
