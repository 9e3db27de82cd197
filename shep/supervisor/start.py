"""Start the supervisor in the background when a new inbox item is one a policy covers.

Cheap and import-light: called by every worker that suspends a run. With the
``collaboration`` flag off, or no enabled policy covering the items, nothing
starts and nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from commands.policies import covering, item_kind, load_policies
from events.store import EventStore
from events.supervisor import Autonomy

if TYPE_CHECKING:
    from shep.home.runtime import Runtime


def log_path(home: Path) -> Path:
    return home / "logs" / "supervisor.log"


def covered(store: EventStore, item_ids: list[UUID]) -> bool:
    """Whether an enabled policy covers one of the items."""
    policies = load_policies(store)
    if not any(p.enabled for p in policies.values()):
        return False
    return any(covering(store, policies, item_id) is not None for item_id in item_ids)


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


def start_if_covered(store: EventStore, home: Path, item_ids: list[UUID]) -> int | None:
    """Start ``shep supervisor run`` detached if the flag is on and a policy covers an item;
    its pid, or None."""
    from shep.home.procs import spawn_shep
    from shep.home.settings import load_settings

    if not item_ids or not load_settings(store).flags["collaboration"]:
        return None
    if not covered(store, item_ids):
        return None
    return spawn_shep(home, ["supervisor", "run", "--background"], log_path(home))


def start_for_waiting(runtime: Runtime) -> int:
    """After the flag or a policy changed: start the supervisor for the items already waiting
    that a policy now covers. How many items are waiting (0: nothing started)."""
    from projections.inbox_queries import list_inbox

    if not runtime.has_store():
        return 0
    waiting = [UUID(item["item_id"]) for item in list_inbox(runtime.read_db())]
    if start_if_covered(runtime.store(), runtime.home, waiting) is None:
        return 0
    return len(waiting)
