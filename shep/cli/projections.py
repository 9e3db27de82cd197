"""``shep projections``: maintain the read models."""

from __future__ import annotations

import time

import click

from events.words import counted
from projections.catch_up import rebuild
from projections.database import open_database
from projections.tables import PROJECTION_NAMES
from shep.cli.render import ProgressLine
from shep.home.runtime import Runtime


@click.group()
def projections() -> None:
    """Maintain the read models (tables rebuilt from the event log)."""


_REBUILD_HELP = f"""Rebuild the projections NAME... (all by default) from the event log.

NAME is one of: {", ".join(PROJECTION_NAMES)}.

The new tables are filled beside the current ones, which every command goes on
reading, and swapped in at the end: stopped before that, the projections are as
they were.
"""


@projections.command("rebuild", help=_REBUILD_HELP)
@click.argument("names", nargs=-1, type=click.Choice(PROJECTION_NAMES), metavar="[NAME]...")
@click.pass_obj
def rebuild_command(runtime: Runtime, names: tuple[str, ...]) -> None:
    runtime.require_home()
    progress = ProgressLine(finished=False)  # the command says it below
    conn = open_database(runtime.db_path, progress=progress)
    try:
        started = time.perf_counter()
        count = rebuild(conn, names or None, progress=progress)
        seconds = time.perf_counter() - started
    finally:
        conn.close()
    rebuilt = ", ".join(names or PROJECTION_NAMES)
    click.echo(f"Rebuilt {rebuilt} from {counted(count, 'event')} in {seconds:.2f}s.")
