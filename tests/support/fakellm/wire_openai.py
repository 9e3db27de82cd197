"""OpenAI wire APIs: Responses (``POST /v1/responses``, codex) and Chat Completions
(``POST /v1/chat/completions``: qwen, Continue, aider through litellm)."""

from __future__ import annotations

import json
import time
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
    fill_schema,
    new_id,
    sse,
)

RESPONSES_API = "responses"
CHAT_API = "chat"
UNAUTHORIZED = (
    "Incorrect API key provided. You can find your API key at "
    "https://platform.openai.com/account/api-keys."
)

_ERROR_KINDS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def error_json(error: ErrorReply, request_id: str) -> dict[str, Any]:
    kind, code = _ERROR_KINDS.get(error.status, ("server_error", None))
    return {
        "error": {
            "message": error_message(error, UNAUTHORIZED),
            "type": kind,
            "param": None,
            "code": code,
        }
    }


def models_json() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake-llm"}],
    }


# --- Responses ------------------------------------------------------------------------


def _response_items(reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append(
            {
                "id": new_id("msg_"),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for call in reply.tool_calls:
        if call.custom and isinstance(call.arguments, str):
            items.append(
                {
                    "id": new_id("ctc_"),
                    "type": "custom_tool_call",
                    "status": "completed",
                    "call_id": call.call_id,
                    "name": call.name,
                    "input": call.arguments,
                }
            )
        else:
            items.append(
                {
                    "id": new_id("fc_"),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments_json(),
                }
            )
    return items


def _response_object(
    body: dict[str, Any], response_id: str, status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": body.get("model", "fake-model"),
        "output": output,
    }
    if status == "completed":
        input_tokens = estimate_tokens(body.get("input", []))
        output_tokens = estimate_tokens(output)
        obj["usage"] = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
    return obj


def response_json(reply: Reply, body: Body, model: str = "") -> Body:
    return _response_object(body, new_id("resp_"), "completed", _response_items(reply))


def _item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """output_item.added, the item's deltas, output_item.done."""
    common = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        text = item["content"][0]["text"]
        yield (
            "response.output_item.added",
            {"output_index": index, "item": dict(item, status="in_progress", content=[])},
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        yield "response.content_part.added", {**common, "content_index": 0, "part": part}
        for delta in chunk_text(text):
            yield "response.output_text.delta", {**common, "content_index": 0, "delta": delta}
        yield "response.output_text.done", {**common, "content_index": 0, "text": text}
        yield (
            "response.content_part.done",
            {**common, "content_index": 0, "part": dict(part, text=text)},
        )
    elif item["type"] == "function_call":
        yield (
            "response.output_item.added",
            {"output_index": index, "item": dict(item, status="in_progress", arguments="")},
        )
        yield "response.function_call_arguments.delta", {**common, "delta": item["arguments"]}
        yield "response.function_call_arguments.done", {**common, "arguments": item["arguments"]}
    else:
        yield (
            "response.output_item.added",
            {"output_index": index, "item": dict(item, status="in_progress", input="")},
        )
        yield "response.custom_tool_call_input.delta", {**common, "delta": item["input"]}
        yield "response.custom_tool_call_input.done", {**common, "input": item["input"]}
    yield "response.output_item.done", {"output_index": index, "item": item}


def response_stream(reply: Reply, body: Body, model: str = "") -> Iterator[bytes]:
    """response.created, per-item events, response.completed (with usage)."""
    response_id = new_id("resp_")
    items = _response_items(reply)
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": _response_object(body, response_id, "in_progress", [])}),
        (
            "response.in_progress",
            {"response": _response_object(body, response_id, "in_progress", [])},
        ),
    ]
    for index, item in enumerate(items):
        events.extend(_item_events(index, item))
    events.append(
        (
            "response.completed",
            {"response": _response_object(body, response_id, "completed", items)},
        )
    )
    for seq, (name, data) in enumerate(events):
        yield sse({"type": name, "sequence_number": seq, **data}, name)


# --- Chat Completions -----------------------------------------------------------------


def chat_aux_reply(body: Body) -> Reply | None:
    """A call asking for JSON (``response_format``) gets JSON that fits its schema."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") not in {"json_schema", "json_object"}:
        return None
    schema = (fmt.get("json_schema") or {}).get("schema", {"type": "object"})
    return Reply(text=json.dumps(fill_schema(schema)))


def _chat_usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    prompt = estimate_tokens(body.get("messages", []))
    completion = estimate_tokens([reply.text, *(c.arguments_json() for c in reply.tool_calls)])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _chat_tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json()},
        }
        for call in reply.tool_calls
    ]


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def chat_json(reply: Reply, body: Body, model: str = "") -> Body:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = _chat_tool_calls(reply)
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(reply),
            }
        ],
        "usage": _chat_usage(body, reply),
    }


def chat_stream(reply: Reply, body: Body, model: str = "") -> Iterator[bytes]:
    """Role chunk, content deltas, tool_call deltas, a finish chunk, usage if asked, [DONE]."""
    base = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    for part in chunk_text(reply.text):
        yield chunk({"content": part})
    for index, call in enumerate(_chat_tool_calls(reply)):
        args = call["function"]["arguments"]
        half = len(args) // 2
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        for part in [p for p in (args[:half], args[half:]) if p]:
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, _finish_reason(reply))
    if (body.get("stream_options") or {}).get("include_usage"):
        yield sse({**base, "choices": [], "usage": _chat_usage(body, reply)})
    yield sse("[DONE]")


RESPONSES = Wire(
    api=RESPONSES_API,
    aux_reply=lambda body: None,
    stream=response_stream,
    json=response_json,
    error_json=error_json,
)
CHAT = Wire(
    api=CHAT_API,
    aux_reply=chat_aux_reply,
    stream=chat_stream,
    json=chat_json,
    error_json=error_json,
)
