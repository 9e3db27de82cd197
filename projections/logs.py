"""The logs projection: what happened in each run, in order, agent output included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.base import Event
from events.features import (
    BranchPushed,
    FeatureMerged,
    MergeConflicted,
    MergePrepared,
    PullRequestOpened,
    ReviewedTreeRestored,
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
    NotificationFailed,
    NotificationSent,
    QuestionAnswered,
    QuestionAsked,
)
from events.runs import (
    AgentOutputRecorded,
    AgentSessionRecorded,
    AgentStarted,
    ArtifactWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunInterrupted,
    RunResumed,
    RunStarted,
    RunSuspended,
)
from events.words import counted
from projections.base import Batch, Folded, Handler, Projection, one_of

DDL = (
    "CREATE TABLE IF NOT EXISTS logs ("
    "position INTEGER PRIMARY KEY, run_id TEXT NOT NULL, timestamp TEXT NOT NULL, "
    "node TEXT, kind TEXT NOT NULL, message TEXT NOT NULL, tool_name TEXT, "
    "is_error INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS logs_run ON logs (run_id, position)",
)


def describe(event: Event) -> tuple[str, str | None, str]:  # noqa: PLR0912 (one branch per event type)
    """(kind, node, message) of a run event as the logs show it."""
    if isinstance(event, AgentOutputRecorded):
        return event.kind, event.node, event.text
    if isinstance(event, RunCreated):
        model = f" model {event.model}" if event.model else ""
        return (
            "run.created",
            None,
            f"{event.workflow} on {event.repo} with {event.agent_type}{model} "
            f"({counted(len(event.node_names), 'node')}) by {event.created_by}",
        )
    if isinstance(event, RunStarted):
        where = "in the background " if event.background else ""
        return "run.started", None, f"started {where}by pid {event.pid} on {event.host}"
    if isinstance(event, RunResumed):
        return "run.resumed", None, f"resumed by pid {event.pid} on {event.host}"
    if isinstance(event, NodeStarted):
        attempt = f" (attempt {event.attempt})" if event.attempt > 1 else ""
        iteration = f" #{event.iteration}" if event.iteration > 1 else ""
        return "node.started", event.node, f"{event.node}{iteration} started{attempt}"
    if isinstance(event, AgentStarted):
        return "agent.started", event.node, f"{event.agent} started (pid {event.pid})"
    if isinstance(event, AgentSessionRecorded):
        return "agent.session", event.node, f"agent session {event.agent_session_id}"
    if isinstance(event, NodeCompleted):
        u = event.usage
        cost = f", ${u.cost_usd:.4f}" if u.cost_usd is not None else ""
        return (
            "node.completed",
            event.node,
            f"{event.node} completed in {event.duration_ms / 1000:.1f}s "
            f"({u.input_tokens} in / {u.output_tokens} out tokens{cost})"
            + (f", snapshot {event.snapshot[:10]}" if event.snapshot else "")
            + (
                f", after {event.waited_ms / 1000:.0f}s waiting for a person"
                if event.waited_ms is not None
                else ""
            ),
        )
    if isinstance(event, NodeFailed):
        return (
            "node.failed",
            event.node,
            f"{event.node} failed: {event.error_type}: {event.message}",
        )
    if isinstance(event, RunSuspended):
        what = "approval" if event.approval else "an answer"
        items = ", ".join(i.hex[:8] for i in event.item_ids)
        return (
            "run.waiting_approval" if event.approval else "run.waiting_answer",
            None,
            f"waiting for {what} ({items}): shep inbox",
        )
    if isinstance(event, ArtifactWritten):
        return "artifact", event.node, f"wrote {event.path} (sha256 {event.sha256[:12]})"
    if isinstance(event, RunInterrupted):
        return "run.interrupted", None, f"interrupted: {event.reason}"
    if isinstance(event, RunCancelled):
        why = f": {event.reason}" if event.reason else ""
        return "run.cancelled", None, f"cancelled by {event.cancelled_by}{why}"
    if isinstance(event, RunCompleted):
        return "run.completed", None, f"completed in {event.duration_ms / 1000:.1f}s"
    if isinstance(event, RunFailed):
        return "run.failed", event.node, f"failed: {event.error_type}: {event.message}"
    if isinstance(event, QuestionAsked):
        return (
            "question.asked",
            event.node,
            f"asked {event.originator_id.hex[:8]}: {event.question}",
        )
    if isinstance(event, ApprovalRequested):
        return (
            "approval.requested",
            event.node,
            f"approval {event.originator_id.hex[:8]} requested: {event.summary}",
        )
    if isinstance(event, QuestionAnswered):
        return "question.answered", event.node, f"answered by {event.actor}: {event.answer}"
    if isinstance(event, ApprovalGranted):
        why = f": {event.rationale}" if event.rationale else ""
        return "approval.granted", event.node, f"approved by {event.actor}{why}"
    if isinstance(event, ApprovalRejected):
        return "approval.rejected", event.node, f"rejected by {event.actor}: {event.rationale}"
    if isinstance(event, NotificationSent):
        return "notification.sent", None, f"notified: {event.command}"
    if isinstance(event, NotificationFailed):
        return "notification.failed", None, f"notification failed: {event.error}"
    feature = _FEATURE_LINES.get(type(event))
    if feature is not None:
        return feature(event)
    return type(event).__name__, None, ""


def _tests_line(e: TestsRan) -> str:
    if e.exit_code is None:
        outcome = "timed out"
    else:
        outcome = "passed" if e.passed else f"exit {e.exit_code}"
    return f"tests `{e.command}` {outcome} in {e.duration_ms / 1000:.1f}s"


#: The feature workflow's events (events.features): (kind, node, message) of each.
_FEATURE_LINES: dict[type[Event], Callable[[Any], tuple[str, str | None, str]]] = {
    WorktreeCreated: lambda e: (
        "feature.worktree",
        "setup",
        f"branch {e.branch} from {e.base} ({e.base_sha[:10]}), worktree {e.path}",
    ),
    WorktreeSetupRan: lambda e: (
        "feature.setup",
        "setup",
        f"setup `{e.command}` " + ("timed out" if e.exit_code is None else f"exited {e.exit_code}"),
    ),
    TaskStarted: lambda e: ("task.started", "implement", f"task {e.task} ({e.phase}): {e.title}"),
    TaskCompleted: lambda e: (
        "task.completed",
        "implement",
        f"task {e.task} completed in {e.duration_ms / 1000:.1f}s"
        + (f" (snapshot {e.snapshot[:10]})" if e.snapshot else ""),
    ),
    TestsRan: lambda e: ("feature.tests", "tests", _tests_line(e)),
    MergeConflicted: lambda e: (
        "feature.conflict",
        "merge",
        f"merging into {e.into} conflicts in: {', '.join(e.files)}",
    ),
    ReviewedTreeRestored: lambda e: (
        "feature.restored",
        "merge",
        f"the files changed after the merge gate showed them: put back to the tree it "
        f"approved ({e.approved[:12]}) before the merge"
        + (f"; the changes are kept in snapshot {e.kept[:10]}" if e.kept else ""),
    ),
    MergePrepared: lambda e: (
        "feature.merging",
        "merge",
        f"squash commit {e.commit[:10]} made on {e.onto[:10]}; moving {e.into} to it",
    ),
    FeatureMerged: lambda e: (
        "feature.merged",
        "merge",
        f"merged into {e.into} as {e.commit[:10]}: {counted(e.files, 'file')}, "
        f"+{e.added} -{e.removed}",
    ),
    BranchPushed: lambda e: ("feature.pushed", "merge", f"pushed {e.branch} to {e.remote}"),
    PullRequestOpened: lambda e: ("feature.pr", "merge", f"pull request {e.url}"),
    WorktreeRemoved: lambda e: (
        "feature.cleanup",
        None,
        f"worktree {e.path} removed by {e.removed_by} ({e.reason})"
        + (f"; branch {e.branch} deleted" if e.branch_deleted else ""),
    ),
}


_INSERT = "INSERT INTO logs VALUES (?,?,?,?,?,?,?,?)"


def _log_outputs(b: Batch, items: list[Folded]) -> None:
    # Most events of a run: their lines without describe()'s ladder.
    b.defer_all(
        _INSERT,
        [
            (position, stream, at, e.node, e.kind, e.text, e.tool_name, int(e.is_error))
            for position, stream, at, e in items
        ],
    )


def _log(b: Batch, event: Event) -> None:
    kind, node, message = describe(event)
    is_error = isinstance(event, NodeFailed | RunFailed) or (
        isinstance(event, AgentOutputRecorded) and event.is_error
    )
    tool = event.tool_name if isinstance(event, AgentOutputRecorded) else None
    b.defer(_INSERT, (b.position, b.stream, b.at, node, kind, message, tool, int(is_error)))


_LOGGED: tuple[type[Event], ...] = (
    RunCreated,
    RunStarted,
    RunResumed,
    NodeStarted,
    AgentStarted,
    AgentSessionRecorded,
    NodeCompleted,
    NodeFailed,
    AgentOutputRecorded,
    RunSuspended,
    ArtifactWritten,
    RunInterrupted,
    RunCancelled,
    RunCompleted,
    RunFailed,
    *_FEATURE_LINES,
)


_ITEM_EVENTS = (
    QuestionAsked,
    ApprovalRequested,
    QuestionAnswered,
    ApprovalGranted,
    ApprovalRejected,
    NotificationSent,
    NotificationFailed,
)


def _log_item(b: Batch, event: Event) -> None:
    """Inbox items, decisions and notifications are on the item's stream: they are logged
    under the run they name.
    """
    assert isinstance(event, _ITEM_EVENTS)
    if event.run_id is None:
        return
    kind, node, message = describe(event)
    b.defer(
        _INSERT,
        (
            b.position,
            event.run_id.hex,
            b.at,
            node,
            kind,
            message,
            None,
            int(isinstance(event, NotificationFailed)),
        ),
    )


_HANDLERS: dict[type[Event], Handler] = {
    **dict.fromkeys(_LOGGED, _log),
    **dict.fromkeys(_ITEM_EVENTS, _log_item),
    AgentOutputRecorded: one_of(_log_outputs),
}

LOGS = Projection(
    name="logs",
    ddl=DDL,
    tables=("logs",),
    handlers=_HANDLERS,
    segments={AgentOutputRecorded: _log_outputs},
)
