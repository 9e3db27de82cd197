"""What a projection is: tables it owns and a handler per event type it reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import apsw

from events.base import Event

Handler = Callable[[apsw.Cursor, int, Event, bytes], None]


@dataclass(frozen=True)
class Projection:
    """A read model: its name (the tracking key), DDL, tables and event handlers.

    Handlers receive the cursor of the catch-up transaction, the event's global
    position, the event and its chain hash. They never write events.
    """

    name: str
    ddl: tuple[str, ...]
    tables: tuple[str, ...]
    handlers: Mapping[type[Event], Handler]


def iso(moment: datetime) -> str:
    """Timestamps are stored as ISO 8601 text in UTC: readable, and sortable as text."""
    return moment.isoformat()
