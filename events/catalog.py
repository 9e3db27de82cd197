"""The event catalog: every event class by topic, and their msgspec encoding.

A topic is ``module:ClassName`` (eventsourcing's topic form), so the library's
``resolve_topic`` and ours agree. Decoding here needs only msgspec, which keeps
the read path (``shep status``, ``shep logs``) free of eventsourcing's imports.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import checkpoints, features, inbox, runs, settings, supervisor
from events.base import Event

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
                found[topic_of(value)] = value
    return found


def topic_of(cls: type[Event]) -> str:
    """The stored topic of an event class."""
    topic = _topics.get(cls)
    if topic is None:
        topic = _topics[cls] = f"{cls.__module__}:{cls.__qualname__}"
    return topic


_topics: dict[type[Event], str] = {}


EVENT_CLASSES: dict[str, type[Event]] = _collect()

_encoder = msgspec.json.Encoder()
_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    topic: msgspec.json.Decoder(cls) for topic, cls in EVENT_CLASSES.items()
}


class UnknownEventTopicError(ValueError):
    """A stored event names a class this version of shep does not know."""


def encode_event(event: Event) -> bytes:
    """The stored bytes of an event: the whole Struct as compact JSON."""
    return _encoder.encode(event)


def decode_event(topic: str, state: bytes) -> Event:
    """Rebuild an event from its topic and stored bytes."""
    try:
        decoder = _decoders[topic]
    except KeyError:
        raise UnknownEventTopicError(f"unknown event topic {topic!r}") from None
    event: Event = decoder.decode(state)
    return event
