"""A run's lifecycle in one worker: drive the workflow's graph from its last checkpoint to
its end, to a pause for people, or to a failure, and record which.

The runner is where a workflow meets the event store. What each kind of node
does lives in ``shep.nodes``; the heartbeat in ``shep.runs.heartbeat``. Here:

- the graph is compiled with the event-store checkpointer, fenced with the
  worker's ``epoch``: once the run has a newer owner (it was interrupted and
  resumed while this worker was stopped) or has ended (cancelled), every
  append is refused, and the worker stops its agent and returns without
  writing anything more;
- a run starts from its inputs, or resumes from its last checkpoint; pending
  questions and gates that have a decision in the log resume with it
  (``Command(resume={interrupt_id: value})``, keyed by interrupt id, never by
  order), the others are asked again (idempotently);
- when the graph stops at interrupts, their inbox items are recorded and the
  run is suspended (``commands.suspend_run``); the worker then exits;
- the run completes when the graph reaches END.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from uuid import UUID

from commands.complete_run import complete_run
from commands.fail_run import fail_run
from commands.inbox_state import load_item, resume_value
from commands.mark_interrupted import mark_interrupted
from commands.run_state import load_run
from commands.suspend_run import Ask, suspend_run
from events.base import utc_now
from events.errors import (
    AgentError,
    ConcurrencyError,
    InvalidTransitionError,
    ShepError,
    StepFailedError,
    WorkerFencedError,
    WorkflowChangedError,
)
from events.inbox import item_stream_id
from events.run_ids import RUN_ID_ENV
from events.runs import NodeStarted, RunStatus, RunSuspended
from events.store import EventStore
from shep.agents import AgentExecutor, create_executor
from shep.agents.process import output_limits
from shep.home.identity import host_name
from shep.home.secrets import load_token
from shep.home.settings import Settings
from shep.nodes import RunKit
from shep.nodes.context import RunContext, RunPlan
from shep.nodes.progress import Progress
from shep.runs.heartbeat import Heartbeat

__all__ = ["RunPlan", "Runner", "WorkerStopped"]


class WorkerStopped(BaseException):
    """The worker got SIGTERM (``shep cancel``, shutdown): stop the graph now.

    A ``BaseException``, like ``KeyboardInterrupt``: the signal handler raises it
    wherever the main thread is, and a library's ``except Exception`` there
    (pydantic's, during langgraph's lazy imports) must not swallow it.
    """


class Runner:
    """Executes one run in this process (the foreground or a background worker)."""

    def __init__(
        self,
        store: EventStore,
        db_path: Path,
        home: Path,
        run_id: UUID,
        settings: Settings,
        *,
        timeout: float | None = None,
        progress: Progress | None = None,
        executor: AgentExecutor | None = None,
    ) -> None:
        self.store = store
        self.db_path = db_path
        self.run_id = run_id
        self.plan = RunPlan.load(store, run_id)
        self.settings = settings
        self.timeout = timeout or settings.values["agent_timeout"]
        self.progress = progress or Progress(len(self.plan.workflow.node_names))
        self.executor = executor or self._executor(home)
        self.pid = os.getpid()
        self.host = host_name()
        self.epoch = 0
        self.asked: list[UUID] = []
        #: A fork's origin's decided items by (node, iteration), for --reapply-answers.
        self._origin_items: dict[tuple[Any, Any], Any] | None = None
        #: Whose decisions ``_reapply`` gives again: a fork's origin (--reapply-answers),
        #: or this run itself once a migration made a new checkpoint.
        self._reapply_from: UUID | None = (
            self.plan.origin_run_id if self.plan.reapply_answers else None
        )
        #: Interrupt ids whose origin's decision was not reapplied, and why (recorded).
        self._not_reapplied: dict[str, str] = {}
        #: Set when an append was refused: the run is no longer ours to write.
        self._ended = threading.Event()

    def _executor(self, home: Path) -> AgentExecutor:
        agent_type = self.plan.agent_type
        same = self.settings.agent_type == agent_type
        return create_executor(
            agent_type,
            token=load_token(home, agent_type),
            binary=self.settings.binary if same else None,
            # Lets `shep cancel` find the agent's processes even if this worker is gone.
            env={RUN_ID_ENV: self.run_id.hex},
            limits=output_limits(self.settings.counts["agent_output_mib"]),
        )

    @property
    def fenced(self) -> bool:
        """Whether the run ended or changed owner elsewhere while this worker ran it."""
        return self._ended.is_set()

    # -- the run --------------------------------------------------------------------------

    def execute(self, epoch: int) -> RunStatus:
        """Run the graph from its last checkpoint until it ends or waits; record which.

        The run must already be running, owned by ``epoch`` (the state that
        ``start_run`` / ``resume_run`` returned). If another owner takes it
        over, or it is cancelled, this returns its status without recording.
        """
        from shep.runs.checkpoints import EventStoreCheckpointSaver

        self.epoch = epoch
        ctx = RunContext(self.store, self.plan, epoch, self.progress)
        kit = RunKit(ctx, self.executor, self.settings, self.timeout)
        self._remember_history(ctx, kit)
        saver = ctx.saver = EventStoreCheckpointSaver(self.store, self.db_path, epoch=epoch)
        heartbeat = Heartbeat(
            self.store,
            self.db_path,
            self.run_id,
            pid=self.pid,
            host=self.host,
            epoch=epoch,
            interval=self.settings.values["heartbeat_interval"],
            live=ctx.live,
            on_lost=self._lost,
        )
        try:
            with _terminate_raises():
                graph = self.plan.workflow.build(kit).compile(checkpointer=saver)
                self._cross_over(saver)
                with heartbeat:
                    waiting = self._drive(graph, saver)
                # The heartbeat has stopped: the last transition is ours alone.
                if waiting:
                    return self._suspend(waiting)
            return self._complete()
        except WorkflowChangedError as e:
            # The workflow changed after the launcher checked it: not this graph, ever.
            self._interrupt(str(e))
            raise
        except (InvalidTransitionError, WorkerFencedError):
            # Someone else ended the run (a cancel) or took it over (a resume while
            # this worker was stopped): it is no longer ours to record.
            return self._gone()
        except (WorkerStopped, KeyboardInterrupt) as e:
            if self._ended.is_set():
                return self._gone()
            reason = (
                "worker stopped by SIGTERM"
                if isinstance(e, WorkerStopped)
                else ("interrupted by the user (Ctrl-C)")
            )
            return self._interrupt(reason)
        except (AgentError, StepFailedError) as e:
            if self._ended.is_set():
                return self._gone()  # the agent was stopped because the run is not ours
            return self._fail(type(e).__name__, str(e))
        except Exception as e:
            if self._ended.is_set():
                return self._gone()
            # Not the agent's fault (a full disk, a bug of ours): keep the run resumable.
            with contextlib.suppress(Exception):
                self._interrupt(f"worker error: {type(e).__name__}: {e}")
            raise
        finally:
            self.progress.close()
            with contextlib.suppress(ShepError):
                saver.close()

    def _cross_over(self, saver: Any) -> None:
        """Resume only under the graph the run is pinned to, or through the migration its
        workflow declares (applied and recorded here); else ``WorkflowChangedError``."""
        from shep.runs.pin import check_resume, migrate

        crossing = check_resume(self.store, self.run_id)
        if crossing is not None:
            if migrate(self.store, saver, self.run_id, crossing) is not None:
                # A new checkpoint gives its waiting questions and gates new interrupt
                # ids: the decisions already given on them are given again, recorded.
                self._reapply_from = self.run_id
                self._origin_items = self._decided_items(self.run_id, crossing.migration.renamed)
            self.progress.message(
                f"migrated from {self.plan.workflow.name} version "
                f"{crossing.pinned.workflow_version} to {crossing.now.workflow_version}"
            )

    def _drive(self, graph: Any, saver: Any) -> list[Ask]:
        """Invoke the graph until it ends (``[]``) or stops at undecided interrupts."""
        from langgraph.types import Command

        config: Any = {"configurable": {"thread_id": self.run_id.hex}, "recursion_limit": 200}
        payload: Any = None
        if saver.get_tuple(config) is None and self._fork_state(saver):
            saver.flush()
        if saver.get_tuple(config) is None:
            payload = {
                "repo": str(self.plan.repo),
                "inputs": self.plan.inputs,
                "results": {},
                "session_id": None,
            }
        while True:
            if payload is None:
                decided = self._decided(graph.get_state(config).interrupts)
                payload = Command(resume=decided) if decided else None
            try:
                result = graph.invoke(payload, config, durability="sync")
            finally:
                saver.flush()
            interrupts = (result or {}).get("__interrupt__") or []
            if not interrupts:
                return []
            if not self._decided(interrupts):
                return [
                    _ask(i.id, i.value, reapply=self._not_reapplied.get(i.id)) for i in interrupts
                ]
            payload = None  # decisions arrived meanwhile: go on with them

    def _fork_state(self, saver: Any) -> bool:
        """A fork's first execution: take the origin's state at the fork's checkpoint."""
        plan = self.plan
        if plan.origin_run_id is None or plan.origin_checkpoint_id is None:
            return False
        if plan.fork_restore == "worktree":
            return False  # the files only: the graph starts afresh
        copied = saver.copy_checkpoint_chain(
            plan.origin_run_id.hex, self.run_id.hex, plan.origin_checkpoint_id
        )
        if not copied:
            raise ShepError(
                f"Run {plan.origin_run_id.hex[:8]} has no checkpoint "
                f"{plan.origin_checkpoint_id}: this fork cannot start from it."
            )
        self.progress.message(
            f"forked from run {plan.origin_run_id.hex[:8]} at checkpoint "
            f"{plan.origin_checkpoint_id[:13]}"
        )
        return True

    def _reapply(self, interrupts: Sequence[Any]) -> None:
        """``--reapply-answers``: the origin's decisions on the same questions and gates
        (the same node and iteration), given again where ``check_reapply`` allows: a
        gate's only on byte-identical artifacts.

        Each is recorded on the fork's own item (asked, then decided by the same
        actor, with ``reapplied_from`` naming the origin's item) before it is used;
        a gate whose decision is not reapplied is asked with the reason why.
        """
        from commands.reapply_decision import check_reapply, reapply_decision

        origin = self._reapply_from
        if origin is None:
            return
        if self._origin_items is None:
            self._origin_items = self._decided_items(origin)
        for interrupt in interrupts:
            if load_item(self.store, item_stream_id(self.run_id, interrupt.id)) is not None:
                continue
            key = (interrupt.value.get("node"), interrupt.value.get("iteration", 1))
            theirs = self._origin_items.get(key)
            if theirs is None:
                continue
            verdict = check_reapply(_ask(interrupt.id, interrupt.value), theirs)
            if not verdict.taken:
                if interrupt.id not in self._not_reapplied:
                    self._not_reapplied[interrupt.id] = verdict.reason
                    self.progress.message(
                        f"{key[0]}: the decision of run {origin.hex[:8]} {verdict.reason}"
                    )
                continue
            try:
                reapply_decision(
                    self.store,
                    self.run_id,
                    _ask(interrupt.id, interrupt.value, reapply=verdict.reason),
                    theirs,
                    epoch=self.epoch,
                )
            except ConcurrencyError:
                continue  # the run kept moving under it: the item is asked as any other
            self.progress.message(
                f"{key[0]}: reapplied the decision of run {origin.hex[:8]} "
                f"({theirs.decision.actor if theirs.decision else ''})"
            )

    def _decided_items(
        self, run_id: UUID, renamed: Mapping[str, str] | None = None
    ) -> dict[tuple[Any, Any], Any]:
        """The decided inbox items of ``run_id`` by (node, iteration), a node under its
        ``renamed`` name."""
        found: dict[tuple[Any, Any], Any] = {}
        for suspended in self.store.load(run_id, types=[RunSuspended]):
            for item_id in getattr(suspended, "item_ids", ()):
                item = load_item(self.store, item_id)
                if item is not None and item.decision is not None:
                    node = (renamed or {}).get(item.asked.node, item.asked.node)
                    found[(node, item.asked.iteration)] = item
        return found

    def _decided(self, interrupts: Sequence[Any]) -> dict[str, Any]:
        """Resume values for the interrupts whose inbox item has a decision in the log."""
        self._reapply(interrupts)
        values: dict[str, Any] = {}
        for interrupt in interrupts:
            item = load_item(self.store, item_stream_id(self.run_id, interrupt.id))
            if item is not None and item.decision is not None:
                waited = item.decision.timestamp - item.asked.timestamp
                values[interrupt.id] = {
                    **resume_value(item.decision),
                    "waited_ms": max(0, int(waited.total_seconds() * 1000)),
                }
        return values

    def _suspend(self, asks: list[Ask]) -> RunStatus:
        state, asked = suspend_run(self.store, self.run_id, asks, epoch=self.epoch)
        self.asked = asked
        return state.status

    def _complete(self) -> RunStatus:
        state = load_run(self.store, self.run_id)
        if state.status is not RunStatus.RUNNING or state.epoch != self.epoch:
            return self._gone()
        # The run's whole life, waits for people included, not this worker's share.
        elapsed = int((utc_now() - self.plan.created_at).total_seconds() * 1000)
        return complete_run(self.store, self.run_id, duration_ms=elapsed, epoch=self.epoch).status

    def _fail(self, error_type: str, message: str) -> RunStatus:
        state = load_run(self.store, self.run_id)
        with contextlib.suppress(InvalidTransitionError, WorkerFencedError):
            fail_run(
                self.store,
                self.run_id,
                error_type=error_type,
                message=message,
                node=state.current_node or state.failed_node,
                epoch=self.epoch,
            )
        return load_run(self.store, self.run_id).status

    def _interrupt(self, reason: str) -> RunStatus:
        with contextlib.suppress(InvalidTransitionError, ConcurrencyError, WorkerFencedError):
            mark_interrupted(
                self.store,
                self.run_id,
                reason=reason,
                detected_by_pid=self.pid,
                detected_by_host=self.host,
                epoch=self.epoch,
            )
        return load_run(self.store, self.run_id).status

    def _lost(self) -> None:
        """The heartbeat found the run no longer ours: stop our agent at once."""
        self._ended.set()
        _stop_own_agents()

    def _gone(self) -> RunStatus:
        """The run ended or changed owner elsewhere: stop our agent, record nothing more."""
        self._lost()
        return load_run(self.store, self.run_id).status

    def _remember_history(self, ctx: RunContext, kit: RunKit) -> None:
        """Attempts so far per node and iteration, the phase the run is in, and agent
        sessions still in flight."""
        for event in self.store.load(self.run_id):
            if isinstance(event, NodeStarted):
                key = (event.node, event.iteration)
                ctx.attempts[key] = max(ctx.attempts.get(key, 0), event.attempt)
                ctx.enter(event.node)
            kit.agents.remember(event)


def _ask(interrupt_id: str, value: Mapping[str, Any], *, reapply: str | None = None) -> Ask:
    """The inbox item a node's ``interrupt(value)`` asks (see ``shep.nodes.human``)."""
    import msgspec

    return msgspec.convert({**value, "interrupt_id": interrupt_id, "reapply": reapply}, Ask)


def _stop_own_agents() -> None:
    """Kill the agent process groups this worker started (its children that lead a group).

    Not ``shep cancel``'s search by ``SHEP_RUN_ID``: a newer worker of the same
    run has agents with that variable too, and they must live.
    """
    from shep.home.procs import group_leaders_started_by

    for pgid in group_leaders_started_by(os.getpid()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """While running, SIGTERM raises ``WorkerStopped`` in the main thread (agent gets killed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise WorkerStopped()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
