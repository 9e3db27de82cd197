"""Give a fork the origin's decision on the same question or gate (``--reapply-answers``).

The fork's item is asked and decided in one append, by the same actor as the
origin's decision, with ``reapplied_from`` naming the origin's item: the audit
trail shows that nobody decided again, and who decided first.
"""

from __future__ import annotations

from uuid import UUID

import msgspec

from commands.inbox_state import ItemState
from commands.run_state import load_run, next_events
from commands.suspend_run import Ask, asked_node, item_event
from events.base import utc_now
from events.inbox import item_stream_id
from events.store import EventStore


def reapply_decision(
    store: EventStore, run_id: UUID, ask: Ask, origin: ItemState, *, epoch: int
) -> UUID:
    """Record ``ask`` on the fork's item, the origin's decision on it, and the node's start on
    the run (as ``suspend_run`` does for an item it asks), in one fenced append; return the
    item id.
    """
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
    started = next_events(load_run(store, run_id), [asked_node(ask)], epoch=epoch)
    store.append([asked, decided, *started])
    return item_id
