"""The root of shep's error hierarchy, and the errors the event store raises.

It lives here because ``events`` is the innermost layer: ``commands`` and
``shep`` extend it, and ``events`` imports nothing of ours.
"""

from __future__ import annotations


class ShepError(Exception):
    """A failure a user can see: the message says the problem and the fix."""

    exit_code: int = 1


class StoreError(ShepError):
    """The event store cannot be used."""


class StoreUnavailableError(StoreError):
    """The database cannot be opened or written (permissions, read-only home, disk full)."""


class StoreCorruptedError(StoreError):
    """The database file is not a shep event store or is damaged."""


class StoreTooNewError(StoreError):
    """The store was written by a newer shep, in a form this one cannot read or write."""

    exit_code = 5


class UnknownEventError(StoreTooNewError):
    """The store holds an event type, or a version of one, that this shep does not know.

    Raised where an event is decoded (``events.catalog``), which does not know
    the store; whoever reads the store names its writer (``naming``).
    """

    def __init__(
        self,
        topic: str,
        version: int | None = None,
        *,
        written_by: str | None = None,
        where: str = "The event store",
    ) -> None:
        from events.versions import SHEP_VERSION

        self.topic = topic
        self.version = version
        self.written_by = written_by
        what = f"version {version} of {topic}" if version is not None else f"{topic} events"
        writer = f"shep {written_by}" if written_by else "a newer shep"
        super().__init__(
            f"{where} holds {what}, written by {writer}; this is shep {SHEP_VERSION}: upgrade shep."
        )

    def naming(
        self, written_by: str | None, *, where: str = "The event store"
    ) -> UnknownEventError:
        """The same refusal, naming the shep that wrote the store."""
        return UnknownEventError(self.topic, self.version, written_by=written_by, where=where)


class ConcurrencyError(ShepError):
    """Another writer appended to the same stream first; reload and decide again."""

    exit_code = 3


class RunNotFoundError(ShepError):
    """No run has that id (or unique id prefix)."""

    exit_code = 2

    def __init__(
        self, run_id: str, *, runs_are: str = "List runs with `shep status --all`."
    ) -> None:
        """``runs_are``: where the runs that do exist are listed (the store's, by default)."""
        super().__init__(f"No run {run_id!r}. {runs_are}")
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


class SecretsError(ShepError):
    """The secrets file cannot be read or written."""


class WorkerNotAssignedError(ShepError):
    """The launcher never recorded this worker as the run's worker."""


class StepFailedError(ShepError):
    """A deterministic step found something wrong (a file that does not validate, ...):
    the run fails with this message.
    """


class UnknownWorkflowError(ShepError):
    exit_code = 2


class RunInputError(ShepError):
    exit_code = 2


class WorkflowChangedError(ShepError):
    """The run's workflow changed since it started and declares no way across: it is not
    resumed (see ``shep.runs.pin``); exit 1, a refusal because of the state it is in."""


class InterruptedRunExistsError(ShepError):
    exit_code = 2


class WorkerStillRunningError(ShepError):
    exit_code = 2


class ChainBrokenError(ShepError):
    """The hash chain does not verify: history was edited, cut short or damaged."""

    exit_code = 4


class AnchorFormatError(ShepError):
    """``--anchor`` is not ``POSITION:HASH``."""

    exit_code = 2


class ReasonRequiredError(ShepError):
    exit_code = 2


class InvalidAnswerError(ShepError):
    """The answer names no option of the question, or is empty."""

    exit_code = 2


class ItemNotFoundError(ShepError):
    """No inbox item has that id (or prefix)."""

    exit_code = 2

    def __init__(self, ref: str) -> None:
        super().__init__(f"No inbox item {ref!r}. List them with `shep inbox`.")


class WrongItemKindError(ShepError):
    """``shep answer`` on an approval gate, or ``shep approve`` on a question."""

    exit_code = 2


class RunNotWaitingError(ShepError):
    """The item's run has ended: its items can no longer be decided."""

    exit_code = 2


class HomePathError(StoreUnavailableError):
    """SHEP_HOME names a path shep cannot record (not valid UTF-8) or use (a file, not a
    directory): a usage error."""

    exit_code = 2


class AmbiguousRunIdError(ShepError):
    """A run id prefix matches more than one run."""

    exit_code = 2


class ItemRefError(ShepError):
    """An item reference names no pending item, or several."""

    exit_code = 2


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


class AlreadyDecidedError(ShepError):
    """The inbox item has its decision already; only one ever takes effect."""

    exit_code = 3

    def __init__(self, message: str, *, actor: str) -> None:
        super().__init__(message)
        self.actor = actor


class InvalidSettingError(ShepError):
    """A setting is unknown, or its value is of the wrong kind, out of bounds, or breaks a rule."""

    exit_code = 2


class GitError(ShepError):
    """A git operation shep needs failed, or the repository is not one shep can work in."""


class NotARepositoryError(GitError):
    """The path given is no git work tree (missing, a plain directory, bare, inside .git)."""

    exit_code = 2


class FeatureNotFoundError(ShepError):
    """No feature run matches what was given."""

    exit_code = 2


class FeatureError(ShepError):
    """A feature command cannot do what was asked (it says why and what to do instead)."""


class FeatureInputError(FeatureError):
    """What ``feat new`` was given cannot start a feature: an empty description, a --base
    that is no branch, or none where HEAD is detached.
    """

    exit_code = 2


class DurationError(FeatureError):
    """``--older-than`` is not a duration."""

    exit_code = 2


class RemovalRefusedError(FeatureError):
    """``rm`` will not remove the worktree without --force: ``problem``, then what to do."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}: {fix}")
        self.problem = problem


class PolicyError(ShepError):
    """A supervisor policy that cannot be set or used (an unknown autonomy, a bad rule, a file)."""

    exit_code = 2


class SupervisorOffError(ShepError):
    """The supervisor was asked to act while the ``collaboration`` flag is off."""

    exit_code = 2


class WorktreeLinkChangedError(GitError, StepFailedError):
    """A feature worktree's ``.git`` file no longer names the git directory shep made for
    it: something in the worktree rewrote it, so shep runs no git there and the run fails.
    """


class UnsafePathError(ShepError):
    """A path an agent or a repository named leads out of its worktree (``..``, an
    absolute path, or a symbolic link on the way): shep does not touch it.
    """


class ServeAddressError(ShepError):
    """A face cannot listen where it was asked to (the port is taken, the host is not this
    machine's): bad input, as the address was the user's to choose.
    """

    exit_code = 2
