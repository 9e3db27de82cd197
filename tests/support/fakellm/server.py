"""The scripted LLM HTTP server: routes the wire APIs, records requests, answers from a script."""

from __future__ import annotations

import gzip
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support.fakellm import wire_anthropic, wire_gemini, wire_openai
from tests.support.fakellm.script import (
    DEFAULT_TEXT,
    ErrorReply,
    Reply,
    Script,
    Scripted,
    ToolCall,
    Wire,
    new_id,
)

_RETRYABLE = {408, 409, 429} | set(range(500, 600))
_REASONS = {529: "Overloaded"}
_GEMINI_CALL = re.compile(
    r"/models/(?P<model>[^/:]+):(?P<method>streamGenerateContent|generateContent|countTokens)$"
)


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the server received, and what it answered."""

    method: str
    path: str  # without the query string
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: Any  # the parsed JSON body, or None
    api: str | None  # "anthropic", "responses", "chat", "gemini", or None for other paths
    aux: bool  # an auxiliary call (title, JSON-schema check, token count): not scripted
    api_key: str | None  # from x-api-key, Authorization: Bearer, x-goog-api-key or ?key=
    outcome: str  # "text", "tool_call", "error 401", "aux", "not found", ...
    time: float = field(default_factory=time.time)

    def dumps(self) -> str:
        """The body as JSON text, for substring checks such as "was turn 1 replayed?"."""
        return json.dumps(self.body)


class FakeLLM:
    """A scripted LLM server on 127.0.0.1 speaking the Anthropic, OpenAI (Responses and
    Chat Completions) and Gemini wire APIs, with streaming.

    Every model call takes the next scripted reply (``enqueue_*``); when the script is
    empty it answers ``default_text``. Auxiliary calls (opencode's title call, JSON-schema
    checks, token counts) get a fitting canned answer and leave the script alone. With
    ``api_key`` set, a call carrying any other key gets the API's own 401.

    Use it as a context manager, or ``start()`` / ``stop()``.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_text: str = DEFAULT_TEXT,
        api_key: str | None = None,
        chunk_delay: float = 0.0,
        verbose: bool = False,
    ) -> None:
        self.script = Script(default_text)
        self.api_key = api_key
        self.chunk_delay = chunk_delay
        self.verbose = verbose
        self._address = (host, port)
        self._records: list[RecordedRequest] = []
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeLLM:
        self._httpd = _Server(self._address, _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"fakellm:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeLLM is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, without ``/v1``."""
        return f"http://127.0.0.1:{self.port}"

    # --- script ------------------------------------------------------------------------

    def enqueue(self, reply: Scripted, *, times: int | None = 1) -> None:
        """Queue a reply for the next model call(s); ``times=None`` keeps it for every call."""
        self.script.push(reply, times)

    def enqueue_text(self, text: str, *, delay: float = 0.0, times: int | None = 1) -> None:
        self.enqueue(Reply(text=text, delay=delay), times=times)

    def enqueue_tool_call(
        self, name: str, arguments: dict[str, Any] | str, *, text: str = "", custom: bool = False
    ) -> ToolCall:
        """Queue one tool call in the API's native shape; returns it (for its call id)."""
        call = ToolCall(name=name, arguments=arguments, custom=custom)
        self.enqueue(Reply(text=text, tool_calls=(call,)))
        return call

    def enqueue_error(
        self,
        status: int,
        body: Any = None,
        *,
        message: str | None = None,
        headers: dict[str, str] | None = None,
        times: int | None = 1,
    ) -> None:
        """Queue an HTTP error in the API's own error shape (``body`` replaces the JSON)."""
        error = ErrorReply(
            status=status, message=message, body=body, headers=tuple((headers or {}).items())
        )
        self.enqueue(error, times=times)

    def pending(self) -> int:
        """How many scripted replies are still queued."""
        return self.script.pending()

    def reset(self) -> None:
        """Forget the script and the recorded requests."""
        self.script.clear()
        with self._lock:
            self._records.clear()

    # --- records -----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._records)

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """The model calls that took a scripted (or default) reply: no aux calls, no 404s."""
        return [r for r in self.requests if r.api is not None and not r.aux]

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until ``count`` requests have been recorded, or raise TimeoutError."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._records) >= count, timeout):
                raise TimeoutError(f"{len(self._records)} of {count} requests after {timeout}s")
            return list(self._records)

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)
            self._lock.notify_all()
        if self.verbose:
            key = " key" if record.api_key else ""
            print(
                f"fakellm: {record.method} {record.path} [{record.api}{key}] -> {record.outcome}",
                file=sys.stderr,
                flush=True,
            )

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], llm: FakeLLM
    ) -> None:
        self.llm = llm
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A CLI that is killed or drops a pooled connection is normal; anything else is shown."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _api_key(headers: dict[str, str], query: dict[str, str]) -> str | None:
    for name in ("x-api-key", "x-goog-api-key"):
        if headers.get(name):
            return headers[name]
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("key")


def _outcome(reply: Scripted) -> str:
    if isinstance(reply, ErrorReply):
        return f"error {reply.status}"
    return "tool_call" if reply.tool_calls else "text"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-llm/1.0"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the FakeLLM records requests itself (and prints them when verbose)."""

    # --- request parsing ---------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            raw = bytes(data)
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            raw = gzip.decompress(raw)
        return raw

    def _parts(self) -> tuple[str, dict[str, str], dict[str, str]]:
        url = urlsplit(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        return url.path, dict(parse_qsl(url.query)), headers

    def _record(
        self,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: Any,
        api: str | None,
        aux: bool,
        outcome: str,
    ) -> None:
        self.server.llm._record(
            RecordedRequest(
                method=self.command,
                path=path,
                query=query,
                headers=headers,
                body=body,
                api=api,
                aux=aux,
                api_key=_api_key(headers, query),
                outcome=outcome,
            )
        )

    # --- responses ---------------------------------------------------------------------

    def _send_json(
        self,
        status: int,
        payload: Any,
        extra: Iterable[tuple[str, str]] = (),
        request_id: str | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status, _REASONS.get(status))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", request_id or new_id("req_"))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", new_id("req_"))
        self.end_headers()
        try:
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.server.llm._sleep(self.server.llm.chunk_delay)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_error_reply(
        self, error: ErrorReply, error_json: Callable[[ErrorReply, str], dict[str, Any]]
    ) -> None:
        request_id = new_id("req_")
        payload = error.body if error.body is not None else error_json(error, request_id)
        retry = "true" if error.status in _RETRYABLE else "false"
        headers = (("x-should-retry", retry), *error.headers)
        self._send_json(error.status, payload, headers, request_id)

    # --- routing -----------------------------------------------------------------------

    def do_GET(self) -> None:
        path, query, headers = self._parts()
        if path in {"/", "/health"}:
            self._record(path, query, headers, None, None, True, "health")
            self._send_json(200, {"status": "ok", "server": "fake-llm"})
        elif path.endswith("/models"):
            gemini = "v1beta" in path
            self._record(path, query, headers, None, "gemini" if gemini else None, True, "models")
            self._send_json(200, wire_gemini.models_json() if gemini else wire_openai.models_json())
        else:
            self._not_found(path, query, headers, None)

    def do_POST(self) -> None:
        path, query, headers = self._parts()
        raw = self._read_body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._record(path, query, headers, body, None, False, "bad request")
            self._send_json(400, {"error": {"message": "fake-llm: body is not a JSON object"}})
            return
        gemini = _GEMINI_CALL.search(path)
        if path.endswith("/messages/count_tokens"):
            self._record(path, query, headers, body, wire_anthropic.API, True, "aux")
            self._send_json(200, wire_anthropic.count_tokens_json(body))
        elif gemini and gemini["method"] == "countTokens":
            self._record(path, query, headers, body, wire_gemini.API, True, "aux")
            self._send_json(200, wire_gemini.count_tokens_json(body))
        elif gemini:
            self._model_call(
                path,
                query,
                headers,
                body,
                wire_gemini.WIRE,
                gemini["model"],
                stream=gemini["method"] == "streamGenerateContent",
            )
        elif path.endswith("/messages"):
            self._model_call(path, query, headers, body, wire_anthropic.WIRE)
        elif path.endswith("/responses"):
            self._model_call(path, query, headers, body, wire_openai.RESPONSES)
        elif path.endswith("/chat/completions"):
            self._model_call(path, query, headers, body, wire_openai.CHAT)
        else:
            self._not_found(path, query, headers, body)

    def _not_found(
        self, path: str, query: dict[str, str], headers: dict[str, str], body: Any
    ) -> None:
        self._record(path, query, headers, body, None, False, "not found")
        self._send_json(
            404,
            {"error": {"message": f"fake-llm: no route for {self.command} {path}", "code": 404}},
        )

    def _model_call(
        self,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: dict[str, Any],
        wire: Wire,
        model: str = "",
        *,
        stream: bool | None = None,
    ) -> None:
        llm = self.server.llm
        aux_reply = wire.aux_reply(body)
        reply: Scripted
        if llm.api_key is not None and _api_key(headers, query) != llm.api_key:
            reply = ErrorReply(status=401)
        elif aux_reply is not None:
            reply = aux_reply
        else:
            reply = llm.script.take()
        aux = aux_reply is not None
        self._record(path, query, headers, body, wire.api, aux, "aux" if aux else _outcome(reply))
        if isinstance(reply, ErrorReply):
            self._send_error_reply(reply, wire.error_json)
            return
        llm._sleep(reply.delay)
        if body.get("stream") if stream is None else stream:
            self._send_stream(wire.stream(reply, body, model))
        else:
            self._send_json(200, wire.json(reply, body, model))
