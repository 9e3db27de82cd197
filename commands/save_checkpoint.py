"""Save a graph step: its checkpoint, its writes and the run events that go with it.

The checkpointer numbers the batch from the stream's current version (see
``shep.runs.checkpoints``); this command checks the batch is one stream's next
contiguous versions and appends it in one transaction. A stale version is a
``ConcurrencyError``, on which the checkpointer renumbers and calls again.
"""

from __future__ import annotations

from collections.abc import Sequence

from commands.run_state import (
    allows,
    check_owner,
    check_transition,
    load_run,
    own_fold,
    remember,
)
from events.base import Event
from events.errors import ConcurrencyError
from events.store import EventStore


def save_checkpoint(
    store: EventStore, events: Sequence[Event], *, epoch: int | None = None
) -> None:
    """Append one step's events (outbox, writes, checkpoint) atomically.

    With ``epoch`` (a worker saving its run's graph) the stream is a run that
    must still be running under that owner: a cancelled run or a fenced-off
    worker gets ``InvalidTransitionError`` / ``WorkerFencedError`` and nothing
    is stored. The check is made at the version the batch follows (on this
    process's own fold of the run when it has one there), and the append commits
    only if the stream is still at that version, so the check holds until commit.
    """
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
    if epoch is None:
        store.append(events)
        return
    follows = first.originator_version - 1
    state = own_fold(store, first.originator_id, at=follows)
    # Run events and checkpoints: while running. A refusal on this process's own fold
    # is checked on the log, which the fold may be behind.
    if state is None or not allows(state, type(first), epoch):
        state = load_run(store, first.originator_id)
        if state.version != follows:
            raise ConcurrencyError(
                f"Stream {first.originator_id} is at version {state.version}, not {follows}."
            )
        check_owner(state, epoch)
        check_transition(state, type(first))
    store.append(events, expected_version=follows)
    for event in events:
        state.apply(event)
    remember(store, state)  # the next step's check reads nothing
