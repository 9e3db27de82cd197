"""Serving the dashboard: the listening socket, the token, the ASGI server (uvicorn).

The socket is bound before anything else, so a port in use is one clear line
and nothing started; ``port`` 0 takes any free one. The server stops on Ctrl-C
or SIGTERM as a server does, by closing every page's stream and returning
(uvicorn would raise the signal again once stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from events.errors import ServeAddressError
from shep.web import actions, pages
from shep.web.app import WebState
from shep.web.app import events as app_events
from shep.web.security import Guard, GuardMiddleware, new_token

#: Seconds the server waits for open requests when it stops (pages' streams end at once).
GRACE = 2


def create_app(state: WebState) -> GuardMiddleware:
    """The application behind its guard; starting it starts the feed."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        feed = state.feed
        if feed is None:
            feed = state.feed = state.new_feed()
        if not feed.prepared:
            await loop.run_in_executor(None, feed.prepare)
        feed.start(loop)
        try:
            yield
        finally:
            state.hub.close()
            await loop.run_in_executor(None, feed.stop)
            state.close()

    routes = [
        *pages.ROUTES,
        *actions.ROUTES,
        Route("/events", app_events),
        Mount("/static", StaticFiles(packages=[("shep.web", "static")]), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=pages.HANDLERS)
    app.state.web = state
    return GuardMiddleware(app, state.guard)


def is_loopback(host: str) -> bool:
    """Whether ``host`` reaches this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``; ``ServeAddressError`` (exit 2) when it cannot."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ServeAddressError(
            f"--host {host}: not an address of this machine ({e.strerror})."
        ) from e
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ServeAddressError(
                f"Port {port} on {host} is in use (another `shep ui`?). Choose another with "
                "--port, or --port 0 for any free one."
            ) from e
        raise ServeAddressError(f"Cannot listen on {host}:{port} ({e.strerror}).") from e
    return sock


def names_of(host: str) -> frozenset[str]:
    """The host names (besides IP addresses and localhost) a page may reach us by."""
    names = {host.lower()}
    if not is_loopback(host):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(n for n in names if n)


def url_host(host: str) -> str:
    """``host`` as it goes in a URL (brackets around IPv6; a wildcard as this machine's name)."""
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 (recognizes a wildcard; binds nothing)
        return socket.gethostname()
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


@dataclass
class Served:
    """What ``shep ui`` tells the user: where, and with which token."""

    url: str
    port: int
    loopback: bool


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by a signal without raising it again afterwards."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self._stop) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self, sig: int, frame: Any) -> None:
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True
        self._on_stop()


class _OneLine(logging.Formatter):
    """A server's errors as one line each (the traceback with ``--debug``)."""

    def __init__(self, debug: bool) -> None:
        super().__init__("shep ui: %(message)s")
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        if self.debug or record.exc_info is None:
            return super().format(record)
        error = record.exc_info[1]
        line = super().format(
            logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        )
        return f"{line.rstrip()}: {type(error).__name__}: {error} (--debug shows the traceback)"


def _log_errors(debug: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine(debug))
    for name in ("uvicorn.error", "shep.web"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(logging.WARNING)


def serve(
    *,
    host: str,
    port: int,
    read_only: bool,
    db_file: str,
    store_url: str | None,
    new_runtime: Callable[[], Any],
    on_ready: Callable[[Served], None],
    debug: bool = False,
) -> None:
    """Serve the dashboard until stopped; ``on_ready`` is told the URL once listening."""
    _log_errors(debug)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    guard = Guard(token=new_token(), port=bound, names=names_of(host), read_only=read_only)
    state = WebState(
        db_file=db_file,
        store_url=store_url,
        guard=guard,
        read_only=read_only,
        new_runtime=new_runtime,
    )
    state.feed = state.new_feed()
    try:
        state.feed.prepare()  # the store's problems, as one line, before anyone is told a URL
    except BaseException:
        sock.close()
        raise
    app = create_app(state)
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="on",
        loop="asyncio",
        http="h11",
        timeout_graceful_shutdown=GRACE,
        server_header=False,
    )
    loop_holder: dict[str, Any] = {}

    def on_stop() -> None:
        loop = loop_holder.get("loop")
        if loop is not None:
            loop.call_soon_threadsafe(state.hub.close)

    server = _Server(config, on_stop)
    served = Served(
        url=f"http://{url_host(host)}:{bound}/?token={guard.token}",
        port=bound,
        loopback=is_loopback(host),
    )

    async def run() -> None:
        import asyncio

        loop_holder["loop"] = asyncio.get_running_loop()
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            on_ready(served)
        await serving

    import asyncio

    try:
        asyncio.run(run())
    finally:
        sock.close()
