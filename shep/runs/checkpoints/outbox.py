"""The write buffer and the outbox: what waits for a thread's next append, and that append.

One transaction per graph step
------------------------------
``put_writes`` does not write: a task's writes wait in memory and are appended
together with the next ``put``'s checkpoint in one ``EventStore.append``. With
``durability="sync"`` that is one durable commit per graph step instead of one
per task plus one per checkpoint. Writes are appended at once (with whatever
waits) when they must outlive the step: writes to a special channel
(``__error__``, ``__interrupt__``, ``__resume__``, ``__scheduled__``), and
whatever is still waiting when ``get_tuple``/``list`` read, when ``flush()`` is
called or the saver is closed.

The trade-off: a crash loses the waiting writes of the step in flight, so on
resume LangGraph re-runs that step's tasks, the finished ones included. For a
linear graph this is exactly "the node in flight is re-run". In a step with
parallel tasks, a task that finished while a sibling was still running is
re-run too; pass ``buffer_writes=False`` to commit each task's writes at once
(one more transaction per task) when that matters more than the commits.

The outbox
----------
The runner makes its own run events (``NodeCompleted``, ...) atomic with the
checkpoint that holds the node's result by enqueueing them as the node's last
act (in the node function, or a wrapper around it)::

    saver.enqueue(run_id.hex, lambda after: [
        NodeCompleted(originator_id=run_id, originator_version=after + 1,
                      timestamp=utc_now(), node="scan", duration_ms=1200),
    ])

A node returns before LangGraph saves its writes and the step's checkpoint,
so the events join that step's transaction: after a crash either both are in
the log (the node never runs again) or neither is (it is re-run). Enqueueing
while iterating ``graph.stream(...)`` is too late: a task's result reaches the
consumer after the step's checkpoint was saved.

The builder is called when the saver appends, with the stream's current
version (``after``), and must return events of that stream numbered
``after + 1``, ``after + 2``, ...; they are appended in the order they were
enqueued, ahead of the buffered writes and the checkpoint (or with the next
special write or ``flush()``). On a version conflict the builder is called
again with the new version, so it must be pure (build events, no I/O).
``commands.run_state.next_events`` builds such events with transition checks:
``lambda after: next_events(RunState(run_id, version=after,
status=RunStatus.RUNNING), [(NodeCompleted, {...})])``. If a builder raises,
the error propagates and the stream's waiting events are dropped, as a crash
would drop them, so the log never holds a node's writes without its outbox
events. If the store fails, they stay queued for the next append.

Events appended to the same stream by others (``commands.*`` in this process,
heartbeats, a cancel from another process) make the next append conflict; the
saver then reloads the stream's version and tries again (``MAX_ATTEMPTS``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from uuid import UUID, uuid5

import msgspec

from commands.run_state import changes_status
from commands.save_checkpoint import save_checkpoint
from events.base import SHEP_NAMESPACE, Event, utc_now
from events.errors import ConcurrencyError
from events.store import EventStore

#: Builds the outbox's events for a stream, numbered after the version it is given.
OutboxBuilder = Callable[[int], Sequence[Event]]

#: How many version conflicts one append survives before giving up.
MAX_ATTEMPTS = 20

_Events = list[Event]


@lru_cache(maxsize=1024)
def thread_stream_id(thread_id: str) -> UUID:
    """The stream of a LangGraph thread: the UUID it spells, else one derived from it."""
    try:
        return UUID(thread_id)
    except ValueError:
        return uuid5(SHEP_NAMESPACE, "thread:" + thread_id)


@dataclass
class _Pending:
    """What waits for a stream's next append: outbox builders, then unnumbered events."""

    outbox: list[OutboxBuilder] = field(default_factory=list)
    events: _Events = field(default_factory=list)


class Outbox:
    """What waits for each stream's next append, and that append (see the module docstring).

    Events are numbered here, from the stream's version, and appended in one
    transaction through ``commands.save_checkpoint``, fenced with ``epoch``
    when a worker gives one. Safe to use from several threads; LangGraph's
    copies of a saver (``with_allowlist``) share one outbox.
    """

    def __init__(self, store: EventStore, *, epoch: int | None = None) -> None:
        self.store = store
        #: A worker's ownership of its run: every append is fenced with it.
        self.epoch = epoch
        self._lock = threading.RLock()
        self._pending: dict[UUID, _Pending] = {}
        self._versions: dict[UUID, int] = {}
        #: Per stream, a version at which the run was known to be running and ours.
        self._owned_at: dict[UUID, int] = {}

    def enqueue(self, stream: UUID, build: OutboxBuilder) -> None:
        """Append ``build(after)``'s events with the stream's next append."""
        with self._lock:
            self._pending.setdefault(stream, _Pending()).outbox.append(build)

    def queue(self, stream: UUID, event: Event, *, now: bool) -> None:
        """Add ``event`` (numbered when appended) to what waits; append at once if ``now``."""
        with self._lock:
            self._pending.setdefault(stream, _Pending()).events.append(event)
        if now:
            self.commit(stream)

    def flush(self, stream: UUID | None = None) -> None:
        """Append whatever waits for one stream, or for all."""
        if stream is not None:
            self.commit(stream)
            return
        with self._lock:
            streams = list(self._pending)
        for waiting in streams:
            self.commit(waiting)

    def commit(self, stream: UUID, tail: Sequence[Event] = ()) -> None:
        """Append the stream's outbox, buffered events and ``tail`` in one transaction.

        Versions are given here, from the stream's current version; a conflict
        reloads it and numbers everything again. If the store fails, the outbox
        and buffered events stay queued (in order) and the error propagates. If
        an outbox builder fails, they are dropped, as a crash would drop them,
        so the log never holds a node's writes without its outbox events.
        """
        with self._lock:
            pending = self._pending.pop(stream, None) or _Pending()
            if not pending.outbox and not pending.events and not tail:
                return
            for _ in range(MAX_ATTEMPTS):
                version = self._version(stream)
                batch = self._number(stream, version, pending, tail)
                # Right after our own append the run is still ours (the append was
                # compare-and-set on a version where it was): no need to look again.
                known = self.epoch is not None and self._owned_at.get(stream) == version
                try:
                    save_checkpoint(self.store, batch, epoch=None if known else self.epoch)
                except ConcurrencyError:
                    # Someone else appended to the stream (a command, a heartbeat): reload.
                    self._versions.pop(stream, None)
                    continue
                except BaseException:
                    # Nothing else could queue meanwhile: we hold the lock.
                    self._pending[stream] = pending
                    raise
                self._versions[stream] = version + len(batch)
                if not any(changes_status(type(event)) for event in batch):
                    self._owned_at[stream] = version + len(batch)
                return
            self._pending[stream] = pending
            raise ConcurrencyError(
                f"Stream {stream} kept changing while checkpoints were saved "
                f"({MAX_ATTEMPTS} attempts). Try again."
            )

    @staticmethod
    def _number(stream: UUID, version: int, pending: _Pending, tail: Sequence[Event]) -> _Events:
        """The batch: outbox events as built, then the rest numbered on and stamped now."""
        batch: _Events = []
        for build in pending.outbox:
            for event in build(version + len(batch)):
                expected = version + len(batch) + 1
                if event.originator_id != stream or event.originator_version != expected:
                    raise ValueError(
                        f"outbox event {type(event).__name__} must be version {expected} of "
                        f"stream {stream}, not version {event.originator_version} of "
                        f"{event.originator_id}"
                    )
                batch.append(event)
        now = utc_now()
        for event in (*pending.events, *tail):
            batch.append(
                msgspec.structs.replace(
                    event, originator_version=version + len(batch) + 1, timestamp=now
                )
            )
        return batch

    def _version(self, stream: UUID) -> int:
        version = self._versions.get(stream)
        if version is None:
            version = self._versions[stream] = self.store.stream_version(stream)
        return version
