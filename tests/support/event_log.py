"""The test's event log, read straight from the store's file: no side effects.

Every ``shep`` command applies due deadlines and resumes stranded runs before
its own work (``shep.runs.inbox_watch``). The gate tests must choose when that
happens, so they poll the log with these reads instead of with ``shep``.
Statuses come from the write side's own fold (``commands.run_state.fold``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import apsw

from commands.run_state import RunState, fold
from events.base import Event
from events.catalog import decode_event
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
)

E = TypeVar("E", bound=Event)
Asked = QuestionAsked | ApprovalRequested
Decided = QuestionAnswered | ApprovalGranted | ApprovalRejected


def read_events(home: Path) -> list[Event]:
    """Every event of the store under ``home``, in log order (``[]`` before the store exists)."""
    path = home / "shep.db"
    if not path.exists():
        return []
    # Not `events.sqlite_file.connect(readonly=True)`: it reads before it sets its busy
    # timeout, so it fails at once while another process closes the store.
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.setbusytimeout(10_000)
    try:
        rows = conn.execute(
            "SELECT topic, state FROM stored_events ORDER BY notification_id"
        ).fetchall()
    finally:
        conn.close()
    return [decode_event(str(topic), state) for topic, state in rows if isinstance(state, bytes)]


def of_type(events: Sequence[Event], kind: type[E], **fields: Any) -> list[E]:
    """The events of ``kind`` whose attributes equal ``fields``."""
    return [
        e
        for e in events
        if isinstance(e, kind) and all(getattr(e, k) == v for k, v in fields.items())
    ]


def run_stream(events: Sequence[Event], run_id: str) -> list[Event]:
    """The events of the run's own stream."""
    stream = UUID(run_id)
    return [e for e in events if e.originator_id == stream]


def run_state(home: Path, run_id: str) -> RunState:
    """The run as the commands see it (the same fold)."""
    state = fold(UUID(run_id), run_stream(read_events(home), run_id))
    assert state is not None, f"run {run_id} has no events"
    return state


def items_of(events: Sequence[Event], run_id: str) -> list[Asked]:
    """The run's questions and gates, in the order they were asked."""
    run = UUID(run_id)
    return [
        e for e in events if isinstance(e, QuestionAsked | ApprovalRequested) and e.run_id == run
    ]


def decisions_of(events: Sequence[Event], item_id: UUID | str) -> list[Decided]:
    """Every decision event on an item's stream (exactly one is the invariant)."""
    stream = item_id if isinstance(item_id, UUID) else UUID(item_id)
    return [
        e
        for e in events
        if e.originator_id == stream
        and isinstance(e, QuestionAnswered | ApprovalGranted | ApprovalRejected)
    ]


def pending_items(events: Sequence[Event], run_id: str) -> list[Asked]:
    """The run's items that have no decision yet."""
    decided = {
        e.originator_id
        for e in events
        if isinstance(e, QuestionAnswered | ApprovalGranted | ApprovalRejected)
    }
    return [i for i in items_of(events, run_id) if i.originator_id not in decided]


def wait_until(condition: Callable[[], Any], *, timeout: float = 60, what: str = "") -> Any:
    """Poll ``condition`` every 20 ms until it is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def wait_for_status(home: Path, run_id: str, *statuses: str, timeout: float = 60) -> RunState:
    """Wait until the run's status is one of ``statuses``; return its state."""

    def reached() -> RunState | None:
        state = run_state(home, run_id)
        return state if state.status.value in statuses else None

    try:
        result: RunState = wait_until(reached, timeout=timeout, what=f"run to be {statuses}")
    except AssertionError as e:
        raise AssertionError(f"{e}; it is {run_state(home, run_id).status.value}") from None
    return result


def wait_for_waiting(home: Path, run_id: str, count: int, timeout: float = 60) -> list[Asked]:
    """Wait until the run waits (no worker) on ``count`` items, none of them decided yet.

    The items are those of the run's latest ``RunSuspended``: a run that still
    waits on an item decided a moment ago (its worker not started yet) does
    not count.
    """

    def waiting() -> list[Asked] | None:
        events = read_events(home)
        state = fold(UUID(run_id), run_stream(events, run_id))
        if state is None or state.status.value not in ("waiting_answer", "waiting_approval"):
            return None
        pending = {i.originator_id: i for i in pending_items(events, run_id)}
        if len(state.waiting_for) != count or any(i not in pending for i in state.waiting_for):
            return None
        return [pending[i] for i in state.waiting_for]

    result: list[Asked] = wait_until(waiting, timeout=timeout, what=f"{count} pending items")
    return result


def assert_rebuild_equals_incremental(home: Path) -> None:
    """The projections the workers and commands built equal a rebuild from the log.

    Call it when no worker runs (every run waits or has ended).
    """
    from projections.catch_up import catch_up, rebuild
    from projections.database import open_database
    from tests.projections.test_rebuild import snapshot

    conn = open_database(home / "shep.db")
    try:
        catch_up(conn)
        incremental = snapshot(conn)
        rebuild(conn)
        rebuilt = snapshot(conn)
    finally:
        conn.close()
    for table, rows in incremental.items():
        assert rebuilt[table] == rows, f"the {table} projection differs once rebuilt"
