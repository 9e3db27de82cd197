"""``shep run``, ``resume``, ``cancel``, ``workflows`` and the hidden ``_worker``: they
parse, call ``shep.runs.launch`` / ``shep.runs.cancel``, and render what comes back."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click

from events.display import printable
from events.errors import (
    InterruptedRunExistsError,
    RunInputError,
)
from shep.cli.render import Seconds
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    from shep.runs.launch import Background, Outcome

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
    from shep.runs.launch import create_workflow_run, launch, request_run
    from shep.runs.launch import resume as resume_run

    request = request_run(runtime, name, repo, model=model)
    parsed = _parse_inputs(inputs)
    if request.interrupted is not None and _should_resume(request.interrupted, resume):
        run_id = UUID(request.interrupted)
        render(
            resume_run(runtime, run_id, background=background, timeout=timeout, force=False),
            runtime=runtime,
        )
        return
    run_id = create_workflow_run(runtime, request, parsed)
    render(
        launch(runtime, run_id, resume=False, background=background, timeout=timeout),
        runtime=runtime,
    )


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
    from shep.runs.launch import resume as resume_run

    run_id = UUID(run_in_log(runtime.read_db(), run_ref))
    render(
        resume_run(runtime, run_id, background=background, timeout=timeout, force=force),
        runtime=runtime,
    )


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
    from events.audit import run_in_log
    from shep.home.identity import current_actor
    from shep.runs.cancel import cancel as cancel_run

    run_id = UUID(run_in_log(runtime.read_db(), run_ref))  # its state is read from the log
    cancelled = cancel_run(runtime.store(), run_id, actor=current_actor(), grace=grace)
    for line in cancelled.stopped:
        click.echo(line)
    click.echo(f"Cancelled run {run_id.hex[:8]}.")
    if cancelled.remote_host:
        click.echo(
            f"Its worker runs on {cancelled.remote_host}: it stops, with its agent, at its "
            "next heartbeat."
        )


@click.command("_worker", hidden=True)
@click.argument("run_id")
@click.option("--resume", "is_resume", is_flag=True)
@click.option("--timeout", type=Seconds(1))
@click.pass_obj
def worker(runtime: Runtime, run_id: str, is_resume: bool, timeout: float | None) -> None:
    """Execute a run in this (detached) process."""
    from shep.runs.launch import execute_run

    outcome = execute_run(runtime, UUID(run_id), resume=is_resume, background=True, timeout=timeout)
    render_outcome(outcome, background=True, runtime=runtime)


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


def render(
    launched: Background | Outcome | None,
    *,
    quiet: bool = False,
    runtime: Runtime | None = None,
) -> None:
    """Say where a started run went: a detached worker (its run id on stdout, for scripts,
    unless ``quiet``), or how the worker in this process left it (and exit with its code).

    ``runtime``: the home the run lives in, named in the commands suggested when it is not
    the one ``$SHEP_HOME`` points at (see ``shep_command``).
    """
    from shep.runs.workers import Background

    if launched is None:
        return
    if isinstance(launched, Background):
        if not quiet:
            click.echo(launched.run_id.hex)
        click.echo(launched.notice, err=True)
        return
    render_outcome(launched, background=False, runtime=runtime)


def shep_command(runtime: Runtime | None, args: str) -> str:
    """``shep ARGS`` as a person types it to reach ``runtime``'s home: with ``SHEP_HOME=``
    in front when that home is not the one the environment points at (the demo's own
    temporary home), so that the command works where it is pasted."""
    if runtime is None:
        return f"shep {args}"
    from events.sqlite_file import home_from_env

    if os.path.realpath(runtime.home_dir) == os.path.realpath(home_from_env()):
        return f"shep {args}"
    import shlex

    return f"SHEP_HOME={shlex.quote(runtime.home_dir)} shep {args}"


def render_outcome(
    outcome: Outcome,
    *,
    background: bool,
    exit_on_failure: bool = True,
    runtime: Runtime | None = None,
) -> None:
    """Say how the worker left the run, and exit with its code (130 interrupted, 1 failed).

    ``runtime``: the home the run lives in (see ``render``).
    """
    from events.runs import WAITING_STATUSES, RunStatus

    short = outcome.run_id.hex[:8]
    status = outcome.status
    if outcome.fenced:
        click.echo(
            f"Run {short} is no longer this worker's ({status.value}, another worker or a "
            f"cancel took it over); this worker stopped without writing more.",
            err=True,
        )
        if exit_on_failure and not background:
            sys.exit(EXIT_FAILED)
        return
    if status is RunStatus.COMPLETED:
        click.echo(
            f"Run {short} completed. See `{shep_command(runtime, 'logs ' + short)}`.", err=True
        )
        return
    if status in WAITING_STATUSES:
        what = "approval" if status is RunStatus.WAITING_APPROVAL else "an answer"
        click.echo(
            f"Run {short} is waiting for {what}: see `{shep_command(runtime, 'inbox')}`. "
            "It goes on once decided.",
            err=True,
        )
        return
    if status is RunStatus.INTERRUPTED:
        resume = shep_command(runtime, f"resume {short}")
        click.echo(f"Run {short} interrupted. Continue it with `{resume}`.", err=True)
        if exit_on_failure:
            sys.exit(EXIT_INTERRUPTED)
        return
    reason = f": {outcome.error}" if outcome.error else ""  # the agent's words: shown escaped
    click.echo(printable(f"Run {short} {status.value}{reason}"), err=True)
    if exit_on_failure:
        sys.exit(EXIT_FAILED)
