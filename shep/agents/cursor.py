"""Cursor agent (``cursor-agent -p``), from Cursor's published documentation only.

NOT verified against the real binary: it is distributed only by
``curl https://cursor.com/install | bash`` and talks to Cursor's own backend, so
it could not be run offline. Per the documented output format, ``json`` prints
one Claude-style ``result`` object; ``stream-json`` prints ``system``/``user``/
``assistant`` lines, ``tool_call`` lines (subtype ``started``/``completed``, the
call under a ``<name>ToolCall`` key) and the ``result`` object last. Failures
exit non-zero with the message on stderr.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from shep.agents.claude_code import JsonResultParser, MessageStreamParser
from shep.agents.executor import CliExecutor, Command, Scratch, as_text, has_write_tools
from shep.agents.model import AgentEvent, AgentOptions, AgentResult, ToolResult, ToolUse
from shep.agents.process import ProcessOutcome
from shep.agents.spec import AgentSpec

__all__ = ["SPEC", "CursorExecutor"]


class ToolCallLine(msgspec.Struct, tag="tool_call", tag_field="type"):
    subtype: str = ""
    call_id: str = ""
    tool_call: dict[str, Any] = {}


def _describe_call(tool_call: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool's name and its payload: ``{"readToolCall": {...}}`` -> ``read``."""
    for key, value in tool_call.items():
        payload = value if isinstance(value, dict) else {}
        if key == "function":
            return str(payload.get("name", "function")), payload
        return key.removesuffix("ToolCall"), payload
    return "tool", {}


def _usage_from(raw: dict[str, Any]) -> dict[str, int] | None:
    usage = raw.get("usage")
    if not isinstance(usage, dict):
        return None
    names = {
        "input_tokens": ("inputTokens", "input_tokens"),
        "output_tokens": ("outputTokens", "output_tokens"),
        "cache_read_tokens": ("cacheReadTokens", "cache_read_input_tokens"),
        "cache_write_tokens": ("cacheWriteTokens", "cache_creation_input_tokens"),
    }
    counts: dict[str, int] = {}
    for ours, theirs in names.items():
        for name in theirs:
            value = usage.get(name)
            if isinstance(value, int):
                counts[ours] = value
                break
    return counts


class _StreamParser(MessageStreamParser):
    def other(self, obj: dict[str, Any]) -> list[AgentEvent]:
        try:
            line = msgspec.convert(obj, ToolCallLine)
        except msgspec.ValidationError:
            return []
        name, payload = _describe_call(line.tool_call)
        if line.subtype == "started":
            return [ToolUse(tool_id=line.call_id, name=name, input=payload.get("args"))]
        if line.subtype == "completed":
            result = payload.get("result")
            failed = isinstance(result, dict) and "error" in result
            return [ToolResult(tool_id=line.call_id, output=as_text(result), is_error=failed)]
        return []

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        return _with_usage(super().finish(outcome))


class _JsonParser(JsonResultParser):
    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        return _with_usage(super().finish(outcome))


def _with_usage(result: AgentResult) -> AgentResult:
    counts = _usage_from(result.raw)
    if counts:
        for name, value in counts.items():
            setattr(result.usage, name, value)
    return result


class CursorExecutor(CliExecutor):
    """``cursor-agent -p --output-format json|stream-json --trust ... -- PROMPT``.

    The documented CLI takes the prompt as an argument (no stdin mode documented).
    """

    features = frozenset({"session-resume", "streaming", "tool-scoping"})
    handled = frozenset({"allowed_tools", "resume_session", "model"})
    session_missing = re.compile(r"(session|chat)\b.*\b(not found|does not exist|invalid)", re.I)
    output_parser = _JsonParser
    stream_parser = _StreamParser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        self.check_argv_prompt(prompt)
        args = ["-p", "--output-format", "stream-json" if streaming else "json", "--trust"]
        if options.model is not None:
            args += ["--model", options.model]
        if options.resume_session is not None:
            args += [f"--resume={options.resume_session}"]
        if options.allowed_tools is not None:
            args += ["--force"] if has_write_tools(options.allowed_tools) else ["--mode=ask"]
        return Command(args=[*args, "--", prompt], stdin=None)


SPEC = AgentSpec(
    type="cursor",
    label="Cursor agent",
    binary="cursor-agent",
    install_hint="curl https://cursor.com/install -fsS | bash",
    token_env=("CURSOR_API_KEY",),
    verified=False,
    verified_version=None,
    executor=CursorExecutor,
)
