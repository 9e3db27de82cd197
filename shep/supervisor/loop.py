"""The supervisor process: follow the log from its tracked position and decide what it may.

One supervisor runs at a time per home (an exclusive lock on
``$SHEP_HOME/supervisor.lock``; another waits for it, then finds nothing left
to do or what arrived meanwhile). It reads every question, approval gate and
cosign vote after its tracked position, in log order; each is recorded with
the position it came from in one commit (``commands.supervise``), so a
supervisor killed between reading an item and deciding it decides it once,
after it restarts.

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
from shep.supervisor.evaluate import Decision, EvaluationGraph, Evaluator

#: What the supervisor says when the ``collaboration`` flag is off.
OFF = "The supervisor is off: turn it on with `shep settings flags enable collaboration`."

#: What the supervisor follows in the log.
TOPICS = (QuestionAsked, ApprovalRequested, ApprovalVoted)


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
    """Decides the items after its tracked position; ``resume(run_id)`` restarts a decided run."""

    store: EventStore
    evaluator: Evaluator | None
    resume: Callable[[UUID], None] = lambda run_id: None
    report: Callable[[str], None] = lambda line: None
    #: Test hook: called with each item before its evaluator is consulted.
    before_evaluate: Callable[[object], None] | None = None
    handled: list[tuple[UUID, Recorded | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.graph = EvaluationGraph(
            self.store, self.evaluator, before_evaluate=self.before_evaluate
        )

    def drain(self) -> int:
        """Handle everything after the tracked position; how many log positions it handled.

        Raises ``SupervisorOffError`` (writing nothing) when the flag is off.
        """
        handled = 0
        while True:
            if not collaboration_on(self.store):
                raise SupervisorOffError(OFF)
            after = self.store.tracked_position(SUPERVISOR)
            batch = self.store.positions_of(list(TOPICS), after=after, limit=50)
            if not batch:
                return handled
            for position, event in batch:
                self._handle(position, event)
                handled += 1

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
        if decision is None:  # no policy covers it
            skip(self.store, position)
            return
        recorded = record_verdict(self.store, as_verdict(decision), position=position)
        self.handled.append((item_id, recorded))
        self.report(_describe(decision, recorded))
        if recorded.acted:
            self.resume(decision.run_id)

    def _run_ended(self, run_id: UUID) -> bool:
        from commands.run_state import load_run

        return load_run(self.store, run_id).status in FINAL_STATUSES


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
