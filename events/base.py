"""The base of every stored event: a frozen, typed msgspec Struct.

Events carry the eventsourcing domain-event protocol fields
(``originator_id``, ``originator_version``, ``timestamp``) so the library's
``EventStore`` and recorders handle them, but they import nothing from it:
``shep status`` decodes events without paying for eventsourcing's import.

Versions, in eventsourcing's convention: a class says its ``class_version``
(1 unless said) and, for each older version N, a static method
``upcast_vN_vN+1(state)`` that turns the stored fields of version N, a dict,
into those of N+1 in place. From version 2 on, the stored form carries the
version as its first key, as a msgspec tag::

    class RunStarted(Event, frozen=True, kw_only=True, tag_field="class_version", tag=2):
        class_version: ClassVar[int] = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["epoch"] = state.pop("owner", 0)

``events.catalog`` checks the tag and the upcasters at import, and decodes
older versions through them; the log itself is never rewritten. Unknown
fields are refused, never dropped: an event a newer shep wrote (with a
``class_version`` or a field this one does not know) is refused, not misread.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar
from uuid import UUID, uuid5

import msgspec

#: Namespace for stream ids derived from names (settings, per-run sub-streams).
SHEP_NAMESPACE = UUID("5f1d7c3e-2b8a-4c61-9d1e-7a0b3c4d5e6f")


class Event(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Something that happened. Past tense, never updated, never deleted."""

    #: The version of the class's stored form (see the module docstring).
    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC (freezegun-friendly)."""
    return datetime.now(UTC)


def named_stream_id(name: str) -> UUID:
    """A stable stream id for a named singleton stream, such as settings."""
    return uuid5(SHEP_NAMESPACE, name)
