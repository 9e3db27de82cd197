"""A msgspec mapper for eventsourcing, following the library's msgspec examples.

The whole event Struct is encoded with msgspec (not the library's JSON
transcoder) and decoded with its concrete type, so every field comes back typed.
Compression and encryption configured on the factory still apply.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import Cipher, Compressor, Mapper, StoredEvent, Transcoder

from events.base import Event
from events.catalog import decode_event, encode_event, topic_of


class MsgspecMapper(Mapper[UUID]):
    """Maps shep's msgspec events to and from eventsourcing's ``StoredEvent``."""

    def __init__(
        self,
        transcoder: Transcoder | None = None,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        # The transcoder is accepted for the factory's sake and unused: msgspec encodes.
        super().__init__(cast(Transcoder, transcoder), compressor=compressor, cipher=cipher)

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        event = cast(Event, domain_event)
        state = encode_event(event)
        if self.compressor:
            state = self.compressor.compress(state)
        if self.cipher:
            state = self.cipher.encrypt(state)
        return StoredEvent(
            event.originator_id, event.originator_version, topic_of(type(event)), state
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        state = stored_event.state
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return decode_event(stored_event.topic, state)
