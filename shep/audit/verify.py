"""Verify a home's log: its store's hash chain, or on a shared store the server's chain and
this home's copy of it against it.

What ``shep audit verify`` prints and the dashboard's audit page shows, decided here
once: the verdict, the sentence that says it, the head hash to anchor. Prints nothing;
the faces render a ``StoreVerified`` (the CLI turns a failed one into exit 4).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from events.audit import ChainReport, open_log, verify_chain
from events.errors import StoreUnavailableError
from events.words import counted, events_verify


@dataclass(frozen=True)
class StoreVerified:
    """What ``verify_store`` found.

    ``summary`` is the verdict as a sentence or two ("OK: 3 events verify on the shared
    store at ...  This machine's copy (3 events) matches."); ``problem`` (empty when it
    verifies) names what does not verify and where, ``first_bad_position`` its position.
    ``offline`` is the shared store's error when it could not be reached: only this
    home's copy was verified then. ``copy_events`` is the size of this home's copy
    when it was compared with the shared store.
    """

    events: int
    head_hash: bytes
    summary: str = ""
    problem: str = ""
    first_bad_position: int | None = None
    anchor_hash: bytes | None = None
    offline: str = ""
    copy_events: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problem


def verify_store(
    db_file: str, store_url: str | None, *, anchor_position: int | None = None
) -> StoreVerified:
    """Recompute the hash chain of the home's log over every event.

    On its own store (``store_url`` None): the chain of ``db_file``. On a shared store:
    the server's chain, then this home's copy (``db_file``) against it: the copy must
    verify on its own and its head must be the hash the server stores at the same
    position (a copy made from another store, or edited, differs). With the server
    unreachable, the copy alone (``offline`` says why); with no copy either, the
    server's ``StoreUnavailableError`` is raised, as for a missing store file.
    """
    if store_url is not None:
        return _verify_shared(db_file, store_url, anchor_position)
    if not os.path.exists(db_file):
        raise StoreUnavailableError(f"No event store at {db_file}: nothing to verify.")
    report = _verify_file(db_file, anchor_position)
    if not report.ok:
        return _failed(report, broken(report, db_file))
    return _verified(report, f"OK: {events_verify(report.events)}.")


def broken(report: ChainReport, where: str) -> str:
    """The sentence saying where a chain that does not verify breaks (``where``: the store)."""
    if report.damaged:
        return (
            f"The event store {where} is damaged at position {report.first_bad_position}: "
            f"{report.problem}. {events_verify(report.events, ' before it')}. "
            "Restore it from a backup or move it aside."
        )
    return (
        f"Hash chain broken at position {report.first_bad_position}: {report.problem}. "
        f"{events_verify(report.events, ' before it')}."
    )


def _verify_file(path: str, anchor_position: int | None) -> ChainReport:
    conn = open_log(path)
    try:
        return verify_chain(conn, anchor_position=anchor_position)
    finally:
        conn.close()


def _verified(
    report: ChainReport, summary: str, *, offline: str = "", copy_events: int | None = None
) -> StoreVerified:
    return StoreVerified(
        report.events,
        report.head_hash,
        summary=summary,
        anchor_hash=report.anchor_hash,
        offline=offline,
        copy_events=copy_events,
    )


def _failed(report: ChainReport, problem: str, *, offline: str = "") -> StoreVerified:
    return StoreVerified(
        report.events,
        report.head_hash,
        problem=problem,
        first_bad_position=report.first_bad_position,
        offline=offline,
    )


def _verify_shared(db_file: str, url: str, anchor_position: int | None) -> StoreVerified:
    """The server's chain, then this home's copy against it (the copy alone when offline)."""
    from events.postgres_url import where
    from events.postgres_verify import stored_hash_at, verify_pg_chain

    copy = _verify_file(db_file, None) if os.path.exists(db_file) else None
    if copy is not None and not copy.ok:
        return _failed(copy, broken(copy, db_file))
    try:
        report = verify_pg_chain(url, anchor_position=anchor_position)
        # The walk verified every stored hash: the copy's head must be the one stored there.
        at_copy = stored_hash_at(url, copy.events) if copy and copy.events else None
    except StoreUnavailableError as e:
        if copy is None:
            raise
        offline = f"{e} Verifying this machine's copy of the log only."
        if anchor_position is not None:
            copy = _verify_file(db_file, anchor_position)
            if not copy.ok:
                return _failed(copy, broken(copy, db_file), offline=offline)
        return _verified(
            copy,
            f"OK: this machine's copy ({counted(copy.events, 'event')}) verifies.",
            offline=offline,
        )
    if not report.ok:
        return _failed(report, broken(report, f"the shared store at {where(url)}"))
    summary = f"OK: {events_verify(report.events)} on the shared store at {where(url)}."
    if copy is None:
        return _verified(report, summary)
    if copy.events and at_copy != copy.head_hash:
        return StoreVerified(
            report.events,
            report.head_hash,
            problem=(
                f"This machine's copy of the log ({db_file}, {counted(copy.events, 'event')}) "
                f"differs from the shared store at position {copy.events}: it was made from "
                "another store or edited. Move it aside; the next command copies the log anew."
            ),
            first_bad_position=copy.events,
            copy_events=copy.events,
        )
    summary += f" This machine's copy ({counted(copy.events, 'event')}) matches."
    return _verified(report, summary, copy_events=copy.events)
