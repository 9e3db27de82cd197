"""Queries of the inbox: pending items across runs, one item by id or run, what is due.

``get_`` one, ``list_`` many; the deadline and resume checks every shep
command makes are single indexed reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import apsw
import msgspec

from events.errors import AlreadyDecidedError, ItemRefError
from events.inbox_status import ItemKind, ItemStatus
from events.run_status import WAITING_STATUSES
from projections.queries import AWAITED_DECIDED, ids_with_prefix, rows_of

Row = dict[str, Any]

_decode = msgspec.json.Decoder(list[dict[str, Any]]).decode
_WAITING = tuple(sorted(s.value for s in WAITING_STATUSES))


class ListedItem(msgspec.Struct):
    """A pending item as a listing shows it (`shep inbox --json`): its fields, in order."""

    item_id: str
    kind: str
    run_id: str
    workflow: str
    repo: str
    node: str
    iteration: int
    prompt: str
    context: str
    options: list[dict[str, Any]]
    free_text: bool
    phase: str | None
    artifacts: list[dict[str, Any]]
    deadline: str | None
    asked_at: str
    supervisor: dict[str, Any] | None
    votes: list[str]


_LISTED_COLUMNS = ", ".join(f"i.{name}" for name in ListedItem.__struct_fields__)
#: Every field of an item: the public ones and its decision's.
_ITEM_COLUMNS = (
    "i.item_id, i.kind, i.run_id, i.workflow, i.repo, i.node, i.iteration, i.prompt, "
    "i.context, i.options, i.free_text, i.phase, i.artifacts, i.deadline, i.status, "
    "i.answer, i.option_id, i.actor, i.rationale, i.asked_at, i.answered_at, i.supervisor, "
    "i.votes"
)
#: Items of a run the log holds (the others have no workflow; no list shows them).
_OF_A_RUN = "i.workflow IS NOT NULL"


def _rows(cursor: apsw.Cursor) -> list[Row]:
    rows = rows_of(cursor)
    for row in rows:
        row["options"] = _decode(row["options"])
        row["artifacts"] = _decode(row["artifacts"])
        row["free_text"] = bool(row["free_text"])
        row["supervisor"] = msgspec.json.decode(row["supervisor"]) if row["supervisor"] else None
        row["votes"] = msgspec.json.decode(row["votes"])
    return rows


def _pending(repo: str | None, run_id: str | None) -> tuple[str, list[str]]:
    """The WHERE and ORDER BY of the pending items (of ``repo``, of ``run_id``), oldest
    first: a read of the inbox's index in this order (items hold their run's workflow and
    repository), and its parameters."""
    where, params = ["i.status=?", _OF_A_RUN], [ItemStatus.PENDING.value]
    if repo is not None:
        where.append("i.repo=?")
        params.append(repo)
    if run_id is not None:
        where.append("i.run_id=?")
        params.append(run_id)
    return f"WHERE {' AND '.join(where)} ORDER BY i.asked_at, i.item_id", params


def list_inbox(
    conn: apsw.Connection, *, repo: str | None = None, run_id: str | None = None
) -> list[Row]:
    """Every pending item, oldest first, with its run's workflow and repository."""
    clauses, params = _pending(repo, run_id)
    return _rows(conn.execute(f"SELECT {_ITEM_COLUMNS} FROM inbox i {clauses}", params))


def list_inbox_items(
    conn: apsw.Connection, *, repo: str | None = None, run_id: str | None = None
) -> list[ListedItem]:
    """``list_inbox`` with only what a listing shows of each item, made straight from the
    rows (for 1,000 items, a few ms less than dicts of every column)."""
    clauses, params = _pending(repo, run_id)
    decode = msgspec.json.decode
    return [
        ListedItem(
            item_id,
            kind,
            run,
            workflow,
            repo_path,
            node,
            iteration,
            prompt,
            context,
            _decode(options),
            bool(free_text),
            phase,
            _decode(artifacts),
            deadline,
            asked_at,
            decode(supervisor) if supervisor else None,
            decode(votes),
        )
        for (
            item_id,
            kind,
            run,
            workflow,
            repo_path,
            node,
            iteration,
            prompt,
            context,
            options,
            free_text,
            phase,
            artifacts,
            deadline,
            asked_at,
            supervisor,
            votes,
        ) in conn.execute(f"SELECT {_LISTED_COLUMNS} FROM inbox i {clauses}", params)
    ]


def get_item(conn: apsw.Connection, item_id: str) -> Row | None:
    """One item, pending or decided."""
    rows = _rows(
        conn.execute(
            f"SELECT {_ITEM_COLUMNS} FROM inbox i WHERE i.item_id=? AND {_OF_A_RUN}",
            (item_id,),
        )
    )
    return rows[0] if rows else None


def resolve_item(conn: apsw.Connection, ref: str, *, kind: str | None = None) -> Row:
    """The item ``ref`` names: an item id or unique prefix, or a run with one pending item.

    With ``kind`` (question / approval), a run's pending items of that kind count.
    """
    items = ids_with_prefix(conn, "inbox", "item_id", ref)
    if len(items) > 1:
        raise ItemRefError(f"{ref!r} matches several inbox items; type more of its id.")
    if items:
        row = get_item(conn, items[0])
        assert row is not None
        return row
    runs = ids_with_prefix(conn, "runs", "run_id", ref)
    if not runs:
        raise ItemRefError(f"No inbox item or run {ref!r}. List them with `shep inbox`.")
    if len(runs) > 1:
        raise ItemRefError(f"{ref!r} matches several runs; type more of its id.")
    every = list_inbox(conn, run_id=runs[0])
    pending = [r for r in every if kind is None or r["kind"] == kind]
    if not pending and every:
        other = every[0]
        verb = (
            "`shep answer`"
            if other["kind"] == ItemKind.QUESTION
            else "`shep approve` or `shep reject`"
        )
        raise ItemRefError(
            f"Run {runs[0][:8]} waits for {_article(other['kind'])} ({other['item_id'][:8]}), "
            f"not {_article(kind or '')}: use {verb}."
        )
    if not pending:
        _refuse_if_decided(conn, runs[0], kind)
    if len(pending) != 1:
        what = f"pending {kind} items" if kind else "pending items"
        listing = ", ".join(r["item_id"][:8] for r in pending)
        detail = f": {listing}; name one" if pending else ""
        raise ItemRefError(f"Run {runs[0][:8]} has {len(pending)} {what}{detail}.")
    return pending[0]


def _refuse_if_decided(conn: apsw.Connection, run_id: str, kind: str | None) -> None:
    """A run named while none of its items waits: if its last item (of ``kind``) has a
    decision, the one naming the run came too late for it (another person, the
    supervisor, a deadline decided first), and is told who and when, as one who
    named the item is.
    """
    kinds = [kind] if kind else [k.value for k in ItemKind]
    decided = (ItemStatus.ANSWERED.value, ItemStatus.APPROVED.value, ItemStatus.REJECTED.value)
    row = conn.execute(
        "SELECT item_id, status, answer, actor, answered_at FROM inbox WHERE run_id=? "
        f"AND kind IN ({','.join('?' * len(kinds))}) AND status IN (?, ?, ?) "
        "ORDER BY answered_at DESC, asked_at DESC LIMIT 1",
        (run_id, *kinds, *decided),
    ).fetchone()
    if row is None:
        return
    from events.inbox import already_decided  # the events, only on this error path

    item_id, status, answer, actor, at = row
    said = status if status != ItemStatus.ANSWERED else f"answered {answer!r}"
    raise AlreadyDecidedError(
        already_decided(item_id, said, actor, datetime.fromisoformat(at)), actor=actor
    )


def _article(kind: str) -> str:
    return "an approval" if kind == ItemKind.APPROVAL else "a question"


def count_pending(conn: apsw.Connection) -> int:
    """How many items wait for a decision."""
    row = conn.execute(
        "SELECT count(*) FROM inbox WHERE status=?", (ItemStatus.PENDING.value,)
    ).fetchone()
    return int(row[0]) if row else 0


def has_awaited_decisions(conn: apsw.Connection) -> bool:
    """Whether a run is still suspended on an item that has its decision (it should be
    resumed): one look at a partial index, empty but for a moment."""
    row = conn.execute(f"SELECT 1 FROM inbox WHERE {AWAITED_DECIDED} LIMIT 1").fetchone()
    return row is not None


def list_expired_questions(conn: apsw.Connection, now: str) -> list[Row]:
    """Pending questions whose deadline (ISO UTC) is before ``now``."""
    return _rows(
        conn.execute(
            f"SELECT {_ITEM_COLUMNS} FROM inbox i "
            f"WHERE i.status=? AND {_OF_A_RUN} AND i.kind=? AND i.deadline IS NOT NULL "
            "AND i.deadline < ? ORDER BY i.deadline",
            (ItemStatus.PENDING.value, ItemKind.QUESTION.value, now),
        )
    )


def list_runs_to_resume(conn: apsw.Connection, *, host: str | None = None) -> list[str]:
    """Waiting runs with a decided item they are suspended on: nobody resumed them yet.

    With ``host`` (a shared store), only the runs that last ran on that host:
    a run goes on where its repository is.
    """
    statement = (
        "SELECT DISTINCT i.run_id FROM inbox i JOIN runs r ON r.run_id = i.run_id "
        # Said literally, not bound: SQLite uses the partial index inbox_awaited only then.
        f"WHERE i.awaited=1 AND i.status!='{ItemStatus.PENDING}' "
        f"AND r.status IN ({','.join('?' * len(_WAITING))})"
    )
    params: tuple[str, ...] = _WAITING
    if host is not None:
        statement += " AND r.host = ?"
        params = (*_WAITING, host)
    return [str(r[0]) for r in conn.execute(statement, params)]


def count_rejections(conn: apsw.Connection, run_id: str, phase: str) -> int:
    """How many times a gate of the run has rejected ``phase``."""
    row = conn.execute(
        "SELECT count(*) FROM inbox WHERE run_id=? AND phase=? AND status=?",
        (run_id, phase, ItemStatus.REJECTED.value),
    ).fetchone()
    return int(row[0]) if row else 0
