"""The normalized vocabulary: options, results, events and embed_context."""

from __future__ import annotations

import msgspec
import pytest

from events.errors import AgentAuthError, AgentTimeoutError
from shep.agents import (
    AgentEvent,
    AgentOptions,
    AgentResult,
    AgentUsage,
    Completed,
    Failed,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
    embed_context,
    failed_event,
)


def test_options_default_to_none_and_are_frozen() -> None:
    """AgentOptions: every field defaults to None; instances are immutable."""
    options = AgentOptions()
    assert all(getattr(options, name) is None for name in AgentOptions.__struct_fields__)
    with pytest.raises(AttributeError):
        options.model = "x"  # type: ignore[misc]


def test_options_are_keyword_only() -> None:
    """AgentOptions takes keywords only."""
    with pytest.raises(TypeError):
        AgentOptions("/tmp")  # type: ignore[call-arg]


def test_events_encode_with_a_type_tag_and_decode_back() -> None:
    """Every event encodes to JSON with a "type" tag and decodes to the same event."""
    result = AgentResult(
        text="hi",
        session_id="s1",
        usage=AgentUsage(input_tokens=3, output_tokens=2, cost_usd=0.01),
        turns=1,
        duration_ms=12,
        structured_output={"a": 1},
        raw={"type": "result"},
    )
    events: list[AgentEvent] = [
        SessionStarted(session_id="s1", model="m"),
        TextDelta(text="hi"),
        ToolUse(tool_id="t1", name="Write", input={"file_path": "/x"}),
        ToolResult(tool_id="t1", output="ok", is_error=False),
        Completed(result=result),
        Failed(error_type="AgentAuthError", message="nope", retryable=False),
    ]
    encoded = [msgspec.json.encode(e) for e in events]
    assert encoded[1] == b'{"type":"TextDelta","text":"hi"}'
    assert [msgspec.json.decode(data, type=AgentEvent) for data in encoded] == events


def test_failed_event_records_type_message_and_retryability() -> None:
    """failed_event(error) captures the error class name, message and retryable flag."""
    assert failed_event(AgentTimeoutError("slow", agent="codex")) == Failed(
        error_type="AgentTimeoutError", message="slow", retryable=True
    )
    assert failed_event(AgentAuthError("denied")).retryable is False


def test_embed_context_without_earlier_results_is_the_prompt() -> None:
    """No earlier results: the prompt is unchanged."""
    assert embed_context("Write the plan.", []) == "Write the plan."


def test_embed_context_puts_earlier_results_before_the_instruction() -> None:
    """Earlier (name, text) results come first, each labelled, then the new task."""
    prompt = embed_context(
        "Write the plan.", [("analyze", "It is a Flask app.\n"), ("research", "Use Celery.")]
    )
    assert prompt == (
        "Earlier steps of this workflow produced the results below. Use them as context; "
        "do not redo that work.\n\n"
        '<result step="analyze">\nIt is a Flask app.\n</result>\n\n'
        '<result step="research">\nUse Celery.\n</result>\n\n'
        "Your task now:\n\nWrite the plan."
    )
