"""The fake LLM server speaks each wire API the way the real CLIs expect (fast, no CLIs)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakellm import DEFAULT_TEXT, FakeLLM
from tests.support.fakellm.__main__ import load_script
from tests.support.fakellm.script import chunk_text, fill_schema

ANTHROPIC = "/v1/messages?beta=true"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"
GEMINI_STREAM = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
GEMINI = "/v1beta/models/gemini-2.5-pro:generateContent"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def post(
    llm: FakeLLM, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", llm.port, timeout=5)
    try:
        conn.request(
            "POST", path, json.dumps(body), {"content-type": "application/json", **(headers or {})}
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def sse_events(text: str) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) for each server-sent event."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = fields["data"]
        events.append((fields.get("event"), data if data == "[DONE]" else json.loads(data)))
    return events


# --- Anthropic Messages ----------------------------------------------------------------


def test_anthropic_stream_has_the_message_event_sequence(llm: FakeLLM) -> None:
    """A streamed text reply is message_start, one text block of deltas, message_delta, stop."""
    llm.enqueue_text("Scripted hello.")
    status, headers, body = post(
        llm, ANTHROPIC, {"model": "m", "stream": True, "messages": [], "tools": [{}]}
    )
    events = sse_events(body)
    names = [name for name, _ in events]
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in events)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "Scripted hello."
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert events[0][1]["message"]["model"] == "m"


def test_anthropic_tool_call_is_a_tool_use_block(llm: FakeLLM) -> None:
    """A scripted tool call streams as a tool_use block with input_json_delta parts."""
    llm.enqueue_tool_call("Write", {"file_path": "/w/a.txt", "content": "hi\n"}, text="Sure.")
    _, _, body = post(llm, ANTHROPIC, {"stream": True, "messages": [], "tools": [{}]})
    events = sse_events(body)
    start = next(
        d
        for n, d in events
        if n == "content_block_start" and d["content_block"]["type"] == "tool_use"
    )
    partial = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["index"] == start["index"]
    )
    assert start["index"] == 1
    assert start["content_block"]["name"] == "Write"
    assert start["content_block"]["id"].startswith("toolu_")
    assert json.loads(partial) == {"file_path": "/w/a.txt", "content": "hi\n"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_without_stream_answers_json(llm: FakeLLM) -> None:
    """``stream`` absent gives one Message object."""
    status, _, body = post(llm, "/v1/messages", {"messages": [], "tools": [{}]})
    message = json.loads(body)
    assert status == 200
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": DEFAULT_TEXT}]
    assert message["usage"]["output_tokens"] > 0


def test_opencode_title_call_is_aux_and_leaves_the_script_alone(llm: FakeLLM) -> None:
    """A tool-less title-generator call gets a title; the scripted reply waits for the real turn."""
    llm.enqueue_text("The real answer.")
    title_body = {
        "stream": True,
        "messages": [],
        "system": [{"type": "text", "text": "You are a title generator."}],
    }
    _, _, title = post(llm, ANTHROPIC, title_body)
    _, _, answer = post(llm, ANTHROPIC, {"stream": True, "messages": [], "tools": [{}]})

    def text(body: str) -> str:
        return "".join(
            d["delta"].get("text", "") for n, d in sse_events(body) if n == "content_block_delta"
        )

    assert text(title) == "Fake session title"
    assert text(answer) == "The real answer."
    assert [r.aux for r in llm.requests] == [True, False]
    assert len(llm.model_requests) == 1


def test_anthropic_count_tokens_is_answered(llm: FakeLLM) -> None:
    """count_tokens returns input_tokens and is recorded as an aux call."""
    status, _, body = post(llm, "/v1/messages/count_tokens", {"messages": []})
    assert status == 200
    assert json.loads(body)["input_tokens"] > 0
    assert llm.model_requests == []


# --- OpenAI Responses ------------------------------------------------------------------


def test_responses_stream_ends_with_completed_and_usage(llm: FakeLLM) -> None:
    """created, output items with text deltas, then response.completed carrying usage."""
    llm.enqueue_text("Scripted hello.")
    _, _, body = post(llm, RESPONSES, {"model": "gpt-5.5", "stream": True, "input": []})
    events = sse_events(body)
    names = [name for name, _ in events]
    assert names[0] == "response.created"
    assert names[-1] == "response.completed"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert text == "Scripted hello."
    done = events[-1][1]["response"]
    assert done["status"] == "completed"
    assert done["usage"]["total_tokens"] == (
        done["usage"]["input_tokens"] + done["usage"]["output_tokens"]
    )
    assert done["output"][0]["content"][0]["text"] == "Scripted hello."


def test_responses_function_and_custom_tool_calls(llm: FakeLLM) -> None:
    """Function tools arrive as function_call items; codex's apply_patch as custom_tool_call."""
    shell = llm.enqueue_tool_call("exec_command", {"cmd": "ls"})
    patch = llm.enqueue_tool_call("apply_patch", "*** Begin Patch\n*** End Patch\n", custom=True)
    items = []
    for _ in range(2):
        _, _, body = post(llm, RESPONSES, {"stream": True, "input": []})
        items += [d["item"] for n, d in sse_events(body) if n == "response.output_item.done"]
    assert items[0]["type"] == "function_call"
    assert items[0]["call_id"] == shell.call_id
    assert json.loads(items[0]["arguments"]) == {"cmd": "ls"}
    assert items[1]["type"] == "custom_tool_call"
    assert items[1]["call_id"] == patch.call_id
    assert items[1]["input"] == "*** Begin Patch\n*** End Patch\n"


# --- OpenAI Chat Completions -----------------------------------------------------------


def test_chat_stream_chunks_end_with_done_and_usage_when_asked(llm: FakeLLM) -> None:
    """Content deltas, a finish_reason chunk, a usage chunk (include_usage), then [DONE]."""
    llm.enqueue_text("Scripted hello.")
    _, _, body = post(
        llm, CHAT, {"stream": True, "messages": [], "stream_options": {"include_usage": True}}
    )
    events = [data for _, data in sse_events(body)]
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == []
    assert usage["usage"]["total_tokens"] > 0
    chunks = events[:-2]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Scripted hello."


def test_chat_tool_call_streams_as_tool_calls_deltas(llm: FakeLLM) -> None:
    """The call's id and name come first, then argument fragments; finish_reason tool_calls."""
    llm.enqueue_tool_call("write_file", {"file_path": "/w/a", "content": "x"})
    _, _, body = post(llm, CHAT, {"stream": True, "messages": []})
    chunks = [d for _, d in sse_events(body) if d != "[DONE]"]
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls[0]["function"]["name"] == "write_file"
    assert calls[0]["id"].startswith("call_")
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"file_path": "/w/a", "content": "x"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any("usage" in c for c in chunks)  # not asked for


def test_chat_without_stream_and_json_schema_aux(llm: FakeLLM) -> None:
    """Non-streaming gives a chat.completion; a response_format call is aux and fits its schema."""
    llm.enqueue_text("Scripted.")
    schema = {"type": "object", "properties": {"next_speaker": {"enum": ["model", "user"]}}}
    _, _, aux = post(
        llm,
        CHAT,
        {
            "messages": [],
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
        },
    )
    _, _, plain = post(llm, CHAT, {"messages": []})
    assert json.loads(json.loads(aux)["choices"][0]["message"]["content"]) == {
        "next_speaker": "user"
    }
    assert json.loads(plain)["choices"][0]["message"]["content"] == "Scripted."


# --- Gemini ----------------------------------------------------------------------------


def test_gemini_stream_text_then_function_call(llm: FakeLLM) -> None:
    """Text chunks, then a functionCall part with finishReason STOP on the last chunk."""
    llm.enqueue_tool_call("write_file", {"file_path": "/w/a", "content": "x"}, text="On it.")
    _, headers, body = post(llm, GEMINI_STREAM, {"contents": []})
    chunks = [d for _, d in sse_events(body)]
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert headers["content-type"] == "text/event-stream"
    assert "".join(p.get("text", "") for p in parts) == "On it."
    assert parts[-1] == {
        "functionCall": {"name": "write_file", "args": {"file_path": "/w/a", "content": "x"}}
    }
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] > 0
    assert llm.requests[0].query == {"alt": "sse"}


def test_gemini_generate_content_json_schema_and_count_tokens(llm: FakeLLM) -> None:
    """generateContent with a JSON schema is aux; countTokens answers totalTokens."""
    config = {
        "responseJsonSchema": {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "next_speaker": {"type": "string", "enum": ["user", "model"]},
            },
        }
    }
    _, _, aux = post(llm, GEMINI, {"contents": [], "generationConfig": config})
    _, _, count = post(llm, "/v1beta/models/gemini-2.5-pro:countTokens", {"contents": []})
    text = json.loads(aux)["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(text) == {"reasoning": "fake", "next_speaker": "user"}
    assert json.loads(count)["totalTokens"] > 0
    assert llm.model_requests == []


# --- errors, script, records -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "check"),
    [
        (ANTHROPIC, 401, lambda b: b["error"]["type"] == "authentication_error"),
        (
            ANTHROPIC,
            529,
            lambda b: b["error"] == {"type": "overloaded_error", "message": "Overloaded"},
        ),
        (RESPONSES, 401, lambda b: b["error"]["code"] == "invalid_api_key"),
        (CHAT, 429, lambda b: b["error"]["code"] == "rate_limit_exceeded"),
        (CHAT, 500, lambda b: b["error"]["message"] == "fake error 500"),
        (GEMINI_STREAM, 401, lambda b: b["error"]["status"] == "UNAUTHENTICATED"),
        (GEMINI_STREAM, 429, lambda b: b["error"]["code"] == 429),
    ],
)
def test_errors_use_each_apis_own_shape(llm: FakeLLM, path: str, status: int, check: Any) -> None:
    """An enqueued error answers with that status, the API's error JSON, and x-should-retry."""
    llm.enqueue_error(status)
    got, headers, body = post(llm, path, {"stream": True, "messages": [], "tools": [{}]})
    assert got == status
    assert check(json.loads(body))
    assert headers["x-should-retry"] == ("false" if status == 401 else "true")
    assert llm.requests[0].outcome == f"error {status}"


def test_error_times_and_custom_body(llm: FakeLLM) -> None:
    """``times`` repeats an error; a given body replaces the JSON; then the script goes on."""
    llm.enqueue_error(529, {"custom": True}, times=2)
    statuses = [post(llm, CHAT, {"messages": []})[0] for _ in range(3)]
    assert statuses == [529, 529, 200]
    assert json.loads(post(llm, CHAT, {"messages": []})[2])["choices"]
    llm.enqueue_error(500, times=None)
    assert [post(llm, CHAT, {"messages": []})[0] for _ in range(3)] == [500, 500, 500]
    assert llm.pending() == 1


def test_times_must_be_positive(llm: FakeLLM) -> None:
    """``times=0`` is a mistake, refused at once."""
    with pytest.raises(ValueError, match="times"):
        llm.enqueue_text("x", times=0)


def test_api_key_is_enforced_and_recorded_from_every_header_style(llm: FakeLLM) -> None:
    """With api_key set, a wrong key gets 401; the key is recorded from each API's header."""
    llm.api_key = "right"
    assert post(llm, ANTHROPIC, {"messages": []}, {"x-api-key": "right"})[0] == 200
    assert post(llm, CHAT, {"messages": []}, {"authorization": "Bearer wrong"})[0] == 401
    assert post(llm, GEMINI, {"contents": []}, {"x-goog-api-key": "right"})[0] == 200
    assert post(llm, GEMINI + "?key=right", {"contents": []})[0] == 200
    assert [r.api_key for r in llm.requests] == ["right", "wrong", "right", "right"]


def test_requests_are_recorded_with_headers_and_body(llm: FakeLLM) -> None:
    """Each request keeps its path, query, lower-case headers and parsed JSON body."""
    post(
        llm,
        ANTHROPIC,
        {"messages": [{"role": "user", "content": "Remember BANANA"}]},
        {"X-Claude-Code-Session-Id": "abc"},
    )
    (record,) = llm.wait_for_requests(1)
    assert record.path == "/v1/messages"
    assert record.query == {"beta": "true"}
    assert record.headers["x-claude-code-session-id"] == "abc"
    assert record.api == "anthropic"
    assert "BANANA" in record.dumps()
    llm.reset()
    assert llm.requests == []


def test_unknown_paths_get_404_and_are_recorded(llm: FakeLLM) -> None:
    """A path no CLI should call is answered 404 and shows up in the records."""
    assert post(llm, "/v2/unknown", {})[0] == 404
    assert llm.requests[0].outcome == "not found"
    assert llm.model_requests == []


def test_keep_alive_connection_serves_several_streams(llm: FakeLLM) -> None:
    """Streams are chunked, so a client can reuse one connection as the CLIs' HTTP pools do."""
    conn = http.client.HTTPConnection("127.0.0.1", llm.port, timeout=5)
    try:
        for path in (ANTHROPIC, CHAT, GEMINI_STREAM, RESPONSES):
            conn.request("POST", path, json.dumps({"stream": True, "messages": []}))
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.getheader("transfer-encoding") == "chunked"
            assert DEFAULT_TEXT.split()[-1] in resp.read().decode()
    finally:
        conn.close()


def test_delay_holds_the_reply_and_stop_cuts_it_short() -> None:
    """A delayed reply waits; stopping the server ends the wait instead of hanging."""
    llm = FakeLLM().start()
    llm.enqueue_text("slow", delay=30)
    conn = http.client.HTTPConnection("127.0.0.1", llm.port, timeout=10)
    conn.request("POST", CHAT, json.dumps({"messages": []}))
    llm.wait_for_requests(1)
    started = time.monotonic()
    llm.stop()
    assert time.monotonic() - started < 5
    conn.close()


def test_wait_for_requests_times_out(llm: FakeLLM) -> None:
    """Waiting for calls that never come raises TimeoutError."""
    with pytest.raises(TimeoutError):
        llm.wait_for_requests(1, timeout=0.1)


# --- helpers and the command line ------------------------------------------------------


def test_chunk_text_splits_at_word_boundaries() -> None:
    """Deltas rejoin to the text; there are at most four of them."""
    assert chunk_text("") == []
    assert chunk_text("one") == ["one"]
    parts = chunk_text(DEFAULT_TEXT)
    assert "".join(parts) == DEFAULT_TEXT
    assert 2 <= len(parts) <= 4


def test_fill_schema_builds_a_matching_value() -> None:
    """Objects, Gemini's upper-case types, enums preferring "user", and nullable types."""
    schema = {
        "type": "OBJECT",
        "properties": {
            "a": {"type": "STRING"},
            "b": {"type": ["null", "integer"]},
            "c": {"type": "array"},
            "d": {"enum": ["model", "user"]},
            "e": {"type": "boolean"},
        },
    }
    assert fill_schema(schema) == {"a": "fake", "b": 0, "c": [], "d": "user", "e": False}


def test_load_script_queues_texts_tools_and_errors(llm: FakeLLM) -> None:
    """The ``--script`` file format maps onto enqueue_text / _tool_call / _error."""
    load_script(
        llm,
        [
            {"error": 529, "times": 2},
            {"tool_call": {"name": "Write", "arguments": {"file_path": "/x"}}, "text": "ok"},
            {"text": "bye"},
        ],
    )
    statuses = [post(llm, CHAT, {"messages": []})[0] for _ in range(2)]
    tool = json.loads(post(llm, CHAT, {"messages": []})[2])
    bye = json.loads(post(llm, CHAT, {"messages": []})[2])
    assert statuses == [529, 529]
    assert tool["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "Write"
    assert bye["choices"][0]["message"]["content"] == "bye"


def test_module_runs_as_a_server_from_the_command_line() -> None:
    """``python -m tests.support.fakellm`` prints its URL and answers until it is stopped."""
    root = Path(__file__).resolve().parents[3]
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.fakellm", "--quiet"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            port = int(line.rsplit(":", 1)[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("POST", CHAT, json.dumps({"messages": []}))
            reply = json.loads(conn.getresponse().read())
            conn.close()
        finally:
            proc.terminate()
    assert reply["choices"][0]["message"]["content"] == DEFAULT_TEXT
