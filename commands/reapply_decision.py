"""Give a fork the origin's decision on the same question or gate (``--reapply-answers``).

The fork's item is asked and decided in one append, by the same actor as the
origin's decision, with ``reapplied_from`` naming the origin's item: the audit
trail shows that nobody decided again, and who decided first.

A question's answer is reapplied to the same question (same node and
iteration). A gate's decision is about what the gate showed: it is reapplied
only when every artifact the fork's gate shows (spec files, the diff to merge,
the test result) is byte-identical to those the origin's decision was about;
otherwise the fork's gate waits for a person. Either way the fork's item
records why (``reapply``).
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import msgspec

from commands.inbox_state import ItemState, load_item
from commands.run_state import CONFLICT_RETRIES, load_run, next_events
from commands.suspend_run import Ask, asked_node, item_event
from events.base import utc_now
from events.errors import ConcurrencyError
from events.inbox import ApprovalRequested, ArtifactRef, item_stream_id
from events.inbox_status import ItemKind
from events.store import EventStore
from events.words import counted


@dataclass(frozen=True)
class Reapply:
    """Whether the origin's decision may be given to the fork's item, and why (recorded)."""

    taken: bool
    reason: str


def check_reapply(ask: Ask, origin: ItemState) -> Reapply:
    """The rule above: a question's answer always; a gate's decision only on what the origin
    decided on, artifact for artifact, with every hash known.
    """
    short = origin.item_id.hex[:8]
    if ask.kind == ItemKind.QUESTION:
        return Reapply(
            True,
            f"reapplied: the answer to the same question ({ask.node}, iteration "
            f"{ask.iteration}) in item {short}",
        )
    asked = origin.asked
    theirs = list(asked.artifacts) if isinstance(asked, ApprovalRequested) else []
    differs = _differences(theirs, list(ask.artifacts))
    if not ask.artifacts:
        differs = ["the gate shows no artifact to compare"]
    if differs:
        return Reapply(
            False,
            f"not reapplied: {'; '.join(differs)} (item {short}); waits for a person",
        )
    return Reapply(
        True,
        f"reapplied: {counted(len(ask.artifacts), 'artifact')} byte-identical to what item "
        f"{short} decided on",
    )


def _differences(origin: list[ArtifactRef], fork: list[ArtifactRef]) -> list[str]:
    """What differs between the artifacts the origin decided on and the fork's, in words.

    Files are matched by path; the diff and the test result (one of each) by kind.
    """
    theirs = {_key(a): a for a in origin}
    ours = {_key(a): a for a in fork}
    found = []
    for key, artifact in ours.items():
        named = f"{artifact.kind} {artifact.path}"
        if not artifact.sha256:
            found.append(f"{named} could not be read")
        elif key not in theirs:
            found.append(f"{named} was not shown to the origin's decider")
        elif theirs[key].sha256 != artifact.sha256:
            found.append(f"{named} differs")
    found += [f"{a.kind} {a.path} is missing" for key, a in theirs.items() if key not in ours]
    return found


def _key(artifact: ArtifactRef) -> tuple[str, str]:
    return artifact.kind, artifact.path if artifact.kind == "file" else ""


def reapply_decision(
    store: EventStore, run_id: UUID, ask: Ask, origin: ItemState, *, epoch: int
) -> UUID:
    """Record ``ask`` on the fork's item, the origin's decision on it, and the node's start on
    the run (as ``suspend_run`` does for an item it asks), in one fenced append; return the
    item id. ``ask.reapply`` says why (``check_reapply`` must have taken it).

    The run's stream has other writers (the worker's heartbeat): when one appends between
    our load and our append, the store refuses ours, and we look again, as
    ``append_to_run`` does. An item another worker of this fork recorded meanwhile stands.
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
    for attempt in range(CONFLICT_RETRIES):
        if load_item(store, item_id) is not None:
            return item_id
        started = next_events(load_run(store, run_id), [asked_node(ask)], epoch=epoch)
        try:
            store.append([asked, decided, *started])
        except ConcurrencyError:
            if attempt == CONFLICT_RETRIES - 1:
                raise
            continue
        return item_id
    raise AssertionError("unreachable")
