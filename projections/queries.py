"""Queries the CLI reads: runs, nodes, logs. ``get_`` one, ``list_`` many."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apsw

from events.errors import RunNotFoundError
from events.inbox_status import ItemStatus
from events.run_ids import hex_prefix, single_run
from events.run_status import FINAL_STATUSES, WAITING_STATUSES, RunStatus

Row = dict[str, Any]

#: Runs that are not over: listed by `shep status` however old they are.
_ACTIVE = tuple(sorted(s.value for s in RunStatus if s not in FINAL_STATUSES))
_WAITING = frozenset(s.value for s in WAITING_STATUSES)
#: An inbox item decided while its run is still suspended on it (the run should be resumed).
#: Said literally, not bound: SQLite uses the partial index ``inbox_awaited`` only for a
#: WHERE that says its terms.
AWAITED_DECIDED = f"awaited=1 AND status!='{ItemStatus.PENDING}'"


def ids_with_prefix(conn: apsw.Connection, table: str, column: str, ref: str) -> list[str]:
    """Up to 3 hex ids in ``table.column`` that start with ``ref`` (dashes ignored); none for
    a ``ref`` that cannot be a prefix of a hex id. ``table`` and ``column`` are constants.
    """
    prefix = hex_prefix(ref)
    if prefix is None:
        return []
    return [
        str(r[0])
        for r in conn.execute(
            f"SELECT {column} FROM {table} WHERE {column} >= ? AND {column} < ? LIMIT 3",
            (prefix, prefix + "g"),
        )
    ]


def rows_of(cursor: apsw.Cursor) -> list[Row]:
    """Each row of ``cursor`` as a dict by column name."""
    try:
        names = [d[0] for d in cursor.getdescription()]
    except apsw.ExecutionCompleteError:
        return []
    return [dict(zip(names, row, strict=True)) for row in cursor]


def resolve_run_id(conn: apsw.Connection, ref: str) -> str:
    """The full run id (hex) for a run id or a unique prefix of one (dashes ignored)."""
    return single_run(ids_with_prefix(conn, "runs", "run_id", ref), ref)


def list_runs(conn: apsw.Connection, *, include_all: bool = False, recent: int = 10) -> list[Row]:
    """Active runs (pending, running, waiting, interrupted) and the ``recent`` newest others.

    With ``include_all``, every run. Newest first.
    """
    if include_all:
        return rows_of(conn.execute("SELECT * FROM runs ORDER BY created_at DESC, run_id"))
    active = rows_of(
        conn.execute(
            f"SELECT * FROM runs WHERE status IN ({','.join('?' * len(_ACTIVE))}) "
            "ORDER BY created_at DESC",
            _ACTIVE,
        )
    )
    finished = rows_of(
        conn.execute(
            f"SELECT * FROM runs WHERE status NOT IN ({','.join('?' * len(_ACTIVE))}) "
            "ORDER BY created_at DESC LIMIT ?",
            (*_ACTIVE, recent),
        )
    )
    runs = sorted(active + finished, key=lambda r: r["created_at"], reverse=True)
    _add_waiting(conn, runs)
    return runs


def find_runs(
    conn: apsw.Connection,
    *,
    status: str | None = None,
    workflow: str | None = None,
    repo: str | None = None,
    text: str | None = None,
    limit: int = 200,
    offset: int = 0,
) -> list[Row]:
    """Runs of that status, workflow and repository (each when given) whose id starts with
    ``text`` or whose workflow, repository, node, creator or error contains it; newest
    first, ``limit`` of them from ``offset``, each with what it waits for (``waiting``).
    """
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("status", status), ("workflow", workflow), ("repo", repo)):
        if value:
            where.append(f"{column}=?")
            params.append(value)
    if text:
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        prefix = hex_prefix(text)
        clauses = [
            f"{column} LIKE ? ESCAPE '\\'"
            for column in ("workflow", "repo", "current_node", "created_by", "error")
        ]
        params += [pattern] * len(clauses)
        if prefix is not None:
            clauses.append("(run_id >= ? AND run_id < ?)")
            params += [prefix, prefix + "g"]
        where.append("(" + " OR ".join(clauses) + ")")
    sql = "SELECT * FROM runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?"
    runs = rows_of(conn.execute(sql, (*params, limit, offset)))
    _add_waiting(conn, runs)
    return runs


def list_run_facets(conn: apsw.Connection) -> dict[str, list[str]]:
    """The statuses, workflows and repositories runs have, each sorted: what a list of
    runs can be filtered by.
    """
    return {
        column: [str(r[0]) for r in conn.execute(f"SELECT DISTINCT {column} FROM runs ORDER BY 1")]
        for column in ("status", "workflow", "repo")
    }


def _add_waiting(conn: apsw.Connection, runs: list[Row]) -> None:
    """Give each waiting run the pending inbox items it waits for (``waiting``), in one read."""
    waiting = {r["run_id"]: r for r in runs if r["status"] in _WAITING}
    for run in runs:
        run["waiting"] = []
    if not waiting:
        return
    for item_id, run_id, kind, node, prompt in conn.execute(
        "SELECT item_id, run_id, kind, node, prompt FROM inbox WHERE status=? ORDER BY asked_at",
        (ItemStatus.PENDING.value,),
    ):
        found = waiting.get(run_id)
        if found is not None:
            found["waiting"].append(
                {"item_id": item_id, "kind": kind, "node": node, "prompt": prompt}
            )


def inbox_has_work(conn: apsw.Connection) -> bool:
    """Whether an inbox item is pending, or decided while its run is still suspended on it:
    each answered by its index, so that most commands, most of the time, look no further
    (and import nothing of the inbox's)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM inbox WHERE status=?) "
        f"OR EXISTS (SELECT 1 FROM inbox WHERE {AWAITED_DECIDED})",
        (ItemStatus.PENDING.value,),
    ).fetchone()
    return row != (0,)


def get_run(conn: apsw.Connection, run_id: str) -> Row:
    """One run with its nodes (in workflow order as far as they started)."""
    rows = rows_of(conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)))
    if not rows:
        raise RunNotFoundError(run_id)
    run = rows[0]
    run["nodes"] = list_nodes(conn, run_id)
    _add_waiting(conn, [run])
    return run


def list_nodes(conn: apsw.Connection, run_id: str) -> list[Row]:
    return rows_of(
        conn.execute(
            "SELECT node, status, kind, iteration, attempt, started_at, finished_at, duration_ms, "
            "agent_session_id, input_tokens, output_tokens, cost_usd, error "
            "FROM nodes WHERE run_id=? ORDER BY started_at IS NULL, started_at, seq, node",
            (run_id,),
        )
    )


def list_logs(
    conn: apsw.Connection, run_id: str, *, after: int = 0, limit: int | None = None
) -> list[Row]:
    """The run's log lines past position ``after``, oldest first."""
    sql = (
        "SELECT position, timestamp, node, kind, message, tool_name, is_error "
        "FROM logs WHERE run_id=? AND position>? ORDER BY position"
    )
    params: tuple[Any, ...] = (run_id, after)
    if limit is not None:
        sql += " LIMIT ?"
        params = (*params, limit)
    return rows_of(conn.execute(sql, params))


#: A reader of a run's log holds this many lines at a time (see ``iter_logs``).
LOG_PAGE = 1000


def iter_logs(
    conn: apsw.Connection, run_id: str, *, after: int = 0, page: int = LOG_PAGE
) -> Iterator[Row]:
    """The run's log lines past position ``after``, oldest first, read ``page`` at a time.

    A run's log can be millions of lines: a reader holds one page, not the log, and
    no read transaction between pages (a writer's checkpoint is not held back by a slow
    pipe). Lines appended meanwhile come after the last one read, so they are included.
    """
    while True:
        rows = list_logs(conn, run_id, after=after, limit=page)
        yield from rows
        if len(rows) < page:
            return
        after = rows[-1]["position"]


def list_last_logs(conn: apsw.Connection, run_id: str, *, limit: int) -> list[Row]:
    """The run's last ``limit`` log lines, oldest first."""
    rows = rows_of(
        conn.execute(
            "SELECT position, timestamp, node, kind, message, tool_name, is_error "
            "FROM logs WHERE run_id=? ORDER BY position DESC LIMIT ?",
            (run_id, limit),
        )
    )
    rows.reverse()
    return rows


def find_interrupted_run(conn: apsw.Connection, workflow: str, repo: str) -> str | None:
    """The newest interrupted run of ``workflow`` in ``repo``, if any (its id)."""
    row = conn.execute(
        "SELECT run_id FROM runs WHERE status=? AND workflow=? AND repo=? "
        "ORDER BY created_at DESC LIMIT 1",
        (RunStatus.INTERRUPTED.value, workflow, repo),
    ).fetchone()
    return str(row[0]) if row else None
