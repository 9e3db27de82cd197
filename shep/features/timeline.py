"""A feature's timeline, as ``shep feat show`` tells it: each node of each phase (status,
iterations, agent time, time waiting for a person, tokens, cost), tasks, snapshots,
tests and the merge, folded from the run's own stream and what it asked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.base import Event
from events.display import short_id
from events.features import (
    BranchPushed,
    FeatureMerged,
    MergeConflicted,
    PullRequestOpened,
    TaskCompleted,
    TestsRan,
)
from events.inbox_status import ItemStatus
from events.run_status import NodeStatus
from events.runs import FINAL_STATUSES, NodeCompleted, NodeFailed, NodeStarted, RunStatus


def phase_of(workflow: str, node: str, within: str) -> str:
    """The phase ``node`` counts for while the run is in phase ``within``."""
    from shep.workflows import WORKFLOWS

    found = WORKFLOWS.get(workflow)
    return found.phase(node, within) if found is not None else within


#: The events of a run's stream ``show`` reads (not its output, heartbeats, checkpoints).
SHOW_TYPES: tuple[type[Event], ...] = (
    NodeStarted,
    NodeCompleted,
    NodeFailed,
    TaskCompleted,
    TestsRan,
    MergeConflicted,
    FeatureMerged,
    BranchPushed,
    PullRequestOpened,
)


@dataclass
class NodeTime:
    node: str
    phase: str
    status: str = NodeStatus.PENDING.value
    starts: int = 0
    completions: int = 0
    iterations: int = 0
    agent_ms: int = 0
    waiting_ms: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def add_usage(self, usage: Any) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if usage.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + usage.cost_usd


class NodeTable:
    """The nodes of a run, in the order they first ran, each under the phase it ran for:
    a node of no phase of its own (a repair) is listed under each phase it served.
    """

    def __init__(self, workflow: Any) -> None:
        self.workflow = workflow
        self.nodes: dict[tuple[str, str], NodeTime] = {}
        #: The node that runs now (a task's usage goes to it).
        self.current: NodeTime | None = None
        self._within: str | None = None  # the phase the run is in
        self._started_for: dict[str, str] = {}  # node -> the phase of its newest start
        self._iterations: dict[tuple[str, str], set[int]] = {}
        self._completed: dict[str, int] = {}  # node -> completions in every phase

    def get(self, name: str, phase: str | None = None) -> NodeTime:
        """The row of ``name`` under ``phase`` (default: the phase it last started for)."""
        workflow = self.workflow
        phase = phase or self._started_for.get(name)
        phase = phase or (workflow.phase(name) if workflow is not None else name)
        if (phase, name) not in self.nodes:
            self.nodes[(phase, name)] = NodeTime(name, phase)
        return self.nodes[(phase, name)]

    def started(self, event: NodeStarted) -> None:
        workflow = self.workflow
        phase = workflow.phase(event.node, self._within) if workflow is not None else event.node
        if workflow is not None and phase in workflow.node_names:
            self._within = phase
        self._started_for[event.node] = phase
        n = self.get(event.node, phase)
        n.starts += 1
        seen = self._iterations.setdefault((phase, event.node), set())
        seen.add(event.iteration)
        n.iterations = max(n.iterations, len(seen))
        n.status, self.current = NodeStatus.RUNNING.value, n

    def completed(self, event: NodeCompleted) -> str:
        """Count the completion; the label of its snapshot (``node #N`` from the 2nd on)."""
        n = self.get(event.node)
        n.completions += 1
        n.iterations = max(n.iterations, n.completions)
        n.agent_ms += event.duration_ms
        n.add_usage(event.usage)
        n.status, self.current = NodeStatus.COMPLETED.value, None
        times = self._completed[event.node] = self._completed.get(event.node, 0) + 1
        return event.node + (f" #{times}" if times > 1 else "")

    def failed(self, event: NodeFailed) -> None:
        n = self.get(event.node)
        n.agent_ms += event.duration_ms
        n.status, self.current = NodeStatus.FAILED.value, None


def describe(  # noqa: PLR0912 (one branch per event type)
    row: dict[str, Any], events: list[Event], asked: list[dict[str, Any]], now: datetime
) -> dict[str, Any]:
    """Everything ``show`` prints, as plain data: the feature's row, its nodes in the order
    they first ran (timed from the run's stream, waiting from its inbox items), snapshots,
    tests and the merge or pull request.
    """
    from shep.workflows import WORKFLOWS

    table = NodeTable(WORKFLOWS.get(row["workflow"]))
    snapshots: list[dict[str, str]] = []
    tests: dict[str, Any] | None = None
    merged = conflicted = pushed = pull_request = None
    for event in events:
        if isinstance(event, NodeStarted):
            table.started(event)
        elif isinstance(event, NodeCompleted):
            label = table.completed(event)
            if event.snapshot:
                snapshots.append({"at": label, "sha": event.snapshot})
        elif isinstance(event, NodeFailed):
            table.failed(event)
        elif isinstance(event, TaskCompleted):
            # A task's agent call runs inside the node that runs the tasks (implement).
            (table.current or table.get("implement")).add_usage(event.usage)
            if event.snapshot:
                snapshots.append({"at": f"task {event.task}", "sha": event.snapshot})
        elif isinstance(event, TestsRan):
            tests = {
                "command": event.command,
                "passed": event.passed,
                "exit_code": event.exit_code,
                "duration_ms": event.duration_ms,
                "output_tail": event.output_tail,
                "at": event.timestamp.isoformat(),
            }
        elif isinstance(event, FeatureMerged):
            merged = {
                "into": event.into,
                "commit": event.commit,
                "files": event.files,
                "added": event.added,
                "removed": event.removed,
                "commits": event.commits,
            }
            conflicted = None
        elif isinstance(event, MergeConflicted):
            conflicted = {"into": event.into, "files": list(event.files)}
        elif isinstance(event, BranchPushed):
            pushed = {"remote": event.remote, "branch": event.branch, "commit": event.commit}
        elif isinstance(event, PullRequestOpened):
            pull_request = {"url": event.url, "number": event.number}
    add_waiting_time(table.get, asked, row, now)
    if row["status"] in FINAL_STATUSES or row["status"] == RunStatus.INTERRUPTED:
        for n in table.nodes.values():
            if n.status == NodeStatus.RUNNING:
                n.status = NodeStatus.STOPPED.value
    listed = [vars(n) for n in table.nodes.values()]
    return {
        "id": short_id(row["run_id"]),
        **{k: v for k, v in row.items() if k not in ("tasks", "waiting")},
        "worktree_exists": os.path.isdir(row["worktree"]),
        "nodes": listed,
        "totals": {
            key: sum(n[key] for n in listed)
            for key in ("agent_ms", "waiting_ms", "input_tokens", "output_tokens")
        }
        | {"cost_usd": sum_cost(listed)},
        "waiting": row["waiting"],
        "snapshots": snapshots,
        "tasks": row["tasks"],
        "tests": tests,
        "merge": {
            "merged": merged,
            "conflicted": conflicted,
            "pushed": pushed,
            "pull_request": pull_request,
        },
    }


def add_waiting_time(
    node: Callable[[str], NodeTime], asked: list[dict[str, Any]], row: dict[str, Any], now: datetime
) -> None:
    """Each item waited from being asked to its decision (to now while pending, to the run's
    end when it was withdrawn): that time goes to the node that asked.
    """
    for item in asked:
        n = node(item["node"])
        end = item["answered_at"]
        if item["status"] == ItemStatus.PENDING:
            n.status = NodeStatus.WAITING.value
            end = now.isoformat()
        elif end is None:
            end = row["finished_at"] or now.isoformat()
        waited = datetime.fromisoformat(end) - datetime.fromisoformat(item["asked_at"])
        n.waiting_ms += max(0, int(waited.total_seconds() * 1000))
        if n.status == NodeStatus.PENDING and item["status"] != ItemStatus.PENDING:
            withdrawn = item["status"] == ItemStatus.WITHDRAWN
            n.status = (NodeStatus.WITHDRAWN if withdrawn else NodeStatus.COMPLETED).value


def sum_cost(nodes: list[dict[str, Any]]) -> float | None:
    costs = [n["cost_usd"] for n in nodes if n["cost_usd"] is not None]
    return sum(costs) if costs else None
