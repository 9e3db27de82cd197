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

from collections.abc import Callable

import msgspec

from events import checkpoints, features, inbox, runs, settings, supervisor
from events.base import Event
from events.errors import UnknownEventError

_MODULES = (runs, settings, inbox, supervisor, checkpoints, features)

#: Decodes one stored state into its event.
Reader = Callable[[bytes], Event]

#: The tag a versioned type's stored state starts with.
_TAG = "class_version"


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
    if version > 1 and tagged != (_TAG, version):
        raise TypeError(
            f"{cls.__qualname__} is at version {version}: declare it with "
            f'tag_field="{_TAG}", tag={version}'
        )
    for older in range(1, version):
        name = f"upcast_v{older}_v{older + 1}"
        if not callable(getattr(cls, name, None)):
            raise TypeError(f"{cls.__qualname__} is at version {version} but has no {name}")


def topic_of(cls: type[Event]) -> str:
    """The stored topic of an event class (the same for every version of it)."""
    topic = _topics.get(cls)
    if topic is None:
        topic = _topics[cls] = f"{cls.__module__}:{cls.__qualname__}"
    return topic


_topics: dict[type[Event], str] = {}


EVENT_CLASSES: dict[str, type[Event]] = _collect()

#: Each topic's reader, made on first use (``reader_of``): a reader is a decoder
#: built for one class, and most commands decode only a few types.
READERS: dict[str, Reader] = {}

_encoder = msgspec.json.Encoder()


def reader_of(cls: type[Event]) -> Reader:
    """The function that decodes ``cls``'s stored states, of any version it can upcast."""
    decode: Reader = msgspec.json.Decoder(cls).decode
    version = cls.class_version
    if version == 1:
        return decode
    current = b'{"%s":%d,' % (_TAG.encode(), version)

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
    version = fields.pop(_TAG, 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise msgspec.ValidationError(f"Invalid {_TAG} {version!r} for {topic_of(cls)}")
    if version > cls.class_version:
        raise UnknownEventError(topic_of(cls), version)
    while version < cls.class_version:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(fields)
        version += 1
    event: Event = msgspec.convert(fields, cls)
    return event


def encode_event(event: Event) -> bytes:
    """The stored bytes of an event: the whole Struct as compact JSON (its tag first)."""
    return _encoder.encode(event)


def decode_event(topic: str, state: bytes) -> Event:
    """Rebuild an event from its topic and stored bytes, upcast to its class's version.

    ``UnknownEventError`` for a topic, or a version of one, this shep does not know.
    """
    read = READERS.get(topic)
    if read is None:
        cls = EVENT_CLASSES.get(topic)
        if cls is None:
            raise UnknownEventError(topic)
        read = READERS[topic] = reader_of(cls)
    try:
        return read(state)
    except msgspec.ValidationError:
        # Not this class's current form: an older one is upcast, a newer one refused.
        return upcast(EVENT_CLASSES[topic], state)
