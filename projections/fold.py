"""Fold views: the event types most of the log is made of, decoded for folding only.

Most events of a log are agent output. Folding one through ``decode_event``
builds a full Struct: a UUID for its stream (the row already says it) and a
datetime for its time (folded as ISO text). A fold view is a slimmer Struct
of the same class: the same fields under the same names, with the stream id and
the time left as the stored text. A segment of consecutive events of such a
type is decoded in one call, as one JSON array.

A view takes only the class's current form: its fields are the class's, unknown
fields are refused as the class refuses them, and from version 2 on each state
must start with the class's version tag. A segment holding any other state (an
older version, to upcast; a newer one, to refuse) is decoded event by event
through ``decode_event`` instead, which does either.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from events.base import VERSION_TAG, Event

#: Fields every event has that a fold reads from the row or as text, not as objects.
_AS_TEXT = ("originator_id", "timestamp")


def view_of(cls: type[Event]) -> type[msgspec.Struct]:
    """A Struct of ``cls``'s fields that reads its stream id and time as text."""
    config = cls.__struct_config__
    fields: list[tuple[str, Any, Any]] = []
    for info in msgspec.structs.fields(cls):
        kind = str if info.name in _AS_TEXT else info.type
        if info.required:
            fields.append((info.name, kind, msgspec.NODEFAULT))
        elif info.default_factory is not msgspec.NODEFAULT:
            fields.append((info.name, kind, msgspec.field(default_factory=info.default_factory)))
        else:
            fields.append((info.name, kind, info.default))
    return msgspec.defstruct(
        f"{cls.__name__}View",
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        tag_field=config.tag_field,
        tag=config.tag,
        gc=False,
    )


class Views:
    """Decodes segments of one event type's stored states into fold views."""

    __slots__ = ("_decoder", "_prefix")

    def __init__(self, cls: type[Event]) -> None:
        self._decoder: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(
            list[view_of(cls)]  # type: ignore[misc]
        )
        version = cls.class_version
        # A tagged type decoded as itself takes a state without its tag: the prefix check
        # keeps older versions (to upcast) away from the view.
        self._prefix = b'{"%s":%d,' % (VERSION_TAG.encode(), version) if version > 1 else None

    def decode(self, states: Sequence[bytes]) -> list[Any] | None:
        """The views of ``states``; None when some state is not of the current form."""
        prefix = self._prefix
        if prefix is not None and not all(s.startswith(prefix) for s in states):
            return None
        try:
            views: list[Any] = self._decoder.decode(b"[" + b",".join(states) + b"]")
        except msgspec.DecodeError:  # ValidationError too: each state then says its own
            return None
        # A state that is not one JSON value could pass as several in the array.
        return views if len(views) == len(states) else None


_views: dict[type[Event], Views] = {}


def views_of(cls: type[Event]) -> Views:
    """The segment decoder of ``cls`` (made once)."""
    views = _views.get(cls)
    if views is None:
        views = _views[cls] = Views(cls)
    return views


_datetime = msgspec.json.Decoder(datetime)


def iso_time(stored: str) -> str:
    """A view's stored time as ``datetime.isoformat`` writes it, the way a decoded event's
    time is folded (msgspec writes UTC as ``Z``, isoformat as ``+00:00``).
    """
    return _datetime.decode(msgspec.json.encode(stored)).isoformat()
