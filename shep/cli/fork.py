"""``shep fork``: a new run that goes on from one checkpoint of another (LangGraph time travel)."""

from __future__ import annotations

from uuid import UUID

import click

from shep.cli.render import Seconds
from shep.home.runtime import Runtime


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--at",
    "checkpoint",
    required=True,
    metavar="CHECKPOINT",
    help="The checkpoint to go on from (its id or a unique prefix; `shep replay RUN` shows "
    "each frame's).",
)
@click.option(
    "--restore",
    type=click.Choice(["both", "state", "worktree"]),
    help="What the fork takes from the checkpoint: the workflow state, the worktree's files "
    "(feature runs), or both (the default for feature runs; state for others).",
)
@click.option(
    "--reapply-answers",
    is_flag=True,
    help="Give the fork the origin's decisions on the same questions and gates (recorded as "
    "reapplied); by default the fork asks again.",
)
@click.option(
    "--id",
    "fork_key",
    metavar="KEY",
    help="Make the fork idempotent: the same KEY on the same run returns the same fork.",
)
@click.option("--background", is_flag=True, help="Run the fork in a detached worker.")
@click.option(
    "--timeout", type=Seconds(1), metavar="SECONDS", help="Time limit of each agent call."
)
@click.pass_obj
def fork(
    runtime: Runtime,
    run_ref: str,
    checkpoint: str,
    restore: str | None,
    reapply_answers: bool,
    fork_key: str | None,
    background: bool,
    timeout: float | None,
) -> None:
    """Start a new run from CHECKPOINT of RUN, as if the steps after it had not happened.

    The fork records its origin and checkpoint, and the origin records the fork.
    For a feature, the fork gets a branch and worktree of its own, with the
    files of the snapshot taken at that checkpoint.
    """
    from projections.queries import resolve_run_id
    from shep.cli.run import render
    from shep.replay.fork import fork_run_at
    from shep.runs.launch import launch

    origin = UUID(resolve_run_id(runtime.read_db(), run_ref))
    forked = fork_run_at(
        runtime,
        origin,
        checkpoint,
        restore=restore,
        reapply_answers=reapply_answers,
        fork_key=fork_key,
    )
    if forked.existed:  # another `shep fork --id` with this key got there first
        click.echo(forked.run_id.hex)
        click.echo(
            f"Fork {forked.run_id.hex[:8]} of run {origin.hex[:8]} already exists "
            f"(--id {fork_key}); see `shep status {forked.run_id.hex[:8]}`.",
            err=True,
        )
        return
    click.echo(forked.line, err=True)
    render(
        launch(runtime, forked.run_id, resume=False, background=background, timeout=timeout),
        runtime=runtime,
    )
