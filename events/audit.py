"""Verify the hash chain: recompute every event's hash from the one before it."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

import apsw

from events.chain import GENESIS_HASH, STORAGE_CLASSES, chain_hash
from events.run_ids import hex_prefix, single_run
from events.sqlite_file import connect, store_error

if TYPE_CHECKING:
    from pathlib import Path

_COLUMNS = tuple(STORAGE_CLASSES)
_CLASSES = tuple(STORAGE_CLASSES.values())


@dataclass(frozen=True)
class ChainReport:
    """What ``verify_chain`` found: how many events verified, the head hash, the first break.

    ``damaged`` says the first bad position could not even be read (the file is
    damaged there); ``anchor_hash`` is the chain hash at the position asked for,
    when the chain verified that far.
    """

    events: int
    head_hash: bytes
    first_bad_position: int | None = None
    problem: str = ""
    damaged: bool = False
    anchor_hash: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.first_bad_position is None


def open_log(path: str | Path) -> apsw.Connection:
    """A read-only connection for ``verify_chain`` that reads a damaged file as far as it can.

    Needs no projections and writes nothing, so it works on a read-only store.
    """
    try:
        return connect(path, readonly=True, salvage=True)
    except apsw.Error as e:
        raise store_error(e, path) from e


def verify_chain(
    conn: apsw.Connection, *, table: str = "stored_events", anchor_position: int | None = None
) -> ChainReport:
    """Walk the log in position order; stop at the first position whose hash does not follow.

    Catches edited events (the stored hash no longer matches), removed or
    inserted events (a gap, or a hash computed over a different predecessor),
    edited hashes (the next event's hash no longer follows), values whose
    storage class was changed (a TEXT id recast to BLOB hashes the same bytes,
    but no reader finds it any more), a log cut short at its end (a tracking
    position beyond the last event), and pages too damaged to read.

    A file that is not a database at all, or whose schema cannot be read,
    raises ``StoreCorruptedError``: there is no position to name.
    """
    try:
        # One read transaction: the walk and the tracking positions are one snapshot,
        # so a projection catching up meanwhile cannot look like a truncated log.
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            report = _walk(conn, table, anchor_position)
            if report.ok:
                report = _check_not_truncated(conn, report)
        finally:
            if own:
                with suppress(apsw.Error):
                    conn.execute("COMMIT")
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return report


def _walk(conn: apsw.Connection, table: str, anchor_position: int | None) -> ChainReport:
    if not table_exists(conn, table):
        return ChainReport(0, GENESIS_HASH)
    # Why storage classes are checked rather than hashed: each column holds exactly
    # one storage class when shep writes it (STORAGE_CLASSES), and an SQLite value
    # is its storage class plus its bytes. Requiring that class and hashing the
    # stored bytes therefore pins every value exactly as hashing the class would,
    # without changing any hash: stores written before keep verifying, and every
    # head hash users recorded stays a valid anchor. A per-row format version would
    # instead let an editor mark an event with the older, weaker format.
    types = ", ".join(f"typeof({c})" for c in _COLUMNS)
    # Bytes as stored: text is hashed as its stored UTF-8, without decoding it.
    values = ", ".join(f"CAST({c} AS BLOB)" if c != "originator_version" else c for c in _COLUMNS)
    scan = f"SELECT notification_id, {types}, {values} FROM {table} ORDER BY notification_id"  # noqa: S608
    # Prepared without reading a row: a schema that cannot be read is no position's fault.
    conn.execute(scan + " LIMIT 0").fetchall()
    previous = GENESIS_HASH
    count = 0
    anchor_hash: bytes | None = None
    try:
        for row in conn.execute(scan):
            position = row[0]
            expected = count + 1
            if position < expected:
                # A sound table yields ascending positions: this row is read from damage.
                return ChainReport(
                    count,
                    previous,
                    expected,
                    f"a row read there has position {position}, out of order "
                    "(the file is damaged or was edited)",
                    damaged=True,
                    anchor_hash=anchor_hash,
                )
            if position != expected:
                return ChainReport(
                    count,
                    previous,
                    expected,
                    f"position {expected} is missing (next stored is {position})",
                    anchor_hash=anchor_hash,
                )
            classes = row[1:6]
            if classes != _CLASSES:
                column, actual, wanted = next(
                    (c, a, w) for c, a, w in zip(_COLUMNS, classes, _CLASSES, strict=True) if a != w
                )
                return ChainReport(
                    count,
                    previous,
                    position,
                    f"{column} is stored as {actual}, not {wanted} (its storage class was changed)",
                    anchor_hash=anchor_hash,
                )
            oid, version, topic, state, stored = row[6:]
            computed = chain_hash(previous, position, oid, version, topic, state)
            if computed != stored:
                return ChainReport(
                    count,
                    previous,
                    position,
                    "stored hash does not match the event and its predecessor "
                    "(the event or an earlier hash was edited)",
                    anchor_hash=anchor_hash,
                )
            if position == anchor_position:
                anchor_hash = computed
            previous = computed
            count += 1
    except (apsw.CorruptError, apsw.NotADBError) as e:
        return ChainReport(
            count,
            previous,
            count + 1,
            f"the event cannot be read ({e})",
            damaged=True,
            anchor_hash=anchor_hash,
        )
    return ChainReport(count, previous, anchor_hash=anchor_hash)


def _check_not_truncated(conn: apsw.Connection, report: ChainReport) -> ChainReport:
    """A tracking position beyond the last event: events the readers saw were cut off."""
    if not table_exists(conn, "tracking"):
        return report
    row = conn.execute(
        "SELECT application_name, notification_id FROM tracking "
        "WHERE notification_id > ? ORDER BY notification_id DESC, application_name LIMIT 1",
        (report.events,),
    ).fetchone()
    if row is None:
        return report
    name, seen = row
    return ChainReport(
        report.events,
        report.head_hash,
        report.events + 1,
        f"the log was truncated: it ends at position {report.events}, "
        f"but {name!r} has already processed position {seen}",
        anchor_hash=report.anchor_hash,
    )


def table_exists(conn: apsw.Connection, table: str) -> bool:
    """Whether the database has ``table`` (a store that was never written has no log)."""
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)
        ).fetchone()
        is not None
    )


#: The stored topic of ``RunCreated`` (spelled out: the catalog builds every decoder).
RUN_CREATED_TOPIC = "events.runs:RunCreated"


def run_in_log(conn: apsw.Connection, ref: str) -> str:
    """The full run id (hex) for ``ref`` (an id or a unique prefix), from the log alone:
    its ``RunCreated``. For readers that must not rely on projections (audit, replay).
    """
    prefix = hex_prefix(ref)
    if prefix is None or not table_exists(conn, "stored_events"):
        return single_run([], ref)
    return single_run(
        [
            str(row[0])
            for row in conn.execute(
                "SELECT originator_id FROM stored_events WHERE originator_id >= ? "
                "AND originator_id < ? AND originator_version = 1 AND topic = ? LIMIT 3",
                (prefix, prefix + "g", RUN_CREATED_TOPIC),
            )
        ],
        ref,
    )
