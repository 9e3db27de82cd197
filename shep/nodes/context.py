"""What every node kind shares while a worker runs one run: the run, its owner, the recorders.

``RunContext`` is made by the runner for one execution (one worker, one
epoch) and handed to the node kinds. Everything it appends carries the epoch
(fencing: see ``commands.run_state.check_owner``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from commands.record_agent_output import AgentOutputBuffer
from commands.record_node import record_node_failed, record_node_started
from commands.run_state import RunState, next_events
from events.errors import ShepError
from events.runs import NodeCompleted, RunCreated, RunStatus, Usage
from events.store import EventStore
from shep.nodes.progress import Progress
from shep.workflows import Workflow, get_workflow


@dataclass(frozen=True)
class RunPlan:
    """What a run is, as its ``RunCreated`` event says."""

    run_id: UUID
    workflow: Workflow
    agent_type: str
    repo: Path
    model: str | None
    inputs: dict[str, str]
    created_at: datetime
    #: A fork: the run and checkpoint it goes on from, what it took, and whether the
    #: origin's later decisions are given again (see ``commands.fork_run``).
    origin_run_id: UUID | None = None
    origin_checkpoint_id: str | None = None
    fork_restore: str | None = None
    reapply_answers: bool = False

    @classmethod
    def load(cls, store: EventStore, run_id: UUID) -> RunPlan:
        events = store.load(run_id, types=[RunCreated])
        created = events[0] if events else None
        if not isinstance(created, RunCreated):
            raise ShepError(f"Run {run_id} has no RunCreated event; it cannot be executed.")
        return cls(
            run_id,
            get_workflow(created.workflow),
            created.agent_type,
            Path(created.repo),
            created.model,
            dict(created.inputs),
            created.timestamp,
            created.origin_run_id,
            created.origin_checkpoint_id,
            created.fork_restore,
            created.reapply_answers,
        )


@dataclass
class Live:
    """What the heartbeat reports: shared between the graph thread and the heartbeat thread."""

    node: str | None = None
    activity: str | None = None
    tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class RunContext:
    """One worker's execution of one run, as the node kinds see it."""

    store: EventStore
    plan: RunPlan
    epoch: int
    progress: Progress
    live: Live = field(default_factory=Live)
    #: The checkpointer, whose outbox a node's completion joins.
    saver: Any = None
    #: Attempts so far per (node, iteration), from the log and this execution.
    attempts: dict[tuple[str, int], int] = field(default_factory=dict)
    buffer: AgentOutputBuffer | None = None
    #: The number of the newest snapshot ref of this run (read from git on first use).
    snapshots: int | None = None
    #: The phase the run is in: that of the newest node started (from the log, then here).
    phase: str | None = None
    settings: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def run_id(self) -> UUID:
        return self.plan.run_id

    def snapshot(self, label: str) -> str | None:
        """Commit the repository's files as they are now to ``refs/shep/runs/RUN/N``.

        Untracked files and changes made through a shell included; the user's
        HEAD, index and branch untouched (``shep.git.snapshot``). None when the
        repository is not the root of a git work tree, or git failed (said). A
        feature's worktree is reached through the git directory shep made for it;
        a worktree whose ``.git`` file was rewritten fails the run
        (``WorktreeLinkChangedError``): nothing is committed anywhere.
        """
        from events.errors import GitError, WorktreeLinkChangedError
        from shep import git

        refs = f"refs/shep/runs/{self.run_id.hex}"
        try:
            where = self._checkout()
            if where is None:
                return None
            with self._lock:
                # Numbered after the refs that exist, not after the events: a snapshot
                # taken just before a crash has a ref but no event, and must keep it.
                if self.snapshots is None:
                    self.snapshots = git.newest_ref_number(where, refs)
                self.snapshots += 1
                number = self.snapshots
            return git.snapshot(
                where,
                f"{refs}/{number}",
                message=f"shep {self.plan.workflow.name} {self.run_id.hex[:8]}: {label}",
            )
        except WorktreeLinkChangedError:
            raise
        except GitError as e:
            self.progress.message(f"no snapshot after {label}: {e}")
            return None

    def _checkout(self) -> Any:
        """How shep's git reaches the run's repository (a ``shep.git.command.Checkout``);
        None when it is no git work tree's root.
        """
        from shep.git.command import Checkout
        from shep.git.worktree import feature_checkout

        repo, inputs = self.plan.repo, self.plan.inputs
        drivers = bool((getattr(self.settings, "flags", None) or {}).get("git_filters", False))
        if "git_dir" in inputs or "source_repo" in inputs:
            # A feature's worktree, or what is left of it once removed (nothing to take).
            return feature_checkout(inputs, repo, drivers=drivers) if repo.is_dir() else None
        if not (repo / ".git").exists():
            return None
        return Checkout(repo, drivers=drivers)

    def output_buffer(self) -> AgentOutputBuffer:
        if self.buffer is None:
            self.buffer = AgentOutputBuffer(self.store, self.run_id, epoch=self.epoch)
        return self.buffer

    def start_node(self, name: str, iteration: int, *, kind: str) -> int:
        """Record ``NodeStarted`` (fenced) and show it; return the attempt number."""
        attempt = self.attempts.get((name, iteration), 0) + 1
        self.attempts[(name, iteration)] = attempt
        record_node_started(
            self.store,
            self.run_id,
            name,
            attempt=attempt,
            iteration=iteration,
            kind=kind,
            epoch=self.epoch,
        )
        self.show_node(name, iteration, attempt)
        return attempt

    def show_node(self, name: str, iteration: int, attempt: int = 1) -> None:
        """Make ``name`` the node the heartbeat and the progress display report."""
        with self.live.lock:
            self.live.node, self.live.activity = name, None
        phase = self.enter(name)
        phases = self.plan.workflow.node_names
        index = phases.index(phase) + 1 if phase in phases else 0
        self.progress.node_started(name, index, attempt, iteration)

    def enter(self, node: str) -> str:
        """The phase ``node`` counts for, which the run is in from now on (a node of no
        phase of its own, such as a repair, counts for the phase the run is in)."""
        workflow = self.plan.workflow
        phase = workflow.phase(node, self.phase)
        if phase in workflow.node_names:
            self.phase = phase
        return phase

    def fail_node(
        self, name: str, *, started: float, error: Exception, retryable: bool = False
    ) -> None:
        """Record ``NodeFailed`` at once (fenced) and show it; the caller re-raises."""
        record_node_failed(
            self.store,
            self.run_id,
            name,
            duration_ms=int((time.monotonic() - started) * 1000),
            error_type=type(error).__name__,
            message=str(error),
            retryable=retryable,
            epoch=self.epoch,
        )
        self.progress.node_finished(name, False, str(error))

    def complete_node(
        self,
        name: str,
        *,
        started: float,
        before: Sequence[tuple[type[Any], dict[str, Any]]] = (),
        session_id: str | None = None,
        usage: Usage | None = None,
        turns: int | None = None,
        snapshot: str | None = None,
        waited_ms: int | None = None,
    ) -> None:
        """Queue ``NodeCompleted`` (after ``before``) to join this step's checkpoint.

        A node returns before LangGraph saves its writes and the step's
        checkpoint, so the events commit with them (see
        ``shep.runs.checkpoints.outbox``): after a crash a node is either
        completed with its result saved, or re-run, never completed twice. The
        saver is fenced with our epoch, so the batch is refused unless the run
        is still ours.
        """
        items: list[tuple[type[Any], dict[str, Any]]] = [
            *before,
            (
                NodeCompleted,
                {
                    "node": name,
                    "duration_ms": int((time.monotonic() - started) * 1000),
                    "agent_session_id": session_id,
                    "usage": usage or Usage(),
                    "turns": turns,
                    "snapshot": snapshot,
                    "waited_ms": waited_ms,
                },
            ),
        ]
        saver = self.saver
        assert saver is not None, "nodes run only while the runner executes the graph"
        run_id = self.run_id

        def build(after: int) -> list[Any]:
            return next_events(RunState(run_id, version=after, status=RunStatus.RUNNING), items)

        saver.enqueue(run_id.hex, build)
        self.progress.node_finished(name, True)


def iteration_of(state: Mapping[str, Any], name: str) -> int:
    """Which time the graph reaches node ``name`` (1 the first time; loops count up).

    Read from the checkpointed state, so a node re-run after a crash keeps its
    iteration, and a node reached again through a loop gets the next one.
    """
    return int((state.get("iterations") or {}).get(name, 0)) + 1
