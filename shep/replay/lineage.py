"""A run's fork tree: up its origins to the oldest, then down every recorded fork,
read from the store (read-only) or from an audit bundle.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING
from uuid import UUID

import msgspec

from events.base import Event
from events.catalog import decode_event, topic_of
from events.runs import RunCreated, RunForked
from shep.replay.frames import iso
from shep.replay.sources import (
    RUN_CREATED,
    OnVerified,
    bundle_run,
    read_bundle,
    read_store,
    resolve_run,
    story,
)

if TYPE_CHECKING:
    import apsw

_RUN_FORKED = topic_of(RunForked)


class Lineage(msgspec.Struct, kw_only=True):
    """A run in a fork tree: where it was forked from its parent, and its own forks."""

    run: str
    workflow: str | None = None
    created_at: str | None = None
    created_by: str | None = None
    checkpoint_id: str | None = None
    forked_by: str | None = None
    status: str | None = None
    known: bool = True
    forks: list[Lineage] = []


class _LineageSource:
    """What a fork tree is built from: each run's creation and the forks it records."""

    def __init__(
        self,
        created: Callable[[UUID], RunCreated | None],
        forks: Callable[[UUID], list[RunForked]],
    ) -> None:
        self.created = created
        self.forks = forks


def lineage_from_store(db_path: str | os.PathLike[str], run_ref: str) -> tuple[str, Lineage]:
    """(the run's hex id, the tree of its lineage from its oldest origin), read-only."""

    def read(conn: apsw.Connection) -> tuple[str, Lineage]:
        run_id = resolve_run(conn, run_ref)

        def events_of(run: UUID, topic: str) -> list[Event]:
            return [
                decode_event(topic, state)
                for (state,) in conn.execute(
                    "SELECT state FROM stored_events WHERE originator_id = ? AND topic = ? "
                    "ORDER BY originator_version",
                    (run.hex, topic),
                )
            ]

        def created(run: UUID) -> RunCreated | None:
            found = events_of(run, RUN_CREATED)
            return found[0] if found and isinstance(found[0], RunCreated) else None

        def forks(run: UUID) -> list[RunForked]:
            return [e for e in events_of(run, _RUN_FORKED) if isinstance(e, RunForked)]

        return run_id.hex, build_lineage(run_id, _LineageSource(created, forks))

    return read_store(os.fspath(db_path), read)


def lineage_from_bundle(
    path: str | os.PathLike[str], run_ref: str | None, *, on_verified: OnVerified | None = None
) -> tuple[str, Lineage]:
    """The same tree from a bundle (verified first, see ``read_bundle``); runs the bundle
    does not hold are marked unknown.
    """
    rows = read_bundle(path, on_verified=on_verified)
    run_id = bundle_run(rows, run_ref, path)
    created: dict[UUID, RunCreated] = {}
    forks: dict[UUID, list[RunForked]] = {}
    lineage = ((p, t, s) for p, _, t, s in rows if t in (RUN_CREATED, _RUN_FORKED))
    for _, event in story(lineage):
        if isinstance(event, RunCreated):
            created.setdefault(event.originator_id, event)
        elif isinstance(event, RunForked):
            forks.setdefault(event.originator_id, []).append(event)
    source = _LineageSource(created.get, lambda run: forks.get(run, []))
    return run_id.hex, build_lineage(run_id, source)


def build_lineage(run_id: UUID, source: _LineageSource) -> Lineage:
    """The fork tree around ``run_id``: up its origins (``RunCreated.origin_run_id``) to the
    oldest, then down every recorded fork (``RunForked``).
    """
    root, seen = run_id, {run_id}
    while (created := source.created(root)) is not None and created.origin_run_id is not None:
        if created.origin_run_id in seen:
            break
        root = created.origin_run_id
        seen.add(root)

    visited: set[UUID] = set()

    def node(run: UUID, via: RunForked | None) -> Lineage:
        visited.add(run)
        created = source.created(run)
        item = Lineage(
            run=run.hex,
            workflow=created.workflow if created else None,
            created_at=iso(created) if created else None,
            created_by=created.created_by if created else None,
            checkpoint_id=(via.checkpoint_id if via else None)
            or (created.origin_checkpoint_id if created else None),
            forked_by=via.forked_by if via else None,
            known=created is not None,
        )
        for fork in source.forks(run):
            if fork.fork_run_id not in visited:
                item.forks.append(node(fork.fork_run_id, fork))
        return item

    return node(root, None)
