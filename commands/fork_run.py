"""Fork a run at one of its checkpoints: a new run that goes on from there (``shep fork``).

The new run's ``RunCreated`` names its origin and checkpoint, and the origin
gets ``RunForked`` naming the new run, in one transaction: the lineage reads
the same from either side. With a ``fork_key`` the new run's id is derived
from the origin and the key, so asking again returns the same fork.
"""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID, uuid4, uuid5

from commands.run_state import load_run, next_events
from events.base import utc_now
from events.checkpoints import CheckpointSaved
from events.errors import RunInputError
from events.runs import RunCreated, RunForked
from events.store import EventStore
from events.versions import SHEP_VERSION

#: What a fork takes from the origin's checkpoint.
RESTORE_MODES = ("both", "state", "worktree")


def fork_id(origin: UUID, key: str | None) -> UUID:
    """The new run's id: derived from the origin and ``key`` (idempotent), or random."""
    return uuid5(origin, f"fork:{key}") if key else uuid4()


def find_checkpoint(store: EventStore, run_id: UUID, ref: str) -> CheckpointSaved:
    """The run's checkpoint whose id is ``ref`` or starts with it (root namespace only)."""
    found = [
        e
        for e in store.load(run_id, types=[CheckpointSaved])
        if isinstance(e, CheckpointSaved)
        and e.checkpoint_ns == ""
        and e.checkpoint_id.startswith(ref.strip())
    ]
    ids = {e.checkpoint_id for e in found}
    if not ref.strip() or not ids:
        raise RunInputError(
            f"Run {run_id.hex[:8]} has no checkpoint {ref!r}: `shep replay "
            f"{run_id.hex[:8]}` lists them (the checkpoint of each frame)."
        )
    if len(ids) > 1:
        raise RunInputError(
            f"Checkpoint {ref!r} is ambiguous in run {run_id.hex[:8]} ({len(ids)} match); "
            "give more of its id."
        )
    return found[-1]


def fork_run(
    store: EventStore,
    origin: UUID,
    checkpoint_id: str,
    *,
    forked_by: str,
    restore: str,
    reapply_answers: bool,
    fork_key: str | None,
    repo: str,
    inputs: Mapping[str, str],
    pid: int | None = None,
    host: str | None = None,
    process_start: str | None = None,
    workflow_version: str | None = None,
    graph_fingerprint: str | None = None,
    node_names: list[str] | None = None,
) -> tuple[UUID, bool]:
    """Create the fork (or find the one ``fork_key`` made before); (its id, made now).

    The fork is pinned to the workflow as it is now (``workflow_version``,
    ``graph_fingerprint``, its ``node_names``), not to the origin's: it goes on from
    the origin's checkpoint under the current graph.
    """
    if restore not in RESTORE_MODES:
        raise RunInputError(f"--restore is one of {', '.join(RESTORE_MODES)}, not {restore!r}.")
    new_id = fork_id(origin, fork_key)
    with store.exclusive():
        if fork_key and store.stream_version(new_id) > 0:
            return new_id, False
        state = load_run(store, origin)
        created = store.load(origin, types=[RunCreated])[0]
        assert isinstance(created, RunCreated)
        forked = next_events(
            state,
            [
                (
                    RunForked,
                    {
                        "fork_run_id": new_id,
                        "checkpoint_id": checkpoint_id,
                        "forked_by": forked_by,
                        "restore": restore,
                        "reapply_answers": reapply_answers,
                        "fork_key": fork_key,
                    },
                )
            ],
        )
        child = RunCreated(
            originator_id=new_id,
            originator_version=1,
            timestamp=utc_now(),
            workflow=created.workflow,
            agent_type=created.agent_type,
            model=created.model,
            repo=repo,
            inputs=dict(inputs),
            node_names=list(created.node_names if node_names is None else node_names),
            created_by=forked_by,
            origin_run_id=origin,
            origin_checkpoint_id=checkpoint_id,
            fork_restore=restore,
            reapply_answers=reapply_answers,
            pid=pid,
            host=host,
            process_start=process_start,
            shep_version=SHEP_VERSION,
            workflow_version=workflow_version,
            graph_fingerprint=graph_fingerprint,
        )
        store.append([*forked, child])
    return new_id, True
