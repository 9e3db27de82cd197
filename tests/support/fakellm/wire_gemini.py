"""Gemini API: ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``,
``:generateContent`` and ``:countTokens`` (gemini-cli with ``GOOGLE_GEMINI_BASE_URL``)."""

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
    fill_schema,
    new_id,
    sse,
)

API = "gemini"
UNAUTHORIZED = "API key not valid. Please pass a valid API key."

_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_json(error: ErrorReply, request_id: str) -> dict[str, Any]:
    return {
        "error": {
            "code": error.status,
            "message": error_message(error, UNAUTHORIZED),
            "status": _STATUSES.get(error.status, "UNAVAILABLE"),
        }
    }


def _json_schema(body: dict[str, Any]) -> Any:
    config = body.get("generationConfig") or body.get("config") or {}
    for key in ("responseJsonSchema", "responseSchema"):
        if key in config:
            return config[key]
    if config.get("responseMimeType") == "application/json":
        return {"type": "object"}
    return None


def aux_reply(body: Body) -> Reply | None:
    """Calls asking for JSON (next-speaker check, model router) get JSON fitting the schema."""
    schema = _json_schema(body)
    return None if schema is None else Reply(text=json.dumps(fill_schema(schema)))


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    prompt = estimate_tokens(body.get("contents", []))
    candidates = estimate_tokens([reply.text, *(c.arguments_json() for c in reply.tool_calls)])
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates,
    }


def _chunk(
    parts: list[dict[str, Any]], usage: dict[str, int], model: str, response_id: str, final: bool
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if final:
        candidate["finishReason"] = "STOP"
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": response_id,
    }


def _call_parts(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"functionCall": {"name": call.name, "args": call.arguments_object()}}
        for call in reply.tool_calls
    ]


def generate_json(reply: Reply, body: Body, model: str) -> Body:
    parts = ([{"text": reply.text}] if reply.text else []) + _call_parts(reply)
    return _chunk(parts, _usage(body, reply), model, new_id(""), final=True)


def generate_stream(reply: Reply, body: Body, model: str) -> Iterator[bytes]:
    """One chunk per text delta; the last one carries the functionCall parts and STOP."""
    usage = _usage(body, reply)
    response_id = new_id("")
    texts = chunk_text(reply.text)
    calls = _call_parts(reply)
    if not texts and not calls:
        texts = [""]
    for i, text in enumerate(texts):
        final = i == len(texts) - 1 and not calls
        yield sse(_chunk([{"text": text}], usage, model, response_id, final))
    if calls:
        yield sse(_chunk(calls, usage, model, response_id, final=True))


def count_tokens_json(body: dict[str, Any]) -> dict[str, Any]:
    return {"totalTokens": estimate_tokens(body.get("contents", body))}


def models_json() -> dict[str, Any]:
    return {
        "models": [
            {
                "name": "models/gemini-2.5-pro",
                "displayName": "Gemini 2.5 Pro",
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
        ]
    }


WIRE = Wire(
    api=API, aux_reply=aux_reply, stream=generate_stream, json=generate_json, error_json=error_json
)
