"""Turning what an agent CLI says went wrong into shep's typed errors, once, here.

The CLIs report the same few failures in many shapes: an HTTP status in a JSON
field, "unexpected status 401" in a sentence, "[API Error: 529 Overloaded]" as
the answer text. Executors extract the message (and the status when the CLI
gives it as a field) and hand it to ``api_error``; the agent's own words always
end up in the error message.
"""

from __future__ import annotations

import re

from events.errors import (
    AgentAuthError,
    AgentError,
    AgentExitError,
    AgentOutputError,
    AgentRateLimitError,
    AgentSessionNotFoundError,
)
from shep.agents.spec import AgentSpec

__all__ = [
    "AUTH_STATUSES",
    "RATE_LIMIT_STATUSES",
    "agent_failure",
    "api_error",
    "clean",
    "error_line",
    "exit_error",
    "output_error",
    "session_not_found",
    "snippet",
    "status_in",
]

AUTH_STATUSES = frozenset({401, 403})
# 503 and 529 are "overloaded": the same advice as a 429, try again later.
RATE_LIMIT_STATUSES = frozenset({429, 503, 529})

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_STATUS = (
    re.compile(r"\bstatus(?:Code)?\"?\s*[:=]?\s*(\d{3})\b", re.IGNORECASE),
    re.compile(r"\bAPI Error:?\s*(\d{3})\b"),
    re.compile(r"\"code\"\s*:\s*(\d{3})\b"),
    re.compile(r"\bHTTP\s*(\d{3})\b"),
    re.compile(r"\bRepeated (\d{3})\b"),
    re.compile(
        r"\b(\d{3}) (?:Unauthorized|Forbidden|Too Many Requests|Overloaded|Service Unavailable)\b"
    ),
    re.compile(r"^\s*(\d{3})\s+[A-Za-z]"),
)
_AUTH_WORDS = re.compile(
    r"invalid api key|incorrect api key|invalid x-api-key|api key not valid|unauthori[sz]ed"
    r"|UNAUTHENTICATED|authentication_error|authentication failed|AuthenticationError"
    r"|no authentication information|could not be validated|bad credentials",
    re.IGNORECASE,
)
_RATE_WORDS = re.compile(
    r"rate[ _-]?limit|too many requests|overloaded|at capacity|high demand"
    r"|resource has been exhausted|RESOURCE_EXHAUSTED",
    re.IGNORECASE,
)
_ERROR_LINE = re.compile(r"(\[?API Error|Error\b|error:|fatal\b)", re.IGNORECASE)
_MESSAGE_LIMIT = 600


def _sentence(text: str) -> str:
    """``text`` without its final full stop, to be followed by one of ours."""
    return text.rstrip().rstrip(".")


def clean(text: str) -> str:
    """``text`` without ANSI colours, on one line, at most a few hundred characters."""
    one_line = " ".join(_ANSI.sub("", text).split())
    if len(one_line) > _MESSAGE_LIMIT:
        return one_line[: _MESSAGE_LIMIT - 3] + "..."
    return one_line


def snippet(data: bytes | str, limit: int = 200) -> str:
    """The start of some output, printable, for an error message."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    text = _ANSI.sub("", text).strip()
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def status_in(text: str) -> int | None:
    """The HTTP status a CLI's error message mentions, if any."""
    for pattern in _STATUS:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def api_error(spec: AgentSpec, message: str, *, status: int | None = None) -> AgentError | None:
    """An auth or rate-limit error for ``message``, or ``None`` if it is neither."""
    text = clean(message)
    code = status if status is not None else status_in(text)
    where = f" (HTTP {code})" if code is not None else ""
    if code in AUTH_STATUSES or (code is None and _AUTH_WORDS.search(text)):
        tokens = " or ".join(spec.token_env) or "its credentials"
        return AgentAuthError(
            f"{spec.label} was refused by its API{where}: {_sentence(text)}. Check {tokens}, "
            f"or log in to `{spec.binary}` again.",
            agent=spec.type,
        )
    if code in RATE_LIMIT_STATUSES or ((code is None or code >= 500) and _RATE_WORDS.search(text)):
        return AgentRateLimitError(
            f"{spec.label}'s API is rate limiting or overloaded{where}: {_sentence(text)}. "
            "Try again in a moment.",
            agent=spec.type,
        )
    return None


def agent_failure(
    spec: AgentSpec, message: str, *, exit_code: int | None, status: int | None = None
) -> AgentError:
    """The error for a failure the agent reported in its own output.

    Auth and rate limits get their types; anything else is an ``AgentExitError``
    when the process exited non-zero, or a plain ``AgentError`` when it claimed
    success (exit code 0) while reporting an error.
    """
    typed = api_error(spec, message, status=status)
    if typed is not None:
        return typed
    text = clean(message)
    if exit_code:
        return AgentExitError(exit_code, text, agent=spec.type)
    return AgentError(f"{spec.label} reported an error: {text}", agent=spec.type)


def session_not_found(spec: AgentSpec, session_id: str | None, message: str) -> AgentError:
    """The error for resuming a session the agent does not know."""
    return AgentSessionNotFoundError(
        f"{spec.label} has no session {session_id or '(unknown)'} to resume: "
        f"{_sentence(clean(message))}. "
        "Start a new session instead.",
        agent=spec.type,
    )


def error_line(text: str) -> str:
    """The line of ``text`` that states the error: the last one that reads like an
    error message (``Error: ...``, ``[API Error: ...]``), else the last non-empty one."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR_LINE.match(line):
            return line
    return lines[-1] if lines else ""


def exit_error(spec: AgentSpec, exit_code: int, stderr: str) -> AgentExitError:
    """A non-zero exit that no narrower error explains.

    The tail is cut after the error line, so that a stack trace printed after it
    does not become the message.
    """
    text = _ANSI.sub("", stderr)
    line = error_line(text)
    if line:
        text = text[: text.rfind(line) + len(line)]
    return AgentExitError(exit_code, text[-4000:], agent=spec.type)


def output_error(spec: AgentSpec, problem: str, data: bytes | str = b"") -> AgentOutputError:
    """Output shep cannot use: empty, truncated, not JSON, or without a result."""
    shown = f": {snippet(data)}" if data else ""
    return AgentOutputError(f"{spec.label} {problem}{shown}", agent=spec.type)
