"""Reapplying an origin's decision on a fork's item (``shep fork --reapply-answers``)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from commands.answer_question import answer_question
from commands.create_run import create_run
from commands.inbox_state import load_item
from commands.reapply_decision import reapply_decision
from commands.record_heartbeat import record_heartbeat
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.inbox import QuestionOption
from events.runs import HeartbeatRecorded, NodeStarted
from events.store import EventStore

ASK = Ask(
    interrupt_id="i-scope",
    kind="question",
    node="scope",
    question="How big?",
    options=[QuestionOption(id="small", label="Small")],
)


def _running(store: EventStore) -> UUID:
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["scope"], created_by="me"
    )
    start_run(store, run_id, pid=10, host="h")
    return run_id


def test_a_heartbeat_between_load_and_append_does_not_lose_the_reapplied_decision(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork's worker heartbeats while it reapplies: a heartbeat appended between the
    reapply's load of the run and its append made the store refuse the append, and the
    runner took that for another worker's record, so the fork's gate waited for a person
    (seen as a flaky fork test under load). It looks again and records the decision."""
    origin = _running(store)
    _, [asked] = suspend_run(store, origin, [ASK], epoch=1)
    answered = answer_question(store, asked, actor="user:ann", option_id="small")
    fork = _running(store)

    append = store.append
    raced = []

    def heartbeat_first(events: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(True)
            record_heartbeat(store, fork, pid=10, host="h", epoch=1)
        return append(events, **kwargs)

    monkeypatch.setattr(store, "append", heartbeat_first)
    item_id = reapply_decision(store, fork, ASK, answered, epoch=1)
    monkeypatch.undo()

    item = load_item(store, item_id)
    assert item is not None
    assert item.decision is not None
    assert item.decision.actor == "user:ann"
    assert item.decision.reapplied_from == asked
    kinds = [type(e) for e in store.load(fork)]
    assert kinds[-2:] == [HeartbeatRecorded, NodeStarted]


def test_an_item_another_worker_recorded_first_stands(store: EventStore) -> None:
    """A second reapply of the same item records nothing more: the first stands."""
    origin = _running(store)
    _, [asked] = suspend_run(store, origin, [ASK], epoch=1)
    answered = answer_question(store, asked, actor="user:ann", option_id="small")
    fork = _running(store)
    first = reapply_decision(store, fork, ASK, answered, epoch=1)
    count = len(store.load(fork))
    assert reapply_decision(store, fork, ASK, answered, epoch=1) == first
    assert len(store.load(fork)) == count
