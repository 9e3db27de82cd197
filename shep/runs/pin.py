"""A run pinned to the workflow it started with: checked on every resume, migrated or refused.

A run records, when it is created, shep's version, its workflow's ``version``
and the fingerprint of its graph (``RunCreated``). Whatever makes the graph go
on again (``shep resume``, a decision's worker, the inbox watcher, the
supervisor: ``shep.runs.launch.launch``, or the inbox watch itself) asks ``check_resume``
first:

- the same graph, or a run from before pins (``unknown``): it goes on as ever;
- a changed graph whose workflow declares a ``Migration`` from the run's
  version: the worker applies it to the run's last checkpoint and records
  ``RunMigrated`` with the migrated checkpoint, in one transaction
  (``migrate``), and goes on;
- otherwise ``WorkflowChangedError``: one line naming both versions and the
  ways out (the shep that started the run, or ``shep fork`` at the newest
  checkpoint whose next nodes all exist in the new graph). Nothing is recorded.

A person's decision is checked before it is recorded (``check_decision``:
``shep answer``/``approve``/``reject``, the inbox picker, the dashboard), so a
refused one leaves the item pending. The supervisor's and a deadline's
decisions are recorded, and their run's resume is refused the same way.

Computing a fingerprint builds the graph, which imports langgraph; a home keeps the
fingerprints it computed, so a check in a home that has seen this graph does not.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from commands.run_state import RunState, next_events
from events.checkpoints import CheckpointSaved
from events.errors import UnknownWorkflowError, WorkflowChangedError
from events.runs import RunCreated, RunMigrated, RunStatus
from events.store import EventStore
from events.versions import SHEP_VERSION
from shep.workflows import get_workflow
from shep.workflows.base import Migration, Workflow
from shep.workflows.shape import Pin, current_pin, workflow_shape_of

#: How a run created before pins existed is named.
UNKNOWN = "unknown"
#: The state keys of ``StepState`` keyed by node name: a rename carries their entries over.
NODE_KEYED = ("results", "iterations", "feedback", "answers", "verdicts")


@dataclass(frozen=True)
class Crossing:
    """A resume under a changed graph that the workflow's ``migration`` allows."""

    workflow: str
    pinned: Pin
    now: Pin
    migration: Migration


def run_pin(events: Sequence[Any]) -> Pin:
    """The pin of a run from its ``RunCreated`` and ``RunMigrated`` events: its creation's,
    or its latest migration's."""
    pin = Pin(None, None, None)
    for event in events:
        if isinstance(event, RunCreated):
            pin = Pin(event.shep_version, event.workflow_version, event.graph_fingerprint)
        elif isinstance(event, RunMigrated):
            pin = Pin(event.shep_version, event.to_version, event.to_fingerprint)
    return pin


def check_resume(store: EventStore, run_id: UUID, home: Path | None = None) -> Crossing | None:
    """Whether run ``run_id`` may go on under the workflow as it is now: None (the same
    graph, or an unpinned run), a ``Crossing`` to apply, or ``WorkflowChangedError``.
    With ``home``, the graph's fingerprint is read from what the home keeps when it can
    (``shep.workflows.shape.current_pin``), without importing langgraph."""
    events = store.load(run_id, types=[RunCreated, RunMigrated])
    if not events or not isinstance(events[0], RunCreated):
        return None
    pinned = run_pin(events)
    if pinned.fingerprint is None:
        return None  # from before pins: it resumes as it always did
    try:
        workflow = get_workflow(events[0].workflow)
    except UnknownWorkflowError:
        return None  # not registered here: the worker says so, as it always did
    now = current_pin(workflow, home)
    if now.fingerprint == pinned.fingerprint:
        return None
    migration = workflow.migrations.get(pinned.workflow_version or UNKNOWN)
    if migration is None or pinned.workflow_version == workflow.version:
        raise WorkflowChangedError(_refusal(store, run_id, workflow, pinned, now))
    return Crossing(workflow.name, pinned, now, migration)


def _refusal(store: EventStore, run_id: UUID, workflow: Workflow, pinned: Pin, now: Pin) -> str:
    short = run_id.hex[:8]
    nodes = {node.name for node in workflow_shape_of(workflow).nodes}
    fits = fork_point(store, run_id, nodes)
    fork = (
        f"or `shep fork {short} --at {fits[:20]}` (its last checkpoint this graph can take)"
        if fits
        else "(no checkpoint of it fits this graph, so no fork can take it over)"
    )
    return (
        f"Run {short} started with {workflow.name} version {pinned.workflow_version or UNKNOWN} "
        f"(graph {pinned.fingerprint}, shep {pinned.shep_version or UNKNOWN}); this shep has "
        f"version {workflow.version} (graph {now.fingerprint}) with no migration from it: "
        f"finish the run with shep {pinned.shep_version or UNKNOWN}, {fork}."
    )


def fork_point(store: EventStore, run_id: UUID, nodes: set[str]) -> str | None:
    """The id of the run's newest checkpoint whose next nodes all exist in ``nodes``
    (a fork at it goes on under that graph), or None."""
    saved = [
        e
        for e in store.load(run_id, types=[CheckpointSaved])
        if isinstance(e, CheckpointSaved) and e.checkpoint_ns == ""
    ]
    for event in reversed(saved):
        following = next_nodes(_decode(event.checkpoint_type, event.checkpoint))
        if following and following <= nodes:
            return event.checkpoint_id
    return None


def _decode(type_tag: str, data: bytes) -> dict[str, Any]:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    value = JsonPlusSerializer().loads_typed((type_tag, data))
    return value if isinstance(value, dict) else {}


def next_nodes(checkpoint: Mapping[str, Any]) -> set[str]:
    """The nodes a checkpoint goes on to: those whose trigger channel (``branch:to:NODE``,
    or ``__start__`` for the input) changed since the node last saw it."""
    versions = checkpoint.get("channel_versions") or {}
    seen = checkpoint.get("versions_seen") or {}
    found = set()
    for channel, version in versions.items():
        if channel == "__start__":
            node = channel
        elif channel.startswith("branch:to:"):
            node = channel.removeprefix("branch:to:")
        else:
            continue
        before = (seen.get(node) or {}).get(channel)
        if before is None or _order(before) < _order(version):
            found.add(node)
    return found


def _order(version: Any) -> tuple[float, str]:
    """A channel version, comparable: shep's savers count in integers, LangGraph's SQL
    savers write ``<counter>.<random>`` strings."""
    if isinstance(version, int | float):
        return (float(version), "")
    counter, _, rest = str(version).partition(".")
    return (float(counter) if counter.isdigit() else 0.0, rest)


def migrate_checkpoint(checkpoint: dict[str, Any], migration: Migration) -> set[str]:
    """Apply ``migration`` to ``checkpoint`` in place; the channels it changed.

    A renamed node takes the old one's trigger, what it has seen and its entries
    in the node-keyed state; a removed node's pending trigger goes to the node it
    continues at; a state key added with a default gets it where it is missing.
    """
    values = checkpoint.setdefault("channel_values", {})
    versions = checkpoint.setdefault("channel_versions", {})
    seen = checkpoint.setdefault("versions_seen", {})
    changed: set[str] = set()
    pending = next_nodes(checkpoint)
    for old, new in migration.renamed.items():
        old_key, new_key = f"branch:to:{old}", f"branch:to:{new}"
        if old_key in versions:
            versions[new_key] = versions.pop(old_key)
            if old_key in values:
                values[new_key] = values.pop(old_key)
            changed.add(new_key)
        if old in seen:
            seen[new] = {
                (new_key if key == old_key else key): v for key, v in seen.pop(old).items()
            }
        for key in NODE_KEYED:
            entries = values.get(key)
            if isinstance(entries, dict) and old in entries:
                values[key] = {(new if k == old else k): v for k, v in entries.items()}
                changed.add(key)
    for gone, at in migration.removed.items():
        old_key, new_key = f"branch:to:{gone}", f"branch:to:{at}"
        version = versions.pop(old_key, None)
        values.pop(old_key, None)
        seen.pop(gone, None)
        if gone in pending and version is not None:
            versions[new_key] = max(version, versions.get(new_key, version), key=_order)
            (seen.get(at) or {}).pop(new_key, None)
            changed.add(new_key)
    for key, default in migration.defaults.items():
        if key not in values:
            values[key] = copy.deepcopy(default)
            if versions:
                versions[key] = max(versions.values(), key=_order)
            changed.add(key)
    return changed


def migrate(store: EventStore, saver: Any, run_id: UUID, crossing: Crossing) -> str | None:
    """Apply ``crossing`` to the run's last checkpoint and record ``RunMigrated``: with the
    migrated checkpoint in one transaction when it changed, alone otherwise (the worker,
    whose ``saver`` is fenced with its epoch, owns the run). The migrated checkpoint's id."""
    from langgraph.checkpoint.base import create_checkpoint

    thread = run_id.hex
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    last = saver.get_tuple(config)
    checkpoint = copy.deepcopy(last.checkpoint) if last is not None else None
    changed = migrate_checkpoint(checkpoint, crossing.migration) if checkpoint else set()
    migrated = None
    step = int((last.metadata or {}).get("step", 0)) + 1 if last is not None else 0
    if checkpoint is not None and changed:
        checkpoint = create_checkpoint(checkpoint, None, step)
        migrated = checkpoint["id"]
    fields = {
        "workflow": crossing.workflow,
        "from_version": crossing.pinned.workflow_version or UNKNOWN,
        "to_version": crossing.now.workflow_version or UNKNOWN,
        "from_fingerprint": crossing.pinned.fingerprint or UNKNOWN,
        "to_fingerprint": crossing.now.fingerprint or UNKNOWN,
        "shep_version": SHEP_VERSION,
        "checkpoint_id": migrated,
        "renamed": dict(crossing.migration.renamed),
        "removed": dict(crossing.migration.removed),
        "defaults": sorted(crossing.migration.defaults),
    }

    def build(after: int) -> list[Any]:
        return next_events(
            RunState(run_id, version=after, status=RunStatus.RUNNING), [(RunMigrated, fields)]
        )

    saver.enqueue(thread, build)
    if migrated is not None and last is not None and checkpoint is not None:
        versions = checkpoint["channel_versions"]
        saver.put(
            last.config,
            checkpoint,
            {"source": "update", "step": step, "parents": {}},
            {key: versions[key] for key in changed if key in versions},
        )
    else:
        saver.flush(thread)
    return migrated


def check_decision(store: EventStore, item_id: UUID, home: Path | None = None) -> None:
    """Refuse (``WorkflowChangedError``) a decision on inbox item ``item_id`` that its run
    could not go on with: the run waits, and its workflow changed with no migration from
    its version. Called before the decision is recorded, so a refusal records nothing."""
    from commands.inbox_state import load_item
    from commands.run_state import load_run
    from events.runs import WAITING_STATUSES

    item = load_item(store, item_id)
    if item is None:
        return  # the decision's own command says so
    run_id = item.asked.run_id
    if load_run(store, run_id).status in WAITING_STATUSES:
        check_resume(store, run_id, home)
