"""Everything the web face reads from shep's core (what it writes is in ``shep.web.decide``;
the audit page's verification and exports are in ``shep.web.audit``).

The pages and the feed call these functions and no other module of ``shep``,
``projections``, ``commands`` or ``events`` (but ``events.display``): the one
place to re-point when the core moves. Reads are the read side's own
queries; nothing is copied out of ``shep/cli/`` (see ``docs/ui.md``, "Phase 2").

Each page reads in its thread's read-only connection (``open_reading``), in one
read transaction (``reading``): all it shows is of one log position (``data-after``),
from which its live updates continue.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import apsw

from events.display import printable

if TYPE_CHECKING:
    from projections.follow import LogFollower
    from shep.home.runtime import Runtime
    from shep.workflows.shape import GraphShape

Row = dict[str, Any]

#: Seconds between two looks at the log's change counter while the log moves.
POLL = 0.005
#: How often the follower looks once the log has been quiet for two seconds.
IDLE_POLL = 0.05
#: Log lines a run's page shows at first (the rest stream in, `shep logs RUN` has all).
LOG_LINES = 500
#: Bytes of one approved file shown on a page.
FILE_LIMIT = 256 * 1024


# --- the store: connections, positions, the log -------------------------------------------


def open_reading(db_file: str) -> apsw.Connection:
    """A read-only connection to the home's database (its log, or its copy of a shared one)."""
    from projections.database import open_database

    return open_database(db_file, readonly=True)


def open_writing(db_file: str) -> apsw.Connection:
    """The connection the feed keeps the projections current with (creates a missing store)."""
    from events.sqlite_file import ensure_home
    from projections.database import open_database

    ensure_home(os.path.dirname(db_file))
    return open_database(db_file)


@contextmanager
def reading(conn: apsw.Connection) -> Iterator[int]:
    """One read transaction; yields the log position the projections are at in it."""
    from projections.state import positions

    conn.execute("BEGIN")
    try:
        yield min(positions(conn).values())
    finally:
        conn.execute("COMMIT")


def projection_positions(conn: apsw.Connection) -> tuple[int, ...]:
    """Every projection's position: what the read side holds changes only when one moves,
    so what was read at the same positions (in a read transaction) is read again alike."""
    from projections.state import positions

    return tuple(positions(conn).values())


def catch_up(conn: apsw.Connection, *, pull: bool) -> None:
    from projections.catch_up import catch_up as run_catch_up

    run_catch_up(conn, pull=pull)


def head_position(conn: apsw.Connection) -> int:
    from projections.state import head_position as head

    return head(conn)


def read_events(conn: apsw.Connection, after: int, until: int) -> list[tuple[int, Any]]:
    """The log's events in (after, until], decoded, in order."""
    from events.catalog import decode_event

    return [
        (int(position), decode_event(topic, state))
        for position, topic, state in conn.execute(
            "SELECT notification_id, topic, state FROM stored_events "
            "WHERE notification_id > ? AND notification_id <= ? ORDER BY notification_id",
            (after, until),
        )
    ]


def open_follower(
    conn: apsw.Connection, *, after: int, url: str | None, poll: float = POLL
) -> LogFollower:
    """The follower of the log the feed runs (see ``shep.web.feed``): the one
    ``shep logs --follow`` uses, looking every ``poll`` seconds while the log moves and
    every ``IDLE_POLL`` once it has been quiet (a server left open all day costs next to
    nothing), woken by the shared store's notifications on a shared home.
    """
    from projections.follow import LogFollower

    return LogFollower(conn, after=after, url=url, poll=poll, idle_poll=IDLE_POLL)


def count_pending(conn: apsw.Connection) -> int:
    from projections.inbox_queries import count_pending as count

    return count(conn)


def upkeep(runtime: Runtime) -> None:
    """Mark runs whose worker is gone as interrupted, as every command does first. Not the
    inbox's part: done every few seconds, it would take a resume from ``shep answer --wait``."""
    from shep.runs.recovery import mark_orphans

    mark_orphans(runtime)


def new_runtime(*, debug: bool = False) -> Runtime:
    """A runtime of ``$SHEP_HOME`` of the server's own; its notices go to the server's log."""
    import logging

    from shep.home.runtime import Runtime

    return Runtime.from_environment(debug=debug, say=logging.getLogger("shep.web").warning)


def store_label(db_file: str, store_url: str | None) -> str:
    """Where the log is, as the page's footer says it: never with a password."""
    if store_url is None:
        return db_file
    from events.postgres_url import redacted

    return f"shared store {redacted(store_url)}"


# --- events as pages get them -------------------------------------------------------------


def event_line(event: Any) -> tuple[str | None, Row] | None:
    """(the run an event is of, the message a page gets) for one event; None for those
    no page shows (checkpoints: big, and nothing a person reads).

    The message's ``text`` is the logs projection's line for the event, made
    printable: control and bidirectional characters arrive as visible escapes.
    """
    from events.checkpoints import CheckpointSaved
    from events.runs import AgentOutputRecorded, NodeFailed, RunFailed
    from projections.logs import LOGS, describe

    if type(event).__module__ == CheckpointSaved.__module__:
        return None
    kind, node, text = describe(event)
    run = _run_of(event)
    output = isinstance(event, AgentOutputRecorded)
    payload: Row = {
        "t": type(event).__name__,
        "run": run,
        "kind": kind,
        "node": printable(node) if node else None,
        "text": printable(text),
        "at": event.timestamp.isoformat(),
        "err": bool(getattr(event, "is_error", False)) or isinstance(event, NodeFailed | RunFailed),
        "log": run is not None and type(event) in LOGS.handlers,
    }
    if output:
        payload["output"] = True
        if event.tool_name:
            payload["tool"] = printable(event.tool_name)
    if run is not None and isinstance(getattr(event, "run_id", None), UUID):
        payload["item"] = event.originator_id.hex
    return run, payload


def _run_of(event: Any) -> str | None:
    from events import features, runs

    run_id = getattr(event, "run_id", None)
    if isinstance(run_id, UUID):
        return run_id.hex
    if type(event).__module__ in (runs.__name__, features.__name__):
        return cast(str, event.originator_id.hex)
    return None


def touches_inbox(event: Any) -> bool:
    """Whether the event may change what waits in the inbox."""
    from projections.inbox import INBOX

    return type(event) in INBOX.handlers


# --- runs ---------------------------------------------------------------------------------


def list_runs(conn: apsw.Connection, filters: Row) -> list[Row]:
    """The runs ``shep status`` lists (active ones and the recent others), or with any
    filter (or ``all``) the runs that match, newest first."""
    from projections.queries import find_runs
    from projections.queries import list_runs as status_runs

    if not any(filters.get(k) for k in ("status", "workflow", "repo", "q", "all")):
        return status_runs(conn)
    return find_runs(
        conn,
        status=filters.get("status") or None,
        workflow=filters.get("workflow") or None,
        repo=filters.get("repo") or None,
        text=filters.get("q") or None,
        limit=int(filters.get("limit") or 200),
        offset=int(filters.get("offset") or 0),
    )


def run_facets(conn: apsw.Connection) -> dict[str, list[str]]:
    from projections.queries import list_run_facets

    return list_run_facets(conn)


def stale_after(conn: apsw.Connection) -> float:
    """Seconds after which a running run's heartbeat is old (the ``orphan_after`` setting)."""
    from shep.runs.recovery import orphan_after

    return orphan_after(conn)


def resolve_run(conn: apsw.Connection, ref: str) -> str:
    from projections.queries import resolve_run_id

    return resolve_run_id(conn, ref)


def get_run(conn: apsw.Connection, run_id: str) -> Row:
    from projections.queries import get_run as get

    return get(conn, run_id)


def last_logs(conn: apsw.Connection, run_id: str) -> list[Row]:
    from projections.queries import list_last_logs

    return list_last_logs(conn, run_id, limit=LOG_LINES)


_shapes_lock = threading.Lock()


@lru_cache(maxsize=64)
def _shape(workflow: str) -> GraphShape | None:
    from events.errors import ShepError
    from shep.workflows import get_workflow
    from shep.workflows.shape import workflow_shape

    try:
        return workflow_shape(get_workflow(workflow))
    except ShepError:
        return None  # a workflow this server does not know (a plugin not loaded here)


def graph_shape(workflow: str) -> GraphShape | None:
    """The workflow's graph (built once per server: it imports langgraph)."""
    with _shapes_lock:
        return _shape(workflow)


def replay(db_file: str, run_id: str) -> Any:
    """The run's frames (``shep.replay.Replay``), read from the log without changing it."""
    from shep.replay import frames_from_store

    return frames_from_store(db_file, run_id)


def format_ms(ms: int | None) -> str:
    from shep.replay import format_ms as fmt

    return fmt(ms)


def lineage(db_file: str, run_id: str) -> Any:
    """The fork tree around the run (``shep.replay.Lineage``)."""
    from shep.replay import lineage_from_store

    return lineage_from_store(db_file, run_id)[1]


# --- the inbox ----------------------------------------------------------------------------


def list_inbox(conn: apsw.Connection) -> list[Row]:
    from projections.inbox_queries import list_inbox as items

    return items(conn)


def get_item(conn: apsw.Connection, item_id: str) -> Row | None:
    from projections.inbox_queries import get_item as get

    return get(conn, item_id)


def feature_of(conn: apsw.Connection, run_id: str) -> Row | None:
    """The feature a run is, or None for a run of another workflow."""
    from events.errors import FeatureNotFoundError
    from projections.feature_queries import get_feature

    try:
        return get_feature(conn, run_id)
    except FeatureNotFoundError:
        return None


def shown_artifacts(item: Row, run: Row, feature: Row | None) -> list[Row]:
    """What an approval is about, each artifact with what a person reads of it: a file's
    content (and whether it is still the content asked about), the diff to merge, the
    test run's outcome. Read from the worktree and the repository, never past them.
    """
    shown = []
    for artifact in item["artifacts"]:
        kind = artifact.get("kind", "file")
        entry: Row = {"kind": kind, "path": artifact["path"], "sha256": artifact["sha256"]}
        if kind == "file":
            entry.update(_file(run["repo"], artifact["path"], artifact["sha256"]))
        elif kind == "diff":
            base, _, tree = artifact["path"].partition("..")
            repo = feature["source_repo"] if feature and feature["source_repo"] else run["repo"]
            entry["text"] = patch(repo, base, tree) if base and tree else ""
        elif kind == "tests" and feature is not None and feature["tests_command"]:
            entry["passed"] = feature["tests_passed"]
            entry["exit"] = feature["tests_exit"]
        shown.append(entry)
    return shown


def _file(root: str, path: str, sha256: str) -> Row:
    from events.errors import UnsafePathError
    from shep.git.worktree import read_inside

    try:
        data = read_inside(root, path, limit=FILE_LIMIT + 1)
    except UnsafePathError as e:
        return {"problem": str(e)}
    except OSError as e:
        return {"problem": f"{path} cannot be read ({e.strerror or e})."}
    cut = len(data) > FILE_LIMIT
    data = data[:FILE_LIMIT]
    return {
        "text": data.decode("utf-8", errors="replace"),
        "cut": cut,
        "changed": not cut and bool(sha256) and hashlib.sha256(data).hexdigest() != sha256,
    }


def patch(repo: str, base: str, head: str) -> str:
    """``git diff base head`` in ``repo``, read-only (see ``shep.replay.snapshots``)."""
    from shep.replay.snapshots import snapshot_patch

    return snapshot_patch(repo, base, head)


# --- features -----------------------------------------------------------------------------


def list_features(conn: apsw.Connection) -> list[Row]:
    from projections.feature_queries import list_features as features

    return features(conn, include_finished=True)


def resolve_feature(conn: apsw.Connection, ref: str) -> str:
    from projections.feature_queries import resolve_feature_id

    return resolve_feature_id(conn, ref)


def get_feature(conn: apsw.Connection, run_id: str) -> Row:
    from projections.feature_queries import get_feature as get

    return get(conn, run_id)


def list_asked(conn: apsw.Connection, run_id: str) -> list[Row]:
    from projections.feature_queries import list_asked as asked

    return asked(conn, run_id)


def spec_files(feature: Row) -> list[Row]:
    """The files of the feature's spec directory in its worktree, each with its text."""
    from events.errors import UnsafePathError
    from shep.git.worktree import inside_worktree

    worktree, spec_dir = feature["worktree"], feature["spec_dir"]
    if not spec_dir or feature["worktree_removed_at"]:
        return []
    try:
        folder = inside_worktree(worktree, spec_dir)
        names = sorted(e.name for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
    except (UnsafePathError, OSError):
        return []
    relative = os.path.relpath(folder, worktree)
    return [
        {"path": f"{relative}/{name}", **_file(worktree, f"{relative}/{name}", "")}
        for name in names
    ]


# --- the supervisor -----------------------------------------------------------------------


def collaboration_on(conn: apsw.Connection) -> bool:
    from shep.home.settings import read_setting_values

    return bool(read_setting_values(conn).flags["collaboration"])


def policies(conn: apsw.Connection) -> list[Row]:
    """Every scope's policy, as ``shep supervisor show --json`` gives them."""
    from commands.policies import fold_policies
    from events.catalog import decode_event
    from events.supervisor import POLICY_STREAM_ID

    events = [
        decode_event(topic, state)
        for topic, state in conn.execute(
            "SELECT topic, state FROM stored_events WHERE originator_id=? "
            "ORDER BY originator_version",
            (POLICY_STREAM_ID.hex,),
        )
    ]
    return [p.as_dict() for p in fold_policies(events).values()]


def decisions_for(runtime: Runtime, ref: str) -> list[Row]:
    """Every decision on a run's items or on one item (``shep supervisor why``'s rows)."""
    from shep.supervisor.history import decisions_for as why

    return why(runtime, ref)
