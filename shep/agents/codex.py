"""OpenAI Codex CLI (``codex exec --json``): JSON lines, the answer is the last agent message.

Lines: ``thread.started``, ``turn.started``, ``item.started``/``item.completed``
(agent_message, command_execution, file_change, mcp_tool_call, ...),
``turn.completed`` with usage, or ``error``/``turn.failed`` on failure. There is
no cost and no final result object.
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
    has_write_tools,
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

__all__ = ["SPEC", "CodexExecutor"]


class Item(msgspec.Struct):
    id: str
    type: str
    text: str | None = None
    message: str | None = None
    command: str | None = None
    aggregated_output: str | None = None
    exit_code: int | None = None
    status: str | None = None
    changes: list[dict[str, Any]] | None = None
    server: str | None = None
    tool: str | None = None
    arguments: Any = None
    result: Any = None
    error: Any = None
    query: str | None = None


class Usage(msgspec.Struct):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    output_tokens: int = 0


class ThreadStarted(msgspec.Struct, tag="thread.started", tag_field="type"):
    thread_id: str


class ItemStarted(msgspec.Struct, tag="item.started", tag_field="type"):
    item: Item


class ItemCompleted(msgspec.Struct, tag="item.completed", tag_field="type"):
    item: Item


class TurnCompleted(msgspec.Struct, tag="turn.completed", tag_field="type"):
    usage: Usage | None = None


class FailureDetail(msgspec.Struct):
    message: str = ""


class TurnFailed(msgspec.Struct, tag="turn.failed", tag_field="type"):
    error: FailureDetail | None = None


class ErrorLine(msgspec.Struct, tag="error", tag_field="type"):
    message: str = ""


Line = ThreadStarted | ItemStarted | ItemCompleted | TurnCompleted | TurnFailed | ErrorLine


def _tool_call(item: Item) -> ToolUse | None:
    if item.type == "command_execution":
        return ToolUse(tool_id=item.id, name="shell", input={"command": item.command})
    if item.type == "file_change":
        return ToolUse(tool_id=item.id, name="apply_patch", input={"changes": item.changes or []})
    if item.type == "mcp_tool_call":
        return ToolUse(tool_id=item.id, name=f"{item.server}.{item.tool}", input=item.arguments)
    if item.type == "web_search":
        return ToolUse(tool_id=item.id, name="web_search", input={"query": item.query})
    return None


def _tool_result(item: Item) -> ToolResult:
    failed = item.status == "failed"
    if item.type == "command_execution":
        failed = failed or item.exit_code not in (0, None)
        output = item.aggregated_output or ""
    elif item.type == "file_change":
        output = "\n".join(f"{c.get('kind', '?')} {c.get('path', '?')}" for c in item.changes or [])
    else:
        output = as_text(item.error if item.error is not None else item.result)
    return ToolResult(tool_id=item.id, output=output, is_error=failed)


class _CodexParser(CliParser):
    def __init__(self, executor: CodexExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.thread_id: str | None = None
        self.answer: str | None = None
        self.usage = AgentUsage()
        self.turns = 0
        self.failure: str | None = None
        self.last_error: str | None = None
        self.raw: dict[str, Any] = {}
        self._started_tools: set[str] = set()
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        decoded = decode_line(line, Line, self.sample)
        return () if decoded is None else self._handle(*decoded)

    def _handle(self, event: Any, obj: dict[str, Any]) -> list[AgentEvent]:
        if isinstance(event, ThreadStarted):
            self.thread_id = event.thread_id
            self.raw["thread.started"] = obj
            return [SessionStarted(session_id=event.thread_id, model=self.options.model)]
        if isinstance(event, ItemStarted):
            call = _tool_call(event.item)
            if call is None:
                return []
            self._started_tools.add(event.item.id)
            return [call]
        if isinstance(event, ItemCompleted):
            return self._completed(event.item)
        if isinstance(event, TurnCompleted):
            self.turns += 1
            self.raw["turn.completed"] = obj
            usage = event.usage or Usage()
            self.usage = add_usage(
                self.usage,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cached_input_tokens,
                cache_write_tokens=usage.cache_write_input_tokens,
            )
            self._done = True
            return []
        if isinstance(event, TurnFailed):
            self.failure = (event.error.message if event.error else "") or self.last_error or ""
            self.raw["turn.failed"] = obj
            self._done = True
            return []
        if isinstance(event, ErrorLine) and not event.message.startswith("Reconnecting"):
            self.last_error = event.message
        return []

    def _completed(self, item: Item) -> list[AgentEvent]:
        if item.type == "agent_message" and item.text is not None:
            self.answer = item.text
            return [TextDelta(text=item.text)]
        call = _tool_call(item)
        if call is None:
            return []
        events: list[AgentEvent] = []
        if item.id not in self._started_tools:
            events.append(call)
        events.append(_tool_result(item))
        return events

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        failure = self.failure
        if failure is None and outcome.exit_code and self.last_error is not None:
            failure = self.last_error
        if failure is not None:
            raise agent_failure(self.spec, failure, exit_code=outcome.exit_code)
        if not self.turns:
            raise self.no_result(outcome)
        text = self.answer or ""
        return AgentResult(
            text=text,
            session_id=self.thread_id,
            usage=self.usage,
            turns=self.turns,
            duration_ms=outcome.duration_ms,
            structured_output=self.structured(text),
            raw=self.raw,
        )


class CodexExecutor(CliExecutor):
    """``codex exec --json --skip-git-repo-check ... -``: the prompt is read from stdin."""

    features = frozenset({"session-resume", "streaming", "tool-scoping", "structured-output"})
    handled = frozenset({"allowed_tools", "resume_session", "model", "output_schema"})
    session_missing = re.compile(r"no rollout found for thread id", re.IGNORECASE)
    output_parser = _CodexParser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["exec", "--json", "--skip-git-repo-check"]
        if options.model is not None:
            args += ["--model", options.model]
        if options.allowed_tools is not None:
            sandbox = "workspace-write" if has_write_tools(options.allowed_tools) else "read-only"
            args += ["--sandbox", sandbox]
        if options.output_schema is not None:
            schema = msgspec.json.encode(options.output_schema).decode()
            args += ["--output-schema", scratch.write("output-schema.json", schema)]
        if options.resume_session is not None:
            args += ["resume", options.resume_session]
        return Command(args=[*args, "-"], stdin=prompt)


SPEC = AgentSpec(
    type="codex",
    label="Codex",
    binary="codex",
    install_hint="npm install -g @openai/codex",
    token_env=("CODEX_API_KEY", "OPENAI_API_KEY"),
    verified=True,
    verified_version="0.169.0",
    executor=CodexExecutor,
)
