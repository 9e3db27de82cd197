"""Anthropic Messages API: ``POST /v1/messages`` (SSE or JSON) and ``/v1/messages/count_tokens``.

Used by Claude Code (``$ANTHROPIC_BASE_URL/v1/messages?beta=true``) and by
opencode through the bundled ``@ai-sdk/anthropic``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.support.fakellm.script import (
    Body,
    ErrorReply,
    Reply,
    Wire,
    chunk_text,
    error_message,
    estimate_tokens,
    new_id,
    sse,
)

API = "anthropic"
UNAUTHORIZED = "invalid x-api-key"
TITLE_TEXT = "Fake session title"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    if isinstance(system, list):
        return " ".join(str(block.get("text", "")) for block in system if isinstance(block, dict))
    return str(system)


#: How opencode's session-title prompt starts (read from its binary).
TITLE_PROMPT = "you are a title generator"


def aux_reply(body: Body) -> Reply | None:
    """opencode's session-title call (no tools, a title-writing system prompt) gets a title.

    Only opencode's own title prompt: a tool-less call of another CLI (claude with
    ``--tools ""``, shep's supervisor) is scripted like any other.
    """
    if not body.get("tools") and TITLE_PROMPT in _system_text(body).lower():
        return Reply(text=TITLE_TEXT)
    return None


def _content(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    blocks.extend(
        {
            "type": "tool_use",
            "id": call.call_id.replace("call_", "toolu_", 1),
            "name": call.name,
            "input": call.arguments_object(),
        }
        for call in reply.tool_calls
    )
    return blocks


def _usage(body: dict[str, Any], output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": estimate_tokens(body.get("messages", [])),
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def message_json(reply: Reply, body: Body, model: str = "") -> Body:
    """The non-streaming response (``stream`` absent or false)."""
    content = _content(reply)
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake-model"),
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": _usage(body, estimate_tokens(content)),
    }


def message_stream(reply: Reply, body: Body, model: str = "") -> Iterator[bytes]:
    """message_start, one content block per text/tool_use, message_delta, message_stop."""
    message = message_json(reply, body)
    start = dict(message, content=[], stop_reason=None, usage=_usage(body, 1))
    yield sse({"type": "message_start", "message": start}, "message_start")
    yield sse({"type": "ping"}, "ping")
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            empty: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in chunk_text(block["text"])]
        else:
            empty = dict(block, input={})
            raw = json.dumps(block["input"])
            half = len(raw) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": part}
                for part in (raw[:half], raw[half:])
                if part
            ]
        yield sse(
            {"type": "content_block_start", "index": index, "content_block": empty},
            "content_block_start",
        )
        for delta in deltas:
            yield sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
        yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
        "message_delta",
    )
    yield sse({"type": "message_stop"}, "message_stop")


def count_tokens_json(body: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": estimate_tokens(body)}


def error_json(error: ErrorReply, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": _ERROR_TYPES.get(error.status, "api_error"),
            "message": error_message(error, UNAUTHORIZED),
        },
        "request_id": request_id,
    }


WIRE = Wire(
    api=API, aux_reply=aux_reply, stream=message_stream, json=message_json, error_json=error_json
)
