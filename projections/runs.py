"""The runs projection: one row per run (status, progress, heartbeat, ...) and one per node."""

from __future__ import annotations

from events.base import Event
from events.run_status import NodeStatus
from events.runs import (
    AgentOutputRecorded,
    AgentSessionRecorded,
    HeartbeatRecorded,
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
    RunStatus,
    RunSuspended,
)
from projections.base import Batch, Folded, Handler, Lazy, Projection, one_of

DDL = (
    "CREATE TABLE IF NOT EXISTS runs ("
    "run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, agent_type TEXT NOT NULL, model TEXT, "
    "repo TEXT NOT NULL, status TEXT NOT NULL, current_node TEXT, "
    "current_iteration INTEGER NOT NULL DEFAULT 1, "
    "completed_nodes INTEGER NOT NULL DEFAULT 0, total_nodes INTEGER NOT NULL DEFAULT 0, "
    "created_at TEXT NOT NULL, started_at TEXT, updated_at TEXT NOT NULL, finished_at TEXT, "
    "last_heartbeat TEXT, pid INTEGER, host TEXT, error TEXT, log_path TEXT, "
    "created_by TEXT NOT NULL, origin_run_id TEXT, agent_session_id TEXT, last_activity TEXT, "
    "input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0, "
    "cost_usd REAL NOT NULL DEFAULT 0, version INTEGER NOT NULL, last_position INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created_at)",
    "CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at)",
    "CREATE TABLE IF NOT EXISTS nodes ("
    "run_id TEXT NOT NULL, node TEXT NOT NULL, status TEXT NOT NULL, "
    "kind TEXT NOT NULL DEFAULT 'agent', iteration INTEGER NOT NULL DEFAULT 1, "
    "completions INTEGER NOT NULL DEFAULT 0, phase INTEGER NOT NULL DEFAULT 0, "
    "seq INTEGER NOT NULL DEFAULT 1000000, "
    "attempt INTEGER NOT NULL DEFAULT 1, started_at TEXT, finished_at TEXT, duration_ms INTEGER, "
    "agent_session_id TEXT, input_tokens INTEGER NOT NULL DEFAULT 0, "
    "output_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL, error TEXT, "
    "PRIMARY KEY (run_id, node)) WITHOUT ROWID",
)

_ACTIVITY_CHARS = 120
_TOUCH = "UPDATE runs SET updated_at=?, version=?, last_position=? WHERE run_id=?"
_ACTIVITY = "UPDATE runs SET last_activity=? WHERE run_id=?"
_HEARTBEAT = "UPDATE runs SET last_heartbeat=?, pid=?, host=? WHERE run_id=?"


def _touch(b: Batch, event: Event) -> None:
    # Every run event moves updated_at/version/position; only the batch's last one matters.
    b.latest(_TOUCH, b.stream, (b.at, event.originator_version, b.position, b.stream))


def _update(b: Batch, assignments: str, *params: object) -> None:
    b.cursor.execute(f"UPDATE runs SET {assignments} WHERE run_id=?", (*params, b.stream))


def _created(b: Batch, event: Event) -> None:
    assert isinstance(event, RunCreated)
    b.cursor.execute(
        "INSERT INTO runs (run_id, workflow, agent_type, model, repo, status, total_nodes, "
        "created_at, updated_at, created_by, origin_run_id, version, last_position) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            b.stream,
            event.workflow,
            event.agent_type,
            event.model,
            event.repo,
            RunStatus.PENDING.value,
            len(event.node_names),
            b.at,
            b.at,
            event.created_by,
            event.origin_run_id.hex if event.origin_run_id else None,
            event.originator_version,
            b.position,
        ),
    )
    b.cursor.executemany(
        "INSERT OR IGNORE INTO nodes (run_id, node, status, phase, seq) VALUES (?,?,?,1,?)",
        [
            (b.stream, node, NodeStatus.PENDING.value, seq)
            for seq, node in enumerate(event.node_names)
        ],
    )


def _started(b: Batch, event: Event) -> None:
    assert isinstance(event, RunStarted | RunResumed)
    _update(
        b,
        "status=?, started_at=coalesce(started_at, ?), log_path=coalesce(?, log_path), error=NULL",
        RunStatus.RUNNING.value,
        b.at,
        event.log_path,
    )
    # A start counts as a heartbeat; queued with heartbeats so the latest one wins.
    b.latest(_HEARTBEAT, b.stream, (b.at, event.pid, event.host, b.stream))
    _touch(b, event)


def _node_started(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeStarted)
    b.cursor.execute(
        "INSERT INTO nodes (run_id, node, status, kind, iteration, attempt, started_at) "
        "VALUES (?,?,?,?,?,?,?) "
        "ON CONFLICT (run_id, node) DO UPDATE SET status=excluded.status, kind=excluded.kind, "
        "iteration=excluded.iteration, attempt=excluded.attempt, "
        "started_at=excluded.started_at, finished_at=NULL, error=NULL",
        (
            b.stream,
            event.node,
            NodeStatus.RUNNING.value,
            event.kind,
            event.iteration,
            event.attempt,
            b.at,
        ),
    )
    _update(b, "current_node=?, current_iteration=?", event.node, event.iteration)
    _touch(b, event)


def _session(b: Batch, event: Event) -> None:
    assert isinstance(event, AgentSessionRecorded)
    b.cursor.execute(
        "UPDATE nodes SET agent_session_id=? WHERE run_id=? AND node=?",
        (event.agent_session_id, b.stream, event.node),
    )
    _update(b, "agent_session_id=?", event.agent_session_id)
    _touch(b, event)


def _node_completed(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeCompleted)
    u = event.usage
    b.cursor.execute(
        "INSERT INTO nodes (run_id, node, status, completions, finished_at, duration_ms, "
        "agent_session_id, input_tokens, output_tokens, cost_usd) "
        "VALUES (?,?,?,1,?,?,?,?,?,?) "
        "ON CONFLICT (run_id, node) DO UPDATE SET status=excluded.status, "
        "completions=completions+1, finished_at=excluded.finished_at, "
        "duration_ms=excluded.duration_ms, "
        "agent_session_id=coalesce(excluded.agent_session_id, agent_session_id), "
        "input_tokens=excluded.input_tokens, output_tokens=excluded.output_tokens, "
        "cost_usd=excluded.cost_usd, error=NULL",
        (
            b.stream,
            event.node,
            NodeStatus.COMPLETED.value,
            b.at,
            event.duration_ms,
            event.agent_session_id,
            u.input_tokens,
            u.output_tokens,
            u.cost_usd,
        ),
    )
    _update(
        b,
        "current_node=NULL, completed_nodes=(SELECT count(*) FROM nodes WHERE run_id=? AND "
        "completions > 0 AND phase = 1), input_tokens=input_tokens+?, "
        "output_tokens=output_tokens+?, "
        "cost_usd=cost_usd+?, agent_session_id=coalesce(?, agent_session_id)",
        b.stream,
        u.input_tokens,
        u.output_tokens,
        u.cost_usd or 0.0,
        event.agent_session_id,
    )
    _touch(b, event)


def _node_failed(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeFailed)
    b.cursor.execute(
        "INSERT INTO nodes (run_id, node, status, finished_at, duration_ms, error) "
        "VALUES (?,?,?,?,?,?) ON CONFLICT (run_id, node) DO UPDATE SET status=excluded.status, "
        "finished_at=excluded.finished_at, duration_ms=excluded.duration_ms, error=excluded.error",
        (
            b.stream,
            event.node,
            NodeStatus.FAILED.value,
            b.at,
            event.duration_ms,
            f"{event.error_type}: {event.message}",
        ),
    )
    _update(b, "current_node=NULL")
    _touch(b, event)


def _heartbeat(b: Batch, event: Event) -> None:
    assert isinstance(event, HeartbeatRecorded)
    b.latest(_HEARTBEAT, b.stream, (b.at, event.pid, event.host, b.stream))
    if event.last_activity:
        b.latest(_ACTIVITY, b.stream, (event.last_activity[:_ACTIVITY_CHARS], b.stream))
    _touch(b, event)


def _activity(event: AgentOutputRecorded, stream: str) -> tuple[str, str]:
    if event.tool_name:
        activity = f"{event.kind} {event.tool_name}"
    else:
        activity = event.text.strip().rsplit("\n", 1)[-1]
    return (activity[:_ACTIVITY_CHARS], stream)


def _outputs(b: Batch, items: list[Folded]) -> None:
    # Most events of a run: kept to the least work, the activity made only for the last.
    touch = b.latest_rows(_TOUCH)
    activity = b.latest_rows(_ACTIVITY)
    for position, stream, at, event in items:
        if event.tool_name or (not event.text.isspace() and event.text):
            activity[stream] = Lazy((_activity, event))
        touch[stream] = (at, event.originator_version, position, stream)


def _status(status: RunStatus, *, final: bool = False, error: bool = False) -> Handler:
    def handle(b: Batch, event: Event) -> None:
        assignments = "status=?"
        params: list[object] = [status.value]
        if final:
            assignments += ", finished_at=?, current_node=NULL"
            params.append(b.at)
            # A node the run left running, or waiting for a person, goes no further.
            b.cursor.execute(
                "UPDATE nodes SET status=? WHERE run_id=? AND status IN (?, ?)",
                (
                    NodeStatus.STOPPED.value,
                    b.stream,
                    NodeStatus.RUNNING.value,
                    NodeStatus.WAITING.value,
                ),
            )
        if error:
            assignments += ", error=?"
            params.append(_error_text(event))
        _update(b, assignments, *params)
        _touch(b, event)

    return handle


def _suspended(b: Batch, event: Event) -> None:
    assert isinstance(event, RunSuspended)
    status = RunStatus.WAITING_APPROVAL if event.approval else RunStatus.WAITING_ANSWER
    _update(b, "status=?, current_node=NULL", status.value)
    # The question or gate nodes asked: waiting for people, not running.
    b.cursor.execute(
        "UPDATE nodes SET status=? WHERE run_id=? AND status=?",
        (NodeStatus.WAITING.value, b.stream, NodeStatus.RUNNING.value),
    )
    _touch(b, event)


def _error_text(event: Event) -> str:
    if isinstance(event, RunFailed):
        return f"{event.error_type}: {event.message}"
    if isinstance(event, RunInterrupted):
        return event.reason
    if isinstance(event, RunCancelled):
        return f"cancelled by {event.cancelled_by}" + (f": {event.reason}" if event.reason else "")
    return ""


RUNS = Projection(
    name="runs",
    ddl=DDL,
    tables=("runs", "nodes"),
    handlers={
        RunCreated: _created,
        RunStarted: _started,
        RunResumed: _started,
        NodeStarted: _node_started,
        AgentSessionRecorded: _session,
        NodeCompleted: _node_completed,
        NodeFailed: _node_failed,
        HeartbeatRecorded: _heartbeat,
        AgentOutputRecorded: one_of(_outputs),
        RunSuspended: _suspended,
        RunInterrupted: _status(RunStatus.INTERRUPTED, error=True),
        RunCancelled: _status(RunStatus.CANCELLED, final=True, error=True),
        RunCompleted: _status(RunStatus.COMPLETED, final=True),
        RunFailed: _status(RunStatus.FAILED, final=True, error=True),
    },
    segments={AgentOutputRecorded: _outputs},
)
