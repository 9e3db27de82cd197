"""A run's life from a face's point of view: request it, start it, resume it, take it over,
execute it here, and finish (what the worker does once the graph stops).

Every function takes the ``Runtime``, returns a value, and raises ``ShepError``
subclasses; a sentence a person must see while it works goes to ``runtime.say``.
The faces (``shep/cli``, ``shep/web``) parse, call one of these, and render what
it returns: ``Outcome`` says how a worker left a run, ``Background`` which
detached worker took it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from events.display import printable
from events.errors import RunInputError, WorkerStillRunningError
from events.runs import RunStatus
from shep.runs.workers import Background, local_worker, start_in_background

if TYPE_CHECKING:
    from commands.run_state import RunState
    from events.store import EventStore
    from shep.home.runtime import Runtime
    from shep.runs.runner import Runner
    from shep.workflows.base import Workflow

__all__ = [
    "Background",
    "Outcome",
    "RunRequest",
    "create_workflow_run",
    "execute_run",
    "launch",
    "request_run",
    "resume",
]


@dataclass(frozen=True)
class RunRequest:
    """A workflow run checked and ready to create: what ``shep run`` asked, resolved."""

    workflow: Workflow
    repo: Path
    agent_type: str
    model: str | None
    #: A run of the same workflow on the same repository that was cut off (hex), if any:
    #: the face asks whether to resume it instead.
    interrupted: str | None


@dataclass(frozen=True)
class Outcome:
    """How a worker in this process left a run."""

    run_id: UUID
    status: RunStatus
    #: The run ended or changed owner elsewhere while this worker ran it.
    fenced: bool = False
    #: Why it failed, in the run's own words (the agent's: render it escaped).
    error: str | None = None


def request_run(runtime: Runtime, name: str, repo: Path, *, model: str | None) -> RunRequest:
    """Check that workflow ``name`` can run on ``repo`` with the configured agent now: the
    repository, the agent's binary and its token (before any run exists)."""
    from projections.queries import find_interrupted_run
    from shep.agents.registry import require_installed
    from shep.git import repo_root
    from shep.home.secrets import require_token
    from shep.home.settings import load_settings
    from shep.workflows import get_workflow

    workflow = get_workflow(name)
    repo_path = repo.expanduser().resolve()
    try:
        str(repo_path).encode()  # recorded as text in events; see events.sqlite_file.home_from_env
    except UnicodeEncodeError as e:
        raise RunInputError(
            f"Repository {bytes(repo_path)!r} is not valid UTF-8. "
            "Rename it (or the directory holding it) so that its path is valid UTF-8."
        ) from e
    if not repo_path.is_dir():
        raise RunInputError(f"Repository {repo_path} is not a directory.")
    # A subdirectory means its repository, as for `shep feat new`.
    repo_path = repo_root(repo_path, outside_git=True)
    settings = load_settings(runtime.store())
    agent_type = settings.require_agent()
    require_installed(agent_type, settings.binary)
    # Fails here, before any run exists, if the secrets file cannot be read.
    require_token(runtime.home, agent_type, configured=settings.token_configured)
    interrupted = find_interrupted_run(runtime.read_db(), name, str(repo_path))
    return RunRequest(workflow, repo_path, agent_type, model or settings.model, interrupted)


def create_workflow_run(runtime: Runtime, request: RunRequest, inputs: Mapping[str, str]) -> UUID:
    """Record the new run (pending, owned by this process until a worker takes it)."""
    from commands.create_run import create_run
    from shep.home.identity import current_actor, host_name
    from shep.home.procs import process_start
    from shep.workflows.shape import pin_fields

    me = os.getpid()
    return create_run(
        runtime.store(),
        workflow=request.workflow.name,
        agent_type=request.agent_type,
        model=request.model,
        repo=str(request.repo),
        inputs=dict(inputs),
        node_names=request.workflow.node_names,
        created_by=current_actor(),
        pid=me,
        host=host_name(),
        process_start=process_start(me),
        **pin_fields(request.workflow, runtime.home),
    )


def resume(
    runtime: Runtime, run_id: UUID, *, background: bool, timeout: float | None, force: bool
) -> Background | Outcome | None:
    """Continue an interrupted run from its last checkpoint, or retry a failed one; with
    ``force``, take a running one over from its stuck or stopped worker first.

    None when this very command already resumed it (its decision was waiting unacted on).
    """
    from commands.run_state import load_run
    from events.errors import InvalidTransitionError
    from events.runs import WAITING_STATUSES

    store = runtime.store()
    state = load_run(store, run_id)
    if state.status is RunStatus.RUNNING and run_id.hex in runtime.resumed:
        runtime.say(
            f"Run {run_id.hex[:8]} resumed with its decision in worker "
            f"{runtime.resumed[run_id.hex]}."
        )
        return None
    taken_over = state.status is RunStatus.RUNNING
    if taken_over:
        state = take_over(runtime, state, force=force)  # it stops the worker and its agents
    if state.status in WAITING_STATUSES:
        raise InvalidTransitionError(
            run_id.hex, state.status.value, "resume it: it goes on once decided (`shep inbox`)"
        )
    if state.status not in (RunStatus.INTERRUPTED, RunStatus.FAILED):
        raise InvalidTransitionError(run_id.hex, state.status.value, "resume it")
    # No worker of this run is left here; an agent a killed worker started may be, still
    # writing into the repository: it must not outlive its worker.
    from shep.runs.workers import stop_worker

    if not taken_over:
        for line in stop_worker(None, None, run_id, grace=5.0):
            runtime.say(f"{line} (left behind by the run's last worker)")
    require_token_for(runtime, state.agent_type)
    return launch(runtime, run_id, resume=True, background=background, timeout=timeout)


def require_token_for(runtime: Runtime, agent_type: str | None) -> None:
    """The agent's token must be readable before a worker starts (``SecretsError`` if not)."""
    from shep.home.secrets import require_token
    from shep.home.settings import load_settings

    settings = load_settings(runtime.store())
    agent_type = agent_type or settings.agent_type
    if agent_type is not None:
        require_token(
            runtime.home,
            agent_type,
            configured=settings.token_configured and settings.agent_type == agent_type,
        )


def take_over(runtime: Runtime, state: RunState, *, force: bool) -> RunState:
    """Interrupt a running run whose worker is stuck or stopped (``force``); else refuse.

    A worker on this host is stopped first (TERM, CONT for a stopped one, KILL
    after a grace period): it may hold the store's write lock mid-transaction,
    and once running it records its own interruption. Then, if the run is still
    running (a killed or remote worker), it is marked interrupted,
    compare-and-set on that worker's epoch. The resume that follows makes a new
    owner, so the old worker is fenced off even if it lives on.
    """
    from commands.mark_interrupted import mark_interrupted
    from commands.run_state import load_run
    from events.errors import InvalidTransitionError, WorkerFencedError
    from shep.home.identity import current_actor, host_name
    from shep.runs.workers import stop_worker

    short = state.run_id.hex[:8]
    if not force:
        raise WorkerStillRunningError(
            f"Run {short} is still running (worker {state.pid} on {state.host}). If that "
            f"worker is stuck, `shep resume {short} --force` stops it and resumes the run."
        )
    pid, started = local_worker(state)
    for line in stop_worker(pid, started, state.run_id, grace=5.0):
        runtime.say(line)
    store = runtime.store()
    with contextlib.suppress(InvalidTransitionError, WorkerFencedError):
        mark_interrupted(
            store,
            state.run_id,
            reason=f"taken over by {current_actor()} (shep resume --force)",
            detected_by_pid=os.getpid(),
            detected_by_host=host_name(),
            epoch=state.epoch,
        )
    after = load_run(store, state.run_id)
    if after.status is RunStatus.RUNNING:
        # Another resume got there first: that one is the owner now.
        raise WorkerStillRunningError(f"Run {short} was resumed by another worker meanwhile.")
    return after


def launch(
    runtime: Runtime, run_id: UUID, *, resume: bool, background: bool, timeout: float | None
) -> Background | Outcome:
    """Start (or resume) the run: in a detached worker, or in this process until it ends
    or waits.

    A resume goes on only under the graph the run is pinned to, or through the migration
    its workflow declares (``shep.runs.pin``): else ``WorkflowChangedError``, nothing
    recorded.
    """
    if resume:
        from shep.runs.pin import check_resume

        check_resume(runtime.store(), run_id, runtime.home)
    if background:
        return start_in_background(runtime, run_id, resume=resume, timeout=timeout)
    return execute_run(runtime, run_id, resume=resume, background=False, timeout=timeout)


def ride_out_outages(runtime: Runtime, store: EventStore) -> None:
    """A worker on a shared store waits for a lost server up to the orphan window.

    Meanwhile its agent keeps running and its events wait in memory; they are
    recorded once the server is back. Past the window other hosts take the run
    for interrupted, so the worker gives up and stops rather than write after that.
    """
    from shep.runs.recovery import orphan_after

    store.retry_for = orphan_after(runtime.read_db())
    me = os.getpid()
    store.on_retry = lambda message: runtime.say(f"shep: run worker {me}: {message}")


def execute_run(
    runtime: Runtime, run_id: UUID, *, resume: bool, background: bool, timeout: float | None
) -> Outcome:
    """Execute the run in this process: as its foreground worker, or the background one.

    A failure before the run starts (its agent cannot be set up) fails a new
    run with the reason rather than leaving it pending.
    """
    from commands.fail_run import fail_run
    from commands.resume_run import resume_run
    from commands.start_run import start_run
    from events.errors import ShepError
    from shep.home.identity import host_name
    from shep.home.procs import process_start
    from shep.home.settings import load_settings
    from shep.runs.runner import Runner
    from shep.runs.workers import wait_until_assigned

    store = runtime.store()
    if store.shared:
        ride_out_outages(runtime, store)
    me = os.getpid()
    if background:
        # The launcher records the start with this worker's pid; wait until it has.
        state = wait_until_assigned(store, run_id, me)
    try:
        settings = load_settings(store)
        runner = Runner(store, runtime.db_path, runtime.home, run_id, settings, timeout=timeout)
    except ShepError as e:
        if background or not resume:
            fail_run(
                store,
                run_id,
                error_type=type(e).__name__,
                message=str(e),
                epoch=state.epoch if background else None,
            )
        raise
    if not background:
        begin = resume_run if resume else start_run
        state = begin(store, run_id, pid=me, host=host_name(), process_start=process_start(me))
        runtime.say(
            printable(
                f"Run {run_id.hex[:8]}: {runner.plan.workflow.name} on {runner.plan.repo} "
                f"with {runner.plan.agent_type}"
            )
        )
    status = runner.execute(state.epoch)
    return finish(runtime, runner, status)


def finish(runtime: Runtime, runner: Runner, status: RunStatus) -> Outcome:
    """What the worker does once the graph stopped: after a suspend, tell and wake who
    decides (see ``after_suspend``); after a failure, read the reason."""
    from events.runs import WAITING_STATUSES

    run_id = runner.run_id
    if runner.fenced:
        return Outcome(run_id, status, fenced=True)
    if status in WAITING_STATUSES:
        after_suspend(runtime, run_id, runner.asked)
        return Outcome(run_id, status)
    if status in (RunStatus.COMPLETED, RunStatus.INTERRUPTED):
        return Outcome(run_id, status)
    from projections.catch_up import catch_up
    from projections.queries import get_run

    conn = runtime.read_db()
    catch_up(conn)
    return Outcome(run_id, status, error=get_run(conn, run_id.hex)["error"] or None)


def after_suspend(runtime: Runtime, run_id: UUID, asked: list[UUID]) -> None:
    """The run waits on ``asked``: notify, start the supervisor where a policy covers an
    item, take a decision that landed meanwhile, and on a shared store leave a waiter
    here for decisions made on another machine."""
    from projections.catch_up import catch_up
    from shep.home.notify import notify_new_items
    from shep.home.settings import load_settings
    from shep.runs.inbox_watch import check_inbox
    from shep.supervisor.start import start_if_covered

    # Settings as they are now: a run can wait for hours after it started.
    store = runtime.store()
    notify_new_items(store, runtime.home, asked, load_settings(store), say=runtime.say)
    start_if_covered(store, runtime.home, asked)
    # A decision that landed while this worker was suspending the run found it
    # still running and left it to us: start the worker that takes it.
    catch_up(runtime.read_db())
    check_inbox(runtime)
    if runtime.shared and run_id.hex not in runtime.resumed:
        # A decision may come from another machine: wait for it here, where the run goes on.
        from shep.home.procs import spawn_shep
        from shep.runs.workers import log_path

        spawn_shep(runtime.home, ["_await", run_id.hex], log_path(runtime.home, run_id))
