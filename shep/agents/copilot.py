"""GitHub Copilot CLI (``copilot --output-format json``): JSON lines of session events.

Lines are ``{"type", "data", "id", "timestamp", "parentId", "ephemeral"?}``:
``assistant.message_delta``/``assistant.message`` (text, ``toolRequests``),
``tool.execution_start``/``tool.execution_complete``, ``assistant.turn_end``,
``session.error`` (``errorType``, ``message``, ``statusCode``), and a final
``{"type": "result", "sessionId", "exitCode", "usage"}`` line. The session id
is only known from that last line. A piped stdin is the prompt (``-p`` is not
needed), so long prompts do not hit argv limits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

from shep.agents.executor import (
    CliExecutor,
    CliParser,
    Command,
    Scratch,
    add_usage,
    as_text,
    decode_line,
)
from shep.agents.failures import agent_failure
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

__all__ = ["SPEC", "CopilotExecutor"]


class Event(msgspec.Struct):
    type: str
    data: dict[str, Any] = {}
    # Only on the final "result" line:
    session_id: str | None = msgspec.field(default=None, name="sessionId")
    exit_code: int | None = msgspec.field(default=None, name="exitCode")


def _text(value: Any) -> str:
    return "" if value is None else as_text(value)


class _Parser(CliParser):
    def __init__(self, executor: CopilotExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.model: str | None = options.model
        self.answer = ""
        self.turns = 0
        self.usage = AgentUsage()
        self.error: dict[str, Any] | None = None
        self.result: Event | None = None
        self.raw: dict[str, Any] = {}
        self._streamed: set[str] = set()
        self._announced = False

    @property
    def done(self) -> bool:
        return self.result is not None

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        decoded = decode_line(line, Event, self.sample)
        return () if decoded is None else self._handle(*decoded)

    def _handle(self, event: Event, obj: dict[str, Any]) -> list[AgentEvent]:
        data = event.data
        kind = event.type
        if kind == "session.tools_updated" and isinstance(data.get("model"), str):
            self.model = data["model"]
        elif kind == "session.start" and not self._announced:
            self._announced = True
            session = data.get("sessionId") or event.session_id
            return [SessionStarted(session_id=session, model=data.get("selectedModel"))]
        elif kind == "assistant.message_delta" and data.get("deltaContent"):
            if data.get("parentToolCallId") is None:
                self._streamed.add(str(data.get("messageId")))
                return [TextDelta(text=str(data["deltaContent"]))]
        elif kind == "assistant.message":
            return self._message(data)
        elif kind == "tool.execution_start":
            return [
                ToolUse(
                    tool_id=str(data.get("toolCallId", "")),
                    name=str(data.get("toolName", "")),
                    input=data.get("arguments"),
                )
            ]
        elif kind == "tool.execution_complete":
            return [self._tool_result(data)]
        elif kind == "assistant.turn_end":
            self.turns += 1
        elif kind == "assistant.usage":
            self._add_usage(data)
        elif kind == "session.error":
            self.error = data
        elif kind == "result":
            self.result, self.raw = event, obj
            if not self._announced:
                self._announced = True
                return [SessionStarted(session_id=event.session_id, model=self.model)]
        return []

    def _message(self, data: dict[str, Any]) -> list[AgentEvent]:
        content = data.get("content")
        if not isinstance(content, str) or not content or data.get("parentToolCallId"):
            return []
        self.answer = content
        if str(data.get("messageId")) in self._streamed:
            return []
        return [TextDelta(text=content)]

    @staticmethod
    def _tool_result(data: dict[str, Any]) -> ToolResult:
        success = bool(data.get("success"))
        result = data.get("result")
        error = data.get("error")
        if success and isinstance(result, dict):
            output = _text(result.get("content"))
        elif isinstance(error, dict):
            output = _text(error.get("message"))
        else:
            output = _text(result if success else error)
        return ToolResult(
            tool_id=str(data.get("toolCallId", "")), output=output, is_error=not success
        )

    def _add_usage(self, data: dict[str, Any]) -> None:
        def count(name: str) -> int:
            value = data.get(name)
            return value if isinstance(value, int) else 0

        self.usage = add_usage(
            self.usage,
            input_tokens=count("inputTokens"),
            output_tokens=count("outputTokens"),
            cache_read_tokens=count("cacheReadTokens"),
            cache_write_tokens=count("cacheWriteTokens"),
        )

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        result = self.result
        if self.error is not None:
            status = self.error.get("statusCode")
            raise agent_failure(
                self.spec,
                _text(self.error.get("message")) or _text(self.error.get("errorType")),
                exit_code=outcome.exit_code or (result.exit_code if result else None),
                status=status if isinstance(status, int) else None,
            )
        if result is None or result.exit_code or outcome.exit_code:
            raise self.no_result(outcome)
        return AgentResult(
            text=self.answer,
            session_id=result.session_id,
            usage=self.usage,
            turns=self.turns or None,
            duration_ms=outcome.duration_ms,
            structured_output=None,
            raw=self.raw,
        )


class CopilotExecutor(CliExecutor):
    """``copilot --output-format json --no-ask-user``, prompt on stdin."""

    features = frozenset({"session-resume", "streaming", "tool-scoping"})
    handled = frozenset({"allowed_tools", "resume_session", "model"})
    session_missing = re.compile(r"No session, task, or name matched", re.IGNORECASE)
    output_parser = _Parser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["--output-format", "json", "--no-ask-user"]
        if options.model is not None:
            args += ["--model", options.model]
        if options.resume_session is not None:
            args += [f"--resume={options.resume_session}"]
        if options.allowed_tools is not None:
            args += [f"--allow-tool={tool}" for tool in options.allowed_tools]
        return Command(args=args, stdin=prompt)


SPEC = AgentSpec(
    type="copilot",
    label="GitHub Copilot CLI",
    binary="copilot",
    install_hint="npm install -g @github/copilot",
    token_env=("COPILOT_GITHUB_TOKEN",),
    verified=True,
    verified_version="1.0.102",
    executor=CopilotExecutor,
)
