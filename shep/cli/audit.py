"""``shep audit``: prove what happened."""

from __future__ import annotations

import click

from events.audit import verify_chain
from events.errors import ShepError
from projections.database import open_database
from shep.runtime import Runtime


class ChainBrokenError(ShepError):
    """The hash chain does not verify: history was edited."""

    exit_code = 4


@click.group()
def audit() -> None:
    """Verify and export the audit trail."""


@audit.command("verify")
@click.pass_obj
def verify(runtime: Runtime) -> None:
    """Recompute the hash chain over every event; name the first bad position.

    Prints the head hash on success, so you can record it somewhere else and
    later prove that nothing before it changed.
    """
    runtime.require_home()
    conn = open_database(runtime.db_path)
    try:
        report = verify_chain(conn)
    finally:
        conn.close()
    if not report.ok:
        raise ChainBrokenError(
            f"Hash chain broken at position {report.first_bad_position}: {report.problem}. "
            f"{report.events} events before it verify."
        )
    click.echo(f"OK: {report.events} events verify. Head hash: {report.head_hash.hex()}")
