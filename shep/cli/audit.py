"""``shep audit``: prove what happened."""

from __future__ import annotations

import os
import re

import click

from events.audit import ChainReport, open_log, verify_chain
from events.errors import AnchorFormatError, ChainBrokenError, StoreUnavailableError
from shep.runtime import Runtime

_ANCHOR = re.compile(r"([0-9]+):([0-9a-fA-F]{64})")


@click.group()
def audit() -> None:
    """Verify and export the audit trail."""


@audit.command("verify")
@click.option(
    "--anchor",
    metavar="POSITION:HASH",
    help="Also prove that the event at POSITION still has chain hash HASH "
    "(a head printed by an earlier verify).",
)
@click.pass_obj
def verify(runtime: Runtime, anchor: str | None) -> None:
    """Recompute the hash chain over every event; name the first bad position.

    Prints the head hash on success, so you can record it somewhere else and
    later prove that nothing before it changed. Reads the store only, so it
    also works on a read-only or damaged store.
    """
    anchor_position, anchor_hash = _parse_anchor(anchor) if anchor is not None else (None, b"")
    runtime.require_home()
    if not os.path.exists(runtime.db_file):
        raise StoreUnavailableError(f"No event store at {runtime.db_file}: nothing to verify.")
    conn = open_log(runtime.db_file)
    try:
        report = verify_chain(conn, anchor_position=anchor_position)
    finally:
        conn.close()
    if not report.ok:
        raise ChainBrokenError(_broken(report, runtime.db_file))
    line = f"OK: {report.events} events verify. "
    if anchor_position is not None:
        if anchor_position > report.events:
            raise ChainBrokenError(
                f"Anchor not found: there is no event at position {anchor_position}; "
                f"the log ends at position {report.events}."
            )
        if report.anchor_hash != anchor_hash:
            found = report.anchor_hash.hex() if report.anchor_hash else "(none)"
            raise ChainBrokenError(
                f"Anchor differs: the chain hash at position {anchor_position} is {found}, "
                f"not {anchor_hash.hex()}. History up to that position was rewritten."
            )
        line += f"Anchor at position {anchor_position} matches. "
    click.echo(line + f"Head hash: {report.head_hash.hex()}")


def _parse_anchor(value: str) -> tuple[int, bytes]:
    match = _ANCHOR.fullmatch(value.strip())
    if match is None or int(match[1]) < 1:
        raise AnchorFormatError(
            f"--anchor must be POSITION:HASH, a position from 1 and the 64 hex digits of a "
            f"chain hash (as `shep audit verify` prints them), not {value!r}."
        )
    return int(match[1]), bytes.fromhex(match[2])


def _broken(report: ChainReport, db_file: str) -> str:
    if report.damaged:
        return (
            f"The event store {db_file} is damaged at position {report.first_bad_position}: "
            f"{report.problem}. {report.events} events before it verify. "
            "Restore it from a backup or move it aside."
        )
    return (
        f"Hash chain broken at position {report.first_bad_position}: {report.problem}. "
        f"{report.events} events before it verify."
    )
