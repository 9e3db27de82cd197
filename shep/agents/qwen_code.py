"""Qwen Code (``qwen``), a Gemini CLI fork that prints Claude-style message objects.

``--output-format json`` prints one JSON array of those objects; ``stream-json``
prints them as lines. API errors are not flagged: the process exits 0 with
``is_error: false`` and ``"[API Error: 401 ...]"`` as the answer, so the answer
text is checked.
"""

from __future__ import annotations

import re

import msgspec

from shep.agents.claude_code import JsonResultParser, MessageStreamParser
from shep.agents.executor import CliExecutor, Command, Scratch
from shep.agents.gemini import allowed_tool_args
from shep.agents.model import AgentOptions
from shep.agents.spec import AgentSpec

__all__ = ["SPEC", "QwenCodeExecutor"]

_API_ERROR = re.compile(r"^\s*\[API Error:\s*(.*?)\]?\s*$", re.DOTALL)


class _StreamParser(MessageStreamParser):
    answer_error = _API_ERROR


class _JsonParser(JsonResultParser):
    answer_error = _API_ERROR


class QwenCodeExecutor(CliExecutor):
    """``qwen --output-format json|stream-json``, prompt on stdin."""

    features = frozenset(
        {"session-resume", "streaming", "tool-scoping", "structured-output", "system-prompt"}
    )
    handled = frozenset(
        {"allowed_tools", "resume_session", "max_turns", "model", "system_prompt", "output_schema"}
    )
    session_missing = re.compile(r"No saved session found", re.IGNORECASE)
    output_parser = _JsonParser
    stream_parser = _StreamParser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["--output-format", "stream-json" if streaming else "json"]
        if options.resume_session is not None:
            args += ["--resume", options.resume_session]
        if options.model is not None:
            args += ["--model", options.model]
        if options.allowed_tools is not None:
            args += allowed_tool_args(options.allowed_tools)
        if options.system_prompt is not None:
            args += ["--append-system-prompt", options.system_prompt]
        if options.max_turns is not None:
            args += ["--max-session-turns", str(options.max_turns)]
        if options.output_schema is not None:
            args += ["--json-schema", msgspec.json.encode(options.output_schema).decode()]
        return Command(args=args, stdin=prompt)


SPEC = AgentSpec(
    type="qwen-code",
    label="Qwen Code",
    binary="qwen",
    install_hint="npm install -g @qwen-code/qwen-code",
    token_env=("OPENAI_API_KEY",),
    verified=True,
    verified_version="0.15.10",
    executor=QwenCodeExecutor,
)
