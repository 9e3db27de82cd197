"""Continue CLI (``cn -p --format json``).

stdout is one object, ``{"response", "status": "success", "note"}``, with no
session id, usage or cost. Failures exit 1 with ``{"status": "error", "message":
"401 ..."}`` on stderr. ``cn`` 1.5.47 does not read a piped prompt, so the prompt
is the last argv operand (after ``--``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from shep.agents.executor import (
    CliExecutor,
    Command,
    JsonDocumentParser,
    Scratch,
    as_text,
    has_write_tools,
    log,
)
from shep.agents.failures import agent_failure, output_error
from shep.agents.model import AgentOptions, AgentResult, AgentUsage
from shep.agents.process import ProcessOutcome
from shep.agents.spec import AgentSpec

__all__ = ["CONFIG_ENV", "SPEC", "ContinueExecutor"]

# cn has no environment variable for its config file; shep reads this one from the
# executor's env (or os.environ) and passes it as --config.
CONFIG_ENV = "SHEP_CONTINUE_CONFIG"


class Reply(msgspec.Struct):
    status: str = ""
    response: Any = None
    message: str | None = None


def _last_object(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (cn's error report)."""
    for raw_line in reversed(text.splitlines()):
        line = raw_line.strip()
        if line.startswith("{"):
            try:
                obj = msgspec.json.decode(line.encode())
            except msgspec.DecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


class _Parser(JsonDocumentParser):
    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        data = bytes(self.document.data)
        decoded = self.decoded(outcome)
        raw: dict[str, Any] | None = decoded if isinstance(decoded, dict) else None
        if raw is None:
            raw = _last_object(outcome.stderr)
        try:
            reply = msgspec.convert(raw, Reply) if raw is not None else None
        except msgspec.ValidationError:
            reply = None
        if reply is not None and reply.status == "error":
            raise agent_failure(
                self.spec, reply.message or "unknown error", exit_code=outcome.exit_code
            )
        if reply is None or reply.status != "success" or outcome.exit_code:
            if outcome.exit_code or not data.strip():
                raise self.no_result(outcome)
            raise output_error(self.spec, "printed JSON without a response", data)
        assert raw is not None
        return AgentResult(
            # cn parses an answer that is itself JSON and prints it as an object.
            text=as_text(reply.response),
            session_id=None,
            usage=AgentUsage(),
            turns=None,
            duration_ms=outcome.duration_ms,
            structured_output=None,
            raw=raw,
        )


class ContinueExecutor(CliExecutor):
    """``cn -p --format json [--config FILE] ... -- PROMPT``."""

    features = frozenset({"tool-scoping", "system-prompt"})
    handled = frozenset({"allowed_tools", "resume_session", "model", "system_prompt"})
    output_parser = _Parser

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        self.check_argv_prompt(prompt)
        args = ["-p", "--format", "json"]
        config = self.child_env().get(CONFIG_ENV)
        if config:
            args += ["--config", config]
        if options.resume_session is not None:
            # cn reports no session ids and resumes only its most recent session.
            log.debug("%s: cn cannot resume a session by id; passing --resume (latest)", self.name)
            args += ["--resume"]
        if options.model is not None:
            args += ["--model", options.model]
        if options.allowed_tools is not None:
            args += ["--auto" if has_write_tools(options.allowed_tools) else "--readonly"]
        if options.system_prompt is not None:
            args += ["--rule", options.system_prompt]
        return Command(args=[*args, "--", prompt], stdin=None)


SPEC = AgentSpec(
    type="continue",
    label="Continue",
    binary="cn",
    install_hint="npm install -g @continuedev/cli",
    token_env=("CONTINUE_API_KEY",),
    verified=True,
    verified_version="1.5.47",
    executor=ContinueExecutor,
)
