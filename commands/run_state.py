"""A run's state, folded from its own stream, and the transitions it allows.

Commands decide on this fold, never on projections: the stream is the truth.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

import msgspec

from events.base import Event, utc_now
from events.errors import (
    ConcurrencyError,
    InvalidTransitionError,
    RunNotFoundError,
    WorkerFencedError,
)
from events.features import WorktreeRemoved
from events.runs import (
    WAITING_STATUSES,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunForked,
    RunInterrupted,
    RunMigrated,
    RunResumed,
    RunStarted,
    RunStatus,
    RunSuspended,
)
from events.store import EventStore

#: The status each status-changing event leads to (``RunSuspended``: see ``RunState.apply``).
_STATUS_AFTER: dict[type[Event], RunStatus] = {
    RunSuspended: RunStatus.WAITING_ANSWER,
    RunCreated: RunStatus.PENDING,
    RunStarted: RunStatus.RUNNING,
    RunResumed: RunStatus.RUNNING,
    RunInterrupted: RunStatus.INTERRUPTED,
    RunCancelled: RunStatus.CANCELLED,
    RunCompleted: RunStatus.COMPLETED,
    RunFailed: RunStatus.FAILED,
}

#: Which statuses each event may be appended in.
ALLOWED_FROM: dict[type[Event], frozenset[RunStatus]] = {
    RunStarted: frozenset({RunStatus.PENDING}),
    # A failed run may be retried: the node that failed runs again.
    RunResumed: frozenset({RunStatus.INTERRUPTED, RunStatus.FAILED, *WAITING_STATUSES}),
    RunSuspended: frozenset({RunStatus.RUNNING}),
    RunInterrupted: frozenset({RunStatus.RUNNING, RunStatus.PENDING}),
    RunCancelled: frozenset(
        {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED, *WAITING_STATUSES}
    ),
    RunCompleted: frozenset({RunStatus.RUNNING}),
    RunFailed: frozenset(
        {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED, *WAITING_STATUSES}
    ),
    # `shep feat rm` / `gc` clean up after a feature whatever its status.
    WorktreeRemoved: frozenset(RunStatus),
    # A run is forked from any of its checkpoints, whatever became of it.
    RunForked: frozenset(RunStatus),
    # Its worker migrates a run to a changed workflow before going on (shep.runs.pin).
    RunMigrated: frozenset({RunStatus.RUNNING}),
}
#: Events that hand the run to a new owner (a worker), numbered by ``next_events``.
_NEW_OWNER: frozenset[type[Event]] = frozenset({RunStarted, RunResumed})
#: Events recorded while a worker executes the run.
WHILE_RUNNING = frozenset({RunStatus.RUNNING})

_ACTION: dict[type[Event], str] = {
    RunStarted: "start it",
    RunResumed: "resume it",
    RunSuspended: "wait for people",
    RunInterrupted: "mark it interrupted",
    RunCancelled: "cancel it",
    RunCompleted: "complete it",
    RunFailed: "fail it",
}


@dataclass
class RunState:
    """What the run's stream says, as of ``version``."""

    run_id: UUID
    version: int = 0
    status: RunStatus = RunStatus.PENDING
    workflow: str = ""
    agent_type: str = ""
    node_names: list[str] = field(default_factory=list)
    completed_nodes: list[str] = field(default_factory=list)
    current_node: str | None = None
    #: The node whose ``NodeFailed`` is the newest (what a ``RunFailed`` after it names).
    failed_node: str | None = None
    #: The current owner: 0 until the run first starts, then one more per start/resume.
    epoch: int = 0
    #: The owner's process (the creator while pending): pid, host, start time.
    pid: int | None = None
    host: str | None = None
    process_start: str | None = None
    #: The inbox items the run waits for (its latest ``RunSuspended``), while it waits.
    waiting_for: list[UUID] = field(default_factory=list)

    def apply(self, event: Event) -> None:
        self.version = event.originator_version
        status = _STATUS_AFTER.get(type(event))
        if status is not None:
            self.status = status
        if isinstance(event, RunSuspended):
            self.status = RunStatus.WAITING_APPROVAL if event.approval else RunStatus.WAITING_ANSWER
            self.waiting_for = list(event.item_ids)
        elif isinstance(event, RunResumed):
            self.waiting_for = []
        if isinstance(event, RunCreated):
            self.workflow = event.workflow
            self.agent_type = event.agent_type
            self.node_names = list(event.node_names)
            self.pid, self.host, self.process_start = event.pid, event.host, event.process_start
        elif isinstance(event, RunStarted | RunResumed):
            # Events older than fencing carry no epoch: count the owners instead.
            self.epoch = event.epoch or self.epoch + 1
            self.pid, self.host, self.process_start = event.pid, event.host, event.process_start
        elif isinstance(event, NodeStarted):
            self.current_node = event.node
        elif isinstance(event, NodeCompleted):
            if event.node not in self.completed_nodes:
                self.completed_nodes.append(event.node)
            self.current_node = None
        elif isinstance(event, NodeFailed):
            self.current_node = None
            self.failed_node = event.node


def changes_status(event_type: type[Event]) -> bool:
    """Whether an event of this type moves the run to another status (or owner)."""
    return event_type in _STATUS_AFTER


def fold(run_id: UUID, events: Iterable[Event]) -> RunState | None:
    """The state after ``events``, or None if the stream is empty."""
    state: RunState | None = None
    for event in events:
        if state is None:
            state = RunState(run_id=run_id)
        state.apply(event)
    return state


#: The events the fold reads. A run's stream also holds checkpoints, output and
#: heartbeats; decoding those on every command would cost more than the command.
FOLDED = (
    RunCreated,
    RunStarted,
    RunResumed,
    NodeStarted,
    NodeCompleted,
    NodeFailed,
    RunSuspended,
    RunInterrupted,
    RunCancelled,
    RunCompleted,
    RunFailed,
)


#: What a snapshot of ``RunState`` is made of. Bump the number whenever ``RunState.apply``
#: or ``FOLDED`` changes meaning: snapshots made under another topic are then ignored
#: and runs folded from their streams again. A change of ``RunState``'s fields changes
#: the topic by itself.
SNAPSHOT_TOPIC = "commands.run_state:RunState:1:" + format(
    zlib.crc32(repr([(f.name, str(f.type)) for f in dataclasses.fields(RunState)]).encode()), "08x"
)
_encode_snapshot = msgspec.msgpack.Encoder().encode
_decode_snapshot = msgspec.msgpack.Decoder(RunState).decode


def load_run(store: EventStore, run_id: UUID) -> RunState:
    """Rebuild a run from its stream; ``RunNotFoundError`` if it has none.

    The version is the stream's newest event of any type, so the next append
    conflicts if anything at all was appended since.

    A long run is not folded whole on every command: the fold starts from the
    run's newest snapshot (this process's, or the one stored with the stream) and
    folds only the events after it. A snapshot is a cache of this same fold at
    a version the log already has; one that cannot be read, or is ahead of the
    log, is ignored and the stream folded from its start.
    """
    base = _snapshot(store, run_id)
    after = base.version if base is not None else 0
    # One read of the version and of what is at or below it: an event appended after
    # it must not be folded under an older version (an append decided on it would
    # then pass the compare-and-set on a stale owner).
    version, events = store.load_since(run_id, after_version=after, types=FOLDED)
    if version < after:  # the log is behind the snapshot: it is not this log's
        base, after = None, 0
        version, events = store.load_since(run_id, after_version=0, types=FOLDED)
    state = base
    for event in events:
        if state is None:
            state = RunState(run_id=run_id)
        state.apply(event)
    if state is None:
        raise RunNotFoundError(str(run_id))
    state.version = version
    if version > after:
        remember(store, state)
    return state


def own_fold(store: EventStore, run_id: UUID, *, at: int | None = None) -> RunState | None:
    """This process's own newest fold of the run (at version ``at``, if given), to decide
    an append on without reading the log; None when there is none, or when the store
    cannot check as it appends that the stream is still at the fold's version.

    Append what is decided on it with ``expected_version=`` its version: if the
    stream has moved on, the append is refused (``ConcurrencyError``) and nothing
    is stored. A refusal decided on it (a transition it does not allow, another
    owner) must be decided again on ``load_run``: the fold may be behind the log.
    A worker, usually its run's only writer, then reads nothing before each append.
    """
    if not store.checks_expected_version:
        return None
    state = _snapshot(store, run_id, memory_only=True)
    if state is None or (at is not None and state.version != at):
        return None
    return state


def allows(state: RunState, event_type: type[Event], epoch: int | None) -> bool:
    """Whether ``epoch`` owns the run and its status allows ``event_type``."""
    try:
        check_owner(state, epoch)
        check_transition(state, event_type)
    except (InvalidTransitionError, WorkerFencedError):
        return False
    return True


def _snapshot(store: EventStore, run_id: UUID, *, memory_only: bool = False) -> RunState | None:
    found = store.get_snapshot(run_id, SNAPSHOT_TOPIC, memory_only=memory_only)
    if found is None:
        return None
    version, data = found
    try:
        state = _decode_snapshot(data)
    except msgspec.MsgspecError:
        return None  # written by another shep, or damaged: fold the stream instead
    if state.run_id != run_id or state.version != version:
        return None
    return state


def remember(store: EventStore, state: RunState) -> None:
    """Keep ``state`` as the run's snapshot: it must be the fold of the run's stream up to
    ``state.version``, every event of it.
    """
    store.put_snapshot(state.run_id, SNAPSHOT_TOPIC, state.version, _encode_snapshot(state))


E = TypeVar("E", bound=Event)


def check_transition(state: RunState, event_type: type[Event]) -> None:
    """Raise ``InvalidTransitionError`` unless the run's status allows ``event_type``."""
    allowed = ALLOWED_FROM.get(event_type, WHILE_RUNNING)
    if state.status not in allowed:
        action = _ACTION.get(event_type, f"record {event_type.__name__}")
        raise InvalidTransitionError(state.run_id.hex, state.status.value, action)


def check_owner(state: RunState, epoch: int | None) -> None:
    """Raise ``WorkerFencedError`` unless ``epoch`` is the run's current owner (None: no owner).

    Appends made on behalf of an owner (a worker's node events, output,
    heartbeats, checkpoints; an orphan check's interruption of that owner)
    pass its epoch. The append is compare-and-set on the stream version this
    state was folded at, so the owner checked here is still the owner when
    the events commit: a start or resume in between makes the append conflict,
    and the retry sees the new owner.
    """
    if epoch is not None and state.epoch != epoch:
        raise WorkerFencedError(state.run_id.hex, epoch, state.epoch)


def next_events(
    state: RunState,
    items: Sequence[tuple[type[E], dict[str, Any]]],
    *,
    epoch: int | None = None,
) -> list[E]:
    """Build events that follow ``state``, numbering versions and stamping one time.

    The run must be owned by ``epoch`` (if given); each event is checked
    against the status the previous ones lead to. A start or resume is given
    the next owner's epoch here, as versions are.
    """
    check_owner(state, epoch)
    now = utc_now()
    events: list[E] = []
    probe = RunState(
        run_id=state.run_id, version=state.version, status=state.status, epoch=state.epoch
    )
    for event_type, fields in items:
        check_transition(probe, event_type)
        owner = {"epoch": probe.epoch + 1} if event_type in _NEW_OWNER else {}
        event = event_type(
            originator_id=state.run_id,
            originator_version=probe.version + 1,
            timestamp=now,
            **{**fields, **owner},
        )
        probe.apply(event)
        events.append(event)
    return events


def _allowed_events(
    state: RunState, items: Sequence[tuple[type[E], dict[str, Any]]], epoch: int | None
) -> list[E] | None:
    """``next_events``, or None where it refuses (to be decided again on the log)."""
    try:
        return next_events(state, items, epoch=epoch)
    except (InvalidTransitionError, WorkerFencedError):
        return None


#: How often a command reloads and decides again when another writer got there first.
CONFLICT_RETRIES = 5


def append_to_run(
    store: EventStore,
    run_id: UUID,
    items: Sequence[tuple[type[E], dict[str, Any]]],
    *,
    epoch: int | None = None,
) -> tuple[RunState, list[E]]:
    """Load the run, check its owner and each transition, append the events in one transaction.

    A run's stream has several writers (the worker's graph, its heartbeat thread,
    a cancel from another process). When one appends between our load and our
    append, the store refuses ours with ``ConcurrencyError``; we then reload and
    decide again on the new state (which may now refuse the transition), a few
    times before giving up. The first decision may be made on this process's own
    fold (``own_fold``): the append then commits only if the stream is still at
    its version, and a refusal is decided again on the log. Nothing is ever
    appended on a stale decision, and with ``epoch`` nothing is appended once the
    run has another owner.
    """
    for attempt in range(CONFLICT_RETRIES):
        state = own_fold(store, run_id) if attempt == 0 else None
        events = _allowed_events(state, items, epoch) if state is not None else None
        if state is None or events is None:
            state = load_run(store, run_id)
            events = next_events(state, items, epoch=epoch)
        try:
            store.append(events, expected_version=state.version)
        except ConcurrencyError:
            if attempt == CONFLICT_RETRIES - 1:
                raise
            continue
        for event in events:
            state.apply(event)
        remember(store, state)  # the next command on this run folds nothing before it
        return state, events
    raise AssertionError("unreachable")
