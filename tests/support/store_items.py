"""Inbox items made at the store level, with the real commands and no worker.

``create_run``, ``start_run`` (owned by this test process, which is alive, so
no orphan check interrupts it) and ``suspend_run`` on the given asks. With
``resumed``, ``resume_run`` then hands the run back to this process, as when
one of a run's questions was answered and its worker goes on: a decision on
the items left then starts no worker (the run is running), and no shep
command resumes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from commands.create_run import create_run
from commands.resume_run import resume_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.inbox import ArtifactRef, QuestionOption, item_stream_id
from events.store import EventStore
from shep.home.identity import host_name
from shep.home.procs import process_start

REVIEW_NODES = ("draft", "scope", "check", "approve", "finish")
OPTIONS = [
    QuestionOption(id="small", label="Small: one module", recommended=True),
    QuestionOption(id="large", label="Large: the whole package"),
]


def question(interrupt_id: str, node: str = "scope") -> Ask:
    """A question like gated-review's scope question."""
    return Ask(
        interrupt_id=interrupt_id,
        kind="question",
        node=node,
        question="How large should the change be?",
        options=OPTIONS,
    )


def gate(interrupt_id: str) -> Ask:
    """An approval gate like gated-review's."""
    return Ask(
        interrupt_id=interrupt_id,
        kind="approval",
        node="approve",
        summary="Draft ready",
        phase="draft",
        artifacts=[ArtifactRef(path="shep-review.md", sha256="0" * 64)],
    )


def ask_on_new_run(
    store: EventStore,
    repo: Path,
    asks: Sequence[Ask],
    *,
    resumed: bool,
    run_id: UUID | None = None,
) -> tuple[UUID, list[UUID]]:
    """A gated-review run suspended on ``asks`` (see the module doc); its id and item ids."""
    me, host, started = os.getpid(), host_name(), process_start(os.getpid())
    run = create_run(
        store,
        workflow="gated-review",
        agent_type="claude-code",
        repo=str(repo),
        node_names=list(REVIEW_NODES),
        created_by="test",
        run_id=run_id,
        pid=me,
        host=host,
        process_start=started,
    )
    state = start_run(store, run, pid=me, host=host, process_start=started)
    suspend_run(store, run, list(asks), epoch=state.epoch)
    if resumed:
        resume_run(store, run, pid=me, host=host, process_start=started)
    return run, [item_stream_id(run, ask.interrupt_id) for ask in asks]
