"""Aider (``aider --message``): plain text, no JSON mode, no sessions.

stdout is a banner (``Aider v0.86.2``, ``Model: ...``, ``Git repo: ...``), the
model's reply, ``Tokens: N sent, M received.`` (and ``Cost: ...`` when the model
is priced), then what aider did (``Applied edit to hello.txt``). Errors from the
model API are printed as ``litellm.<Kind>Error: ...`` (wrapped over lines, then
aider's explanation), followed by ``Retrying in N seconds...`` while it retries;
the exit code stays 0 when it gives up.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from shep.agents.executor import (
    ARGV_PROMPT_LIMIT,
    CliExecutor,
    CliParser,
    Command,
    Scratch,
    add_usage,
    has_write_tools,
)
from shep.agents.failures import agent_failure, clean
from shep.agents.model import (
    AgentEvent,
    AgentOptions,
    AgentResult,
    AgentUsage,
    TextDelta,
    ToolResult,
    ToolUse,
)
from shep.agents.process import ProcessOutcome
from shep.agents.spec import AgentSpec

__all__ = ["SPEC", "AiderExecutor"]

_BANNER = re.compile(
    r"^(Aider v\d|Analytics have been|Model: |Main model: |Weak model: |Editor model: "
    r"|Git repo: |Repo-map: |Added .* to the chat|Use /help|Newer aider version|"
    r"Warning: |You can skip this check|Detected dumb terminal)"
)
_TOKENS = re.compile(r"^Tokens: ([\d.]+)(k?) sent, ([\d.]+)(k?) received\.(?:\s+Cost: \$([\d.]+))?")
_APPLIED = re.compile(r"^Applied edit to (.+)$")
_API_ERROR = re.compile(r"^litellm\.(\w+Error):\s*(.*)$")
_RETRYING = re.compile(r"^Retrying in [\d.]+ seconds")


def _count(number: str, thousands: str) -> int:
    return round(float(number) * (1000 if thousands else 1))


class _Parser(CliParser):
    """Sorts aider's lines into banner, reply, usage and actions as they arrive."""

    done = False

    def __init__(self, executor: AiderExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.reply: list[str] = []
        self.usage = AgentUsage()
        self.usage_line: str | None = None
        self.errors: list[str] = []
        self.edits = 0
        self._after_reply = False
        self._in_error = False
        self._error_pending = False

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        self.sample.add(line)
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        tokens = _TOKENS.match(text)
        if tokens:
            sent, sent_k, received, received_k, cost = tokens.groups()
            self.usage = add_usage(
                self.usage,
                input_tokens=_count(sent, sent_k),
                output_tokens=_count(received, received_k),
                cost_usd=float(cost) if cost else None,
            )
            self.usage_line = text
            self._after_reply = True
            return ()
        error = _API_ERROR.match(text)
        if error:
            self.errors.append(f"{error.group(1)}: {error.group(2)}")
            self._in_error = self._error_pending = True
            return ()
        if _RETRYING.match(text):
            # aider tries again: an answer may still follow.
            self._in_error = self._error_pending = False
            return ()
        if self._in_error:
            if text.strip():
                # The message wraps onto the next lines, then aider explains it
                # ("The API provider has rate limited you."): all part of the error.
                self.errors[-1] += " " + text.strip()
            else:
                self._in_error = False
            return ()
        applied = _APPLIED.match(text)
        if applied:
            self.edits += 1
            tool_id = f"aider-edit-{self.edits}"
            return (
                ToolUse(tool_id=tool_id, name="edit", input={"path": applied.group(1)}),
                ToolResult(tool_id=tool_id, output=text, is_error=False),
            )
        if self._after_reply or self._error_pending:
            return ()  # after the usage line, or what aider adds to an error (a help URL)
        if not self.reply and (not text.strip() or _BANNER.match(text)):
            return ()
        self.reply.append(text)
        return (TextDelta(text=text + "\n"),)

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        text = "\n".join(self.reply).strip()
        if self.errors and (self._error_pending or not text):
            raise agent_failure(self.spec, self.errors[-1], exit_code=outcome.exit_code)
        if outcome.exit_code or (not text and self.usage_line is None):
            raise self.no_result(outcome)
        raw: dict[str, Any] = {"usage_line": self.usage_line}
        if self.errors:
            raw["errors"] = [clean(e) for e in self.errors]
        return AgentResult(
            text=text,
            session_id=None,
            usage=self.usage,
            turns=None,
            duration_ms=outcome.duration_ms,
            structured_output=None,
            raw=raw,
        )


class AiderExecutor(CliExecutor):
    """``aider --message=PROMPT --yes-always --no-git --no-pretty``.

    Aider cannot read the message from stdin; prompts too long for one argv
    string go through ``--message-file`` instead.
    """

    features = frozenset({"tool-scoping"})
    handled = frozenset({"allowed_tools", "model"})
    output_parser = _Parser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        args = ["--yes-always", "--no-git", "--no-pretty", "--no-check-update"]
        if options.model is not None:
            args += ["--model", options.model]
        if options.allowed_tools is not None and not has_write_tools(options.allowed_tools):
            args += ["--dry-run"]
        if len(prompt.encode("utf-8")) > ARGV_PROMPT_LIMIT:
            args += [f"--message-file={scratch.write('message.txt', prompt)}"]
        else:
            args += [f"--message={prompt}"]
        return Command(args=args, stdin=None)


SPEC = AgentSpec(
    type="aider",
    label="Aider",
    binary="aider",
    install_hint="python -m pip install aider-chat",
    token_env=("OPENAI_API_KEY",),
    verified=True,
    verified_version="0.86.2",
    executor=AiderExecutor,
)
