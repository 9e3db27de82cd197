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
older versions through them (``reader_of`` and ``upcast``, here so that a
reader of one event type needs no catalog); the log itself is never rewritten. Unknown
fields are refused, never dropped: an event a newer shep wrote (with a
``class_version`` or a field this one does not know) is refused, not misread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import ClassVar
from uuid import UUID, uuid5

import msgspec

from events.errors import UnknownEventError

#: Namespace for stream ids derived from names (settings, per-run sub-streams).
SHEP_NAMESPACE = UUID("5f1d7c3e-2b8a-4c61-9d1e-7a0b3c4d5e6f")


class Event(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Something that happened. Past tense, never updated, never deleted."""

    #: The version of the class's stored form (see the module docstring).
    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime


#: The key of a stored state's version (eventsourcing's name), absent for version 1.
VERSION_TAG = "class_version"

#: Decodes one stored state into its event.
Reader = Callable[[bytes], Event]


def topic_of(cls: type[Event]) -> str:
    """The stored topic of an event class (the same for every version of it)."""
    topic = _topics.get(cls)
    if topic is None:
        topic = _topics[cls] = f"{cls.__module__}:{cls.__qualname__}"
    return topic


_topics: dict[type[Event], str] = {}


@cache
def reader_of(cls: type[Event]) -> Reader:
    """The fast reader of ``cls``'s stored states (made once per class): its current form,
    and from version 2 on older forms too (through ``upcast``). A state it does not
    validate may be of a version newer than the class's: ``upcast`` then refuses it."""
    decode: Reader = msgspec.json.Decoder(cls).decode
    version = cls.class_version
    if version == 1:
        return decode
    current = b'{"%s":%d,' % (VERSION_TAG.encode(), version)

    def read(state: bytes) -> Event:
        if state.startswith(current):
            return decode(state)
        return upcast(cls, state)

    return read


def upcast(cls: type[Event], state: bytes) -> Event:
    """The event of ``cls`` whose stored state (of any version up to the class's) is ``state``.

    Raises ``UnknownEventError`` for a version newer than the class's, and
    msgspec's ``ValidationError`` for a state that is not a valid form of it.
    """
    fields = msgspec.json.decode(state)
    if not isinstance(fields, dict):
        raise msgspec.ValidationError(f"Expected an object for {topic_of(cls)}")
    version = fields.pop(VERSION_TAG, 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise msgspec.ValidationError(f"Invalid {VERSION_TAG} {version!r} for {topic_of(cls)}")
    if version > cls.class_version:
        raise UnknownEventError(topic_of(cls), version)
    while version < cls.class_version:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(fields)
        version += 1
    event: Event = msgspec.convert(fields, cls)
    return event


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC (freezegun-friendly)."""
    return datetime.now(UTC)


def named_stream_id(name: str) -> UUID:
    """A stable stream id for a named singleton stream, such as settings."""
    return uuid5(SHEP_NAMESPACE, name)
