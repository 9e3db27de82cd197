"""Start the supervisor in the background for inbox items it has yet to decide.

Cheap and import-light: called by every worker that suspends a run, and by
the commands that let the supervisor decide more (the flag turned on, a
policy configured or enabled). With the ``collaboration`` flag off, or no item
left for it to decide, nothing starts and nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from commands.policies import covering, item_kind, load_policies
from events.base import Event
from events.store import EventStore
from events.supervisor import Autonomy, SupervisorDecisionMade, SupervisorDecisionRefused

if TYPE_CHECKING:
    from shep.home.runtime import Runtime


def log_path(home: Path) -> Path:
    return home / "logs" / "supervisor.log"


def left_to_decide(store: EventStore, item_ids: list[UUID]) -> list[UUID]:
    """The items of ``item_ids`` (in their order) the supervisor is to decide now: not
    decided, their run not ended, covered by an enabled policy, and nothing of the
    supervisor's recorded on them yet (an item it escalated or advised on waits for a
    person, not for it)."""
    from commands.run_state import load_run
    from commands.supervise import supervisor_decisions
    from events.runs import FINAL_STATUSES

    policies = load_policies(store)
    if not any(p.enabled for p in policies.values()):
        return []
    # Per run: None when it ended (its items are left alone), else the items the
    # supervisor recorded something on.
    recorded: dict[UUID, set[UUID] | None] = {}
    left = []
    for item_id in item_ids:
        found = covering(store, policies, item_id)
        if found is None:
            continue
        run_id = found[0].asked.run_id
        if run_id not in recorded:
            ended = load_run(store, run_id).status in FINAL_STATUSES
            recorded[run_id] = None if ended else _subjects(supervisor_decisions(store, run_id))
        subjects = recorded[run_id]
        if subjects is not None and item_id not in subjects:
            left.append(item_id)
    return left


def _subjects(events: list[Event]) -> set[UUID]:
    """The items a run's supervisor stream decided on (or was refused on)."""
    return {
        e.subject_id
        for e in events
        if isinstance(e, SupervisorDecisionMade | SupervisorDecisionRefused)
        and e.subject_id is not None
    }


def cosign_label(store: EventStore, item_id: UUID) -> str | None:
    """The label of the cosign policy a gate needs the supervisor's signature under, if any
    (only while the flag is on)."""
    from shep.home.settings import load_settings

    if not load_settings(store).flags["collaboration"]:
        return None
    found = covering(store, load_policies(store), item_id)
    if found is None:
        return None
    item, policy = found
    return policy.label if policy.autonomy_for(item_kind(item.asked)) == Autonomy.COSIGN else None


def start_if_covered(store: EventStore, home: Path, item_ids: list[UUID]) -> list[UUID]:
    """Start ``shep supervisor run`` detached if the flag is on and some of ``item_ids`` are
    left for it to decide (``left_to_decide``); those items (none: nothing started)."""
    from shep.home.procs import spawn_shep
    from shep.home.settings import load_settings

    if not item_ids or not load_settings(store).flags["collaboration"]:
        return []
    left = left_to_decide(store, item_ids)
    if left:
        spawn_shep(home, ["supervisor", "run", "--background"], log_path(home))
    return left


def start_for_waiting(runtime: Runtime) -> int:
    """After the flag or a policy changed: start the supervisor for the items waiting in
    the inbox that it is now to decide. How many (0: nothing started)."""
    from projections.inbox_queries import list_inbox

    if not runtime.has_store():
        return 0
    waiting = [UUID(item["item_id"]) for item in list_inbox(runtime.read_db())]
    return len(start_if_covered(runtime.store(), runtime.home, waiting))
