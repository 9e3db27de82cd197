"""``shep logs``: a run's events and agent output, optionally followed live."""

from __future__ import annotations

import sys
import time
from typing import Any

import apsw
import click
import msgspec

from events.display import printable, short_id
from events.run_status import FINAL_STATUSES, RunStatus
from projections.catch_up import catch_up
from projections.follow import LogFollower
from projections.queries import get_run, iter_logs, resolve_run_id
from projections.state import head_position
from shep.home.runtime import Runtime

FINAL = frozenset(s.value for s in FINAL_STATUSES)
INTERRUPTED = RunStatus.INTERRUPTED.value
#: --follow stops at a final status, and at interrupted: no worker is left to write more.
FOLLOW_ENDS_AT = FINAL | {INTERRUPTED}
#: How often --follow applies the orphan rule: a worker that dies writes no final status.
ORPHAN_CHECK_SECONDS = 1.0
#: The exit code after Ctrl-C, as for any command a person interrupts.
EXIT_STOPPED = 130


@click.command()
@click.argument("run")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per line.")
@click.pass_obj
def logs(runtime: Runtime, run: str, follow: bool, as_json: bool) -> None:
    """Show what happened in RUN (an id or a unique prefix): lifecycle events and agent output."""
    conn = runtime.read_db()
    run_id = resolve_run_id(conn, run)
    if not follow:
        _print(conn, run_id, 0, as_json)
        return
    try:
        _follow(runtime, conn, run_id, as_json)
    except KeyboardInterrupt:
        # Ctrl-C stops this reader only: the run's worker is another process.
        short = short_id(run_id)
        click.echo(
            f"Stopped following run {short}; the run goes on "
            f"(`shep logs {short} --follow` to follow it again).",
            err=True,
        )
        sys.exit(EXIT_STOPPED)


def _follow(runtime: Runtime, conn: apsw.Connection, run_id: str, as_json: bool) -> None:
    """Print the run's lines, then the new ones as they come, until it ends or is
    interrupted."""
    # From the log's head as these lines are printed: each later append wakes the follower.
    follower = LogFollower(
        conn,
        after=head_position(conn),
        url=runtime.store_url,
        on_notice=lambda notice: click.echo(f"shep: {notice}", err=True),
    )
    last = _print(conn, run_id, 0, as_json)
    next_orphan_check = time.monotonic() + ORPHAN_CHECK_SECONDS
    try:
        changes = follower.follow(idle=ORPHAN_CHECK_SECONDS)
        while get_run(conn, run_id)["status"] not in FOLLOW_ENDS_AT:
            next(changes)  # new events, or a second without any
            if time.monotonic() >= next_orphan_check:
                # A killed worker never writes its final status: apply the orphan rule, as
                # every command does at start, so a dead worker's run turns interrupted.
                from shep.runs.recovery import mark_orphans

                mark_orphans(runtime)
                next_orphan_check = time.monotonic() + ORPHAN_CHECK_SECONDS
            catch_up(conn, pull=False)  # the follower brought a shared log's copy up to date
            last = _print(conn, run_id, last, as_json)
    finally:
        follower.close()
    catch_up(conn, pull=False)
    _print(conn, run_id, last, as_json)
    status = get_run(conn, run_id)["status"]
    if status == INTERRUPTED:
        from shep.cli.run import EXIT_INTERRUPTED

        short = short_id(run_id)
        click.echo(f"Run {short} interrupted. Continue it with `shep resume {short}`.", err=True)
        sys.exit(EXIT_INTERRUPTED)


def _print(conn: apsw.Connection, run_id: str, after: int, as_json: bool) -> int:
    """Print the run's lines past ``after`` (a page at a time); the last one's position."""
    for row in iter_logs(conn, run_id, after=after):
        click.echo(_json_line(row) if as_json else _text_line(row))
        after = row["position"]
    return after


def _json_line(row: dict[str, Any]) -> str:
    row = {**row, "is_error": bool(row["is_error"])}
    return msgspec.json.encode(row).decode()


def _text_line(row: dict[str, Any]) -> str:
    clock = row["timestamp"][11:19]
    node = f"[{row['node']}] " if row["node"] else ""
    marker = "!" if row["is_error"] else " "
    tool = (
        f" {row['tool_name']}"
        if row["tool_name"] and row["tool_name"] not in row["message"]
        else ""
    )
    # Agent output and people's answers may hold escape codes: never replay them raw.
    return printable(f"{clock} {marker}{node}{row['kind']}{tool}: {row['message']}")
