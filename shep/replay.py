"""Time travel: a run's history as frames, read from the log or from an audit bundle.

A frame is one step of the run as a person would tell it: a node's iteration
with the agent's output, a question or gate asked, a decision, or a moment of
the run itself (created, interrupted, ended, forked). Each names the log
positions it was read from, the checkpoint to fork from (``shep fork RUN --at
CHECKPOINT``), the change to the workflow state against the previous
checkpoint, and, for feature runs, the worktree snapshot.

Everything here reads; nothing writes. The store is opened read-only in a way
that changes no byte of the database, its WAL or its shared-memory file (see
``_open_unchanged``), and checkpoints are decoded with ``ormsgpack`` alone:
importing LangGraph would cost a second and could run code named in the data.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from uuid import UUID

import msgspec

from events.base import Event
from events.checkpoints import CheckpointSaved, WritesSaved
from events.errors import AmbiguousRunIdError, RunNotFoundError, ShepError, StoreUnavailableError
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
    item_stream_id,
)
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
    RunResumed,
    RunStarted,
    RunSuspended,
    Usage,
)

if TYPE_CHECKING:
    import apsw

_T = TypeVar("_T")

#: A frame keeps this many lines of agent output from its start, and this many from its end.
OUTPUT_HEAD = 40
OUTPUT_TAIL = 20
#: Longer lines (and state values) are cut here, with an ellipsis.
LINE_LIMIT = 240
VALUE_LIMIT = 80
#: A state diff names at most this many keys; the rest are counted.
DIFF_LIMIT = 40
#: Dicts in the state are compared this deep (``results.draft``, ``answers.scope``).
DIFF_DEPTH = 2


def topic_of(cls: type[Event]) -> str:
    """The stored topic of an event class, in ``events.catalog``'s form (``module:Class``).

    Spelled here because importing the catalog builds a decoder for every event
    class (with the settings' imports, ~8 ms); a replay builds only the few it
    reads. ``tests/replay/test_builder.py`` pins the two forms equal.
    """
    return f"{cls.__module__}:{cls.__qualname__}"


_RUN_CREATED = topic_of(RunCreated)
_RUN_FORKED = topic_of(RunForked)
_ITEM_EVENTS: frozenset[type[Event]] = frozenset(
    (QuestionAsked, ApprovalRequested, QuestionAnswered, ApprovalGranted, ApprovalRejected)
)
_ITEM_TOPICS = frozenset(topic_of(cls) for cls in _ITEM_EVENTS)


class ReplayInputError(ShepError):
    """What a replay was asked for is not there: a frame past the run's end, say."""

    exit_code = 2


class BundleError(ReplayInputError):
    """A file given as an audit bundle is not one, or cannot be read."""


class StateDiff(msgspec.Struct, kw_only=True):
    """How the workflow state changed: keys (dotted into dicts) with short values."""

    added: dict[str, str] = {}
    removed: dict[str, str] = {}
    changed: dict[str, tuple[str, str]] = {}
    #: Changed keys left out beyond ``DIFF_LIMIT``.
    omitted: int = 0


class Decision(msgspec.Struct, kw_only=True):
    """Who decided a question or gate, when, how, and why."""

    item: str
    actor: str
    at: str
    verdict: str
    reason: str = ""
    answer: str | None = None
    option_id: str | None = None
    policy: str | None = None
    reapplied_from: str | None = None


class Frame(msgspec.Struct, kw_only=True):
    """One step of a run (see the module's docstring); ``--json`` prints it as is.

    ``index`` counts from 1. ``agent_ms`` is the time the node worked (the agent
    call, or a deterministic step), ``waited_ms`` the time a question or gate
    waited for a person; they are never added together. ``output``, ``state`` and
    ``diff_stat`` are filled by ``Replay.frame`` (they cost decoding and a git
    call): empty until then, or when there is nothing to show.
    """

    run: str
    index: int
    kind: str
    title: str
    at: str
    first_position: int
    last_position: int
    node: str | None = None
    iteration: int | None = None
    attempt: int | None = None
    status: str = ""
    output: list[str] = []
    state: StateDiff | None = None
    decision: Decision | None = None
    snapshot: str | None = None
    previous_snapshot: str | None = None
    diff_stat: str | None = None
    checkpoint_id: str | None = None
    fork_command: str | None = None
    agent_ms: int | None = None
    waited_ms: int | None = None
    usage: Usage | None = None
    notes: list[str] = []


class RunSummary(msgspec.Struct, kw_only=True):
    """The run a replay is of, from its ``RunCreated`` and its last status."""

    run: str
    workflow: str
    agent: str
    repo: str
    source_repo: str
    created_at: str
    created_by: str
    origin_run: str | None = None
    origin_checkpoint_id: str | None = None
    status: str = "pending"


class Replay:
    """A run's frames, with the costly parts of each (state diff, snapshot diff stat) made
    on demand by ``frame(i)``, so opening a long run at its last frame decodes one
    checkpoint pair, not all of them.
    """

    def __init__(
        self,
        summary: RunSummary,
        frames: list[Frame],
        checkpoints: Mapping[int, tuple[CheckpointSaved | None, CheckpointSaved]],
        outputs: Mapping[int, _Lines],
        *,
        git: bool = True,
    ) -> None:
        self.summary = summary
        self.frames = frames
        self._checkpoints = checkpoints
        self._outputs = outputs
        self._states: dict[str, dict[str, Any] | str] = {}
        self._detailed: set[int] = set()
        self._git = git

    def __len__(self) -> int:
        return len(self.frames)

    def frame(self, index: int) -> Frame:
        """Frame ``index`` (from 1) with its state diff and snapshot diff stat filled in."""
        frame = self.frames[index - 1]
        if index not in self._detailed:
            self._detailed.add(index)
            lines = self._outputs.get(index)
            if lines is not None:
                frame.output = lines.lines()
            pair = self._checkpoints.get(index)
            if pair is not None:
                frame.state = self._diff(*pair, frame)
            if self._git and frame.snapshot:
                frame.diff_stat = snapshot_diff_stat(
                    self.summary.source_repo, frame.previous_snapshot, frame.snapshot
                )
        return frame

    def _diff(
        self, before: CheckpointSaved | None, after: CheckpointSaved, frame: Frame
    ) -> StateDiff | None:
        old = self._state(before) if before is not None else {}
        new = self._state(after)
        for value in (old, new):
            if isinstance(value, str):
                frame.notes.append(value)
                return None
        assert isinstance(old, dict)
        assert isinstance(new, dict)
        return diff_state(old, new)

    def _state(self, event: CheckpointSaved) -> dict[str, Any] | str:
        key = event.checkpoint_id
        if key not in self._states:
            try:
                self._states[key] = checkpoint_state(event)
            except Exception as e:  # a damaged checkpoint is shown, not fatal
                self._states[key] = f"checkpoint {key} could not be decoded ({e})"
        return self._states[key]


# --- building frames -----------------------------------------------------------------


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
_OUTPUT_TOPIC = topic_of(AgentOutputRecorded)
#: An item of a frame's output: a line of ours, an output event, or one's stored bytes.
_OutputItem = str | AgentOutputRecorded | bytes
Story = Event | OutputBatch


def story(rows: Iterable[tuple[int, str, bytes]]) -> list[tuple[int, Story]]:
    """The events of stored ``(position, topic, state)`` rows that a replay reads: the
    story's events decoded, output gathered undecoded into batches, the rest skipped.
    """
    found: list[tuple[int, Story]] = []
    batch: OutputBatch | None = None
    for position, topic, state in rows:
        if topic == _OUTPUT_TOPIC:
            if batch is None:
                batch = OutputBatch()
                found.append((position, batch))
            batch.positions.append(position)
            batch.states.append(state)
        elif topic in _STORY_TOPICS:
            found.append((position, decode_event(topic, state)))
            batch = None
    return found


class _Lines:
    """A frame's output as it grows: its first and last items, and how many fell between."""

    def __init__(self) -> None:
        self.head: list[_OutputItem] = []
        self.tail: deque[_OutputItem] = deque(maxlen=OUTPUT_TAIL)
        self.dropped = 0

    def add(self, item: _OutputItem) -> None:
        if len(self.head) < OUTPUT_HEAD:
            self.head.append(item)
            return
        if len(self.tail) == OUTPUT_TAIL:
            self.dropped += 1
        self.tail.append(item)

    def extend(self, items: list[bytes]) -> None:
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head.extend(items[:room])
            items = items[room:]
        self.dropped += max(0, len(self.tail) + len(items) - OUTPUT_TAIL)
        self.tail.extend(items[-OUTPUT_TAIL:])

    def lines(self) -> list[str]:
        head = [line for item in self.head for line in _output_lines(item)]
        tail = [line for item in self.tail for line in _output_lines(item)]
        dropped = self.dropped
        if len(head) > OUTPUT_HEAD:
            dropped += len(head) - OUTPUT_HEAD
            head = head[:OUTPUT_HEAD]
        if len(tail) > OUTPUT_TAIL:
            dropped += len(tail) - OUTPUT_TAIL
            tail = tail[-OUTPUT_TAIL:]
        middle = [f"… {dropped} more lines not shown …"] if dropped else []
        return [*head, *middle, *tail]


def _output_lines(item: _OutputItem) -> list[str]:
    """An output item as the lines a person reads: text, ``→ tool input``, ``← result``."""
    if isinstance(item, str):
        return [_cut(item, LINE_LIMIT)]
    event = decode_event(_OUTPUT_TOPIC, item) if isinstance(item, bytes) else item
    assert isinstance(event, AgentOutputRecorded)
    mark = "! " if event.is_error else ""
    if event.kind == "tool_use":
        lines = [f"{mark}→ {event.tool_name or 'tool'} {event.text}".rstrip()]
    elif event.kind == "tool_result":
        first, _, rest = event.text.partition("\n")
        more = f" (+{rest.count(chr(10)) + 1} lines)" if rest else ""
        lines = [f"{mark}← {first}{more}"]
    else:
        lines = [f"{mark}{line}" for line in event.text.splitlines() or [""]]
    return [_cut(line, LINE_LIMIT) for line in lines]


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
        self.lines: dict[int, _Lines] = {}
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
            at=_iso(event),
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
            created_at=_iso(e),
            created_by=e.created_by,
            origin_run=e.origin_run_id.hex if e.origin_run_id else None,
            origin_checkpoint_id=e.origin_checkpoint_id,
        )
        frame = self._new(
            position, e, "run", f"Run created: {e.workflow} on {e.repo} with {e.agent_type}"
        )
        frame.status = "created"
        frame.notes.append(f"created by {e.created_by}")
        if e.origin_run_id is not None:
            frame.notes.append(
                f"forked from run {e.origin_run_id.hex} at checkpoint {e.origin_checkpoint_id}"
            )
        lines = _Lines()
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
            if frame.kind == "node" and frame.status == "running":
                frame.status = "interrupted"
                del self.open[node]
        frame = self._new(position, e, "run", f"Run interrupted: {e.reason}")
        frame.status = "interrupted"
        frame.checkpoint_id = self._checkpoint_id()

    def _ended(self, position: int, e: RunCompleted | RunFailed | RunCancelled) -> None:
        agent = sum(f.agent_ms or 0 for f in self.frames if f.kind == "node")
        waited = sum(f.waited_ms or 0 for f in self.frames if f.kind == "decision")
        if isinstance(e, RunCompleted):
            status, title = "completed", f"Run completed in {format_ms(e.duration_ms)}"
        elif isinstance(e, RunFailed):
            where = f" in {e.node}" if e.node else ""
            status, title = "failed", f"Run failed{where}: {e.error_type}: {e.message}"
        else:
            reason = f": {e.reason}" if e.reason else ""
            status, title = "cancelled", f"Run cancelled by {e.cancelled_by}{reason}"
        frame = self._new(position, e, "run", title, agent_ms=agent, waited_ms=waited)
        frame.status = status
        frame.checkpoint_id = self._checkpoint_id()

    def _forked(self, position: int, e: RunForked) -> None:
        frame = self._new(
            position, e, "run", f"Forked as run {e.fork_run_id.hex} at checkpoint {e.checkpoint_id}"
        )
        frame.status = "forked"
        frame.checkpoint_id = e.checkpoint_id
        frame.notes.append(f"forked by {e.forked_by}, restoring {e.restore}")
        if e.reapply_answers:
            frame.notes.append("decisions after the checkpoint were given again")

    # nodes

    def _node_started(self, position: int, e: NodeStarted) -> None:
        asking = e.kind in ("question", "approval")
        current = self.open.get(e.node)
        if current is not None and asking and current.kind in ("question", "approval", "decision"):
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
        frame.status = "running" if kind == "node" else "asked"
        frame.checkpoint_id = self._checkpoint_id()
        self.open[e.node] = frame

    def _node_completed(self, position: int, e: NodeCompleted) -> None:
        frame = self.open.pop(e.node, None)
        if frame is None:
            return
        self._touch(frame, position)
        if frame.kind == "node":
            frame.status = "completed"
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
        frame.status = "failed"
        frame.agent_ms = e.duration_ms
        retry = " (retryable)" if e.retryable else ""
        frame.notes.append(f"failed: {e.error_type}: {e.message}{retry}")

    def _output(self, position: int, e: AgentOutputRecorded) -> None:
        self._output_of(e.node, position, e)

    def _output_of(self, node: str, position: int, item: _OutputItem) -> None:
        frame = self.open.get(node) or self._for_node(node)
        if frame is not None:
            self._touch(frame, position)
            self._lines(frame).add(item)

    def _outputs(self, position: int, batch: OutputBatch) -> None:
        running = [f for f in self.open.values() if f.kind == "node" and f.status == "running"]
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

    def _lines(self, frame: Frame) -> _Lines:
        return self.lines.setdefault(frame.index, _Lines())

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
            lines = _Lines()
            for option in e.options:
                star = " (recommended)" if option.recommended else ""
                lines.add(f"option {option.id}: {option.label}{star}")
            for choice in e.choices:
                lines.add(f"choice: {choice}")
            if e.context:
                lines.add(f"context: {e.context}")
        else:
            kind, title = "approval", f"{e.node} asks for approval: {e.summary}"
            lines = _Lines()
            for artifact in e.artifacts:
                lines.add(f"file {artifact.path} sha256 {artifact.sha256[:12]}")
            if e.phase:
                lines.add(f"a rejection goes back to {e.phase}")
        started = self.open.get(e.node)
        if started is not None and started.kind == kind and started.status == "asked":
            # The node's start came first: its frame is this item's.
            frame = self._touch(started, position)
            frame.title, frame.at = title, _iso(e)
        else:
            frame = self._new(position, e, kind, title, node=e.node, iteration=e.iteration)
            frame.checkpoint_id = self._checkpoint_id()
        frame.status = "waiting"
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
            verdict, reason, answer, policy = "answered", "", e.answer, None
        else:
            verdict = "approved" if isinstance(e, ApprovalGranted) else "rejected"
            reason, answer, policy = e.rationale, None, e.policy
        decision = Decision(
            item=e.originator_id.hex,
            actor=e.actor,
            at=_iso(e),
            verdict=verdict,
            reason=reason,
            answer=answer,
            option_id=e.option_id if isinstance(e, QuestionAnswered) else None,
            policy=policy,
            reapplied_from=e.reapplied_from.hex if e.reapplied_from else None,
        )
        said = f": {_cut(answer or reason, VALUE_LIMIT)}" if answer or reason else ""
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
            ask.status = "decided"
            frame.waited_ms = _ms_between(ask.at, frame.at)
        frame.checkpoint_id = self._checkpoint_id()
        if decision.reapplied_from:
            frame.notes.append(f"reapplied from item {decision.reapplied_from}")
        if node is not None:
            # The node runs again with the decision and completes: that is this frame's end.
            self.open[node] = frame

    # feature runs

    def _feature(self, position: int, e: Event) -> None:
        frame = next(
            (f for f in reversed(self.frames) if f.kind == "node" and f.status == "running"),
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
                f"({e.files} files, +{e.added} -{e.removed})"
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
                frame.title = _node_title(frame)
        self.summary.status = _last_status(self.frames)
        return Replay(self.summary, self.frames, self.checkpoints, self.lines, git=git)


#: What a replay decodes from the log: the story's events, and the writes naming interrupts.
_STORY_CLASSES: dict[str, type[Event]] = {
    topic_of(cls): cls
    for cls in (WritesSaved, *_Builder.HANDLERS)
    if isinstance(cls, type) and issubclass(cls, Event)
}
_STORY_TOPICS = frozenset(_STORY_CLASSES)
_decoders: dict[str, msgspec.json.Decoder[Any]] = {}


def decode_event(topic: str, state: bytes) -> Event:
    """An event a replay reads (``_STORY_TOPICS``) from its topic and stored bytes."""
    decoder = _decoders.get(topic)
    if decoder is None:
        decoder = _decoders[topic] = msgspec.json.Decoder(_STORY_CLASSES[topic])
    event: Event = decoder.decode(state)
    return event


def _node_title(frame: Frame) -> str:
    name = frame.node or "?"
    if frame.iteration and frame.iteration > 1:
        name += f" (iteration {frame.iteration})"
    if frame.attempt and frame.attempt > 1:
        name += f" (attempt {frame.attempt})"
    took = f" in {format_ms(frame.agent_ms)}" if frame.agent_ms is not None else ""
    return f"{name}: {frame.status}{took}"


_RUN_ENDS = frozenset({"completed", "failed", "cancelled", "interrupted"})


def _last_status(frames: list[Frame]) -> str:
    """What the log says of the run at its end: ended, waiting for a person, or running."""
    for frame in reversed(frames):
        if frame.kind == "run" and frame.status in _RUN_ENDS:
            return frame.status
        if frame.kind in ("question", "approval") and frame.status == "waiting":
            return "waiting"
        if frame.kind in ("node", "decision"):
            return "running"
    return "pending"


def fork_command(run_hex: str, checkpoint_id: str) -> str:
    """The command that forks run ``run_hex`` at ``checkpoint_id`` (shown, never run here)."""
    return f"shep fork {run_hex} --at {checkpoint_id}"


# --- workflow state -------------------------------------------------------------------


def checkpoint_state(event: CheckpointSaved) -> dict[str, Any]:
    """The workflow state a checkpoint holds: its channel values, LangGraph's own channels
    (``__start__``, ``branch:to:...``) left out. Values of types this module does not
    know are rendered as readable placeholders; nothing is imported or constructed.
    """
    value = decode_typed(event.checkpoint_type, event.checkpoint)
    values = value.get("channel_values") if isinstance(value, dict) else None
    if not isinstance(values, dict):
        return {}
    return {
        key: item
        for key, item in values.items()
        if isinstance(key, str) and not key.startswith("__") and ":" not in key
    }


def decode_typed(type_tag: str, data: bytes) -> Any:
    """A value as LangGraph's serializer wrote it (``dumps_typed``), decoded without it."""
    if type_tag == "null":
        return None
    if type_tag == "msgpack":
        import ormsgpack  # a LangGraph dependency; imported only when a state is shown

        return ormsgpack.unpackb(data, ext_hook=_readable_ext, option=ormsgpack.OPT_NON_STR_KEYS)
    if type_tag == "json":
        return msgspec.json.decode(data)
    if type_tag in ("bytes", "bytearray"):
        return f"<{len(data)} bytes>"
    # pickle above all: loading it would run code from the log.
    return f"<{type_tag} value, {len(data)} bytes, not decoded>"


#: LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD = 0, 1, 2, 3
_EXT_PYDANTIC_V1, _EXT_PYDANTIC_V2, _EXT_NUMPY, _EXT_DELTA = 4, 5, 6, 7


def _readable_ext(code: int, data: bytes) -> Any:
    """An extension value as plain data: a UUID's hex, a datetime's ISO text, a model's
    fields, a set's items; for anything else a placeholder naming it.
    """
    import ormsgpack

    def unpack(raw: bytes) -> Any:
        return ormsgpack.unpackb(raw, ext_hook=_readable_ext, option=ormsgpack.OPT_NON_STR_KEYS)

    try:
        if code == _EXT_DELTA:
            return unpack(data)
        if code == _EXT_NUMPY:
            return "<numpy array>"
        if code in (_EXT_SINGLE_ARG, _EXT_POS_ARGS, _EXT_KW_ARGS, _EXT_METHOD) or code in (
            _EXT_PYDANTIC_V1,
            _EXT_PYDANTIC_V2,
        ):
            module, name, arg = unpack(data)[:3]
            if code in (_EXT_SINGLE_ARG, _EXT_METHOD):
                return list(arg) if isinstance(arg, list | tuple) else arg
            if code == _EXT_POS_ARGS:
                if name.endswith("Path") and isinstance(arg, list | tuple):
                    return "/".join(str(p) for p in arg).replace("//", "/")
                return f"<{module}.{name}{tuple(arg) if isinstance(arg, list) else (arg,)}>"
            if isinstance(arg, dict):
                return {"_type": f"{module}.{name}", **{str(k): v for k, v in arg.items()}}
            return f"<{module}.{name}>"
    except Exception:  # noqa: S110 - malformed: falls through to the placeholder
        pass
    return f"<ext type {code}, {len(data)} bytes>"


def diff_state(before: Mapping[str, Any], after: Mapping[str, Any]) -> StateDiff:
    """Keys added, removed and changed from ``before`` to ``after``, dotted into nested dicts
    (``DIFF_DEPTH`` deep), each with a short rendering of its value.
    """
    diff = StateDiff()
    entries = 0

    def room() -> bool:
        nonlocal entries
        entries += 1
        if entries > DIFF_LIMIT:
            diff.omitted += 1
            return False
        return True

    def walk(prefix: str, old: Mapping[Any, Any], new: Mapping[Any, Any], depth: int) -> None:
        for key, value in new.items():
            path = f"{prefix}{key}"
            if key not in old:
                if room():
                    diff.added[path] = short_value(value)
            elif old[key] != value:
                if isinstance(value, dict) and isinstance(old[key], dict) and depth < DIFF_DEPTH:
                    walk(f"{path}.", old[key], value, depth + 1)
                elif room():
                    diff.changed[path] = _changed(old[key], value)
        for key, value in old.items():
            if key not in new and room():
                diff.removed[f"{prefix}{key}"] = short_value(value)

    walk("", before, after, 1)
    return diff


_value_encoder = msgspec.json.Encoder(enc_hook=str)
#: Characters of a changed text kept before the first place it differs.
_CONTEXT = 12


def _changed(old: Any, new: Any) -> tuple[str, str]:
    """Both values short; texts that share a long beginning are shown from where they part."""
    if isinstance(old, str) and isinstance(new, str):
        same = 0
        for a, b in zip(old, new, strict=False):
            if a != b:
                break
            same += 1
        if same > 2 * _CONTEXT and max(len(old), len(new)) > VALUE_LIMIT - 2:
            start = same - _CONTEXT
            return short_value("…" + old[start:]), short_value("…" + new[start:])
    return short_value(old), short_value(new)


def short_value(value: Any, limit: int = VALUE_LIMIT) -> str:
    """``value`` as compact JSON, cut to ``limit`` characters with an ellipsis."""
    try:
        text = _value_encoder.encode(value).decode()
    except (TypeError, ValueError, msgspec.EncodeError):
        text = repr(value)
    return _cut(text, limit)


def _cut(text: str, limit: int) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- worktree snapshots ---------------------------------------------------------------


def snapshot_diff_stat(repo: str, previous: str | None, snapshot: str) -> str:
    """``git diff --stat`` from ``previous`` (or the snapshot's parent) to ``snapshot`` in
    ``repo``, read-only; a sentence saying why when it cannot be made.
    """
    import subprocess

    if not os.path.isdir(repo):
        return f"the repository {repo} is gone: no diff for snapshot {snapshot[:10]}"
    span = [previous, snapshot] if previous else [f"{snapshot}^!"]
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", repo, "diff", "--stat", "--no-color", *span],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"git could not be run for the diff ({e})"
    if done.returncode != 0:
        problem = (done.stderr.strip().splitlines() or ["git failed"])[0]
        return f"no diff for snapshot {snapshot[:10]} in {repo}: {problem}"
    return done.stdout.rstrip() or "no files changed"


# --- reading the store ----------------------------------------------------------------


def frames_from_store(db_path: str | os.PathLike[str], run_ref: str) -> Replay:
    """The replay of run ``run_ref`` (an id or a unique prefix) read from the store at
    ``db_path``, changing nothing: see ``_open_unchanged``.
    """
    events = _read_store(os.fspath(db_path), lambda conn: _run_events(conn, run_ref))
    return build_replay(events)


def _read_store(path: str, read: Callable[[apsw.Connection], _T]) -> _T:
    """``read(conn)`` inside one read transaction of a connection that writes nothing."""
    import apsw

    from events.schema import store_error

    if not os.path.isfile(path):
        raise StoreUnavailableError(f"No event store at {path}: nothing to replay.")
    for _ in range(3):
        try:
            conn, unchanged = _open_unchanged(path)
            try:
                conn.execute("BEGIN")
                result = read(conn)
                conn.execute("COMMIT")
            finally:
                conn.close()
        except apsw.Error as e:
            raise store_error(e, path) from e
        if unchanged():
            return result
    raise StoreUnavailableError(
        f"The event store {path} kept changing while it was read. Try again."
    )


def _open_unchanged(path: str) -> tuple[apsw.Connection, Callable[[], bool]]:
    """A read-only connection that writes no byte, and a check that what it read holds.

    SQLite's usual read-only connection still writes the WAL index (``-shm``)
    and creates ``-wal`` and ``-shm`` when they are missing. Instead: with a
    ``-wal`` file, its index is opened read-only (``readonly_shm``: SQLite reads
    it, or rebuilds it in private memory when no writer has it); without one no
    writer has the file open in WAL mode, so it is read as immutable, and the
    check says whether a writer came and changed the file meanwhile (then the
    caller reads again, through the WAL).
    """
    import apsw

    # A URI's own characters escaped, the rest as is (urllib costs an import for this).
    uri = "file:" + "".join(f"%{ord(c):02x}" if c in "%?#" else c for c in os.path.abspath(path))
    flags = apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    wal = path + "-wal"
    if os.path.exists(wal):
        conn = apsw.Connection(f"{uri}?mode=ro&readonly_shm=1", flags=flags)
        conn.setbusytimeout(10_000)
        unchanged: Callable[[], bool] = lambda: True  # noqa: E731
    else:
        before = _file_state(path)
        conn = apsw.Connection(f"{uri}?immutable=1", flags=flags)
        unchanged = lambda: not os.path.exists(wal) and _file_state(path) == before  # noqa: E731
    # A long run's rows are read once, in order: mapped, they are not copied page by page.
    conn.execute(f"PRAGMA mmap_size={_MMAP_BYTES}")
    return conn, unchanged


_MMAP_BYTES = 256 * 1024 * 1024


def _file_state(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _run_events(conn: apsw.Connection, run_ref: str) -> list[tuple[int, Story]]:
    run_id = resolve_run(conn, run_ref)
    events = _stream(conn, run_id)
    items = item_ids(run_id, (e for _, e in events))
    for item in items:
        events += [(p, e) for p, e in _stream(conn, item) if type(e) in _ITEM_EVENTS]
    if items:
        events.sort(key=lambda pair: pair[0])
    return events


def _stream(conn: apsw.Connection, stream: UUID) -> list[tuple[int, Story]]:
    """A stream's story (see ``story``) in order, with log positions."""
    rows = conn.execute(
        "SELECT notification_id, topic, state FROM stored_events "
        "WHERE originator_id = ? ORDER BY originator_version",
        (stream.hex,),
    )
    return story(rows)


def item_ids(run_id: UUID, events: Iterable[Story]) -> list[UUID]:
    """The inbox items a run asked: those it suspended on, and every interrupt it recorded
    (a fork's reapplied decisions are asked and decided without a suspension).
    """
    found: dict[UUID, None] = {}
    for event in events:
        if isinstance(event, RunSuspended):
            found.update(dict.fromkeys(event.item_ids))
        elif isinstance(event, WritesSaved):
            for write in event.writes:
                if write.channel == "__interrupt__":
                    for interrupt_id in _interrupt_ids(write.value_type, write.value):
                        found[item_stream_id(run_id, interrupt_id)] = None
    return list(found)


def _interrupt_ids(type_tag: str, data: bytes) -> Iterator[str]:
    try:
        value = decode_typed(type_tag, data)
    except Exception:  # an unreadable write names no item
        return
    for interrupt in value if isinstance(value, list) else [value]:
        if isinstance(interrupt, dict) and isinstance(interrupt.get("id"), str):
            yield interrupt["id"]


def resolve_run(conn: apsw.Connection, run_ref: str) -> UUID:
    """The run whose id is ``run_ref`` or starts with it (dashes ignored), read from the log
    itself (``RunCreated`` events), not from a projection.
    """
    hex_prefix = _hex_prefix(run_ref)
    if hex_prefix is None:
        raise RunNotFoundError(run_ref)
    if not _has_events_table(conn):
        raise RunNotFoundError(run_ref)
    matches = [
        UUID(row[0])
        for row in conn.execute(
            "SELECT originator_id FROM stored_events WHERE originator_id >= ? "
            "AND originator_id < ? AND originator_version = 1 AND topic = ? LIMIT 3",
            (hex_prefix, hex_prefix + "g", _RUN_CREATED),
        )
    ]
    return _one(matches, run_ref)


def _one(matches: list[UUID], run_ref: str) -> UUID:
    if not matches:
        raise RunNotFoundError(run_ref)
    if len(matches) > 1:
        raise AmbiguousRunIdError(
            f"Run id {run_ref!r} matches several runs; type more characters of it."
        )
    return matches[0]


def _hex_prefix(run_ref: str) -> str | None:
    prefix = run_ref.strip().lower().replace("-", "")
    if not prefix or len(prefix) > 32 or any(c not in "0123456789abcdef" for c in prefix):
        return None
    return prefix


def _has_events_table(conn: apsw.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stored_events'"
    ).fetchone()
    return row is not None


# --- reading a bundle -----------------------------------------------------------------


class _Line(msgspec.Struct):
    """The fields of an export line a replay needs (see shep/audit_export.py)."""

    type: str
    position: int = 0
    stream: str = ""
    topic: str = ""
    state: str = ""
    format: str = ""


_line_decoder = msgspec.json.Decoder(_Line)


def frames_from_bundle(path: str | os.PathLike[str], run_ref: str | None = None) -> Replay:
    """The replay of a run read from an audit bundle's ``export.jsonl`` (no database).

    ``run_ref`` may be left out when the bundle holds one run. Snapshot diff
    stats are made from the repository named in the run, if it is on this machine.
    """
    rows = read_bundle(path)
    run_id = _bundle_run(rows, run_ref, path)
    own = story((p, t, s) for p, stream, t, s in rows if stream == run_id.hex)
    items = {i.hex for i in item_ids(run_id, (e for _, e in own))}
    asked = story((p, t, s) for p, stream, t, s in rows if t in _ITEM_TOPICS)
    for position, event in asked:
        stream = getattr(event, "originator_id", None)
        if stream is not None and (stream.hex in items or getattr(event, "run_id", None) == run_id):
            own.append((position, event))
    own.sort(key=lambda pair: pair[0])
    return build_replay(own)


#: An export's event lines that a replay reads: (position, stream, topic, state).
BundleRows = list[tuple[int, str, str, bytes]]


def read_bundle(path: str | os.PathLike[str]) -> BundleRows:
    """The story's event lines of the bundle's export (see ``story``), in file order."""
    import tarfile
    from binascii import Error as Base64Error
    from binascii import a2b_base64

    name = os.fspath(path)
    try:
        with tarfile.open(name, "r:") as tar:
            member = next(
                (m for m in tar.getmembers() if os.path.basename(m.name) == "export.jsonl"), None
            )
            if member is None or not member.isfile():
                raise BundleError(f"{name} is not a shep audit bundle: it has no export.jsonl.")
            handle = tar.extractfile(member)
            assert handle is not None
            raw = handle.read()
    except FileNotFoundError:
        raise BundleError(f"No bundle at {name}.") from None
    except (tarfile.TarError, EOFError) as e:
        raise BundleError(f"{name} is not a readable shep audit bundle (not a tar file).") from e
    except OSError as e:
        raise BundleError(f"Cannot read the bundle {name}: {e.strerror or e}.") from e
    rows: BundleRows = []
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            record = _line_decoder.decode(line)
            if number == 1 and (record.type != "export-start" or not record.format):
                raise BundleError(f"{name}: export.jsonl does not start with an export-start line.")
            if record.type == "event" and (
                record.topic in _STORY_TOPICS or record.topic == _OUTPUT_TOPIC
            ):
                state = a2b_base64(record.state)
                rows.append((record.position, record.stream, record.topic, state))
        except (msgspec.DecodeError, Base64Error, ValueError) as e:
            raise BundleError(f"{name}: line {number} of export.jsonl cannot be read ({e}).") from e
    return rows


def _bundle_run(rows: BundleRows, run_ref: str | None, path: str | os.PathLike[str]) -> UUID:
    runs = [UUID(stream) for _, stream, topic, _ in rows if topic == _RUN_CREATED]
    if run_ref is None:
        if len(runs) == 1:
            return runs[0]
        raise BundleError(
            f"{os.fspath(path)} holds {len(runs)} runs: name one (`shep replay RUN --bundle FILE`)."
        )
    prefix = _hex_prefix(run_ref)
    if prefix is None:
        raise RunNotFoundError(run_ref)
    return _one([r for r in runs if r.hex.startswith(prefix)][:3], run_ref)


# --- lineage --------------------------------------------------------------------------


class Lineage(msgspec.Struct, kw_only=True):
    """A run in a fork tree: where it was forked from its parent, and its own forks."""

    run: str
    workflow: str | None = None
    created_at: str | None = None
    created_by: str | None = None
    checkpoint_id: str | None = None
    forked_by: str | None = None
    status: str | None = None
    known: bool = True
    forks: list[Lineage] = []


class _LineageSource:
    """What a fork tree is built from: each run's creation and the forks it records."""

    def __init__(
        self,
        created: Callable[[UUID], RunCreated | None],
        forks: Callable[[UUID], list[RunForked]],
    ) -> None:
        self.created = created
        self.forks = forks


def lineage_from_store(db_path: str | os.PathLike[str], run_ref: str) -> tuple[str, Lineage]:
    """(the run's hex id, the tree of its lineage from its oldest origin), read-only."""

    def read(conn: apsw.Connection) -> tuple[str, Lineage]:
        run_id = resolve_run(conn, run_ref)

        def events_of(run: UUID, topic: str) -> list[Event]:
            return [
                decode_event(topic, state)
                for (state,) in conn.execute(
                    "SELECT state FROM stored_events WHERE originator_id = ? AND topic = ? "
                    "ORDER BY originator_version",
                    (run.hex, topic),
                )
            ]

        def created(run: UUID) -> RunCreated | None:
            found = events_of(run, _RUN_CREATED)
            return found[0] if found and isinstance(found[0], RunCreated) else None

        def forks(run: UUID) -> list[RunForked]:
            return [e for e in events_of(run, _RUN_FORKED) if isinstance(e, RunForked)]

        return run_id.hex, build_lineage(run_id, _LineageSource(created, forks))

    return _read_store(os.fspath(db_path), read)


def lineage_from_bundle(path: str | os.PathLike[str], run_ref: str | None) -> tuple[str, Lineage]:
    """The same tree from a bundle; runs the bundle does not hold are marked unknown."""
    rows = read_bundle(path)
    run_id = _bundle_run(rows, run_ref, path)
    created: dict[UUID, RunCreated] = {}
    forks: dict[UUID, list[RunForked]] = {}
    lineage = ((p, t, s) for p, _, t, s in rows if t in (_RUN_CREATED, _RUN_FORKED))
    for _, event in story(lineage):
        if isinstance(event, RunCreated):
            created.setdefault(event.originator_id, event)
        elif isinstance(event, RunForked):
            forks.setdefault(event.originator_id, []).append(event)
    source = _LineageSource(created.get, lambda run: forks.get(run, []))
    return run_id.hex, build_lineage(run_id, source)


def build_lineage(run_id: UUID, source: _LineageSource) -> Lineage:
    """The fork tree around ``run_id``: up its origins (``RunCreated.origin_run_id``) to the
    oldest, then down every recorded fork (``RunForked``).
    """
    root, seen = run_id, {run_id}
    while (created := source.created(root)) is not None and created.origin_run_id is not None:
        if created.origin_run_id in seen:
            break
        root = created.origin_run_id
        seen.add(root)

    visited: set[UUID] = set()

    def node(run: UUID, via: RunForked | None) -> Lineage:
        visited.add(run)
        created = source.created(run)
        item = Lineage(
            run=run.hex,
            workflow=created.workflow if created else None,
            created_at=_iso(created) if created else None,
            created_by=created.created_by if created else None,
            checkpoint_id=(via.checkpoint_id if via else None)
            or (created.origin_checkpoint_id if created else None),
            forked_by=via.forked_by if via else None,
            known=created is not None,
        )
        for fork in source.forks(run):
            if fork.fork_run_id not in visited:
                item.forks.append(node(fork.fork_run_id, fork))
        return item

    return node(root, None)


# --- small helpers --------------------------------------------------------------------


def _iso(event: Event) -> str:
    return event.timestamp.isoformat().replace("+00:00", "Z")


def _ms_between(start: str, end: str) -> int | None:
    from datetime import datetime

    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except ValueError:
        return None
    return max(0, int(delta.total_seconds() * 1000))


def format_ms(ms: int | None) -> str:
    """'850 ms', '12.3 s', '4 min 05 s', '2 h 03 min'; '-' for none."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
