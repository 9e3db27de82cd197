"""``shep status``: runs and their progress, read from the runs projection."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from events.display import printable, short_id
from events.run_status import RunStatus
from projections.queries import get_run, list_runs, resolve_run_id
from shep.cli.render import age, table
from shep.home.runtime import Runtime


@click.command()
@click.argument("run", required=False)
@click.option(
    "--all", "show_all", is_flag=True, help="Show every run, not only active and recent ones."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def status(runtime: Runtime, run: str | None, show_all: bool, as_json: bool) -> None:
    """Show runs: status, workflow, agent, current node, progress, age, last heartbeat.

    Without RUN: active runs and the ten most recent finished ones. With RUN
    (an id or a unique prefix of one): that run and its nodes.
    """
    conn = runtime.read_db()
    if run is not None:
        detail = get_run(conn, resolve_run_id(conn, run))
        click.echo(_json(detail) if as_json else _render_detail(detail))
        return
    runs = list_runs(conn, include_all=show_all)
    if as_json:
        click.echo(_json(runs))  # `[]` when there are none: a list, not an error
        return
    if not runs:  # an empty result, not an error: say where to start, exit 0
        click.echo("No runs yet. Start one with `shep run analyze-repository`, or try `shep demo`.")
        return
    now = datetime.now(UTC)
    stale_after = _stale_after(conn, runs)
    click.echo(
        table(
            ["RUN", "WORKFLOW", "AGENT", "STATUS", "NODE", "PROGRESS", "AGE", "HEARTBEAT"],
            [
                [
                    short_id(r["run_id"]),
                    printable(r["workflow"]),
                    printable(r["agent_type"]),
                    r["status"],
                    printable(_node(r)),
                    f"{r['completed_nodes']}/{r['total_nodes']}",
                    age(r["created_at"], now),
                    _heartbeat(r, now, stale_after),
                ]
                for r in runs
            ],
        )
    )


def _node(run: dict[str, Any]) -> str:
    """The node in flight (``requirements #2`` past its first iteration), or what the run
    waits for (``waiting: approve (approval)``).
    """
    waiting = run.get("waiting") or []
    if waiting:
        return "waiting: " + ", ".join(f"{w['node']} ({w['kind']})" for w in waiting)
    node = run["current_node"]
    if not node:
        return "-"
    iteration = run.get("current_iteration") or 1
    return f"{node} #{iteration}" if iteration > 1 else node


def _stale_after(conn: Any, runs: list[dict[str, Any]]) -> float | None:
    if not any(r["status"] == RunStatus.RUNNING for r in runs):
        return None
    from shep.runs.recovery import orphan_after

    return orphan_after(conn)


def _heartbeat(run: dict[str, Any], now: datetime, stale_after: float | None) -> str:
    """The heartbeat's age; ``(stale)`` when a live worker here has gone quiet (a stopped
    process, a sleeping laptop: it is not interrupted, since it will go on).
    """
    if run["status"] != RunStatus.RUNNING:
        return "-"
    text = age(run["last_heartbeat"], now)
    beat = run["last_heartbeat"]
    if stale_after is not None and beat:
        seconds = (now - datetime.fromisoformat(beat)).total_seconds()
        if seconds > stale_after:
            text += " (stale)"
    return text


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value).decode(), indent=2)


def _render_detail(run: dict[str, Any]) -> str:
    """The run and its nodes; what agents, repositories and people wrote shown escaped."""
    now = datetime.now(UTC)
    lines = [
        f"run       {run['run_id']}",
        f"workflow  {run['workflow']}",
        f"agent     {run['agent_type']}" + (f" ({run['model']})" if run["model"] else ""),
        f"repo      {run['repo']}",
        f"status    {run['status']}" + (f": {run['error']}" if run["error"] else ""),
        *(
            f"waiting   {w['kind']} {w['item_id'][:8]} at {w['node']}: {w['prompt']} (shep inbox)"
            for w in run.get("waiting") or []
        ),
        f"progress  {run['completed_nodes']}/{run['total_nodes']} nodes",
        f"created   {run['created_at']} ({age(run['created_at'], now)} ago) by {run['created_by']}",
    ]
    if run["last_heartbeat"] and run["status"] == RunStatus.RUNNING:
        lines.append(
            f"heartbeat {age(run['last_heartbeat'], now)} ago "
            f"from pid {run['pid']} on {run['host']}"
        )
    if run["last_activity"]:
        lines.append(f"activity  {run['last_activity']}")
    lines.append(
        f"usage     {run['input_tokens']} in / {run['output_tokens']} out tokens, "
        f"${run['cost_usd']:.4f}"
    )
    lines = [printable(line) for line in lines]
    if run["nodes"]:
        lines.append("")
        lines.append(
            table(
                ["NODE", "STATUS", "DURATION", "SESSION", "ERROR"],
                [
                    [
                        printable(n["node"])
                        + (f" #{n['iteration']}" if n["iteration"] > 1 else ""),
                        n["status"],
                        f"{n['duration_ms'] / 1000:.1f}s" if n["duration_ms"] is not None else "-",
                        printable(n["agent_session_id"] or "-"),
                        printable(n["error"] or ""),
                    ]
                    for n in run["nodes"]
                ],
            )
        )
    return "\n".join(lines)
