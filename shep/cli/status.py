"""``shep status``: runs and their progress, read from the runs projection."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from events.errors import ShepError
from projections.queries import get_run, list_runs, resolve_run_id
from shep.cli.render import age, short_id, table
from shep.runtime import Runtime


class NoRunsError(ShepError):
    """The store holds no runs yet."""

    def __init__(self) -> None:
        super().__init__(
            "No runs yet. Start one with `shep run analyze-repository`, or try `shep demo`."
        )


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
    if not runs:
        raise NoRunsError()
    now = datetime.now(UTC)
    click.echo(
        table(
            ["RUN", "WORKFLOW", "AGENT", "STATUS", "NODE", "PROGRESS", "AGE", "HEARTBEAT"],
            [
                [
                    short_id(r["run_id"]),
                    r["workflow"],
                    r["agent_type"],
                    r["status"],
                    r["current_node"] or "-",
                    f"{r['completed_nodes']}/{r['total_nodes']}",
                    age(r["created_at"], now),
                    age(r["last_heartbeat"], now) if r["status"] == "running" else "-",
                ]
                for r in runs
            ],
        )
    )


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value).decode(), indent=2)


def _render_detail(run: dict[str, Any]) -> str:
    now = datetime.now(UTC)
    lines = [
        f"run       {run['run_id']}",
        f"workflow  {run['workflow']}",
        f"agent     {run['agent_type']}" + (f" ({run['model']})" if run["model"] else ""),
        f"repo      {run['repo']}",
        f"status    {run['status']}" + (f": {run['error']}" if run["error"] else ""),
        f"progress  {run['completed_nodes']}/{run['total_nodes']} nodes",
        f"created   {run['created_at']} ({age(run['created_at'], now)} ago) by {run['created_by']}",
    ]
    if run["last_heartbeat"]:
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
    if run["nodes"]:
        lines.append("")
        lines.append(
            table(
                ["NODE", "STATUS", "DURATION", "SESSION", "ERROR"],
                [
                    [
                        n["node"],
                        n["status"],
                        f"{n['duration_ms'] / 1000:.1f}s" if n["duration_ms"] is not None else "-",
                        n["agent_session_id"] or "-",
                        n["error"] or "",
                    ]
                    for n in run["nodes"]
                ],
            )
        )
    return "\n".join(lines)
