"""The hash chain: each stored event's hash covers the previous hash and the event itself."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable

GENESIS_HASH = bytes(32)
_HEADER = struct.Struct(">qqIII")
_sha256 = hashlib.sha256

#: The one SQLite storage class (``typeof()``) each hashed column holds when shep wrote it.
#:
#: The hash covers a value's bytes, not its storage class: a value is its class
#: and its bytes together, so the verifier requires exactly these classes (see
#: ``events.audit``). Together they pin every value a reader can see.
STORAGE_CLASSES = {
    "originator_id": "text",
    "originator_version": "integer",
    "topic": "text",
    "state": "blob",
    "chain_hash": "blob",
}


def chain_hash(
    previous: bytes,
    notification_id: int,
    originator_id: bytes,
    originator_version: int,
    topic: bytes,
    state: bytes,
) -> bytes:
    """``H(previous hash, event bytes)``: SHA-256 over the previous hash and every stored field.

    ``originator_id`` and ``topic`` are their stored text, UTF-8 encoded. Lengths
    prefix the variable fields so no two different events hash alike. Storage
    classes are not hashed: each column has exactly one (``STORAGE_CLASSES``),
    which verification requires.
    """
    header = _HEADER.pack(
        notification_id, originator_version, len(originator_id), len(topic), len(state)
    )
    return _sha256(b"".join((previous, header, originator_id, topic, state))).digest()


#: The columns of a stored event, in the events table's order.
ROW_WIDTH = 6


def chained_values(
    previous: bytes, position: int, events: Iterable[tuple[str, int, str, bytes]]
) -> tuple[list[int | str | bytes], bytes]:
    """Number and hash events that follow ``position`` (whose hash is ``previous``).

    ``events`` are (originator id, version, topic, state) as stored; the result is
    the rows' columns one row after another (position, originator id, version,
    topic, state, chain hash: ``ROW_WIDTH`` values each), ready to bind to a
    many-row INSERT, and the last hash. The same hash as ``chain_hash``, in one
    loop: a batch's events are mostly one stream and a few topics, so an id or
    topic the same as the previous event's is not encoded again.
    """
    sha256, pack, join = _sha256, _HEADER.pack, b"".join
    values: list[int | str | bytes] = []
    extend = values.extend
    last_oid: str | None = None
    last_topic: str | None = None
    oid_bytes = topic_bytes = names = b""
    oid_length = topic_length = 0
    for oid, version, topic, state in events:
        position += 1
        if oid is not last_oid or topic is not last_topic:
            if oid is not last_oid:
                last_oid, oid_bytes = oid, oid.encode()
                oid_length = len(oid_bytes)
            if topic is not last_topic:
                last_topic, topic_bytes = topic, topic.encode()
                topic_length = len(topic_bytes)
            names = oid_bytes + topic_bytes  # hashed side by side: joined once
        header = pack(position, version, oid_length, topic_length, len(state))
        previous = sha256(join((previous, header, names, state))).digest()
        extend((position, oid, version, topic, state, previous))
    return values, previous
