"""Save a graph step: its checkpoint, its writes and the run events that go with it.

The checkpointer numbers the batch from the stream's current version (see
``shep.checkpointer``); this command checks the batch is one stream's next
contiguous versions and appends it in one transaction. A stale version is a
``ConcurrencyError``, on which the checkpointer renumbers and calls again.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.base import Event
from events.store import EventStore


def save_checkpoint(store: EventStore, events: Sequence[Event]) -> None:
    """Append one step's events (outbox, writes, checkpoint) atomically."""
    if not events:
        return
    first = events[0]
    for offset, event in enumerate(events):
        if (
            event.originator_id != first.originator_id
            or event.originator_version != first.originator_version + offset
        ):
            raise ValueError(
                f"a checkpoint batch must be contiguous versions of one stream; "
                f"{type(event).__name__} is version {event.originator_version} of "
                f"{event.originator_id}"
            )
    store.append(events)
