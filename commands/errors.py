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


class WorkerFencedError(ShepError):
    """A worker appended to a run that now belongs to another owner (a newer start or resume).

    The run was interrupted and resumed (or cancelled) while this worker was
    stopped or cut off; whatever it appends now would duplicate the new
    owner's work, so it is refused and the worker stops.
    """

    exit_code = 75

    def __init__(self, run_id: str, epoch: int, current: int) -> None:
        super().__init__(
            f"Run {run_id[:8]} now belongs to worker #{current}; this worker (#{epoch}) "
            "was fenced off and stops. See `shep status`."
        )
        self.run_id = run_id
        self.epoch = epoch
        self.current = current
