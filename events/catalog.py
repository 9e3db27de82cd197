"""The event catalog: every event class by topic, their versions, and their msgspec encoding.

A topic is ``module:ClassName`` (eventsourcing's topic form), so the library's
``resolve_topic`` and ours agree. Decoding here needs only msgspec, which keeps
the read path (``shep status``, ``shep logs``) free of eventsourcing's imports.

Versions (see ``events.base``): a type keeps its topic from version to
version, so every query by topic finds all of its events; the version is in
the stored state, as in eventsourcing, where its mapper puts it
(``class_version``, absent for version 1). Decoding an event costs what it
did before versions: one dict lookup finds the topic's reader, which for a
version-1 type is the msgspec decoder itself. A type at version N > 1 reads
its current form directly when the state starts with its tag (the tag is
encoded first) and sends older forms through its upcasters. A version newer
than this shep knows fails msgspec's validation (an unknown field, or a tag
of another value): only then is the state looked at again, and refused with
``UnknownEventError`` rather than misread.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from events import checkpoints, features, inbox, runs, settings, supervisor
from events.base import VERSION_TAG, Event, Reader, reader_of, topic_of, upcast
from events.errors import UnknownEventError

__all__ = [
    "EVENT_CLASSES",
    "READERS",
    "check_versions",
    "decode_event",
    "encode_event",
    "encode_events",
    "topic_of",
]

_MODULES = (runs, settings, inbox, supervisor, checkpoints, features)


def _collect() -> dict[str, type[Event]]:
    found: dict[str, type[Event]] = {}
    for module in _MODULES:
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Event)
                and value is not Event
                and value.__module__ == module.__name__
            ):
                check_versions(value)
                found[topic_of(value)] = value
    return found


def check_versions(cls: type[Event]) -> None:
    """Refuse (``TypeError``) a class whose version, tag and upcasters disagree.

    From version 2 on, the class is tagged ``tag_field="class_version", tag=N`` and
    has ``upcast_v1_v2`` ... ``upcast_vN-1_vN``; at version 1 it has no tag.
    """
    version = cls.class_version
    config = cls.__struct_config__
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TypeError(f"{cls.__qualname__}.class_version must be a whole number from 1")
    tagged = (config.tag_field, config.tag)
    if version == 1 and config.tag is not None:
        raise TypeError(f"{cls.__qualname__} is at version 1: it takes no tag")
    if version > 1 and tagged != (VERSION_TAG, version):
        raise TypeError(
            f"{cls.__qualname__} is at version {version}: declare it with "
            f'tag_field="{VERSION_TAG}", tag={version}'
        )
    for older in range(1, version):
        name = f"upcast_v{older}_v{older + 1}"
        if not callable(getattr(cls, name, None)):
            raise TypeError(f"{cls.__qualname__} is at version {version} but has no {name}")


EVENT_CLASSES: dict[str, type[Event]] = _collect()

#: Each topic's reader, made on first use (``reader_of``): a reader is a decoder
#: built for one class, and most commands decode only a few types.
READERS: dict[str, Reader] = {}

_encoder = msgspec.json.Encoder()


def encode_event(event: Event) -> bytes:
    """The stored bytes of an event: the whole Struct as compact JSON (its tag first)."""
    return _encoder.encode(event)


#: From this many events on, ``encode_events`` encodes a batch in one call.
ONE_CALL_EVENTS = 8


def encode_events(events: Sequence[Event]) -> list[bytes]:
    """Each event's ``encode_event`` bytes.

    A batch of ``ONE_CALL_EVENTS`` or more (agent output, mostly: many small events)
    is encoded in one call, as JSON lines, at about half the cost per small event
    of a call each; cutting the lines apart copies them, which costs more than it
    saves on the few big events of a checkpoint's batch, encoded one by one.
    Compact JSON holds no newline byte (a newline in a string is escaped), so the
    lines are exactly the events' encodings; should one ever hold a newline, the
    batch is encoded an event at a time instead.
    """
    if len(events) < ONE_CALL_EVENTS:
        return [_encoder.encode(e) for e in events]
    lines = _encoder.encode_lines(events).split(b"\n")
    if len(lines) != len(events) + 1:
        return [_encoder.encode(e) for e in events]
    del lines[-1]  # after the last newline
    return lines


def decode_event(topic: str, state: bytes) -> Event:
    """Rebuild an event from its topic and stored bytes, upcast to its class's version.

    ``UnknownEventError`` for a topic, or a version of one, this shep does not know.
    """
    try:
        read = READERS[topic]
    except KeyError:
        cls = EVENT_CLASSES.get(topic)
        if cls is None:
            raise UnknownEventError(topic) from None
        read = READERS[topic] = reader_of(cls)
    try:
        return read(state)
    except msgspec.ValidationError:
        # Not this class's current form: an older one is upcast, a newer one refused.
        return upcast(EVENT_CLASSES[topic], state)
