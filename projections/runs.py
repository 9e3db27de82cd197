"""The runs projection: one row per run (status, progress, heartbeat, ...) and one per node."""

from __future__ import annotations

import apsw

from events.base import Event
from events.runs import (
    AgentOutputRecorded,
    AgentSessionRecorded,
    ApprovalAwaited,
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
)
from projections.base import Handler, Projection, iso

DDL = (
    "CREATE TABLE IF NOT EXISTS runs ("
    "run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, agent_type TEXT NOT NULL, model TEXT, "
    "repo TEXT NOT NULL, status TEXT NOT NULL, current_node TEXT, "
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
    "attempt INTEGER NOT NULL DEFAULT 1, started_at TEXT, finished_at TEXT, duration_ms INTEGER, "
    "agent_session_id TEXT, input_tokens INTEGER NOT NULL DEFAULT 0, "
    "output_tokens INTEGER NOT NULL DEFAULT 0, cost_usd REAL, error TEXT, "
    "PRIMARY KEY (run_id, node)) WITHOUT ROWID",
)

_ACTIVITY_CHARS = 120


def _touch(c: apsw.Cursor, position: int, event: Event, assignments: str, *params: object) -> None:
    c.execute(
        f"UPDATE runs SET {assignments}{', ' if assignments else ''}"
        "updated_at=?, version=?, last_position=? WHERE run_id=?",
        (
            *params,
            iso(event.timestamp),
            event.originator_version,
            position,
            event.originator_id.hex,
        ),
    )


def _created(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, RunCreated)
    at = iso(event.timestamp)
    c.execute(
        "INSERT INTO runs (run_id, workflow, agent_type, model, repo, status, total_nodes, "
        "created_at, updated_at, created_by, origin_run_id, version, last_position) "
        "VALUES (?,?,?,?,?,'pending',?,?,?,?,?,?,?)",
        (
            event.originator_id.hex,
            event.workflow,
            event.agent_type,
            event.model,
            event.repo,
            len(event.node_names),
            at,
            at,
            event.created_by,
            event.origin_run_id.hex if event.origin_run_id else None,
            event.originator_version,
            position,
        ),
    )
    c.executemany(
        "INSERT OR IGNORE INTO nodes (run_id, node, status) VALUES (?,?,'pending')",
        [(event.originator_id.hex, node) for node in event.node_names],
    )


def _started(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, RunStarted | RunResumed)
    _touch(
        c,
        position,
        event,
        "status='running', started_at=coalesce(started_at, ?), pid=?, host=?, "
        "log_path=coalesce(?, log_path), error=NULL, last_heartbeat=?",
        iso(event.timestamp),
        event.pid,
        event.host,
        event.log_path,
        iso(event.timestamp),
    )


def _node_started(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, NodeStarted)
    run = event.originator_id.hex
    c.execute(
        "INSERT INTO nodes (run_id, node, status, attempt, started_at) VALUES (?,?,'running',?,?) "
        "ON CONFLICT (run_id, node) DO UPDATE SET status='running', attempt=excluded.attempt, "
        "started_at=excluded.started_at, finished_at=NULL, error=NULL",
        (run, event.node, event.attempt, iso(event.timestamp)),
    )
    _touch(c, position, event, "current_node=?", event.node)


def _session(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, AgentSessionRecorded)
    c.execute(
        "UPDATE nodes SET agent_session_id=? WHERE run_id=? AND node=?",
        (event.agent_session_id, event.originator_id.hex, event.node),
    )
    _touch(c, position, event, "agent_session_id=?", event.agent_session_id)


def _node_completed(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, NodeCompleted)
    run = event.originator_id.hex
    u = event.usage
    c.execute(
        "INSERT INTO nodes (run_id, node, status) VALUES (?,?,'completed') "
        "ON CONFLICT (run_id, node) DO UPDATE SET status='completed'",
        (run, event.node),
    )
    c.execute(
        "UPDATE nodes SET finished_at=?, duration_ms=?, agent_session_id=coalesce(?, "
        "agent_session_id), input_tokens=?, output_tokens=?, cost_usd=?, error=NULL "
        "WHERE run_id=? AND node=?",
        (
            iso(event.timestamp),
            event.duration_ms,
            event.agent_session_id,
            u.input_tokens,
            u.output_tokens,
            u.cost_usd,
            run,
            event.node,
        ),
    )
    _touch(
        c,
        position,
        event,
        "current_node=NULL, completed_nodes=(SELECT count(*) FROM nodes WHERE run_id=? AND "
        "status='completed'), input_tokens=input_tokens+?, output_tokens=output_tokens+?, "
        "cost_usd=cost_usd+?, agent_session_id=coalesce(?, agent_session_id)",
        run,
        u.input_tokens,
        u.output_tokens,
        u.cost_usd or 0.0,
        event.agent_session_id,
    )


def _node_failed(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, NodeFailed)
    run = event.originator_id.hex
    c.execute(
        "INSERT INTO nodes (run_id, node, status) VALUES (?,?,'failed') "
        "ON CONFLICT (run_id, node) DO UPDATE SET status='failed'",
        (run, event.node),
    )
    c.execute(
        "UPDATE nodes SET finished_at=?, duration_ms=?, error=? WHERE run_id=? AND node=?",
        (
            iso(event.timestamp),
            event.duration_ms,
            f"{event.error_type}: {event.message}",
            run,
            event.node,
        ),
    )
    _touch(c, position, event, "current_node=NULL")


def _heartbeat(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, HeartbeatRecorded)
    _touch(
        c,
        position,
        event,
        "last_heartbeat=?, pid=?, host=?, last_activity=coalesce(?, last_activity)",
        iso(event.timestamp),
        event.pid,
        event.host,
        event.last_activity,
    )


def _output(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
    assert isinstance(event, AgentOutputRecorded)
    activity = event.text.strip().splitlines()[-1] if event.text.strip() else ""
    if event.tool_name:
        activity = f"{event.kind} {event.tool_name}"
    _touch(c, position, event, "last_activity=?", activity[:_ACTIVITY_CHARS] or None)


def _status(status: str, *, final: bool = False, error: bool = False) -> Handler:
    def handle(c: apsw.Cursor, position: int, event: Event, _: bytes) -> None:
        assignments = f"status='{status}'"
        params: list[object] = []
        if final:
            assignments += ", finished_at=?, current_node=NULL"
            params.append(iso(event.timestamp))
        if error:
            assignments += ", error=?"
            params.append(_error_text(event))
        _touch(c, position, event, assignments, *params)

    return handle


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
        AgentOutputRecorded: _output,
        ApprovalAwaited: _status("waiting_approval"),
        RunInterrupted: _status("interrupted", error=True),
        RunCancelled: _status("cancelled", final=True, error=True),
        RunCompleted: _status("completed", final=True),
        RunFailed: _status("failed", final=True, error=True),
    },
)
