"""Gemini CLI (``gemini -p``).

``--output-format json`` prints one pretty-printed (multi-line) object with the
answer in ``response``. On failure stdout is empty, a stack trace and then the
error object go to stderr, and the exit code is the HTTP status & 255 (401 ->
145). ``stream-json`` prints ``init``/``message``/``tool_use``/``tool_result``
lines and a final ``result`` line whose ``status`` says success or error.
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
    JsonDocumentParser,
    Scratch,
    as_text,
    decode_line,
    has_write_tools,
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

__all__ = ["SPEC", "GeminiCliExecutor", "allowed_tool_args"]


# -- wire format -------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct):
    message: str = ""
    code: int | None = None
    type: str | None = None


class ModelTokens(msgspec.Struct):
    prompt: int = 0
    input: int = 0
    candidates: int = 0
    cached: int = 0


class ModelStats(msgspec.Struct):
    tokens: ModelTokens | None = None


class Stats(msgspec.Struct):
    models: dict[str, ModelStats] = {}


class JsonOutput(msgspec.Struct):
    session_id: str | None = None
    response: str | None = None
    stats: Stats | None = None
    error: ErrorDetail | None = None


class Init(msgspec.Struct, tag="init", tag_field="type"):
    session_id: str | None = None
    model: str | None = None


class MessageLine(msgspec.Struct, tag="message", tag_field="type"):
    role: str = ""
    content: str = ""


class ToolUseLine(msgspec.Struct, tag="tool_use", tag_field="type"):
    tool_id: str = ""
    tool_name: str = ""
    parameters: Any = None


class ToolResultLine(msgspec.Struct, tag="tool_result", tag_field="type"):
    tool_id: str = ""
    status: str = ""
    output: Any = None
    error: ErrorDetail | None = None


class StreamStats(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    cached: int = 0


class ResultLine(msgspec.Struct, tag="result", tag_field="type"):
    status: str = ""
    error: ErrorDetail | None = None
    stats: StreamStats | None = None


Line = Init | MessageLine | ToolUseLine | ToolResultLine | ResultLine


def _error_message(detail: ErrorDetail) -> tuple[str, int | None]:
    """The API's own message and status from Gemini's error object.

    ``message`` is often the API's JSON body as a string (``{"error":{"code":401,
    "message":"API key not valid..."}}``), sometimes wrapped as ``[API Error: ...]``.
    """
    text = detail.message.strip()
    inner = text
    if text.startswith("[API Error:"):
        inner = text[len("[API Error:") :].strip()
        # The wrapper's closing bracket, when it is there, is the last character.
        if inner.endswith("]"):
            inner = inner[:-1].rstrip()
    status = detail.code
    try:
        body = msgspec.json.decode(inner.encode())
    except msgspec.DecodeError:
        return inner, status
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message")
        return (
            message if isinstance(message, str) else inner,
            code if isinstance(code, int) else status,
        )
    return inner, status


def _trailing_json(stderr: str) -> Any | None:
    """The JSON object Gemini prints at the end of stderr, after its stack trace."""
    start = stderr.rfind("\n{")
    candidate = stderr[start + 1 :] if start >= 0 else stderr
    if not candidate.lstrip().startswith("{"):
        return None
    try:
        return msgspec.json.decode(candidate.strip().encode())
    except msgspec.DecodeError:
        return None


class _JsonParser(JsonDocumentParser):
    """The pretty-printed object: collected whole, parsed when the process ended."""

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        data = bytes(self.document.data)
        raw = self.decoded(outcome)
        if raw is None and outcome.stderr:
            raw = _trailing_json(outcome.stderr)
        parsed = None
        if isinstance(raw, dict):
            try:
                parsed = msgspec.convert(raw, JsonOutput)
            except msgspec.ValidationError:
                parsed = None
        if parsed is not None and parsed.error is not None:
            message, status = _error_message(parsed.error)
            raise agent_failure(self.spec, message, exit_code=outcome.exit_code, status=status)
        if parsed is None or parsed.response is None:
            if outcome.exit_code or not data.strip():
                raise self.no_result(outcome)
            raise output_error(self.spec, "printed JSON without a response", data)
        assert isinstance(raw, dict)
        usage = AgentUsage()
        for model in (parsed.stats or Stats()).models.values():
            tokens = model.tokens or ModelTokens()
            usage.input_tokens += tokens.prompt or tokens.input
            usage.output_tokens += tokens.candidates
            usage.cache_read_tokens += tokens.cached
        return AgentResult(
            text=parsed.response,
            session_id=parsed.session_id,
            usage=usage,
            turns=None,
            duration_ms=outcome.duration_ms,
            structured_output=None,
            raw=raw,
        )


class _StreamParser(CliParser):
    def __init__(self, executor: GeminiCliExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.session_id: str | None = None
        self.result: ResultLine | None = None
        self.raw: dict[str, Any] = {}
        self._turn_text: list[str] = []

    @property
    def done(self) -> bool:
        return self.result is not None

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        decoded = decode_line(line, Line, self.sample)
        if decoded is None:
            return ()
        event, obj = decoded
        if isinstance(event, Init):
            self.session_id = event.session_id
            return [SessionStarted(session_id=event.session_id, model=event.model)]
        if isinstance(event, MessageLine):
            if event.role != "assistant" or not event.content:
                return []
            self._turn_text.append(event.content)
            return [TextDelta(text=event.content)]
        if isinstance(event, ToolUseLine):
            self._turn_text.clear()  # the answer is the text after the last tool call
            return [ToolUse(tool_id=event.tool_id, name=event.tool_name, input=event.parameters)]
        if isinstance(event, ToolResultLine):
            return [self._tool_result(event)]
        self.result, self.raw = event, obj
        return []

    @staticmethod
    def _tool_result(event: ToolResultLine) -> ToolResult:
        if event.error is not None:
            output = event.error.message
        elif event.output is None:
            output = event.status
        else:
            output = as_text(event.output)
        return ToolResult(tool_id=event.tool_id, output=output, is_error=event.status != "success")

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        result = self.result
        if result is None:
            raise self.no_result(outcome)
        if result.status != "success":
            message, status = _error_message(result.error or ErrorDetail(message=result.status))
            raise agent_failure(self.spec, message, exit_code=outcome.exit_code, status=status)
        stats = result.stats or StreamStats()
        return AgentResult(
            text="".join(self._turn_text),
            session_id=self.session_id,
            usage=AgentUsage(
                input_tokens=stats.input_tokens,
                output_tokens=stats.output_tokens,
                cache_read_tokens=stats.cached,
            ),
            turns=None,
            duration_ms=outcome.duration_ms,
            structured_output=None,
            raw=self.raw,
        )


def allowed_tool_args(tools: tuple[str, ...]) -> list[str]:
    """Gemini CLI's flags (kept by its fork Qwen Code) to allow exactly ``tools``.

    A headless run cannot stop to ask for approval: with a write tool the approval
    mode is ``yolo``; without one the headless default (read-only) stays.
    """
    args = [f"--allowed-tools={tool}" for tool in tools]
    if has_write_tools(tools):
        args += ["--approval-mode", "yolo"]
    return args


class GeminiCliExecutor(CliExecutor):
    """``gemini -p ""``: the prompt goes on stdin, which ``-p`` is appended to."""

    features = frozenset({"session-resume", "streaming", "tool-scoping"})
    handled = frozenset({"allowed_tools", "resume_session", "model"})
    session_missing = re.compile(r"Error resuming session|Invalid session identifier")
    output_parser = _JsonParser
    stream_parser = _StreamParser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["--output-format", "stream-json" if streaming else "json"]
        if options.model is not None:
            args += ["--model", options.model]
        if options.resume_session is not None:
            args += ["--resume", options.resume_session]
        if options.allowed_tools is not None:
            args += allowed_tool_args(options.allowed_tools)
        return Command(args=[*args, "-p", ""], stdin=prompt)


SPEC = AgentSpec(
    type="gemini-cli",
    label="Gemini CLI",
    binary="gemini",
    install_hint="npm install -g @google/gemini-cli",
    token_env=("GEMINI_API_KEY",),
    verified=True,
    verified_version="0.61.0",
    executor=GeminiCliExecutor,
)
