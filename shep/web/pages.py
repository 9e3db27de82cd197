"""The pages: runs, a run, the inbox, features, replay, audit, the supervisor.

Each page reads in one read transaction (``core.reading``) and says the log
position it shows (``data-after``); its live parts are fragments of the same
templates, fetched again when the stream says something of theirs changed.
Every read is the read side's own (``shep.web.core``); nothing here writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, BinaryIO, cast

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from events.errors import (
    AmbiguousRunIdError,
    FeatureNotFoundError,
    ItemRefError,
    RunNotFoundError,
    ShepError,
)
from events.inbox_status import ItemKind, ItemStatus
from events.run_status import RunStatus
from shep.web import audit, core
from shep.web.app import EXPORTS, WebState, render
from shep.web.graph import graph_svg
from shep.web.runs_table import Facets, Listings, Rows

Row = dict[str, Any]

#: Run statuses in the order the filter offers them.
STATUSES = tuple(
    s.value
    for s in (
        RunStatus.PENDING,
        RunStatus.RUNNING,
        RunStatus.WAITING_APPROVAL,
        RunStatus.WAITING_ANSWER,
        RunStatus.INTERRUPTED,
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    )
)
_FILTERS = ("status", "workflow", "repo", "q", "all", "offset")
PAGE_SIZE = 200


def _state(request: Request) -> WebState:
    state: WebState = request.app.state.web
    return state


# --- runs ---------------------------------------------------------------------------------


def _filters(request: Request) -> Row:
    found = {key: request.query_params.get(key, "").strip() for key in _FILTERS}
    if found["status"] and found["status"] not in STATUSES:
        found["status"] = ""
    try:
        found["offset"] = str(max(0, int(found["offset"] or 0)))
    except ValueError:
        found["offset"] = "0"
    found["limit"] = str(PAGE_SIZE)
    return found


def _runs(request: Request) -> Row:
    state = _state(request)
    filters = _filters(request)
    conn = state.readers.get()

    def read() -> tuple[list[Row], float | None, int]:
        runs = core.list_runs(conn, filters)
        running = any(r["status"] == RunStatus.RUNNING for r in runs)
        return runs, core.stale_after(conn) if running else None, core.count_pending(conn)

    with core.reading(conn) as position:
        listings = state.cache("listings", Listings)
        key = tuple(filters[k] for k in sorted(filters))
        runs, stale, count = listings.get(core.projection_positions(conn), key, read)
        facets = state.cache("facets", Facets).get(state, conn)
    query = "&".join(
        f"{k}={v}" for k, v in request.query_params.multi_items() if k in _FILTERS and v
    )
    filtered = any(filters[k] for k in ("status", "workflow", "repo", "q", "all"))
    return {
        "rows": state.cache("rows", Rows).render(state, runs, stale),
        "facets": facets,
        "statuses": STATUSES,
        "filters": filters,
        "filtered": filtered,
        "more": filtered and len(runs) == PAGE_SIZE,
        "next_offset": int(filters["offset"]) + PAGE_SIZE,
        "query": query,
        "stale_after": stale,
        "position": position,
        "inbox_count": count,
    }


def runs_page(request: Request) -> Response:
    return render(request, "runs.html", page="runs", **_runs(request))


def runs_rows(request: Request) -> Response:
    return render(request, "_runs_rows.html", **_runs(request))


# --- a run --------------------------------------------------------------------------------


def _run_id(conn: Any, ref: str) -> str:
    return core.resolve_run(conn, ref)


def _timeline(state: WebState, run_id: str) -> tuple[list[Any], str]:
    """The run's steps with their agent time and time waiting for a person (from the
    replay's frames), and why there are none when they cannot be read."""
    try:
        replay = core.replay(state.db_file, run_id)
    except ShepError as e:
        return [], str(e)
    kinds = ("node", "question", "approval", "decision")
    return [f for f in replay.frames if f.kind in kinds], ""


def _live(state: WebState, run: Row) -> Row:
    """The parts of a run's page that change as it goes: graph, steps, usage, heartbeat."""
    shape = core.graph_shape(run["workflow"])
    states = {n["node"]: n["status"] for n in run["nodes"]}
    graph = graph_svg(shape, states, run["current_node"]) if shape is not None else None
    steps, problem = _timeline(state, run["run_id"])
    return {
        "run": run,
        "graph": graph,
        "steps": steps,
        "steps_problem": problem,
        "agent_ms": sum(f.agent_ms or 0 for f in steps),
        "waited_ms": sum(f.waited_ms or 0 for f in steps),
    }


def _run(request: Request) -> tuple[Row, int, Row | None, list[Row], float, int]:
    state = _state(request)
    conn = state.readers.get()
    with core.reading(conn) as position:
        run_id = _run_id(conn, request.path_params["run"])
        run = core.get_run(conn, run_id)
        feature = core.feature_of(conn, run_id)
        logs = core.last_logs(conn, run_id)
        stale = core.stale_after(conn)
        count = core.count_pending(conn)
    return run, position, feature, logs, stale, count


def run_page(request: Request) -> Response:
    state = _state(request)
    run, position, feature, logs, stale, count = _run(request)
    return render(
        request,
        "run.html",
        page="run",
        run_id=run["run_id"],
        position=position,
        feature=feature,
        logs=logs,
        stale_after=stale,
        inbox_count=count,
        **_live(state, run),
    )


def run_live(request: Request) -> Response:
    state = _state(request)
    run, position, _, _, stale, _ = _run(request)
    return render(
        request, "_run_live.html", stale_after=stale, position=position, **_live(state, run)
    )


# --- the inbox ----------------------------------------------------------------------------


def _version(item: Row) -> str:
    """Changes whenever what the page shows of the item changes."""
    seen = repr(
        (item["status"], item["actor"], item["answered_at"], item["votes"], item["supervisor"])
    )
    return hashlib.sha256(seen.encode()).hexdigest()[:12]


def _shown_item(conn: Any, item: Row) -> Row:
    item["version"] = _version(item)
    if item["kind"] == ItemKind.APPROVAL and item["status"] == ItemStatus.PENDING:
        run = core.get_run(conn, item["run_id"])
        item["shown"] = core.shown_artifacts(item, run, core.feature_of(conn, item["run_id"]))
    else:
        item["shown"] = []
    return item


def _inbox(request: Request) -> Row:
    state = _state(request)
    conn = state.readers.get()
    shown = [
        i for i in request.query_params.get("shown", "").split(",") if len(i) == 32 and i.isalnum()
    ]
    with core.reading(conn) as position:
        items = [_shown_item(conn, item) for item in core.list_inbox(conn)]
        pending = {item["item_id"] for item in items}
        for item_id in shown:
            if item_id not in pending and (decided := core.get_item(conn, item_id)) is not None:
                items.append(_shown_item(conn, decided))
        count = len(pending)
    return {"items": items, "position": position, "inbox_count": count}


def inbox_page(request: Request) -> Response:
    return render(request, "inbox.html", page="inbox", **_inbox(request))


def inbox_items(request: Request) -> Response:
    return render(request, "_items.html", **_inbox(request))


def item_page(request: Request) -> Response:
    state = _state(request)
    conn = state.readers.get()
    with core.reading(conn) as position:
        item = core.get_item(conn, request.path_params["item"])
        if item is None:
            raise ItemRefError(f"No inbox item {request.path_params['item']!r}.")
        item = _shown_item(conn, item)
    return render(request, "item.html", page="item", item=item, position=position)


# --- features -----------------------------------------------------------------------------


def _features(request: Request) -> Row:
    conn = _state(request).readers.get()
    with core.reading(conn) as position:
        return {"features": core.list_features(conn), "position": position}


def features_page(request: Request) -> Response:
    return render(request, "features.html", page="features", **_features(request))


def features_rows(request: Request) -> Response:
    return render(request, "_features_rows.html", **_features(request))


def _feature(request: Request) -> Row:
    state = _state(request)
    conn = state.readers.get()
    with core.reading(conn) as position:
        run_id = core.resolve_feature(conn, request.path_params["ref"])
        feature = core.get_feature(conn, run_id)
        asked = core.list_asked(conn, run_id)
    diff = ""
    if feature["last_snapshot"] and feature["base_sha"]:
        diff = core.patch(feature["source_repo"], feature["base_sha"], feature["last_snapshot"])
    try:
        tree = core.lineage(state.db_file, run_id)
    except ShepError:
        tree = None
    return {
        "feature": feature,
        "asked": asked,
        "specs": core.spec_files(feature),
        "diff": diff,
        "lineage": tree,
        "run_id": run_id,
        "position": position,
    }


def feature_page(request: Request) -> Response:
    return render(request, "feature.html", page="feature", **_feature(request))


def feature_live(request: Request) -> Response:
    return render(request, "_feature_live.html", **_feature(request))


# --- replay -------------------------------------------------------------------------------


def _replay(request: Request) -> tuple[Any, int, str]:
    state = _state(request)
    conn = state.readers.get()
    with core.reading(conn):
        run_id = _run_id(conn, request.path_params["run"])
    replay = core.replay(state.db_file, run_id)
    raw = request.path_params.get("frame") or request.query_params.get("frame") or ""
    try:
        index = int(raw) if raw else len(replay)
    except ValueError:
        index = len(replay)
    return replay, min(max(index, 1), max(len(replay), 1)), run_id


def replay_page(request: Request) -> Response:
    replay, index, run_id = _replay(request)
    frame = replay.frame(index) if len(replay) else None
    return render(
        request,
        "replay.html",
        page="replay",
        replay=replay,
        frame=frame,
        index=index,
        run_id=run_id,
    )


def replay_frame(request: Request) -> Response:
    replay, index, run_id = _replay(request)
    frame = replay.frame(index) if len(replay) else None
    return render(request, "_frame.html", replay=replay, frame=frame, index=index, run_id=run_id)


def replay_frames(request: Request) -> Response:
    replay, index, run_id = _replay(request)
    return render(request, "_frames.html", replay=replay, index=index, run_id=run_id)


# --- audit --------------------------------------------------------------------------------


def audit_page(request: Request) -> Response:
    state = _state(request)
    conn = state.readers.get()
    with core.reading(conn) as position:
        head = core.head_position(conn)
    verified = None
    if request.query_params.get("verify"):
        try:
            verified = audit.verify(state.db_file, state.store_url)
        except ShepError as e:
            verified = {"ok": False, "problem": str(e), "offline": ""}
    return render(
        request,
        "audit.html",
        page="audit",
        head=head,
        verified=verified,
        formats=list(EXPORTS),
        kinds=("all", "decisions", "approvals"),
        position=position,
    )


class _Chunks(io.RawIOBase):
    """What an export writer writes to in its thread: chunks handed to the response on the
    event loop, no more than a few at a time (a slow download slows the writer)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
        self.loop = loop
        self.queue = queue
        self.gone = threading.Event()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.gone.is_set():
            raise BrokenPipeError("the download was closed")
        chunk = bytes(data)
        asyncio.run_coroutine_threadsafe(self.queue.put(chunk), self.loop).result()
        return len(chunk)


async def _streamed(write: Callable[[BinaryIO], None]) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=8)
    raw = _Chunks(loop, queue)
    done = object()

    def work() -> None:
        try:
            with io.BufferedWriter(raw, 256 * 1024) as out:
                write(cast(BinaryIO, out))
            result: Any = done
        except BaseException as e:  # handed to the response, which ends the download
            result = e
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(queue.put(result), loop).result()

    task = loop.run_in_executor(None, work)
    try:
        while True:
            chunk = await queue.get()
            if chunk is done:
                break
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
    finally:
        raw.gone.set()
        while not task.done():  # let a writer blocked on a full queue see it is gone
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            await asyncio.sleep(0.01)


async def audit_export(request: Request) -> Response:
    """An audit export of the whole log, streamed (a bundle is a tar, written whole first)."""
    state = _state(request)
    fmt = request.path_params["fmt"]
    kind = request.query_params.get("kind", "all")
    if fmt not in EXPORTS or kind not in ("all", "decisions", "approvals"):
        raise HTTPException(404)
    media, suffix = EXPORTS[fmt]
    headers = {"content-disposition": f'attachment; filename="shep-audit-{kind}.{suffix}"'}
    if fmt == "bundle":
        return StreamingResponse(_bundle(state, kind), media_type=media, headers=headers)
    stream = _streamed(lambda out: audit.write_export(state.db_file, fmt, kind, out))
    return StreamingResponse(stream, media_type=media, headers=headers)


async def _bundle(state: WebState, kind: str) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    with tempfile.TemporaryDirectory(prefix="shep-ui-bundle-") as folder:
        path = os.path.join(folder, "audit.tar")
        await loop.run_in_executor(None, audit.write_bundle, state.db_file, kind, path)
        with open(path, "rb") as f:
            while chunk := await loop.run_in_executor(None, f.read, 256 * 1024):
                yield chunk


# --- the supervisor -----------------------------------------------------------------------


def supervisor_page(request: Request) -> Response:
    state = _state(request)
    conn = state.readers.get()
    ref = request.query_params.get("ref", "").strip()
    with core.reading(conn) as position:
        on = core.collaboration_on(conn)
        policies = core.policies(conn)
    decisions: list[Row] | None = None
    problem = ""
    if ref:
        try:
            decisions = state.with_runtime(lambda runtime: core.decisions_for(runtime, ref))
        except ShepError as e:
            problem = str(e)
    return render(
        request,
        "supervisor.html",
        page="supervisor",
        on=on,
        policies=policies,
        ref=ref,
        decisions=decisions,
        problem=problem,
        position=position,
    )


# --- errors -------------------------------------------------------------------------------


def _not_found(request: Request, exc: Exception) -> Response:
    return render(request, "error.html", status=404, page="error", message=str(exc))


def _shep_error(request: Request, exc: Exception) -> Response:
    status = 400 if getattr(exc, "exit_code", 1) == 2 else 500
    return render(request, "error.html", status=status, page="error", message=str(exc))


HANDLERS: dict[Any, Callable[[Request, Exception], Any]] = {
    RunNotFoundError: _not_found,
    FeatureNotFoundError: _not_found,
    ItemRefError: _not_found,
    AmbiguousRunIdError: _shep_error,
    ShepError: _shep_error,
}

ROUTES = [
    Route("/", runs_page),
    Route("/fragment/runs", runs_rows),
    Route("/runs/{run}", run_page),
    Route("/runs/{run}/live", run_live),
    Route("/runs/{run}/replay", replay_page),
    Route("/runs/{run}/replay/frames", replay_frames),
    Route("/runs/{run}/replay/{frame:int}", replay_frame),
    Route("/inbox", inbox_page),
    Route("/fragment/inbox", inbox_items),
    Route("/items/{item}", item_page),
    Route("/features", features_page),
    Route("/fragment/features", features_rows),
    Route("/features/{ref:path}/live", feature_live),
    Route("/features/{ref:path}", feature_page),
    Route("/audit", audit_page),
    Route("/audit/export/{fmt}", audit_export),
    Route("/supervisor", supervisor_page),
]
