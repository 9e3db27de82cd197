"""What the fake LLM answers: scripted replies, errors, and the shared bits every wire API uses."""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TEXT = "Hello from the fake LLM. The answer is 42."


def new_id(prefix: str) -> str:
    """An id shaped like the real APIs' (``msg_fake...``, ``call_fake...``), unique per call."""
    return f"{prefix}fake{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolCall:
    """One tool call in a reply.

    ``arguments`` is a JSON object for function tools. For an OpenAI Responses
    ``custom`` (freeform) tool such as codex's ``apply_patch`` it is the raw
    input string and ``custom`` is true; the other APIs then send it as
    ``{"input": <string>}``.
    """

    name: str
    arguments: dict[str, Any] | str
    custom: bool = False
    call_id: str = field(default_factory=lambda: new_id("call_"))

    def arguments_object(self) -> dict[str, Any]:
        if isinstance(self.arguments, str):
            return {"input": self.arguments}
        return self.arguments

    def arguments_json(self) -> str:
        return json.dumps(self.arguments_object())


@dataclass(frozen=True)
class Reply:
    """One model turn: text (possibly empty) followed by tool calls (possibly none)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    delay: float = 0.0  # seconds the server waits before answering (for timeout tests)


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error in the API's own error shape; ``body`` replaces the whole JSON body."""

    status: int
    message: str | None = None
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()


# Per-status messages shared by the APIs (401 is API-specific, see the wire modules).
STATUS_MESSAGES = {
    400: "Bad request",
    403: "Permission denied",
    404: "Not found",
    408: "Request timeout",
    429: "Rate limit exceeded",
    500: "fake error 500",
    502: "Bad gateway",
    503: "Service unavailable",
    529: "Overloaded",
}


def error_message(error: ErrorReply, unauthorized: str) -> str:
    if error.message is not None:
        return error.message
    if error.status == 401:
        return unauthorized
    return STATUS_MESSAGES.get(error.status, f"fake error {error.status}")


def chunk_text(text: str, parts: int = 4) -> list[str]:
    """Split ``text`` at word boundaries into at most ``parts`` streaming deltas."""
    if not text:
        return []
    words = re.findall(r"\s*\S+\s*", text) or [text]
    size = max(1, math.ceil(len(words) / parts))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def estimate_tokens(value: Any) -> int:
    """A rough token count (characters / 4), as the samples' fake server used."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return max(1, len(text) // 4)


def fill_schema(schema: Any) -> Any:
    """A small value matching a JSON schema, for aux calls that ask for JSON output.

    Enums prefer ``"user"`` so gemini-style next-speaker checks end the turn.
    """
    if not isinstance(schema, dict):
        return {}
    if schema.get("enum"):
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: fill_schema(sub) for name, sub in props.items()}
    if kind == "array":
        return []
    if kind == "string":
        return "fake"
    if kind in {"integer", "number"}:
        return 0
    if kind == "boolean":
        return False
    return None


Scripted = Reply | ErrorReply
Body = dict[str, Any]


@dataclass(frozen=True)
class Wire:
    """How one wire API renders replies. ``model`` is the model named in the URL (Gemini)
    or empty (the others name it in the body)."""

    api: str
    aux_reply: Callable[[Body], Reply | None]  # a canned answer for an aux call, else None
    stream: Callable[[Reply, Body, str], Iterator[bytes]]
    json: Callable[[Reply, Body, str], Body]
    error_json: Callable[[ErrorReply, str], Body]  # (error, request id) -> body


class Script:
    """A thread-safe queue of replies. Each model call takes the head; an empty queue
    answers with the default text. An entry may repeat (``times``) or stick (``None``)."""

    def __init__(self, default_text: str = DEFAULT_TEXT) -> None:
        self.default_text = default_text
        self._lock = threading.Lock()
        self._items: deque[list[Any]] = deque()  # [reply, remaining uses or None]

    def push(self, reply: Scripted, times: int | None = 1) -> None:
        if times is not None and times < 1:
            raise ValueError("times must be at least 1, or None for every later call")
        with self._lock:
            self._items.append([reply, times])

    def take(self) -> Scripted:
        with self._lock:
            if not self._items:
                return Reply(text=self.default_text)
            head = self._items[0]
            if head[1] is not None:
                head[1] -= 1
                if head[1] == 0:
                    self._items.popleft()
            reply: Scripted = head[0]
            return reply

    def pending(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already a string."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()
