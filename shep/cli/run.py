"""``shep run``, ``resume``, ``cancel``, ``workflows`` and the hidden ``_worker``."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click

from events.display import printable
from events.errors import (
    InterruptedRunExistsError,
    RunInputError,
    ShepError,
    WorkerStillRunningError,
)
from shep.cli.render import Seconds
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    from commands.run_state import RunState
    from events.runs import RunStatus
    from events.store import EventStore
    from shep.runs.runner import Runner

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def _parse_inputs(values: tuple[str, ...]) -> dict[str, str]:
    inputs = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise RunInputError(f"--input takes KEY=VALUE, not {value!r}.")
        inputs[key.strip()] = text
    return inputs


@click.command()
def workflows() -> None:
    """List the workflows `shep run` can run."""
    from shep.workflows import WORKFLOWS

    for workflow in WORKFLOWS.values():
        click.echo(f"{workflow.name}  {workflow.description}")
        click.echo(f"    nodes: {' -> '.join(workflow.node_names)}")


@click.command()
@click.argument("name")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The repository to work on (any directory in its work tree).",
)
@click.option("--input", "inputs", multiple=True, metavar="KEY=VALUE", help="Workflow input.")
@click.option("--background", is_flag=True, help="Run in a detached worker; print the run id.")
@click.option("--model", help="Model for this run (overrides the agent's configured model).")
@click.option(
    "--timeout",
    type=Seconds(1),
    metavar="SECONDS",
    help="Time limit of each agent call (default: the agent_timeout setting, 1800).",
)
@click.option(
    "--resume/--no-resume",
    "resume",
    default=None,
    help="If an interrupted run of NAME exists in this repository: resume it, or not.",
)
@click.pass_obj
def run(
    runtime: Runtime,
    name: str,
    repo: Path,
    inputs: tuple[str, ...],
    background: bool,
    model: str | None,
    timeout: float | None,
    resume: bool | None,
) -> None:
    """Run workflow NAME on a repository with the configured agent."""
    from commands.create_run import create_run
    from projections.queries import find_interrupted_run
    from shep.git import repo_root
    from shep.home.identity import current_actor, host_name, process_start
    from shep.home.secrets import require_token
    from shep.home.settings import load_settings
    from shep.workflows import get_workflow
    from shep.workflows.shape import pin_fields

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
    parsed = _parse_inputs(inputs)
    store = runtime.store()
    settings = load_settings(store)
    agent_type = settings.require_agent()
    _check_binary(agent_type, settings.binary)
    # Fails here, before any run exists, if the secrets file cannot be read.
    require_token(runtime.home, agent_type, configured=settings.token_configured)
    interrupted = find_interrupted_run(runtime.read_db(), name, str(repo_path))
    if interrupted is not None and _should_resume(interrupted, resume):
        _resume(runtime, UUID(interrupted), background=background, timeout=timeout, force=False)
        return
    me = os.getpid()
    run_id = create_run(
        store,
        workflow=workflow.name,
        agent_type=agent_type,
        model=model or settings.model,
        repo=str(repo_path),
        inputs=parsed,
        node_names=workflow.node_names,
        created_by=current_actor(),
        pid=me,
        host=host_name(),
        process_start=process_start(me),
        **pin_fields(workflow),
    )
    launch(runtime, run_id, resume=False, background=background, timeout=timeout)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option("--background", is_flag=True, help="Resume in a detached worker.")
@click.option(
    "--timeout",
    type=Seconds(1),
    metavar="SECONDS",
    help="Time limit of each agent call.",
)
@click.option(
    "--force",
    is_flag=True,
    help="If RUN is still running (a stuck or stopped worker): stop that worker, then resume.",
)
@click.pass_obj
def resume(
    runtime: Runtime, run_ref: str, background: bool, timeout: float | None, force: bool
) -> None:
    """Continue an interrupted RUN from its last checkpoint, or retry a failed one.

    Completed nodes are not run again; the node that was in flight (or failed) is re-run,
    continuing the agent's session where the agent supports it. A run whose
    worker is still alive is not resumed unless --force: that worker is
    interrupted first, and fenced off, so it can never write to the run again.
    """
    from events.audit import run_in_log

    # From the log, not the projections: a worker stopped inside a write transaction
    # keeps them from catching up, and --force is how that worker is taken over.
    run_id = UUID(run_in_log(runtime.read_db(), run_ref))
    _resume(runtime, run_id, background=background, timeout=timeout, force=force)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--grace",
    type=Seconds(0),
    default=5.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL.",
)
@click.pass_obj
def cancel(runtime: Runtime, run_ref: str, grace: float) -> None:
    """Cancel RUN: record it, stop its worker (TERM, then KILL) and the agent's processes.

    Only the run's own worker is signalled: a process that merely has its
    pid now (the worker died and the pid was reused) is left alone, and a run
    with no worker (waiting, interrupted) gets no signal.
    """
    from commands.cancel_run import cancel_run
    from commands.run_state import load_run
    from events.audit import run_in_log
    from events.runs import RunStatus
    from shep.home.identity import current_actor
    from shep.runs.workers import stop_worker

    run_id = UUID(run_in_log(runtime.read_db(), run_ref))  # its state is read from the log
    store = runtime.store()
    before = load_run(store, run_id)
    cancel_run(store, run_id, cancelled_by=current_actor())
    running = before.status is RunStatus.RUNNING
    pid, started = _local_worker(before) if running else (None, None)
    for line in stop_worker(pid, started, run_id, grace=grace):
        click.echo(line)
    click.echo(f"Cancelled run {run_id.hex[:8]}.")
    if running and pid is None and before.host:
        click.echo(
            f"Its worker runs on {before.host}: it stops, with its agent, at its next heartbeat."
        )


def _ride_out_outages(runtime: Runtime, store: EventStore) -> None:
    """A worker on a shared store waits for a lost server up to the orphan window.

    Meanwhile its agent keeps running and its events wait in memory; they are
    recorded once the server is back. Past the window other hosts take the run
    for interrupted, so the worker gives up and stops rather than write after that.
    """
    from shep.runs.recovery import orphan_after

    store.retry_for = orphan_after(runtime.read_db())

    def say(message: str) -> None:
        click.echo(f"shep: run worker {os.getpid()}: {message}", err=True)

    store.on_retry = say


@click.command("_worker", hidden=True)
@click.argument("run_id")
@click.option("--resume", "is_resume", is_flag=True)
@click.option("--timeout", type=Seconds(1))
@click.pass_obj
def worker(runtime: Runtime, run_id: str, is_resume: bool, timeout: float | None) -> None:
    """Execute a run in this (detached) process."""
    execute_run(runtime, UUID(run_id), resume=is_resume, background=True, timeout=timeout)


@click.command("_await", hidden=True)
@click.argument("run_id")
@click.option("--every", type=float, default=2.0)
@click.pass_obj
def await_decision(runtime: Runtime, run_id: str, every: float) -> None:
    """Wait, on the run's own host, for a decision made on another host; then resume the run.

    On a shared store a person may answer from any machine, but the run goes
    on where its repository is. Its worker starts this waiter when it suspends
    the run; the waiter ends once the run is resumed, ends, or leaves this host,
    and rides out a lost server meanwhile (see ``shep.runs.inbox_watch``).
    """
    from shep.runs.inbox_watch import wait_for_decision

    def say(message: str) -> None:
        click.echo(f"shep: waiter {os.getpid()}: {message}", err=True)

    pid = wait_for_decision(runtime, run_id, every=every, say=say)
    if pid is not None:
        click.echo(f"Run {run_id[:8]} decided: resumed in worker {pid}.")


def _check_binary(agent_type: str, binary: str | None) -> None:
    import shutil

    from events.errors import AgentNotFoundError
    from shep.agents import get_spec

    spec = get_spec(agent_type)
    if not spec.binary:
        return
    executable = binary or spec.binary
    if shutil.which(executable) is None:
        raise AgentNotFoundError(
            f"{spec.label} is not installed: `{executable}` was not found. "
            f"Install it with `{spec.install_hint}`, or run `shep settings agent`.",
            agent=agent_type,
        )


def _should_resume(run_id: str, flag: bool | None) -> bool:
    if flag is not None:
        return flag
    if not sys.stdin.isatty():
        raise InterruptedRunExistsError(
            f"Run {run_id[:8]} of this workflow was interrupted here. "
            "Pass --resume to continue it or --no-resume to start a new run."
        )
    return ask_resume(run_id)


def ask_resume(run_id: str, *, input: Any = None, output: Any = None) -> bool:
    """Ask "Resume? [Y/n]" with prompt-toolkit (tests pass a pipe input); Enter means yes."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.validation import Validator

    answer = PromptSession[str](input=input, output=output).prompt(
        f"Run {run_id[:8]} of this workflow was interrupted here. Resume? [Y/n] ",
        validator=Validator.from_callable(
            lambda text: text.strip().lower() in ("", "y", "yes", "n", "no"),
            error_message="Answer y or n.",
            move_cursor_to_end=True,
        ),
    )
    return answer.strip().lower() in ("", "y", "yes")


def _local_worker(state: RunState) -> tuple[int | None, str | None]:
    """The pid and start time of the process that last owned the run, if it ran on this host.

    ``state`` is the run as it was when the worker was last known to run it
    (a running run, or the fold just before a cancel).
    """
    from shep.home.identity import host_name

    if state.epoch == 0 or state.host != host_name():
        return None, None
    return state.pid, state.process_start


def _resume(
    runtime: Runtime, run_id: UUID, *, background: bool, timeout: float | None, force: bool
) -> None:
    from commands.run_state import load_run
    from events.errors import InvalidTransitionError
    from events.runs import WAITING_STATUSES, RunStatus

    store = runtime.store()
    state = load_run(store, run_id)
    if state.status is RunStatus.RUNNING and run_id.hex in runtime.resumed:
        # This very command found the run's decision unacted on and resumed it.
        click.echo(
            f"Run {run_id.hex[:8]} resumed with its decision in worker "
            f"{runtime.resumed[run_id.hex]}.",
            err=True,
        )
        return
    taken_over = state.status is RunStatus.RUNNING
    if taken_over:
        state = _take_over(runtime, state, force=force)  # it stops the worker and its agents
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
            click.echo(f"{line} (left behind by the run's last worker)", err=True)
    _require_token_for(runtime, state.agent_type)
    launch(runtime, run_id, resume=True, background=background, timeout=timeout)


def _require_token_for(runtime: Runtime, agent_type: str | None) -> None:
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


def _take_over(runtime: Runtime, state: RunState, *, force: bool) -> RunState:
    """Interrupt a running run whose worker is stuck or stopped (``--force``); else refuse.

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
    from events.runs import RunStatus
    from shep.home.identity import current_actor, host_name
    from shep.runs.workers import stop_worker

    short = state.run_id.hex[:8]
    if not force:
        raise WorkerStillRunningError(
            f"Run {short} is still running (worker {state.pid} on {state.host}). If that "
            f"worker is stuck, `shep resume {short} --force` stops it and resumes the run."
        )
    pid, started = _local_worker(state)
    for line in stop_worker(pid, started, state.run_id, grace=5.0):
        click.echo(line, err=True)
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
    runtime: Runtime,
    run_id: UUID,
    *,
    resume: bool,
    background: bool,
    timeout: float | None,
    quiet: bool = False,
) -> int | None:
    """Start (or resume) the run: in a detached worker (its pid is returned), or in this
    process. A background start prints the run id on stdout (for scripts) unless ``quiet``.

    A resume goes on only under the graph the run is pinned to, or through the migration
    its workflow declares (``shep.runs.pin``): else ``WorkflowChangedError``, nothing
    recorded.
    """
    if resume:
        from shep.runs.pin import check_resume

        check_resume(runtime.store(), run_id)
    if background:
        from commands.fail_run import fail_run
        from commands.resume_run import resume_run
        from commands.start_run import start_run
        from shep.home.identity import host_name, process_start
        from shep.runs.workers import log_path, spawn_worker

        try:
            pid = spawn_worker(runtime.home, run_id, resume=resume, timeout=timeout)
        except OSError as e:
            message = f"Cannot start a background worker: {e}."
            if not resume:
                fail_run(runtime.store(), run_id, error_type="WorkerStartError", message=message)
            raise ShepError(message) from e
        # Recorded here, not by the worker: a worker that dies while still importing
        # is then a running run with a dead pid, which recovery marks interrupted.
        begin = resume_run if resume else start_run
        try:
            begin(
                runtime.store(),
                run_id,
                pid=pid,
                host=host_name(),
                background=True,
                log_path=str(log_path(runtime.home, run_id)),
                process_start=process_start(pid),
            )
        except BaseException:
            # Not handed the run (another worker took it first): it must not linger.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise
        if not quiet:
            click.echo(run_id.hex)
        click.echo(
            f"Started worker {pid} in the background. Follow it with "
            f"`shep logs {run_id.hex[:8]} --follow`.",
            err=True,
        )
        return pid
    execute_run(runtime, run_id, resume=resume, background=False, timeout=timeout)
    return None


def execute_run(
    runtime: Runtime,
    run_id: UUID,
    *,
    resume: bool,
    background: bool,
    timeout: float | None,
    exit_on_failure: bool = True,
) -> None:
    """Execute the run in this process: as its foreground worker, or the background one.

    A failure before the run starts (its agent cannot be set up) fails a new
    run with the reason rather than leaving it pending.
    """
    from commands.fail_run import fail_run
    from commands.resume_run import resume_run
    from commands.start_run import start_run
    from shep.home.identity import host_name, process_start
    from shep.home.settings import load_settings
    from shep.runs.runner import Runner
    from shep.runs.workers import wait_until_assigned

    store = runtime.store()
    if store.shared:
        _ride_out_outages(runtime, store)
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
    short = run_id.hex[:8]
    if not background:
        click.echo(
            printable(
                f"Run {short}: {runner.plan.workflow.name} on {runner.plan.repo} with "
                f"{runner.plan.agent_type}"
            ),
            err=True,
        )
    status = runner.execute(state.epoch)
    _report(runtime, runner, status, background=background, exit_on_failure=exit_on_failure)


def _report(
    runtime: Runtime, runner: Runner, status: RunStatus, *, background: bool, exit_on_failure: bool
) -> None:
    """Say how the worker left the run, and exit with its code (130 interrupted, 1 failed)."""
    from events.runs import WAITING_STATUSES, RunStatus
    from projections.catch_up import catch_up

    run_id = runner.run_id
    short = run_id.hex[:8]
    if runner.fenced:
        click.echo(
            f"Run {short} is no longer this worker's ({status.value}, another worker or a "
            f"cancel took it over); this worker stopped without writing more.",
            err=True,
        )
        if exit_on_failure and not background:
            sys.exit(EXIT_FAILED)
        return
    if status is RunStatus.COMPLETED:
        click.echo(f"Run {short} completed. See `shep logs {short}`.", err=True)
        return
    if status in WAITING_STATUSES:
        what = "approval" if status is RunStatus.WAITING_APPROVAL else "an answer"
        click.echo(
            f"Run {short} is waiting for {what}: see `shep inbox`. It goes on once decided.",
            err=True,
        )
        from shep.home.notify import notify_new_items
        from shep.home.settings import load_settings

        # Settings as they are now: a run can wait for hours after it started.
        store = runtime.store()
        notify_new_items(store, runtime.home, runner.asked, load_settings(store))
        from shep.supervisor.start import start_if_covered

        start_if_covered(store, runtime.home, runner.asked)
        # A decision that landed while this worker was suspending the run found it
        # still running and left it to us: start the worker that takes it.
        catch_up(runtime.read_db())
        runtime.check_inbox(notice=False)
        if runtime.shared and run_id.hex not in runtime.resumed:
            # A decision may come from another machine: wait for it here, where the run goes on.
            from shep.runs.workers import log_path, spawn_shep

            spawn_shep(runtime.home, ["_await", run_id.hex], log_path(runtime.home, run_id))
        return
    if status is RunStatus.INTERRUPTED:
        click.echo(f"Run {short} interrupted. Continue it with `shep resume {short}`.", err=True)
        if exit_on_failure:
            sys.exit(EXIT_INTERRUPTED)
        return
    from projections.queries import get_run

    conn = runtime.read_db()
    catch_up(conn)
    error = get_run(conn, run_id.hex)["error"]
    reason = f": {error}" if error else ""  # the agent's words: shown escaped
    click.echo(printable(f"Run {short} {status.value}{reason}"), err=True)
    if exit_on_failure:
        sys.exit(EXIT_FAILED)
