"""The supervisor process: follow the log from its tracked position and decide what it may.

One supervisor runs at a time per home (an exclusive lock on
``$SHEP_HOME/supervisor.lock``; another waits for it, then finds nothing left
to do or what arrived meanwhile). It reads every question, approval gate and
cosign vote after its tracked position, in log order; each is recorded with
the position it came from in one commit (``commands.supervise``), so a
supervisor killed between reading an item and deciding it decides it once,
after it restarts.

An item no enabled policy covers when it is read is passed over, and stays in
the inbox. Only a policy event can make it covered, so when it starts and
whenever the policies changed, the supervisor also goes back over the items
before its tracked position that are left for it (``start.left_to_decide``).
Its tracking is a high-water mark (every position up to it is handled), so
such a late decision commits with a position after the tracked one and before
any question, gate or vote not read yet: a position of an event it does not
follow (the policy's own event, say). Until there is one, the item waits.

With the ``collaboration`` flag off it reads nothing and writes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from commands.inbox_state import load_item
from commands.policies import load_policies
from commands.supervise import (
    SUPERVISOR,
    Recorded,
    Verdict,
    close_cosigned,
    record_verdict,
    skip,
)
from events.errors import SupervisorOffError
from events.inbox import ApprovalRequested, ApprovalVoted, QuestionAsked
from events.runs import FINAL_STATUSES
from events.store import EventStore
from events.supervisor import POLICY_STREAM_ID
from shep.supervisor.evaluate import Decision, EvaluationGraph, Evaluator
from shep.supervisor.start import left_to_decide

#: What the supervisor says when the ``collaboration`` flag is off.
OFF = "The supervisor is off: turn it on with `shep settings flags enable collaboration`."

#: What the supervisor follows in the log.
TOPICS = (QuestionAsked, ApprovalRequested, ApprovalVoted)
#: The events that ask: the items it may come back to.
ASKED = (QuestionAsked, ApprovalRequested)


def lock_path(home: Path) -> Path:
    return home / "supervisor.lock"


@contextlib.contextmanager
def supervisor_lock(home: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the home's supervisor lock; yields False if ``wait`` is off and it is taken."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def collaboration_on(store: EventStore) -> bool:
    from shep.home.settings import load_settings

    return load_settings(store).flags["collaboration"]


def as_verdict(decision: Decision) -> Verdict:
    return Verdict(
        item_id=decision.item_id,
        run_id=decision.run_id,
        kind=decision.kind,
        autonomy=decision.autonomy,
        verdict=decision.verdict,
        rationale=decision.rationale,
        policy_scope=decision.policy.scope,
        policy_version=decision.policy.label,
        prompt_version=decision.prompt_version,
        evaluator=decision.evaluator,
        model=decision.model,
        input_hash=decision.input_hash,
        confidence=decision.confidence,
        advice=decision.advice,
        answer=decision.answer,
        option_id=decision.option_id,
        rules=tuple(decision.rules),
    )


@dataclass
class Supervisor:
    """Decides the items after its tracked position, and those before it that a policy came
    to cover; ``resume(run_id)`` restarts a decided run."""

    store: EventStore
    evaluator: Evaluator | None
    resume: Callable[[UUID], None] = lambda run_id: None
    report: Callable[[str], None] = lambda line: None
    #: Test hook: called with each item before its evaluator is consulted.
    before_evaluate: Callable[[object], None] | None = None
    handled: list[tuple[UUID, Recorded | None]] = field(default_factory=list)
    #: The items waiting in the inbox, oldest first, from the home's read model: what it
    #: goes back over for late decisions (None: every item the log ever asked, read from it).
    waiting: Callable[[], list[UUID]] | None = None
    #: The policies' stream version the items before the tracking were last gone over
    #: at (None: not yet, in this process).
    _late_checked: int | None = field(default=None, init=False)
    #: (policies' version, newest log position) when a late item last found no position
    #: to be recorded at: not gone over again until one of them changes.
    _late_stalled: tuple[int, int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.graph = EvaluationGraph(
            self.store, self.evaluator, before_evaluate=self.before_evaluate
        )

    def drain(self) -> int:
        """Handle everything after the tracked position, and the items before it that a
        policy came to cover; how many log positions and late items it handled.

        Raises ``SupervisorOffError`` (writing nothing) when the flag is off.
        """
        handled = 0
        while True:
            if not collaboration_on(self.store):
                raise SupervisorOffError(OFF)
            late = self._decide_late()
            after = self.store.tracked_position(SUPERVISOR)
            batch = self.store.positions_of(list(TOPICS), after=after, limit=50)
            for position, event in batch:
                self._handle(position, event)
            handled += late + len(batch)
            if not late and not batch:
                return handled

    def follow(self, *, poll: float = 0.5, stop: Callable[[], bool] = lambda: False) -> None:
        """Drain, then keep draining as the log grows, until ``stop()``."""
        while not stop():
            if self.drain() == 0:
                time.sleep(poll)

    def _handle(self, position: int, event: object) -> None:
        if isinstance(event, ApprovalVoted):
            item_id = event.originator_id
            if close_cosigned(self.store, item_id, position=position):
                self.report(f"{item_id.hex[:8]}: co-signed the user's approval")
                self.handled.append((item_id, Recorded(acted=True)))
                assert event.run_id is not None
                self.resume(event.run_id)
            return
        assert isinstance(event, QuestionAsked | ApprovalRequested)
        item_id = event.originator_id
        item = load_item(self.store, item_id)
        if item is None or item.decision is not None or self._run_ended(item.asked.run_id):
            skip(self.store, position)
            return
        decision = self.graph.decide(item_id)
        if decision is None:  # no policy covers it yet: `_decide_late` comes back to it
            skip(self.store, position)
            return
        self._record(decision, position)

    def _record(self, decision: Decision, position: int) -> None:
        """Record ``decision`` with the tracked ``position``, say it, and resume its run
        when it acted."""
        recorded = record_verdict(self.store, as_verdict(decision), position=position)
        self.handled.append((decision.item_id, recorded))
        self.report(_describe(decision, recorded))
        if recorded.acted:
            self.resume(decision.run_id)

    def _run_ended(self, run_id: UUID) -> bool:
        from commands.run_state import load_run

        return load_run(self.store, run_id).status in FINAL_STATUSES

    def _decide_late(self) -> int:
        """Decide the items before the tracked position left for the supervisor (a policy
        came to cover them since they were read), if the policies changed since the last
        time; how many it decided."""
        version = self.store.stream_version(POLICY_STREAM_ID)
        if version == self._late_checked:
            return 0
        newest = self.store.max_position()
        if (version, newest) == self._late_stalled:
            return 0
        if not any(p.enabled for p in load_policies(self.store).values()):
            self._late_checked = version  # no policy covers anything: nothing to go over
            return 0
        after = self.store.tracked_position(SUPERVISOR)
        decided = 0
        for item_id in self._candidates(after):
            # Checked one at a time, just before it is decided: a person may have decided
            # it while the one before was evaluated.
            if not left_to_decide(self.store, [item_id]):
                continue
            position = self._free_position()
            if position is None:
                # Gone over again once the log grows (or the policies change).
                self._late_stalled = (version, newest)
                return decided
            decision = self.graph.decide(item_id)
            if decision is None:  # its policy was disabled meanwhile
                continue
            self._record(decision, position)
            decided += 1
        self._late_checked = version
        return decided

    def _candidates(self, after: int) -> list[UUID]:
        """The items asked at or before position ``after`` that may be left to decide: those
        waiting in the inbox when the read model is at hand, else every one asked."""
        if self.waiting is None:
            return self._asked_up_to(after)
        unread = {
            event.originator_id for _, event in self.store.positions_of(list(ASKED), after=after)
        }
        return [item_id for item_id in self.waiting() if item_id not in unread]

    def _asked_up_to(self, position: int) -> list[UUID]:
        """The items asked at or before ``position``, in log order."""
        items: list[UUID] = []
        after = 0
        while batch := self.store.positions_of(list(ASKED), after=after, limit=500):
            for at, event in batch:
                if at > position:
                    return items
                assert isinstance(event, QuestionAsked | ApprovalRequested)
                items.append(event.originator_id)
            after = batch[-1][0]
        return items

    def _free_position(self) -> int | None:
        """A log position after the tracked one with nothing the supervisor follows up to
        it, to track a late decision at; None when there is none yet."""
        after = self.store.tracked_position(SUPERVISOR)
        # The newest position first: whatever it follows that lands after this read lands
        # after it.
        newest = self.store.max_position()
        unread = self.store.positions_of(list(TOPICS), after=after, limit=1)
        free = min(newest, unread[0][0] - 1) if unread else newest
        return free if free > after else None


def _describe(decision: Decision, recorded: Recorded) -> str:
    head = f"{decision.item_id.hex[:8]} ({decision.kind} of run {decision.run_id.hex[:8]})"
    if recorded.refused_by:
        return f"{head}: {decision.verdict} refused, {recorded.refused_by} decided first"
    what = decision.verdict
    if decision.answer:
        what += f" {decision.answer!r}"
    if decision.advice:
        what += f" (would {decision.advice})"
    if recorded.cosign_pending:
        what += ", waiting for a user's co-signature"
    return f"{head}: {what} under {decision.policy.label}: {decision.rationale}"
