"""What a replay shows: a run's frames, with the costly parts of each made on demand.

A frame is one step of the run as a person would tell it: a node's iteration
with the agent's output, a question or gate asked, a decision, or a moment of
the run itself (created, interrupted, ended, forked). Each names the log
positions it was read from, the checkpoint to fork from (``shep fork RUN --at
CHECKPOINT``), the change to the workflow state against the previous
checkpoint, and, for feature runs, the worktree snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import msgspec

from events.base import Event
from events.checkpoints import CheckpointSaved
from events.errors import ShepError
from events.inbox_status import ItemKind
from events.run_status import RunStatus
from events.runs import Usage
from shep.replay.snapshots import snapshot_diff_stat
from shep.replay.state import StateDiff, checkpoint_state, diff_state

if TYPE_CHECKING:
    from shep.replay.output import OutputLines


class FrameStatus(StrEnum):
    """A replay frame's status besides a run's (``RunStatus``), a node's (``NodeStatus``) and a
    decision's verdict (``ItemStatus``)."""

    CREATED = "created"
    FORKED = "forked"
    MIGRATED = "migrated"
    #: A question or gate asked by its node...
    ASKED = "asked"
    #: ... the run suspended, waiting for people...
    WAITING = "waiting"
    #: ... and its decision recorded (a frame of its own).
    DECIDED = "decided"


class ReplayInputError(ShepError):
    """What a replay was asked for is not there: a frame past the run's end, say."""

    exit_code = 2


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
    status: str = RunStatus.PENDING.value


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
        outputs: Mapping[int, OutputLines],
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


def node_title(frame: Frame) -> str:
    name = frame.node or "?"
    if frame.iteration and frame.iteration > 1:
        name += f" (iteration {frame.iteration})"
    if frame.attempt and frame.attempt > 1:
        name += f" (attempt {frame.attempt})"
    took = f" in {format_ms(frame.agent_ms)}" if frame.agent_ms is not None else ""
    return f"{name}: {frame.status}{took}"


_RUN_ENDS = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.INTERRUPTED}
)


def last_status(frames: list[Frame]) -> str:
    """What the log says of the run at its end: ended, waiting for a person, or running."""
    for frame in reversed(frames):
        if frame.kind == "run" and frame.status in _RUN_ENDS:
            return frame.status
        if (
            frame.kind in (ItemKind.QUESTION, ItemKind.APPROVAL)
            and frame.status == FrameStatus.WAITING
        ):
            return FrameStatus.WAITING.value
        if frame.kind in ("node", "decision"):
            return RunStatus.RUNNING.value
    return RunStatus.PENDING.value


def fork_command(run_hex: str, checkpoint_id: str) -> str:
    """The command that forks run ``run_hex`` at ``checkpoint_id`` (shown, never run here)."""
    return f"shep fork {run_hex} --at {checkpoint_id}"


def iso(event: Event) -> str:
    return event.timestamp.isoformat().replace("+00:00", "Z")


def ms_between(start: str, end: str) -> int | None:
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
