"""Verify the shared store's hash chain on the server: the same walk as ``events.audit``.

Reads with psycopg alone, in batches, in one repeatable-read snapshot, so a
writer appending meanwhile cannot look like a break.
"""

from __future__ import annotations

from events.audit import ChainReport
from events.chain import GENESIS_HASH, chain_hash
from events.postgres_url import store_error

_BATCH = 5000


def verify_pg_chain(url: str, *, anchor_position: int | None = None) -> ChainReport:
    """Walk the server's log in position order; stop at the first position that does not follow."""
    import psycopg

    previous, count, anchor_hash = GENESIS_HASH, 0, None
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            exists = conn.execute("SELECT to_regclass('stored_events') IS NOT NULL").fetchone()
            if not exists or not exists[0]:
                return ChainReport(0, GENESIS_HASH)
            with conn.cursor(name="shep_verify") as rows:
                rows.itersize = _BATCH
                rows.execute(
                    "SELECT notification_id, originator_id, originator_version, topic, state, "
                    "chain_hash FROM stored_events ORDER BY notification_id"
                )
                for position, oid, version, topic, state, stored in rows:
                    expected = count + 1
                    if position != expected:
                        return ChainReport(
                            count,
                            previous,
                            expected,
                            f"position {expected} is missing (the next is {position})",
                            anchor_hash=anchor_hash,
                        )
                    computed = chain_hash(
                        previous, position, oid.encode(), version, topic.encode(), bytes(state)
                    )
                    if computed != bytes(stored):
                        return ChainReport(
                            count,
                            previous,
                            position,
                            "its hash does not follow from the event and the one before it",
                            anchor_hash=anchor_hash,
                        )
                    previous, count = computed, position
                    if position == anchor_position:
                        anchor_hash = computed
    except psycopg.Error as e:
        raise store_error(e, url) from e
    return ChainReport(count, previous, anchor_hash=anchor_hash)


def stored_hash_at(url: str, position: int) -> bytes | None:
    """The chain hash the server stores at ``position`` (after ``verify_pg_chain`` said
    the chain holds, the hash the chain has there); None past its head."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            row = conn.execute(
                "SELECT chain_hash FROM stored_events WHERE notification_id = %s", (position,)
            ).fetchone()
    except psycopg.Error as e:
        raise store_error(e, url) from e
    return bytes(row[0]) if row else None
