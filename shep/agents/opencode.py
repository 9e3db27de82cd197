"""opencode (``opencode run --format json``): JSON lines of session parts.

Lines are ``{"type", "timestamp", "sessionID", "part"}`` with types ``step_start``,
``text``, ``tool_use``, ``step_finish`` (tokens and cost per step) and ``error``
(``{"name": "APIError", "data": {"message", "statusCode", ...}}``). There is no
final summary object; a ``step_finish`` with reason ``stop`` ends the run.
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

__all__ = ["SPEC", "OpencodeExecutor"]


class Cache(msgspec.Struct):
    read: int = 0
    write: int = 0


class Tokens(msgspec.Struct):
    input: int = 0
    output: int = 0
    cache: Cache | None = None


class ToolState(msgspec.Struct):
    status: str = ""
    input: Any = None
    output: Any = None
    error: Any = None


class Part(msgspec.Struct):
    text: str | None = None
    tool: str | None = None
    call_id: str | None = msgspec.field(default=None, name="callID")
    state: ToolState | None = None
    reason: str | None = None
    tokens: Tokens | None = None
    cost: float | None = None


class ErrorData(msgspec.Struct):
    message: str = ""
    status_code: int | None = msgspec.field(default=None, name="statusCode")


class ErrorInfo(msgspec.Struct):
    name: str = ""
    data: ErrorData | None = None


class Line(msgspec.Struct):
    type: str
    session_id: str | None = msgspec.field(default=None, name="sessionID")
    part: Part | None = None
    error: ErrorInfo | None = None


class _Parser(CliParser):
    def __init__(self, executor: OpencodeExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.session_id: str | None = None
        self.usage = AgentUsage()
        self.steps = 0
        self.error: ErrorInfo | None = None
        self.raw: dict[str, Any] = {}
        self._step_text: list[str] = []
        self._answer = ""
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        decoded = decode_line(line, Line, self.sample)
        if decoded is None:
            return ()
        event, obj = decoded
        events: list[AgentEvent] = []
        if event.session_id and self.session_id is None:
            self.session_id = event.session_id
            events.append(SessionStarted(session_id=event.session_id, model=self.options.model))
        part = event.part or Part()
        if event.type == "step_start":
            self._step_text = []
        elif event.type == "text" and part.text:
            self._step_text.append(part.text)
            self._answer = "".join(self._step_text)
            events.append(TextDelta(text=part.text))
        elif event.type == "tool_use" and part.call_id is not None:
            events.extend(self._tool(part, part.call_id))
        elif event.type == "step_finish":
            self._step_finish(part, obj)
        elif event.type == "error":
            self.error = event.error or ErrorInfo(name="error")
            self.raw["error"] = obj
            self._done = True
        return events

    def _tool(self, part: Part, call_id: str) -> list[AgentEvent]:
        state = part.state or ToolState()
        events: list[AgentEvent] = [
            ToolUse(tool_id=call_id, name=part.tool or "", input=state.input)
        ]
        if state.status in ("completed", "error"):
            output = as_text(state.error if state.status == "error" else state.output)
            events.append(
                ToolResult(tool_id=call_id, output=output, is_error=state.status == "error")
            )
        return events

    def _step_finish(self, part: Part, obj: dict[str, Any]) -> None:
        self.steps += 1
        self.raw["step_finish"] = obj
        tokens = part.tokens or Tokens()
        cache = tokens.cache or Cache()
        self.usage = add_usage(
            self.usage,
            input_tokens=tokens.input,
            output_tokens=tokens.output,
            cache_read_tokens=cache.read,
            cache_write_tokens=cache.write,
            cost_usd=part.cost,
        )
        if part.reason == "stop":
            self._done = True

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        if self.error is not None:
            data = self.error.data or ErrorData(message=self.error.name)
            raise agent_failure(
                self.spec,
                data.message or self.error.name,
                exit_code=outcome.exit_code,
                status=data.status_code,
            )
        if not self.steps or outcome.exit_code:
            raise self.no_result(outcome)
        return AgentResult(
            text=self._answer,
            session_id=self.session_id,
            usage=self.usage,
            turns=self.steps,
            duration_ms=outcome.duration_ms,
            structured_output=None,
            raw=self.raw,
        )


class OpencodeExecutor(CliExecutor):
    """``opencode run --format json``: the prompt is read from stdin."""

    features = frozenset({"session-resume", "streaming"})
    handled = frozenset({"resume_session", "model"})
    session_missing = re.compile(r"Session not found", re.IGNORECASE)
    output_parser = _Parser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["run", "--format", "json"]
        if options.resume_session is not None:
            args += ["--session", options.resume_session]
        if options.model is not None:
            args += ["--model", options.model]
        return Command(args=args, stdin=prompt)


SPEC = AgentSpec(
    type="opencode",
    label="opencode",
    binary="opencode",
    install_hint="npm install -g opencode-ai",
    token_env=("ANTHROPIC_API_KEY",),
    verified=True,
    verified_version="1.18.33",
    executor=OpencodeExecutor,
)
