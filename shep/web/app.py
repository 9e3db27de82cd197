"""The dashboard's application: its state, its routes, the live stream, the templates.

``shep.web.server.create_app`` wires one ``WebState`` (the home's database, the feed, the guard)
into a Starlette application behind ``GuardMiddleware``. Pages (``pages``) and
actions (``actions``) are plain functions of a request; Starlette runs them in
its thread pool, where each thread reads through a connection of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import apsw
import jinja2
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from events.display import printable
from events.inbox_status import ItemKind, ItemStatus
from events.run_status import RunStatus
from shep.web import core
from shep.web.feed import Feed, Hub
from shep.web.security import Guard

T = TypeVar("T")

#: Bumped with the static files, so a browser never mixes an old script with a new page.
STATIC_VERSION = "3"


class Readers:
    """One read-only connection per thread of the server's pool, opened on first use."""

    def __init__(self, db_file: str) -> None:
        self.db_file = db_file
        self._local = threading.local()
        self._all: list[apsw.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> apsw.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = core.open_reading(self.db_file)
            with self._lock:
                self._all.append(conn)
        return cast(apsw.Connection, conn)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


#: The export formats, and what each is sent as.
EXPORTS = {
    "jsonl": ("application/x-ndjson", "jsonl"),
    "csv": ("text/csv; charset=utf-8", "csv"),
    "otlp-json": ("application/x-ndjson", "otlp.jsonl"),
    "bundle": ("application/x-tar", "tar"),
}


@dataclass
class WebState:
    """What every request of one server shares."""

    db_file: str
    store_url: str | None
    guard: Guard
    read_only: bool
    #: Makes the server's own runtimes (a Runtime is not shared between threads).
    new_runtime: Callable[[], Any]
    upkeep: bool = True
    readers: Readers = field(init=False)
    templates: jinja2.Environment = field(init=False)
    hub: Hub = field(init=False)
    feed: Feed | None = None
    #: One runtime for the reads that need the event store (the supervisor's history).
    _runtime: Any = None
    _runtime_lock: threading.Lock = field(default_factory=threading.Lock)
    #: What pages keep between requests (rendered rows, lists of names), by name.
    _caches: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.readers = Readers(self.db_file)
        self.templates = environment()
        self.hub = Hub(self._history)

    def new_feed(self) -> Feed:
        """The server's feed (one per server): it keeps the projections current, and does
        every command's upkeep unless the server is read-only."""
        upkeep = _upkeep(self) if self.upkeep and not self.read_only else None
        return Feed(self.hub, db_file=self.db_file, store_url=self.store_url, upkeep=upkeep)

    def _history(self, after: int, until: int) -> Any:
        assert self.feed is not None
        return self.feed.history(after, until)

    def cache(self, name: str, make: Callable[[], T]) -> T:
        """The server's ``name`` cache, made by ``make`` on first use."""
        with self._runtime_lock:
            if name not in self._caches:
                self._caches[name] = make()
            return cast(T, self._caches[name])

    @property
    def store_label(self) -> str:
        return core.store_label(self.db_file, self.store_url)

    def with_runtime(self, use: Callable[[Any], Any]) -> Any:
        """``use(runtime)`` with the server's reading runtime, one caller at a time."""
        with self._runtime_lock:
            if self._runtime is None:
                self._runtime = self.new_runtime()
            return use(self._runtime)

    def close(self) -> None:
        self.readers.close()
        with self._runtime_lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None


def _finalize(value: Any) -> Any:
    """Every value a template prints: text another wrote shows its control and bidi
    characters as escapes (``events.display.printable``) before HTML escaping."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return printable(value)


def age(value: str | None) -> str:
    """'42s', '5m', '3h', '2d' since an ISO timestamp; '-' for none."""
    if not value:
        return "-"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - moment).total_seconds()))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") + " UTC" if value else "-"


def _diff_lines(patch: str) -> list[tuple[str, str]]:
    """Each line of a patch with its class: added, removed, a hunk, a file's header."""
    lines = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---", "diff --git", "index ", "new file", "deleted file")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append((kind, line))
    return lines


def environment() -> jinja2.Environment:
    """The templates: autoescaped, every printed value made printable first."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("shep.web", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["when"] = _when
    env.filters["short"] = lambda value: (value or "")[:8]
    env.filters["ms"] = core.format_ms
    env.filters["diff_lines"] = _diff_lines
    env.globals["static_version"] = STATIC_VERSION
    # The status words, said once: templates compare with these, never with a literal.
    env.globals.update(RunStatus=RunStatus, ItemStatus=ItemStatus, ItemKind=ItemKind)
    return env


def render(request: Request, template: str, status: int = 200, **values: Any) -> Response:
    """A page (or a fragment) of ``template`` with the values every page has."""
    state: WebState = request.app.state.web
    values.setdefault("position", 0)
    values.setdefault("run_id", "")
    html = state.templates.get_template(template).render(
        request=request,
        csrf=state.guard.csrf,
        read_only=state.read_only,
        store=state.store_label,
        inbox_count=values.pop("inbox_count", state.hub.inbox_count),
        **values,
    )
    return Response(html, status_code=status, media_type="text/html; charset=utf-8")


async def events(request: Request) -> Response:
    """The live stream of a page (Server-Sent Events): ``run`` narrows it to one run's
    events (agent output included); ``after`` (or ``Last-Event-ID`` when the browser
    reconnects) is the log position the page has seen.
    """
    state: WebState = request.app.state.web
    last = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        after = int(last)
    except ValueError:
        after = 0
    run = request.query_params.get("run") or None
    if run is not None and not (len(run) == 32 and all(c in "0123456789abcdef" for c in run)):
        return Response("not a run id\n", status_code=400, media_type="text/plain")
    if state.hub.closing:
        return Response("stopping\n", status_code=503, media_type="text/plain")
    return StreamingResponse(
        state.hub.stream(after=after, run=run),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


def _upkeep(state: WebState) -> Callable[[], None]:
    runtime: Any = None

    def upkeep() -> None:
        nonlocal runtime
        if runtime is None:
            runtime = state.new_runtime()
        try:
            core.upkeep(runtime)
        except BaseException:
            runtime.close()  # opened afresh next round: a store that failed may be back
            runtime = None
            raise

    return upkeep
