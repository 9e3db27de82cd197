"""``shep logs``: a run's events and agent output, optionally followed live."""

from __future__ import annotations

import sys
import time
from typing import Any, cast

import apsw
import click
import msgspec

from events.display import printable
from events.runs import FINAL_STATUSES, RunStatus
from projections.queries import get_run, list_logs, resolve_run_id
from projections.runner import catch_up
from shep.cli.render import short_id
from shep.runtime import Runtime

FINAL = frozenset(s.value for s in FINAL_STATUSES)
INTERRUPTED = RunStatus.INTERRUPTED.value
#: --follow stops at a final status, and at interrupted: no worker is left to write more.
FOLLOW_ENDS_AT = FINAL | {INTERRUPTED}
POLL_SECONDS = 0.01
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
        _follow(runtime, conn, run_id, _print(conn, run_id, 0, as_json), as_json)
    except KeyboardInterrupt:
        # Ctrl-C stops this reader only: the run's worker is another process.
        short = short_id(run_id)
        click.echo(
            f"Stopped following run {short}; the run goes on "
            f"(`shep logs {short} --follow` to follow it again).",
            err=True,
        )
        sys.exit(EXIT_STOPPED)


def _follow(runtime: Runtime, conn: apsw.Connection, run_id: str, last: int, as_json: bool) -> None:
    """Print the run's new lines as they come, until it ends or is interrupted."""
    data_version = _data_version(conn)
    next_orphan_check = time.monotonic() + ORPHAN_CHECK_SECONDS
    shared = _SharedLog(runtime.store_url) if runtime.store_url is not None else None
    while (status := get_run(conn, run_id)["status"]) not in FOLLOW_ENDS_AT:
        time.sleep(POLL_SECONDS)
        # Copied by this connection: data_version below counts only other connections.
        copied = shared.pull(conn) if shared is not None else 0
        if time.monotonic() >= next_orphan_check:
            # A killed worker never writes its final status: apply the orphan rule, as
            # every command does at start, so a dead worker's run turns interrupted.
            runtime.check_orphans()
            next_orphan_check = time.monotonic() + ORPHAN_CHECK_SECONDS
        current = _data_version(conn)
        if current == data_version and not copied:
            continue
        data_version = current
        catch_up(conn, pull=shared is None)  # a shared log was pulled just above
        last = _print(conn, run_id, last, as_json)
    catch_up(conn)
    _print(conn, run_id, last, as_json)
    if status == INTERRUPTED:
        from shep.cli.run import EXIT_INTERRUPTED

        short = short_id(run_id)
        click.echo(f"Run {short} interrupted. Continue it with `shep resume {short}`.", err=True)
        sys.exit(EXIT_INTERRUPTED)


class _SharedLog:
    """Brings the home's copy of a shared log up to the server every few tenths of a second.

    Says once when the server goes away (the copy is followed meanwhile) and once
    when it is back.
    """

    every = 0.2

    def __init__(self, url: str) -> None:
        self.url = url
        self.away = False
        self.next = time.monotonic() + self.every

    def pull(self, conn: apsw.Connection) -> int:
        """How many events were copied (0 when not due, or the server is away)."""
        if time.monotonic() < self.next:
            return 0
        from events.errors import StoreUnavailableError
        from projections.mirror import forget_offline, pull

        forget_offline()
        try:
            copied = pull(conn, self.url)
        except StoreUnavailableError as e:
            if not self.away:
                click.echo(f"shep: {e} Following this machine's copy until it is back.", err=True)
            self.away = True
            # An unreachable server costs its connect timeout: try again less often.
            self.next = time.monotonic() + 2.0
            return 0
        if self.away:
            click.echo("shep: the shared store is back.", err=True)
        self.away = False
        self.next = time.monotonic() + self.every
        return copied


def _data_version(conn: apsw.Connection) -> int:
    # Changes whenever another connection commits: a few microseconds to ask.
    return cast(int, conn.execute("PRAGMA data_version").fetchall()[0][0])


def _print(conn: apsw.Connection, run_id: str, after: int, as_json: bool) -> int:
    for row in list_logs(conn, run_id, after=after):
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
