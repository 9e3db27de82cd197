"""Claude Code (``claude -p``), and the message-stream format Qwen Code and Cursor share.

``--output-format json`` prints one ``result`` object; ``stream-json --verbose``
prints ``system``/``assistant``/``user``/``stream_event`` lines and that same
``result`` object last. A ``result`` with ``is_error: true`` (or an
``api_error_status``) is a failure even when the exit code is 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

import msgspec

from events.errors import AgentError
from shep.agents.executor import (
    CliExecutor,
    CliParser,
    Command,
    JsonDocumentParser,
    Scratch,
    as_text,
    decode_json,
)
from shep.agents.failures import agent_failure, output_error
from shep.agents.model import (
    AgentEvent,
    AgentOptions,
    AgentResult,
    AgentUsage,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
)
from shep.agents.process import ProcessOutcome
from shep.agents.spec import AgentSpec

__all__ = ["SPEC", "ClaudeCodeExecutor", "MessageStreamParser", "ResultLine", "tool_output"]


# -- wire format -------------------------------------------------------------------------


class Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class Block(msgspec.Struct):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: Any = None
    is_error: bool | None = None


class Message(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    content: list[Block] | str = []


class SystemLine(msgspec.Struct, tag="system", tag_field="type"):
    subtype: str = ""
    session_id: str | None = None
    model: str | None = None


class AssistantLine(msgspec.Struct, tag="assistant", tag_field="type"):
    message: Message
    parent_tool_use_id: str | None = None
    error: str | None = None


class UserLine(msgspec.Struct, tag="user", tag_field="type"):
    message: Message


class StreamEventLine(msgspec.Struct, tag="stream_event", tag_field="type"):
    event: dict[str, Any]
    parent_tool_use_id: str | None = None


class ResultLine(msgspec.Struct, tag="result", tag_field="type"):
    subtype: str = ""
    is_error: bool = False
    api_error_status: int | None = None
    result: str = ""
    session_id: str | None = None
    num_turns: int | None = None
    total_cost_usd: float | None = None
    usage: Usage | None = None
    structured_output: Any = None  # Claude Code (--json-schema)
    structured_result: Any = None  # Qwen Code (--json-schema)


Line = SystemLine | AssistantLine | UserLine | StreamEventLine | ResultLine


def tool_output(content: Any) -> str:
    """A tool result's content as text: strings as they are, text blocks joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            item["text"]
            for item in content
            if isinstance(item, dict) and isinstance(item.get("text"), str)
        ]
        if len(texts) == len(content):
            return "\n".join(texts)
    return as_text(content)


# -- parsing -----------------------------------------------------------------------------


class MessageStreamParser(CliParser):
    """Claude-style message objects, fed one by one (stream lines or a JSON array).

    Subclasses set ``answer_error`` to match an answer that is really an error
    report (Qwen Code answers ``[API Error: ...]`` with exit code 0); its first
    group is the message. They handle object types only their CLI prints in ``other``.
    """

    answer_error: ClassVar[re.Pattern[str] | None] = None

    def __init__(self, executor: CliExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.result: ResultLine | None = None
        self.result_raw: dict[str, Any] = {}
        self._started = False
        self._streamed_messages: set[str] = set()
        self._message_id: str | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        if not line.strip():
            return ()
        try:
            obj = decode_json(line)
        except msgspec.DecodeError:
            self.sample.add(line)
            return ()
        return self.handle(obj)

    def handle(self, obj: Any) -> list[AgentEvent]:
        """Events for one decoded message object."""
        if not isinstance(obj, dict):
            return []
        try:
            line = msgspec.convert(obj, Line)
        except msgspec.ValidationError:
            return self.other(obj)
        if isinstance(line, ResultLine):
            self.result, self.result_raw = line, obj
            return []
        if isinstance(line, SystemLine):
            if line.subtype == "init" and not self._started:
                self._started = True
                return [SessionStarted(session_id=line.session_id, model=line.model)]
            return []
        if isinstance(line, StreamEventLine):
            return self._stream_event(line)
        if isinstance(line, AssistantLine):
            return self._assistant(line)
        return self._user(line)

    def other(self, obj: dict[str, Any]) -> list[AgentEvent]:
        """Events for an object of a type this format does not define."""
        return []

    def _stream_event(self, line: StreamEventLine) -> list[AgentEvent]:
        event = line.event
        kind = event.get("type")
        if kind == "message_start" and line.parent_tool_use_id is None:
            message = event.get("message")
            self._message_id = message.get("id") if isinstance(message, dict) else None
            return []
        delta = event.get("delta")
        if (
            kind == "content_block_delta"
            and line.parent_tool_use_id is None
            and isinstance(delta, dict)
            and delta.get("type") == "text_delta"
            and isinstance(delta.get("text"), str)
        ):
            if self._message_id is not None:
                self._streamed_messages.add(self._message_id)
            return [TextDelta(text=delta["text"])]
        return []

    def _assistant(self, line: AssistantLine) -> list[AgentEvent]:
        if line.error is not None:
            # A synthetic message carrying an API error: the result line reports it.
            return []
        if isinstance(line.message.content, str):
            return []
        events: list[AgentEvent] = []
        streamed = line.message.id in self._streamed_messages
        for block in line.message.content:
            if block.type == "text" and block.text and not streamed:
                if line.parent_tool_use_id is None:
                    events.append(TextDelta(text=block.text))
            elif block.type == "tool_use" and block.id is not None:
                events.append(ToolUse(tool_id=block.id, name=block.name or "", input=block.input))
        return events

    def _user(self, line: UserLine) -> list[AgentEvent]:
        if isinstance(line.message.content, str):
            return []
        return [
            ToolResult(
                tool_id=block.tool_use_id,
                output=tool_output(block.content),
                is_error=bool(block.is_error),
            )
            for block in line.message.content
            if block.type == "tool_result" and block.tool_use_id is not None
        ]

    # -- the end ----------------------------------------------------------------------

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        result = self.result
        if result is None:
            raise self.no_result(outcome)
        self.check_result(result, outcome)
        structured = result.structured_output
        if structured is None:
            structured = result.structured_result
        if structured is None:
            structured = self.structured(result.result)
        usage = result.usage or Usage()
        return AgentResult(
            text=result.result,
            session_id=result.session_id,
            usage=AgentUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_input_tokens,
                cache_write_tokens=usage.cache_creation_input_tokens,
                cost_usd=result.total_cost_usd,
            ),
            turns=result.num_turns,
            duration_ms=outcome.duration_ms,
            structured_output=structured,
            raw=self.result_raw,
        )

    def check_result(self, result: ResultLine, outcome: ProcessOutcome) -> None:
        """Raise if the result object reports a failure."""
        match = self.answer_error.match(result.result) if self.answer_error else None
        if match:
            raise agent_failure(self.spec, match.group(1), exit_code=outcome.exit_code)
        if result.is_error or result.api_error_status is not None:
            raise agent_failure(
                self.spec,
                result.result or result.subtype,
                exit_code=outcome.exit_code,
                status=result.api_error_status,
            )
        if result.subtype.startswith("error"):
            raise AgentError(
                f"{self.spec.label} stopped early ({result.subtype}): "
                f"{result.result or 'no answer'}",
                agent=self.spec.type,
            )


class JsonResultParser(JsonDocumentParser, MessageStreamParser):
    """``--output-format json``: the whole stdout is one result object (or an array of
    message objects, as Qwen Code prints it). Parsed once the process ended.

    The document collecting comes from ``JsonDocumentParser`` (first in the MRO), the
    message handling and the result from ``MessageStreamParser``.
    """

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        document = self.decoded(outcome)
        if document is not None:
            for obj in document if isinstance(document, list) else [document]:
                self.handle(obj)
            if self.result is None and not outcome.exit_code:
                raise output_error(
                    self.spec, "printed JSON without a result object", self.unused_output()
                )
        return super().finish(outcome)


# -- the executor ----------------------------------------------------------------------


class ClaudeCodeExecutor(CliExecutor):
    """``claude -p``, prompt on stdin."""

    features = frozenset(
        {"session-resume", "streaming", "tool-scoping", "structured-output", "system-prompt"}
    )
    handled = frozenset(
        {"allowed_tools", "resume_session", "max_turns", "model", "system_prompt", "output_schema"}
    )
    session_missing = re.compile(r"No conversation found with session ID", re.IGNORECASE)
    output_parser = JsonResultParser
    stream_parser = MessageStreamParser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["-p"]
        if streaming:
            args += ["--output-format", "stream-json", "--verbose", "--include-partial-messages"]
        else:
            args += ["--output-format", "json"]
        if options.resume_session is not None:
            args += ["--resume", options.resume_session]
        if options.allowed_tools:
            args += ["--allowedTools", ",".join(options.allowed_tools)]
        elif options.allowed_tools is not None:
            # No tools at all (the supervisor's evaluator): none offered to the model, so
            # a permission the user granted in ~/.claude/settings.json cannot apply.
            args += ["--tools", ""]
        if options.system_prompt is not None:
            args += ["--append-system-prompt", options.system_prompt]
        if options.output_schema is not None:
            args += ["--json-schema", msgspec.json.encode(options.output_schema).decode()]
        if options.model is not None:
            args += ["--model", options.model]
        if options.max_turns is not None:
            args += ["--max-turns", str(options.max_turns)]
        return Command(args=args, stdin=prompt)


SPEC = AgentSpec(
    type="claude-code",
    label="Claude Code",
    binary="claude",
    install_hint="npm install -g @anthropic-ai/claude-code",
    token_env=("ANTHROPIC_API_KEY",),
    verified=True,
    verified_version="2.1.197",
    executor=ClaudeCodeExecutor,
)
