"""Create a run: the first event of a new run stream (status: pending)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID, uuid4

from events.base import utc_now
from events.runs import RunCreated
from events.store import EventStore
from events.versions import SHEP_VERSION


def create_run(
    store: EventStore,
    *,
    workflow: str,
    agent_type: str,
    repo: str,
    node_names: Sequence[str],
    created_by: str,
    model: str | None = None,
    inputs: Mapping[str, str] | None = None,
    origin_run_id: UUID | None = None,
    origin_checkpoint_id: str | None = None,
    run_id: UUID | None = None,
    pid: int | None = None,
    host: str | None = None,
    process_start: str | None = None,
    workflow_version: str | None = None,
    graph_fingerprint: str | None = None,
) -> UUID:
    """Append ``RunCreated`` to a new stream and return the run id.

    ``pid``, ``host`` and ``process_start`` name the process that will start
    the run; if it dies first, recovery finds the run pending with its creator
    gone and marks it interrupted (resumable) instead of leaving it pending.
    ``workflow_version`` and ``graph_fingerprint`` pin the run to the workflow as
    it is now (``shep.runs.pin.current_pin``), with this shep's version.
    """
    new_id = run_id or uuid4()
    store.append(
        [
            RunCreated(
                originator_id=new_id,
                originator_version=1,
                timestamp=utc_now(),
                workflow=workflow,
                agent_type=agent_type,
                model=model,
                repo=repo,
                inputs=dict(inputs or {}),
                node_names=list(node_names),
                created_by=created_by,
                origin_run_id=origin_run_id,
                origin_checkpoint_id=origin_checkpoint_id,
                pid=pid,
                host=host,
                process_start=process_start,
                shep_version=SHEP_VERSION,
                workflow_version=workflow_version,
                graph_fingerprint=graph_fingerprint,
            )
        ]
    )
    return new_id
