"""``shep projections``: maintain the read models."""

from __future__ import annotations

import time

import click

from events.words import counted
from projections.database import open_database
from projections.runner import rebuild
from projections.schema import PROJECTIONS
from shep.runtime import Runtime


@click.group()
def projections() -> None:
    """Maintain the read models (tables rebuilt from the event log)."""


@projections.command("rebuild")
@click.pass_obj
def rebuild_command(runtime: Runtime) -> None:
    """Drop every projection table and rebuild it from the event log."""
    runtime.require_home()
    conn = open_database(runtime.db_path)
    try:
        started = time.perf_counter()
        count = rebuild(conn)
        seconds = time.perf_counter() - started
    finally:
        conn.close()
    names = ", ".join(p.name for p in PROJECTIONS)
    click.echo(f"Rebuilt {names} from {counted(count, 'event')} in {seconds:.2f}s.")
