"""`shep audit verify` as a user runs it: recast values, a truncated log, anchors."""

from __future__ import annotations

import random
from pathlib import Path
from typing import cast

import apsw
import pytest

from commands.cancel_run import cancel_run
from commands.create_run import create_run
from commands.start_run import start_run
from events.chain import GENESIS_HASH, chain_hash
from events.errors import InvalidTransitionError
from events.store import EventStore
from tests.support.cli import shep
from tests.support.histories import random_run


def edit(db_path: Path, statement: str, *params: object) -> None:
    """Run ``statement`` on the store with the append-only triggers dropped, as an editor would."""
    conn = apsw.Connection(str(db_path))
    conn.execute("DROP TRIGGER IF EXISTS stored_events_no_update")
    conn.execute("DROP TRIGGER IF EXISTS stored_events_no_delete")
    conn.execute(statement, params)
    conn.close()


def history(store: EventStore, runs: int = 3, seed: int = 4) -> int:
    rng = random.Random(seed)
    for _ in range(runs):
        random_run(store, rng)
    return store.max_position()


def head_of(result_stdout: str) -> str:
    return result_stdout.rsplit("Head hash: ", 1)[1].strip()


def test_recast_id_of_a_cancellation_is_a_broken_chain(store: EventStore, db_path: Path) -> None:
    """A RunCancelled with its stream id recast TEXT->BLOB hashes alike, unseen by commands.

    The cancelled run can then be started again; verify names the recast position, exit 4.
    """
    history(store)
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    cancel_run(store, run_id, cancelled_by="me")
    cancelled_at = store.max_position()
    with pytest.raises(InvalidTransitionError):
        start_run(store, run_id, pid=1, host="h")
    edit(
        db_path,
        "UPDATE stored_events SET originator_id = CAST(originator_id AS BLOB) "
        "WHERE notification_id = ?",
        cancelled_at,
    )
    start_run(store, run_id, pid=1, host="h")  # the hole: the cancellation is gone for commands
    result = shep("audit", "verify")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: Hash chain broken at position {cancelled_at}: originator_id is stored as blob, "
        f"not text (its storage class was changed). {cancelled_at - 1} events before it verify.\n"
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("column", "recast", "message"),
    [
        ("topic", "CAST(topic AS BLOB)", "topic is stored as blob, not text"),
        ("state", "CAST(state AS TEXT)", "state is stored as text, not blob"),
        # Arabic-Indic digit three: SQLite keeps it TEXT, Python's int() reads it as 3.
        ("originator_version", "'\u0663'", "originator_version is stored as text, not integer"),
    ],
)
def test_recast_of_any_hashed_column_is_a_broken_chain_there(
    store: EventStore, db_path: Path, column: str, recast: str, message: str
) -> None:
    """Topic, state or version recast to another storage class: broken at that position, exit 4."""
    history(store)
    conn = apsw.Connection(str(db_path))
    (position,) = conn.execute(
        "SELECT notification_id FROM stored_events WHERE originator_version = 3 "
        "ORDER BY notification_id LIMIT 1 OFFSET 1"
    ).fetchone() or (0,)
    conn.close()
    assert position > 1
    edit(
        db_path, f"UPDATE stored_events SET {column} = {recast} WHERE notification_id = ?", position
    )
    result = shep("audit", "verify")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: Hash chain broken at position {position}: {message} "
        f"(its storage class was changed). {position - 1} events before it verify.\n"
    )


def test_tracking_beyond_the_head_says_the_log_was_truncated(
    store: EventStore, db_path: Path
) -> None:
    """Cutting the last events off leaves a valid chain; the projections' positions give it away."""
    head = history(store)
    shep("status", check=True)  # the projections catch up to the head
    assert shep("audit", "verify", check=True).stdout.startswith(f"OK: {head} events verify.")
    edit(db_path, "DELETE FROM stored_events WHERE notification_id > ?", head - 5)
    result = shep("audit", "verify")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: Hash chain broken at position {head - 4}: the log was truncated: it ends at "
        f"position {head - 5}, but 'checkpoints' has already processed position {head}. "
        f"{head - 5} events before it verify.\n"
    )


def test_anchor_of_an_earlier_head_matches_after_more_events(store: EventStore) -> None:
    """A head printed earlier, given as --anchor POSITION:HASH, is found in the longer chain."""
    first = history(store, seed=1)
    anchor = f"{first}:{head_of(shep('audit', 'verify', check=True).stdout)}"
    total = history(store, seed=2)
    result = shep("audit", "verify", "--anchor", anchor)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"OK: {total} events verify. Anchor at position {first} matches. Head hash: "
    )
    assert result.stderr == ""


def test_anchor_differs_when_history_was_rewritten_with_new_hashes(
    store: EventStore, db_path: Path
) -> None:
    """An editor who recomputes every later hash passes a plain verify, but not the anchor."""
    head = history(store)
    anchor_hash = head_of(shep("audit", "verify", check=True).stdout)
    _rewrite(db_path, position=1, replace=(b"tester", b"mallory"))
    rewritten = shep("audit", "verify", check=True)
    new_head = head_of(rewritten.stdout)
    assert new_head != anchor_hash
    result = shep("audit", "verify", "--anchor", f"{head}:{anchor_hash}")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: Anchor differs: the chain hash at position {head} is {new_head}, "
        f"not {anchor_hash}. History up to that position was rewritten.\n"
    )


def test_anchor_beyond_the_head_is_not_found(store: EventStore) -> None:
    """An anchor position the log does not reach: not found, exit 4."""
    head = history(store)
    result = shep("audit", "verify", "--anchor", f"{head + 1}:{'ab' * 32}")
    assert result.returncode == 4
    assert result.stderr == (
        f"shep: Anchor not found: there is no event at position {head + 1}; "
        f"the log ends at position {head}.\n"
    )


@pytest.mark.parametrize("anchor", ["abc", "12", f"0:{'ab' * 32}", "5:zz", f"5:{'ab' * 31}", ""])
def test_malformed_anchor_is_a_usage_error(store: EventStore, anchor: str) -> None:
    """--anchor that is not POSITION:HASH: one line, exit 2, before the store is read."""
    history(store, runs=1)
    result = shep("audit", "verify", "--anchor", anchor)
    assert result.returncode == 2
    assert result.stderr == (
        "shep: --anchor must be POSITION:HASH, a position from 1 and the 64 hex digits of a "
        f"chain hash (as `shep audit verify` prints them), not {anchor!r}.\n"
    )


def test_verify_without_a_store_says_so_and_creates_nothing(shep_home: Path) -> None:
    """An existing home without shep.db: one line, exit 1, and no database is created."""
    shep_home.mkdir()
    result = shep("audit", "verify")
    assert result.returncode == 1
    assert result.stderr == f"shep: No event store at {shep_home / 'shep.db'}: nothing to verify.\n"
    assert list(shep_home.iterdir()) == []


def _rewrite(db_path: Path, *, position: int, replace: tuple[bytes, bytes]) -> None:
    """Edit the event at ``position`` and recompute every hash from there on, as a forger would."""
    conn = apsw.Connection(str(db_path))
    conn.execute("DROP TRIGGER IF EXISTS stored_events_no_update")
    rows = cast(
        list[tuple[int, str, int, str, bytes, bytes]],
        conn.execute(
            "SELECT notification_id, originator_id, originator_version, topic, state, chain_hash "
            "FROM stored_events ORDER BY notification_id"
        ).fetchall(),
    )
    previous = rows[position - 2][5] if position > 1 else GENESIS_HASH
    assert replace[0] in rows[position - 1][4]
    with conn:
        for notification_id, oid, version, topic, stored_state, _ in rows[position - 1 :]:
            state = stored_state
            if notification_id == position:
                state = stored_state.replace(*replace)
            previous = chain_hash(
                previous, notification_id, oid.encode(), version, topic.encode(), state
            )
            conn.execute(
                "UPDATE stored_events SET state = ?, chain_hash = ? WHERE notification_id = ?",
                (state, previous, notification_id),
            )
    conn.close()


def test_a_log_of_one_event_is_counted_in_the_singular(store: EventStore, db_path: Path) -> None:
    """A fresh home's first event: "1 event verifies", and a break after it "1 event before it"."""
    create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    assert store.max_position() == 1
    ok = shep("audit", "verify", check=True)
    assert ok.stdout == f"OK: 1 event verifies. Head hash: {head_of(ok.stdout)}\n"
    create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    edit(db_path, "UPDATE stored_events SET state = X'00' WHERE notification_id = 2")
    broken = shep("audit", "verify")
    assert broken.returncode == 4
    assert "1 event before it verifies" in broken.stderr, broken.stderr
