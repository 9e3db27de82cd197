"""The runs projection: one row per run (status, progress, heartbeat, ...) and one per node."""

from __future__ import annotations

from typing import Any

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
from projections.base import Batch, Folded, Handler, Lazy, Projection, Writer, one_of

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

Row = dict[str, Any]
#: The columns of a table as a row of it is made in memory: each with its default.
_RUN: Row = {
    **dict.fromkeys(
        [
            "run_id",
            "workflow",
            "agent_type",
            "model",
            "repo",
            "status",
            "current_node",
            "current_iteration",
            "completed_nodes",
            "total_nodes",
            "created_at",
            "started_at",
            "updated_at",
            "finished_at",
            "last_heartbeat",
            "pid",
            "host",
            "error",
            "log_path",
            "created_by",
            "origin_run_id",
            "agent_session_id",
            "last_activity",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "version",
            "last_position",
        ]
    ),
    **{"current_iteration": 1, "completed_nodes": 0, "total_nodes": 0},
    **{"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
}
_NODE: Row = {
    **dict.fromkeys(
        [
            "run_id",
            "node",
            "status",
            "kind",
            "iteration",
            "completions",
            "phase",
            "seq",
            "attempt",
            "started_at",
            "finished_at",
            "duration_ms",
            "agent_session_id",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "error",
        ]
    ),
    **{"kind": "agent", "iteration": 1, "completions": 0, "phase": 0, "seq": 1_000_000},
    **{"attempt": 1, "input_tokens": 0, "output_tokens": 0},
}


def _statement(verb: str, table: str, columns: Row) -> str:
    names = ", ".join(columns)
    return f"{verb} INTO {table} ({names}) VALUES ({', '.join(':' + c for c in columns)})"


_INSERT_RUN = _statement("INSERT", "runs", _RUN)
_UPDATE_RUN = (
    f"UPDATE runs SET {', '.join(f'{c}=:{c}' for c in _RUN if c != 'run_id')} WHERE run_id=:run_id"
)
_SELECT_RUN = f"SELECT {', '.join(_RUN)} FROM runs WHERE run_id=?"
_WRITE_NODE = _statement("INSERT OR REPLACE", "nodes", _NODE)
_SELECT_NODES = f"SELECT {', '.join(_NODE)} FROM nodes WHERE run_id=?"


class _Runs:
    """The runs and nodes rows a batch changed, kept in memory and written once when the
    batch ends: a run's events then cost no statement each.

    A row is read from the tables when the batch first touches it. Each handler
    does to these rows what one SQL statement per change did: an update of a run
    that has no row changes nothing; a node's row is made by the first event that
    names it, with the columns' defaults.
    """

    __slots__ = ("_cursor", "_new", "_nodes", "_runs")

    def __init__(self, cursor: Writer) -> None:
        self._cursor = cursor
        self._runs: dict[str, Row | None] = {}
        self._new: set[str] = set()
        self._nodes: dict[str, dict[str, Row]] = {}

    def run(self, run_id: str) -> Row | None:
        """The run's row (None: no such run)."""
        try:
            return self._runs[run_id]
        except KeyError:
            pass
        found = self._cursor.execute(_SELECT_RUN, (run_id,)).fetchall()
        row = self._runs[run_id] = dict(zip(_RUN, found[0], strict=True)) if found else None
        return row

    def create(self, row: Row) -> None:
        """A new run's row (inserted when the batch ends: an existing one fails it)."""
        run_id = str(row["run_id"])
        self._runs[run_id] = row
        self._new.add(run_id)
        if row["version"] == 1:
            # Its stream's first event: no event of the stream made a node row before it.
            self._nodes.setdefault(run_id, {})

    def nodes(self, run_id: str) -> dict[str, Row]:
        """The run's node rows by node name."""
        nodes = self._nodes.get(run_id)
        if nodes is None:
            rows = self._cursor.execute(_SELECT_NODES, (run_id,)).fetchall()
            nodes = self._nodes[run_id] = {
                str(row[1]): dict(zip(_NODE, row, strict=True)) for row in rows
            }
        return nodes

    def node(self, run_id: str, node: str) -> Row:
        """The node's row, made with the defaults if it has none."""
        nodes = self.nodes(run_id)
        row = nodes.get(node)
        if row is None:
            row = nodes[node] = {**_NODE, "run_id": run_id, "node": node}
        return row

    def write(self) -> None:
        new = [row for run_id, row in self._runs.items() if run_id in self._new]
        if new:
            self._cursor.executemany(_INSERT_RUN, new)
        changed = [
            row for run_id, row in self._runs.items() if row is not None and run_id not in self._new
        ]
        if changed:
            self._cursor.executemany(_UPDATE_RUN, changed)
        rows = [row for nodes in self._nodes.values() for row in nodes.values()]
        if rows:
            self._cursor.executemany(_WRITE_NODE, rows)


def _runs(b: Batch) -> _Runs:
    return b.fold("runs", _Runs)


def _touch(b: Batch, event: Event) -> None:
    # Every run event moves updated_at/version/position; only the batch's last one matters.
    b.latest(_TOUCH, b.stream, (b.at, event.originator_version, b.position, b.stream))


def _update(b: Batch, **changes: object) -> None:
    row = _runs(b).run(b.stream)
    if row is not None:
        row.update(changes)


def _created(b: Batch, event: Event) -> None:
    assert isinstance(event, RunCreated)
    runs = _runs(b)
    runs.create(
        {
            **_RUN,
            "run_id": b.stream,
            "workflow": event.workflow,
            "agent_type": event.agent_type,
            "model": event.model,
            "repo": event.repo,
            "status": RunStatus.PENDING.value,
            "total_nodes": len(event.node_names),
            "created_at": b.at,
            "updated_at": b.at,
            "created_by": event.created_by,
            "origin_run_id": event.origin_run_id.hex if event.origin_run_id else None,
            "version": event.originator_version,
            "last_position": b.position,
        }
    )
    nodes = runs.nodes(b.stream)
    for seq, node in enumerate(event.node_names):
        if node not in nodes:  # the first of a name stands
            nodes[node] = {
                **_NODE,
                "run_id": b.stream,
                "node": node,
                "status": NodeStatus.PENDING.value,
                "phase": 1,
                "seq": seq,
            }


def _started(b: Batch, event: Event) -> None:
    assert isinstance(event, RunStarted | RunResumed)
    row = _runs(b).run(b.stream)
    if row is not None:
        row["status"] = RunStatus.RUNNING.value
        if row["started_at"] is None:
            row["started_at"] = b.at
        if event.log_path is not None:
            row["log_path"] = event.log_path
        row["error"] = None
    # A start counts as a heartbeat; queued with heartbeats so the latest one wins.
    b.latest(_HEARTBEAT, b.stream, (b.at, event.pid, event.host, b.stream))
    _touch(b, event)


def _node_started(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeStarted)
    _runs(b).node(b.stream, event.node).update(
        status=NodeStatus.RUNNING.value,
        kind=event.kind,
        iteration=event.iteration,
        attempt=event.attempt,
        started_at=b.at,
        finished_at=None,
        error=None,
    )
    _update(b, current_node=event.node, current_iteration=event.iteration)
    _touch(b, event)


def _session(b: Batch, event: Event) -> None:
    assert isinstance(event, AgentSessionRecorded)
    runs = _runs(b)
    node = runs.nodes(b.stream).get(event.node)
    if node is not None:
        node["agent_session_id"] = event.agent_session_id
    _update(b, agent_session_id=event.agent_session_id)
    _touch(b, event)


def _node_completed(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeCompleted)
    u = event.usage
    runs = _runs(b)
    node = runs.node(b.stream, event.node)
    node.update(
        status=NodeStatus.COMPLETED.value,
        completions=node["completions"] + 1,
        finished_at=b.at,
        duration_ms=event.duration_ms,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cost_usd=u.cost_usd,
        error=None,
    )
    if event.agent_session_id is not None:
        node["agent_session_id"] = event.agent_session_id
    row = runs.run(b.stream)
    if row is not None:
        row["current_node"] = None
        row["completed_nodes"] = sum(
            1 for n in runs.nodes(b.stream).values() if n["completions"] > 0 and n["phase"] == 1
        )
        row["input_tokens"] += u.input_tokens
        row["output_tokens"] += u.output_tokens
        row["cost_usd"] += u.cost_usd or 0.0
        if event.agent_session_id is not None:
            row["agent_session_id"] = event.agent_session_id
    _touch(b, event)


def _node_failed(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeFailed)
    _runs(b).node(b.stream, event.node).update(
        status=NodeStatus.FAILED.value,
        finished_at=b.at,
        duration_ms=event.duration_ms,
        error=f"{event.error_type}: {event.message}",
    )
    _update(b, current_node=None)
    _touch(b, event)


def _set_nodes(b: Batch, status: NodeStatus, where: tuple[str, ...]) -> None:
    """Each of the run's nodes whose status is one of ``where`` takes ``status``."""
    for node in _runs(b).nodes(b.stream).values():
        if node["status"] in where:
            node["status"] = status.value


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
    # Most events of a run: each only noted; the rows are made for each stream's last.
    active: dict[str, Any] = {}
    last: dict[str, Folded] = {}
    for item in items:
        event = item[3]
        if event.tool_name or (not event.text.isspace() and event.text):
            active[item[1]] = event
        last[item[1]] = item
    activity = b.latest_rows(_ACTIVITY)
    for stream, event in active.items():
        activity[stream] = Lazy((_activity, event))
    touch = b.latest_rows(_TOUCH)
    for stream, (position, _, at, event) in last.items():
        touch[stream] = (at, event.originator_version, position, stream)


def _status(status: RunStatus, *, final: bool = False, error: bool = False) -> Handler:
    def handle(b: Batch, event: Event) -> None:
        changes: dict[str, object] = {"status": status.value}
        if final:
            changes["finished_at"] = b.at
            changes["current_node"] = None
            # A node the run left running, or waiting for a person, goes no further.
            _set_nodes(b, NodeStatus.STOPPED, (NodeStatus.RUNNING.value, NodeStatus.WAITING.value))
        if error:
            changes["error"] = _error_text(event)
        _update(b, **changes)
        _touch(b, event)

    return handle


def _suspended(b: Batch, event: Event) -> None:
    assert isinstance(event, RunSuspended)
    status = RunStatus.WAITING_APPROVAL if event.approval else RunStatus.WAITING_ANSWER
    _update(b, status=status.value, current_node=None)
    # The question or gate nodes asked: waiting for people, not running.
    _set_nodes(b, NodeStatus.WAITING, (NodeStatus.RUNNING.value,))
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
