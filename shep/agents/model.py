"""The agent layer's vocabulary: options in, results and normalized events out.

Every executor, whatever CLI it drives, speaks only these types. Events are
tagged msgspec Structs so the runner can store them as JSON with a ``"type"``
field and decode them back into the same classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from events.errors import AgentError

__all__ = [
    "FEATURES",
    "AgentEvent",
    "AgentExecutor",
    "AgentOptions",
    "AgentResult",
    "AgentUsage",
    "Completed",
    "Failed",
    "SessionStarted",
    "TextDelta",
    "ToolResult",
    "ToolUse",
    "failed_event",
]

FEATURES: Final = frozenset(
    {"session-resume", "streaming", "tool-scoping", "structured-output", "system-prompt"}
)


class AgentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How one agent call should run. ``None`` means "the agent's own default".

    ``allowed_tools`` uses the agent's own tool names; ``None`` leaves the agent's
    permission defaults alone. ``timeout`` is in seconds for the whole call.
    """

    cwd: str | None = None
    allowed_tools: tuple[str, ...] | None = None
    resume_session: str | None = None
    max_turns: int | None = None
    model: str | None = None
    system_prompt: str | None = None
    output_schema: dict[str, Any] | None = None
    timeout: float | None = None


class AgentUsage(msgspec.Struct, kw_only=True):
    """Token counts (0 when the agent does not report them) and cost if it does."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None


class AgentResult(msgspec.Struct, kw_only=True):
    """The outcome of one successful agent call.

    ``raw`` holds the CLI's own final metadata object(s), undigested, for the record.
    """

    text: str
    session_id: str | None
    usage: AgentUsage
    turns: int | None
    duration_ms: int
    structured_output: Any | None
    raw: dict[str, Any]


class SessionStarted(msgspec.Struct, tag=True, kw_only=True):
    """The agent opened (or resumed) a session."""

    session_id: str | None
    model: str | None


class TextDelta(msgspec.Struct, tag=True, kw_only=True):
    """A piece of the agent's answer text, in order."""

    text: str


class ToolUse(msgspec.Struct, tag=True, kw_only=True):
    """The agent called a tool. ``input`` is the tool's arguments as the CLI reported them."""

    tool_id: str
    name: str
    input: Any


class ToolResult(msgspec.Struct, tag=True, kw_only=True):
    """A tool call finished; ``tool_id`` matches the ``ToolUse`` it answers."""

    tool_id: str
    output: str
    is_error: bool


class Completed(msgspec.Struct, tag=True, kw_only=True):
    """The call succeeded; always the last event of a successful stream."""

    result: AgentResult


class Failed(msgspec.Struct, tag=True, kw_only=True):
    """A call failed. Executors raise instead; the runner records this event."""

    error_type: str
    message: str
    retryable: bool


AgentEvent = SessionStarted | TextDelta | ToolUse | ToolResult | Completed | Failed


def failed_event(error: AgentError) -> Failed:
    """The ``Failed`` event that records ``error`` (class name, message, retryability)."""
    return Failed(error_type=type(error).__name__, message=str(error), retryable=error.retryable)


@runtime_checkable
class AgentExecutor(Protocol):
    """Runs one agent CLI. Failures raise a typed ``events.errors.AgentError``."""

    name: str

    def execute(self, prompt: str, options: AgentOptions) -> AgentResult:
        """Run the agent to completion and return its result."""
        ...

    def stream(self, prompt: str, options: AgentOptions) -> Iterator[AgentEvent]:
        """Yield normalized events as they happen; the last one is ``Completed``."""
        ...

    def supports(self, feature: str) -> bool:
        """Whether the agent honours ``feature`` (one of ``FEATURES``)."""
        ...
