"""Folding a run's events, in log order, into frames: which events tell the run's
story, how they are decoded (agent output only for the frames shown), and the fold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar
from uuid import UUID

import msgspec

from events.base import Event
from events.catalog import topic_of
from events.checkpoints import CheckpointSaved, WritesSaved
from events.errors import RunNotFoundError
from events.features import (
    BranchPushed,
    FeatureMerged,
    MergeConflicted,
    PullRequestOpened,
    TaskCompleted,
    TaskStarted,
    TestsRan,
    WorktreeCreated,
    WorktreeRemoved,
    WorktreeSetupRan,
)
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
)
from events.inbox_status import ItemKind, ItemStatus
from events.run_status import NodeStatus, RunStatus
from events.runs import (
    AgentOutputRecorded,
    ArtifactWritten,
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
    RunSuspended,
    Usage,
)
from events.words import counted
from shep.replay.frames import (
    Decision,
    Frame,
    FrameStatus,
    Replay,
    RunSummary,
    fork_command,
    format_ms,
    iso,
    last_status,
    ms_between,
    node_title,
)
from shep.replay.output import LINE_LIMIT, OutputItem, OutputLines
from shep.replay.state import VALUE_LIMIT, cut_text, short_value


def load_frames(events: Iterable[tuple[int, Story]]) -> list[Frame]:
    """The frames of a run's events (and its items' events), given in log order as
    ``(position, event)``; output and state diffs filled in, no git called.
    """
    replay = build_replay(events, git=False)
    return [replay.frame(i) for i in range(1, len(replay) + 1)]


def build_replay(events: Iterable[tuple[int, Story]], *, git: bool = True) -> Replay:
    """A ``Replay`` of the run whose ``RunCreated`` comes first in ``events``."""
    builder = _Builder()
    for position, event in events:
        builder.add(position, event)
    return builder.finish(git=git)


def _running(frame: Frame) -> bool:
    """Whether ``frame`` is a node's that is still running."""
    return frame.kind == "node" and frame.status == NodeStatus.RUNNING


class OutputBatch:
    """Consecutive ``AgentOutputRecorded`` of a run, kept as stored: most of a long run is
    output, so it is decoded only for the frames shown (their first and last lines), or
    to find each item's node when several nodes run at once.
    """

    __slots__ = ("positions", "states")

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.states: list[bytes] = []


class _NodeOnly(msgspec.Struct):
    node: str


_node_of = msgspec.json.Decoder(_NodeOnly)
Story = Event | OutputBatch


class _Builder:
    """Folds a run's events into frames, one event at a time, in log order."""

    #: The events that tell the run's story, and the method each goes to.
    HANDLERS: ClassVar[dict[type[Any], str]] = {
        RunCreated: "_created",
        RunStarted: "_started",
        RunResumed: "_resumed",
        RunSuspended: "_suspended",
        RunInterrupted: "_interrupted",
        RunCompleted: "_ended",
        RunFailed: "_ended",
        RunCancelled: "_ended",
        RunForked: "_forked",
        RunMigrated: "_migrated",
        NodeStarted: "_node_started",
        NodeCompleted: "_node_completed",
        NodeFailed: "_node_failed",
        AgentOutputRecorded: "_output",
        OutputBatch: "_outputs",
        ArtifactWritten: "_artifact",
        CheckpointSaved: "_checkpoint",
        QuestionAsked: "_asked",
        ApprovalRequested: "_asked",
        QuestionAnswered: "_decided",
        ApprovalGranted: "_decided",
        ApprovalRejected: "_decided",
        WorktreeCreated: "_feature",
        WorktreeSetupRan: "_feature",
        TaskStarted: "_feature",
        TaskCompleted: "_feature",
        TestsRan: "_feature",
        MergeConflicted: "_feature",
        FeatureMerged: "_feature",
        BranchPushed: "_feature",
        PullRequestOpened: "_feature",
        WorktreeRemoved: "_feature",
    }

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.lines: dict[int, OutputLines] = {}
        #: The frame each node's events go to while it runs, waits or is decided.
        self.open: dict[str, Frame] = {}
        #: Frames that ended since the last checkpoint: that checkpoint is theirs.
        self.awaiting: list[Frame] = []
        self.asks: dict[UUID, Frame] = {}
        self.checkpoints: dict[int, tuple[CheckpointSaved | None, CheckpointSaved]] = {}
        self.last_checkpoint: CheckpointSaved | None = None
        self.last_snapshot: str | None = None
        self.summary: RunSummary | None = None
        self.run_hex = ""
        self.handlers: dict[type[Any], Callable[[int, Any], None]] = {
            cls: getattr(self, name) for cls, name in self.HANDLERS.items()
        }

    def add(self, position: int, event: Story) -> None:
        handler = self.handlers.get(type(event))
        if handler is None:
            return  # heartbeats, agent sessions, writes, settings: not a step of the story
        if self.summary is None and not isinstance(event, RunCreated):
            return  # a run's own events start with its creation
        handler(position, event)

    # frames

    def _new(
        self, position: int, event: Event, kind: str, title: str, node: str | None = None, **kw: Any
    ) -> Frame:
        index = len(self.frames) + 1
        frame = Frame(
            run=self.run_hex,
            index=index,
            kind=kind,
            title=title,
            at=iso(event),
            first_position=position,
            last_position=position,
            node=node,
            **kw,
        )
        self.frames.append(frame)
        return frame

    def _touch(self, frame: Frame, position: int) -> Frame:
        frame.last_position = max(frame.last_position, position)
        return frame

    def _note(self, position: int, text: str, frame: Frame | None = None) -> None:
        target = frame or (self.frames[-1] if self.frames else None)
        if target is not None:
            self._touch(target, position).notes.append(text)

    def _for_node(self, node: str) -> Frame | None:
        frame = self.open.get(node)
        if frame is not None:
            return frame
        for frame in reversed(self.frames):
            if frame.node == node:
                return frame
        return None

    # the run

    def _created(self, position: int, e: RunCreated) -> None:
        if self.summary is not None:
            return
        self.run_hex = e.originator_id.hex
        source = e.inputs.get("source_repo") or e.repo
        self.summary = RunSummary(
            run=self.run_hex,
            workflow=e.workflow,
            agent=e.agent_type,
            repo=e.repo,
            source_repo=source,
            created_at=iso(e),
            created_by=e.created_by,
            origin_run=e.origin_run_id.hex if e.origin_run_id else None,
            origin_checkpoint_id=e.origin_checkpoint_id,
        )
        frame = self._new(
            position, e, "run", f"Run created: {e.workflow} on {e.repo} with {e.agent_type}"
        )
        frame.status = FrameStatus.CREATED.value
        frame.notes.append(f"created by {e.created_by}")
        if e.origin_run_id is not None:
            frame.notes.append(
                f"forked from run {e.origin_run_id.hex} at checkpoint {e.origin_checkpoint_id}"
            )
        lines = OutputLines()
        for key, value in e.inputs.items():
            lines.add(f"{key} = {short_value(value, LINE_LIMIT)}")
        self.lines[frame.index] = lines
        # The first checkpoints (the input and the state before the first node) are the
        # run's: forking there starts the run over.
        self.awaiting = [frame]

    def _started(self, position: int, e: RunStarted) -> None:
        self._note(position, f"started by worker {e.pid} on {e.host}")

    def _resumed(self, position: int, e: RunResumed) -> None:
        where = f" from checkpoint {e.from_checkpoint_id}" if e.from_checkpoint_id else ""
        self._note(position, f"resumed by worker {e.pid} on {e.host}{where}")

    def _suspended(self, position: int, e: RunSuspended) -> None:
        what = "an approval" if e.approval else "an answer"
        self._note(position, f"run suspended, waiting for {what} (no worker runs meanwhile)")

    def _interrupted(self, position: int, e: RunInterrupted) -> None:
        for node, frame in list(self.open.items()):
            if frame.kind == "node" and frame.status == NodeStatus.RUNNING:
                frame.status = RunStatus.INTERRUPTED.value
                del self.open[node]
        frame = self._new(position, e, "run", f"Run interrupted: {e.reason}")
        frame.status = RunStatus.INTERRUPTED.value
        frame.checkpoint_id = self._checkpoint_id()

    def _ended(self, position: int, e: RunCompleted | RunFailed | RunCancelled) -> None:
        agent = sum(f.agent_ms or 0 for f in self.frames if f.kind == "node")
        waited = sum(f.waited_ms or 0 for f in self.frames if f.kind == "decision")
        if isinstance(e, RunCompleted):
            status, title = RunStatus.COMPLETED, f"Run completed in {format_ms(e.duration_ms)}"
        elif isinstance(e, RunFailed):
            where = f" in {e.node}" if e.node else ""
            status, title = RunStatus.FAILED, f"Run failed{where}: {e.error_type}: {e.message}"
        else:
            reason = f": {e.reason}" if e.reason else ""
            status, title = RunStatus.CANCELLED, f"Run cancelled by {e.cancelled_by}{reason}"
        frame = self._new(position, e, "run", title, agent_ms=agent, waited_ms=waited)
        frame.status = status.value
        frame.checkpoint_id = self._checkpoint_id()

    def _forked(self, position: int, e: RunForked) -> None:
        frame = self._new(
            position, e, "run", f"Forked as run {e.fork_run_id.hex} at checkpoint {e.checkpoint_id}"
        )
        frame.status = FrameStatus.FORKED.value
        frame.checkpoint_id = e.checkpoint_id
        frame.notes.append(f"forked by {e.forked_by}, restoring {e.restore}")
        if e.reapply_answers:
            frame.notes.append("decisions after the checkpoint were given again")

    def _migrated(self, position: int, e: RunMigrated) -> None:
        title = f"Migrated from {e.workflow} version {e.from_version} to {e.to_version}"
        frame = self._new(position, e, "run", title)
        frame.status = FrameStatus.MIGRATED.value
        frame.checkpoint_id = e.checkpoint_id or self._checkpoint_id()
        frame.notes.append(
            f"graph {e.from_fingerprint} -> {e.to_fingerprint}, shep {e.shep_version}"
        )

    # nodes

    def _node_started(self, position: int, e: NodeStarted) -> None:
        asking = e.kind in (ItemKind.QUESTION, ItemKind.APPROVAL)
        current = self.open.get(e.node)
        if (
            current is not None
            and asking
            and current.kind in (ItemKind.QUESTION, ItemKind.APPROVAL, "decision")
        ):
            # The item was recorded just before its node's start, in one transaction.
            current.iteration, current.attempt = e.iteration, e.attempt
            self._touch(current, position)
            return
        if current is not None and current.kind == "node" and current.iteration == e.iteration:
            current.attempt = e.attempt
            self._touch(current, position).notes.append(f"attempt {e.attempt} started")
            self._lines(current).add(f"--- attempt {e.attempt} ---")
            return
        self._close_run_frame()
        kind = e.kind if asking else "node"
        frame = self._new(
            position, e, kind, e.node, node=e.node, iteration=e.iteration, attempt=e.attempt
        )
        frame.status = (NodeStatus.RUNNING if kind == "node" else FrameStatus.ASKED).value
        frame.checkpoint_id = self._checkpoint_id()
        self.open[e.node] = frame

    def _node_completed(self, position: int, e: NodeCompleted) -> None:
        frame = self.open.pop(e.node, None)
        if frame is None:
            return
        self._touch(frame, position)
        if frame.kind == "node":
            frame.status = NodeStatus.COMPLETED.value
            frame.agent_ms = e.duration_ms
        if e.waited_ms is not None:
            frame.waited_ms = e.waited_ms
        if e.usage != Usage():
            frame.usage = e.usage
        if e.snapshot:
            frame.snapshot, frame.previous_snapshot = e.snapshot, self.last_snapshot
            self.last_snapshot = e.snapshot
        self.awaiting.append(frame)

    def _node_failed(self, position: int, e: NodeFailed) -> None:
        frame = self.open.pop(e.node, None) or self._for_node(e.node)
        if frame is None:
            return
        self._touch(frame, position)
        frame.status = NodeStatus.FAILED.value
        frame.agent_ms = e.duration_ms
        retry = " (retryable)" if e.retryable else ""
        frame.notes.append(f"failed: {e.error_type}: {e.message}{retry}")

    def _output(self, position: int, e: AgentOutputRecorded) -> None:
        self._output_of(e.node, position, e)

    def _output_of(self, node: str, position: int, item: OutputItem) -> None:
        frame = self.open.get(node) or self._for_node(node)
        if frame is not None:
            self._touch(frame, position)
            self._lines(frame).add(item)

    def _outputs(self, position: int, batch: OutputBatch) -> None:
        running = [f for f in self.open.values() if _running(f)]
        if len(running) == 1:
            # One node runs: the output is its own, no need to read whose it is.
            self._touch(running[0], batch.positions[-1])
            self._lines(running[0]).extend(batch.states)
            return
        for at, state in zip(batch.positions, batch.states, strict=True):
            self._output_of(_node_of.decode(state).node, at, state)

    def _artifact(self, position: int, e: ArtifactWritten) -> None:
        frame = self._for_node(e.node)
        self._note(position, f"wrote {e.path} (sha256 {e.sha256[:12]})", frame)

    def _lines(self, frame: Frame) -> OutputLines:
        return self.lines.setdefault(frame.index, OutputLines())

    # checkpoints

    def _checkpoint_id(self) -> str | None:
        return self.last_checkpoint.checkpoint_id if self.last_checkpoint else None

    def _checkpoint(self, position: int, e: CheckpointSaved) -> None:
        if e.checkpoint_ns:
            return  # a subgraph's: the run's story is its root graph
        for frame in self.awaiting:
            self._touch(frame, position)
            before, _ = self.checkpoints.get(frame.index, (self.last_checkpoint, e))
            self.checkpoints[frame.index] = (before, e)
            frame.checkpoint_id = e.checkpoint_id
        # The run's first frame keeps taking checkpoints until the first step: the state
        # the run starts from (a fork's copied chain included).
        self.awaiting = [f for f in self.awaiting if f.kind == "run"]
        self.last_checkpoint = e

    def _close_run_frame(self) -> None:
        self.awaiting = [f for f in self.awaiting if f.kind != "run"]

    # questions and gates

    def _asked(self, position: int, e: QuestionAsked | ApprovalRequested) -> None:
        self._close_run_frame()
        if isinstance(e, QuestionAsked):
            kind, title = "question", f"{e.node} asks: {e.question}"
            lines = OutputLines()
            for option in e.options:
                star = " (recommended)" if option.recommended else ""
                lines.add(f"option {option.id}: {option.label}{star}")
            for choice in e.choices:
                lines.add(f"choice: {choice}")
            if e.context:
                lines.add(f"context: {e.context}")
        else:
            kind, title = "approval", f"{e.node} asks for approval: {e.summary}"
            lines = OutputLines()
            for artifact in e.artifacts:
                lines.add(f"{artifact.kind} {artifact.path} sha256 {artifact.sha256[:12]}")
            if e.phase:
                lines.add(f"a rejection goes back to {e.phase}")
        if e.reapply:
            lines.add(f"the origin's decision: {e.reapply}")
        started = self.open.get(e.node)
        if started is not None and started.kind == kind and started.status == FrameStatus.ASKED:
            # The node's start came first: its frame is this item's.
            frame = self._touch(started, position)
            frame.title, frame.at = title, iso(e)
        else:
            frame = self._new(position, e, kind, title, node=e.node, iteration=e.iteration)
            frame.checkpoint_id = self._checkpoint_id()
        frame.status = FrameStatus.WAITING.value
        frame.notes.append(f"item {e.originator_id.hex}")
        self.lines[frame.index] = lines
        self.asks[e.originator_id] = frame
        self.open[e.node] = frame

    def _decided(
        self, position: int, e: QuestionAnswered | ApprovalGranted | ApprovalRejected
    ) -> None:
        ask = self.asks.get(e.originator_id)
        node = ask.node if ask is not None else e.node
        if isinstance(e, QuestionAnswered):
            verdict, reason, answer, policy = ItemStatus.ANSWERED.value, "", e.answer, None
        else:
            approved = isinstance(e, ApprovalGranted)
            verdict = (ItemStatus.APPROVED if approved else ItemStatus.REJECTED).value
            reason, answer, policy = e.rationale, None, e.policy
        decision = Decision(
            item=e.originator_id.hex,
            actor=e.actor,
            at=iso(e),
            verdict=verdict,
            reason=reason,
            answer=answer,
            option_id=e.option_id if isinstance(e, QuestionAnswered) else None,
            policy=policy,
            reapplied_from=e.reapplied_from.hex if e.reapplied_from else None,
        )
        said = f": {cut_text(answer or reason, VALUE_LIMIT)}" if answer or reason else ""
        frame = self._new(
            position,
            e,
            "decision",
            f"{node or 'item'}: {verdict} by {e.actor}{said}",
            node=node,
            iteration=ask.iteration if ask is not None else None,
            decision=decision,
        )
        frame.status = verdict
        if ask is not None:
            ask.status = FrameStatus.DECIDED.value
            frame.waited_ms = ms_between(ask.at, frame.at)
        frame.checkpoint_id = self._checkpoint_id()
        if decision.reapplied_from:
            frame.notes.append(f"reapplied from item {decision.reapplied_from}")
        if node is not None:
            # The node runs again with the decision and completes: that is this frame's end.
            self.open[node] = frame

    # feature runs

    def _feature(self, position: int, e: Event) -> None:
        frame = next(
            (f for f in reversed(self.frames) if _running(f)),
            None,
        )
        if isinstance(e, WorktreeCreated):
            self.last_snapshot = e.base_sha
            text = f"worktree {e.path} on branch {e.branch} from {e.base} ({e.base_sha[:10]})"
        elif isinstance(e, WorktreeSetupRan):
            text = f"setup command `{e.command}` exited {e.exit_code} in {format_ms(e.duration_ms)}"
        elif isinstance(e, TaskStarted):
            text = f"task {e.task} ({e.phase}) started: {e.title}"
        elif isinstance(e, TaskCompleted):
            shot = f", snapshot {e.snapshot[:10]}" if e.snapshot else ""
            text = f"task {e.task} done in {format_ms(e.duration_ms)}{shot}"
        elif isinstance(e, TestsRan):
            verdict = "passed" if e.passed else "failed"
            text = (
                f"tests `{e.command}` {verdict} (exit {e.exit_code}) in {format_ms(e.duration_ms)}"
            )
        elif isinstance(e, MergeConflicted):
            text = f"merge into {e.into} conflicted in {', '.join(e.files)}"
        elif isinstance(e, FeatureMerged):
            text = (
                f"merged into {e.into} as {e.commit[:10]} "
                f"({counted(e.files, 'file')}, +{e.added} -{e.removed})"
            )
        elif isinstance(e, BranchPushed):
            text = f"pushed {e.branch} to {e.remote} at {e.commit[:10]}"
        elif isinstance(e, PullRequestOpened):
            text = f"pull request {e.url}"
        elif isinstance(e, WorktreeRemoved):
            text = f"worktree {e.path} removed by {e.removed_by}: {e.reason}"
        else:
            return
        self._note(position, text, frame)

    def finish(self, *, git: bool) -> Replay:
        if self.summary is None:
            raise RunNotFoundError("?")
        for frame in self.frames:
            if frame.checkpoint_id is not None:
                frame.fork_command = fork_command(self.run_hex, frame.checkpoint_id)
            if frame.kind == "node":
                frame.title = node_title(frame)
        self.summary.status = last_status(self.frames)
        return Replay(self.summary, self.frames, self.checkpoints, self.lines, git=git)


#: What a replay decodes from the log: the story's events, and the writes naming interrupts.
STORY_CLASSES: dict[str, type[Event]] = {
    topic_of(cls): cls
    for cls in (WritesSaved, *_Builder.HANDLERS)
    if isinstance(cls, type) and issubclass(cls, Event)
}
STORY_TOPICS = frozenset(STORY_CLASSES)
