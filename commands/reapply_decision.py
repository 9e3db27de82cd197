"""Give a fork the origin's decision on the same question or gate (``--reapply-answers``).

The fork's item is asked and decided in one append, by the same actor as the
origin's decision, with ``reapplied_from`` naming the origin's item: the audit
trail shows that nobody decided again, and who decided first.
"""

from __future__ import annotations

from uuid import UUID

import msgspec

from commands.inbox_state import ItemState
from commands.suspend_run import Ask, item_event
from events.base import utc_now
from events.inbox import item_stream_id
from events.store import EventStore


def reapply_decision(store: EventStore, run_id: UUID, ask: Ask, origin: ItemState) -> UUID:
    """Record ``ask`` on the fork's item and the origin's decision on it; return the item id."""
    assert origin.decision is not None
    item_id = item_stream_id(run_id, ask.interrupt_id)
    asked = item_event(run_id, item_id, ask)
    decided = msgspec.structs.replace(
        origin.decision,
        originator_id=item_id,
        originator_version=2,
        timestamp=utc_now(),
        run_id=run_id,
        reapplied_from=origin.item_id,
    )
    store.append([asked, decided])
    return item_id
