"""Queries `shep feat` reads: features, their tasks, and the people they waited for."""

from __future__ import annotations

import json
from typing import Any

import apsw

from events.errors import AmbiguousRunIdError, FeatureNotFoundError
from events.inbox_status import ItemStatus
from events.runs import FINAL_STATUSES
from projections.queries import Row, ids_with_prefix, rows_of

_FINAL = tuple(sorted(s.value for s in FINAL_STATUSES))
#: A feature's row with what the runs projection knows of its run.
_SELECT = (
    "SELECT f.*, r.status, r.finished_at, r.error, r.agent_type, r.model, r.created_by, "
    "r.input_tokens, r.output_tokens, r.cost_usd FROM features f JOIN runs r USING (run_id)"
)


def _decoded(rows: list[Row]) -> list[Row]:
    for row in rows:
        row["phases"] = json.loads(row["phases"])
        conflicts = row["merge_conflicts"]
        row["merge_conflicts"] = json.loads(conflicts) if conflicts is not None else None
        for flag in ("worktree_created", "pushed", "branch_deleted"):
            row[flag] = bool(row[flag])
        if row["tests_passed"] is not None:
            row["tests_passed"] = bool(row["tests_passed"])
    return rows


def list_features(conn: apsw.Connection, *, include_finished: bool) -> list[Row]:
    """Features whose run is not over (completed, failed, cancelled), or every one with
    ``include_finished``; newest first, each with the pending inbox items it waits for
    (``waiting``).
    """
    where = "" if include_finished else f"WHERE r.status NOT IN ({','.join('?' * len(_FINAL))}) "
    params = () if include_finished else _FINAL
    rows = _decoded(
        rows_of(conn.execute(f"{_SELECT} {where}ORDER BY f.created_at DESC, f.run_id", params))
    )
    _add_waiting(conn, rows)
    return rows


def _add_waiting(conn: apsw.Connection, features: list[Row]) -> None:
    by_run = {f["run_id"]: f for f in features}
    for feature in features:
        feature["waiting"] = []
    if not by_run:
        return
    for item in rows_of(
        conn.execute(
            "SELECT item_id, run_id, kind, node, prompt, asked_at FROM inbox "
            "WHERE status=? ORDER BY asked_at, item_id",
            (ItemStatus.PENDING.value,),
        )
    ):
        found = by_run.get(item.pop("run_id"))
        if found is not None:
            found["waiting"].append(item)


def get_feature(conn: apsw.Connection, run_id: str) -> Row:
    """One feature with its tasks (in the order they began) and the pending items it waits for."""
    rows = _decoded(rows_of(conn.execute(f"{_SELECT} WHERE f.run_id=?", (run_id,))))
    if not rows:
        raise FeatureNotFoundError(f"No feature {run_id!r}. List them with `shep feat ls --all`.")
    feature = rows[0]
    feature["tasks"] = list_tasks(conn, run_id)
    _add_waiting(conn, [feature])
    return feature


def list_tasks(conn: apsw.Connection, run_id: str) -> list[Row]:
    """The tasks the feature began: id, phase, title, state, attempts, timing, snapshot, usage."""
    return rows_of(
        conn.execute(
            "SELECT task, phase, title, state, attempts, started_at, finished_at, duration_ms, "
            "snapshot, input_tokens, output_tokens, cost_usd FROM feature_tasks "
            "WHERE run_id=? ORDER BY started_at, task",
            (run_id,),
        )
    )


def list_asked(conn: apsw.Connection, run_id: str) -> list[Row]:
    """Every question and gate the run asked, decided or not: node, kind, status, when asked,
    when decided (None while pending or when withdrawn).
    """
    return rows_of(
        conn.execute(
            "SELECT item_id, node, iteration, kind, status, asked_at, answered_at, actor "
            "FROM inbox WHERE run_id=? ORDER BY asked_at, item_id",
            (run_id,),
        )
    )


def resolve_feature_id(conn: apsw.Connection, ref: str) -> str:
    """The run id of the feature ``ref`` names: its branch (exactly), its spec directory's
    name (``001-add-login`` or ``add-login``), or a unique prefix of its run id.
    """
    ref = ref.strip()
    if not ref:
        raise FeatureNotFoundError("Name a feature: its id, branch or spec. See `shep feat ls`.")
    for kind, matches in (
        ("branch", _column_matches(conn, "branch=?", (ref,))),
        (
            "spec",
            _column_matches(
                conn,
                "spec_dir != '' AND (spec_dir=? OR spec_dir LIKE ? ESCAPE '\\' "
                "OR spec_dir LIKE ? ESCAPE '\\')",
                (ref, "%/" + _like(ref), "%/___-" + _like(ref)),
            ),
        ),
        ("id", ids_with_prefix(conn, "features", "run_id", ref)),
    ):
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(m[:8] for m in matches[:3]) + (", ..." if len(matches) > 3 else "")
            raise AmbiguousRunIdError(
                f"{ref!r} matches several features by {kind} ({shown}); name one by more of its id."
            )
    raise FeatureNotFoundError(_not_found(conn, ref))


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _column_matches(conn: apsw.Connection, where: str, params: tuple[Any, ...]) -> list[str]:
    return [
        str(r[0])
        for r in conn.execute(
            f"SELECT run_id FROM features WHERE {where} ORDER BY created_at DESC LIMIT 4", params
        )
    ]


def _not_found(conn: apsw.Connection, ref: str) -> str:
    runs = ids_with_prefix(conn, "runs", "run_id", ref)
    if len(runs) == 1:
        row = conn.execute("SELECT workflow FROM runs WHERE run_id=?", (runs[0],)).fetchone()
        workflow = row[0] if row else "other"
        return (
            f"Run {runs[0][:8]} is a run of {workflow}, not a feature; "
            f"see `shep status {runs[0][:8]}`."
        )
    return f"No feature {ref!r} (by id, branch or spec). List them with `shep feat ls --all`."
