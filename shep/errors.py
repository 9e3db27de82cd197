"""shep's error hierarchy in one place.

The CLI layer turns any ``ShepError`` into one line on stderr and its
``exit_code``; ``--debug`` shows the traceback.
"""

from __future__ import annotations

from commands.errors import InvalidTransitionError, RunNotFoundError
from events.errors import (
    ConcurrencyError,
    ShepError,
    StoreCorruptedError,
    StoreError,
    StoreUnavailableError,
)

__all__ = [
    "AgentAuthError",
    "AgentError",
    "AgentExitError",
    "AgentNotConfiguredError",
    "AgentNotFoundError",
    "AgentOutputError",
    "AgentRateLimitError",
    "AgentSessionNotFoundError",
    "AgentTimeoutError",
    "ConcurrencyError",
    "InvalidTransitionError",
    "RunNotFoundError",
    "SettingsError",
    "ShepError",
    "StoreCorruptedError",
    "StoreError",
    "StoreUnavailableError",
]


class SettingsError(ShepError):
    """The settings are missing or invalid."""

    exit_code = 2


class AgentNotConfiguredError(SettingsError):
    """No agent type has been configured."""

    def __init__(self) -> None:
        super().__init__("No agent configured. Run `shep settings agent`.")


class AgentError(ShepError):
    """An agent CLI call failed. ``retryable`` says whether trying again may help."""

    retryable: bool = False

    def __init__(self, message: str, *, agent: str = "") -> None:
        super().__init__(message)
        self.agent = agent


class AgentNotFoundError(AgentError):
    """The agent's binary is not installed or not on PATH."""


class AgentAuthError(AgentError):
    """The agent was refused by its API (401/403): fix the token or log in again."""


class AgentRateLimitError(AgentError):
    """The agent's API is rate limiting (429) or overloaded (529): retry later."""

    retryable = True


class AgentExitError(AgentError):
    """The agent exited non-zero for a reason not covered by a narrower error."""

    def __init__(self, code: int, stderr_tail: str, *, agent: str = "") -> None:
        detail = stderr_tail.strip().splitlines()[-1] if stderr_tail.strip() else "no message"
        super().__init__(f"{agent or 'agent'} exited with code {code}: {detail}", agent=agent)
        self.code = code
        self.stderr_tail = stderr_tail


class AgentOutputError(AgentError):
    """The agent's output was empty, truncated, not JSON, or too large."""


class AgentSessionNotFoundError(AgentError):
    """The agent does not know the session shep asked it to resume."""


class AgentTimeoutError(AgentError):
    """The agent call ran past its timeout and was killed with its process group."""

    retryable = True
