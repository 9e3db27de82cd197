"""Record what became of telling someone about a new inbox item (the ``notify_command``).

Each item has its own notification stream (``notification_stream_id``), apart
from the item's stream, whose version 2 is reserved for its one decision: a
notification must never take the place of, or race with, a decision.
"""

from __future__ import annotations

from uuid import UUID

from commands.inbox_state import load_item
from events.base import utc_now
from events.errors import ConcurrencyError, ItemNotFoundError
from events.inbox import NotificationFailed, NotificationSent, notification_stream_id
from events.store import EventStore

#: Appends to one item's notification stream race only when two processes notify
#: the same item at once; each conflict is the other's success, so a few suffice.
CONFLICT_RETRIES = 5


def record_notification(
    store: EventStore, item_id: UUID, *, command: str, error: str | None = None
) -> NotificationSent | NotificationFailed:
    """Append ``NotificationSent`` (``error`` None) or ``NotificationFailed`` for the item.

    The run id recorded with it is read from the item's own stream, so that the
    run's logs can show it. Raises ``ItemNotFoundError`` for an unknown item.
    Retries on a version conflict: two notifiers of one item both get recorded.
    """
    item = load_item(store, item_id)
    if item is None:
        raise ItemNotFoundError(item_id.hex)
    stream_id = notification_stream_id(item_id)
    for attempt in range(CONFLICT_RETRIES):
        version = store.stream_version(stream_id) + 1
        event: NotificationSent | NotificationFailed
        if error is None:
            event = NotificationSent(
                originator_id=stream_id,
                originator_version=version,
                timestamp=utc_now(),
                item_id=item_id,
                command=command,
                run_id=item.asked.run_id,
            )
        else:
            event = NotificationFailed(
                originator_id=stream_id,
                originator_version=version,
                timestamp=utc_now(),
                item_id=item_id,
                command=command,
                error=error,
                run_id=item.asked.run_id,
            )
        try:
            store.append([event])
        except ConcurrencyError:
            if attempt == CONFLICT_RETRIES - 1:
                raise
            continue
        return event
    raise AssertionError("unreachable")


def was_notified(store: EventStore, item_id: UUID) -> bool:
    """Whether the item's ``notify_command`` already ran successfully for it."""
    return bool(store.load(notification_stream_id(item_id), types=[NotificationSent]))
