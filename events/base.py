"""The base of every stored event: a frozen, typed msgspec Struct.

Events carry the eventsourcing domain-event protocol fields
(``originator_id``, ``originator_version``, ``timestamp``) so the library's
``EventStore`` and recorders handle them, but they import nothing from it:
``shep status`` decodes events without paying for eventsourcing's import.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID, uuid5

import msgspec

#: Namespace for stream ids derived from names (settings, per-run sub-streams).
SHEP_NAMESPACE = UUID("5f1d7c3e-2b8a-4c61-9d1e-7a0b3c4d5e6f")


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Something that happened. Past tense, never updated, never deleted."""

    originator_id: UUID
    originator_version: int
    timestamp: datetime


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC (freezegun-friendly)."""
    return datetime.now(UTC)


def named_stream_id(name: str) -> UUID:
    """A stable stream id for a named singleton stream, such as settings."""
    return uuid5(SHEP_NAMESPACE, name)
