"""Verify the hash chain: recompute every event's hash from the one before it."""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from events.chain import GENESIS_HASH, chain_hash


@dataclass(frozen=True)
class ChainReport:
    """What ``verify_chain`` found: how many events verified, the head hash, the first break."""

    events: int
    head_hash: bytes
    first_bad_position: int | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return self.first_bad_position is None


def verify_chain(conn: apsw.Connection, *, table: str = "stored_events") -> ChainReport:
    """Walk the log in position order; stop at the first position whose hash does not follow.

    Catches edited events (the stored hash no longer matches), removed or
    inserted events (a gap, or a hash computed over a different predecessor),
    and edited hashes (the next event's hash no longer follows).
    """
    previous = GENESIS_HASH
    expected_position = 1
    count = 0
    for position, oid, version, topic, state, stored in conn.execute(
        f"SELECT notification_id, originator_id, originator_version, topic, state, chain_hash "  # noqa: S608
        f"FROM {table} ORDER BY notification_id"
    ):
        if position != expected_position:
            return ChainReport(
                count,
                previous,
                expected_position,
                f"position {expected_position} is missing (next stored is {position})",
            )
        computed = chain_hash(previous, position, _raw(oid), int(version), _raw(topic), _raw(state))
        if computed != _raw(stored):
            return ChainReport(
                count,
                previous,
                position,
                "stored hash does not match the event and its predecessor "
                "(the event or an earlier hash was edited)",
            )
        previous = computed
        expected_position += 1
        count += 1
    return ChainReport(count, previous)


def _raw(value: object) -> bytes:
    # An edit can change a column's type (replace() on a BLOB gives TEXT): hash what is there.
    if isinstance(value, bytes):
        return value
    return str(value).encode()
