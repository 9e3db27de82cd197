"""Events of a run's stream: one stream per run, from creation to its end."""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import UUID

import msgspec

from events.base import Event

# The status words live in a module of their own, so readers (`shep status`) need not
# define every event type; re-exported here, where the write side looks for them.
from events.run_status import FINAL_STATUSES as FINAL_STATUSES  # noqa: PLC0414
from events.run_status import WAITING_STATUSES as WAITING_STATUSES  # noqa: PLC0414
from events.run_status import RunStatus as RunStatus  # noqa: PLC0414


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage and cost an agent reported for one call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None


class RunCreated(Event, frozen=True, kw_only=True, tag_field="class_version", tag=2):
    """A run of a workflow was requested (status: pending).

    The run is pinned to the code that created it: ``shep_version``, the
    workflow's ``workflow_version`` and ``graph_fingerprint`` (its nodes, their
    kinds and its edges). It goes on under a different graph only through a
    migration its workflow declares (``RunMigrated``); see ``shep.runs.pin``.
    """

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 (shep 0.1.0) recorded no pin: such a run is pinned to nothing known."""
        state.setdefault("shep_version", None)
        state.setdefault("workflow_version", None)
        state.setdefault("graph_fingerprint", None)

    workflow: str
    agent_type: str
    model: str | None = None
    repo: str
    inputs: dict[str, str] = {}
    node_names: list[str] = []
    created_by: str
    origin_run_id: UUID | None = None
    origin_checkpoint_id: str | None = None
    #: A fork (``shep fork``): what it took from the origin's checkpoint (state, worktree,
    #: both), and whether the origin's later decisions are given again.
    fork_restore: str | None = None
    reapply_answers: bool = False
    #: The process that created the run and is about to start it: a pending run
    #: whose creator is gone never started (see ``shep.runs.recovery``).
    pid: int | None = None
    host: str | None = None
    process_start: str | None = None
    shep_version: str | None = None
    workflow_version: str | None = None
    graph_fingerprint: str | None = None


class RunMigrated(Event, frozen=True, kw_only=True):
    """The run went on under a changed workflow through the migration the workflow declares
    from the run's version: from then on it is pinned to ``to_version`` and
    ``to_fingerprint``. ``checkpoint_id`` is the migrated checkpoint saved with this
    event (None when the last checkpoint needed no change); ``renamed``, ``removed``
    and ``defaults`` say what the migration changed in it.
    """

    workflow: str
    from_version: str
    to_version: str
    from_fingerprint: str
    to_fingerprint: str
    shep_version: str
    checkpoint_id: str | None = None
    renamed: dict[str, str] = {}
    removed: dict[str, str] = {}
    defaults: list[str] = []


class RunForked(Event, frozen=True, kw_only=True):
    """A new run was forked from this one at ``checkpoint_id`` (``shep fork``): the lineage,
    recorded on the origin too. ``fork_key`` is the caller's ``--id`` (the same key, the
    same fork).
    """

    fork_run_id: UUID
    checkpoint_id: str
    forked_by: str
    restore: str
    reapply_answers: bool = False
    fork_key: str | None = None


class RunStarted(Event, frozen=True, kw_only=True):
    """A worker process took the run and began executing it (status: running).

    ``epoch`` numbers the run's owners: each start or resume makes a new one,
    and only the current owner's appends are accepted (fencing). ``pid``,
    ``host`` and ``process_start`` identify the worker process; a reused pid
    has another start time.
    """

    pid: int
    host: str
    background: bool = False
    log_path: str | None = None
    epoch: int = 0
    process_start: str | None = None


class RunResumed(Event, frozen=True, kw_only=True):
    """An interrupted or waiting run continued in a worker (status: running); a new owner."""

    pid: int
    host: str
    background: bool = False
    log_path: str | None = None
    from_checkpoint_id: str | None = None
    epoch: int = 0
    process_start: str | None = None


class NodeStarted(Event, frozen=True, kw_only=True):
    """A workflow node began executing: its ``iteration`` (how many times the graph has
    reached it, loops included) and ``attempt`` (retries within that iteration).
    """

    node: str
    attempt: int = 1
    iteration: int = 1
    kind: str = "agent"


class AgentStarted(Event, frozen=True, kw_only=True):
    """The worker started the agent's process for a node.

    Appended in the same write transaction that checked the worker still owns
    the run and started the process, so no agent starts for a fenced worker.
    """

    node: str
    agent: str
    pid: int


class AgentSessionRecorded(Event, frozen=True, kw_only=True):
    """The agent's native session id became known, for resume and audit."""

    node: str
    agent_session_id: str


class NodeCompleted(Event, frozen=True, kw_only=True):
    """A workflow node finished successfully."""

    node: str
    duration_ms: int
    agent_session_id: str | None = None
    usage: Usage = Usage()
    turns: int | None = None
    #: The commit of the worktree's files as this node left them (``refs/shep/runs/RUN/N``),
    #: for nodes that may change files in a git repository.
    snapshot: str | None = None
    #: For a question or gate: how long it waited for a person (asked to decided).
    waited_ms: int | None = None


class NodeFailed(Event, frozen=True, kw_only=True):
    """A workflow node raised an error; ``retryable`` says whether a retry may help."""

    node: str
    duration_ms: int
    error_type: str
    message: str
    retryable: bool = False


class HeartbeatRecorded(Event, frozen=True, kw_only=True):
    """The worker is alive: pid, host and what it is doing."""

    pid: int
    host: str
    node: str | None = None
    last_activity: str | None = None
    tokens_so_far: int = 0


class AgentOutputRecorded(Event, frozen=True, kw_only=True):
    """One item of the agent's normalized output stream (text, tool use, tool result, ...)."""

    node: str
    kind: str
    text: str = ""
    tool_name: str | None = None
    tool_id: str | None = None
    is_error: bool = False


class RunSuspended(Event, frozen=True, kw_only=True):
    """The run waits for people: the inbox items it asked (status: waiting_approval when one
    of them is an approval gate, else waiting_answer). Its worker exits; a decision starts a
    new one.
    """

    item_ids: list[UUID]
    approval: bool


class ArtifactWritten(Event, frozen=True, kw_only=True):
    """The run wrote a file into the repository; its path and content hash."""

    node: str
    path: str
    sha256: str
    written_by: str


class RunInterrupted(Event, frozen=True, kw_only=True):
    """The run's worker is gone (crash, kill, lost heartbeat); the run is resumable.

    ``epoch`` is the owner that was interrupted (0 for a run that never started).
    """

    reason: str
    detected_by_pid: int | None = None
    detected_by_host: str | None = None
    epoch: int | None = None


class RunCancelled(Event, frozen=True, kw_only=True):
    """A user cancelled the run. Final."""

    cancelled_by: str
    reason: str = ""


class RunCompleted(Event, frozen=True, kw_only=True):
    """The workflow's graph reached its end. Final."""

    duration_ms: int


class RunFailed(Event, frozen=True, kw_only=True):
    """The run stopped on an error it cannot recover from. Final."""

    error_type: str
    message: str
    node: str | None = None
