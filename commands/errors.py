"""Errors raised by the write side when a command is refused."""

from __future__ import annotations

from events.errors import ShepError


class RunNotFoundError(ShepError):
    """No run has that id (or unique id prefix)."""

    exit_code = 2

    def __init__(self, run_id: str) -> None:
        super().__init__(f"No run {run_id!r}. List runs with `shep status --all`.")
        self.run_id = run_id


class InvalidTransitionError(ShepError):
    """The run's current status does not allow the requested change."""

    exit_code = 2

    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(f"Run {run_id} is {status}; cannot {action}.")
        self.run_id = run_id
        self.status = status
        self.action = action
