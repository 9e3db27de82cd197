"""``shep fork``: a new run that goes on from one checkpoint of another (LangGraph time travel)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any
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
    from commands.fork_run import find_checkpoint, fork_id, fork_run
    from events.errors import RunInputError
    from events.features import FEATURE_WORKFLOW_NAMES
    from events.runs import RunCreated
    from projections.queries import resolve_run_id
    from shep.cli.run import launch, render
    from shep.home.identity import current_actor, host_name, process_start
    from shep.workflows import get_workflow
    from shep.workflows.shape import pin_fields

    store = runtime.store()
    origin = UUID(resolve_run_id(runtime.read_db(), run_ref))
    created = store.load(origin, types=[RunCreated])[0]
    assert isinstance(created, RunCreated)
    found = find_checkpoint(store, origin, checkpoint)
    workflow = get_workflow(created.workflow)
    feature = created.workflow in FEATURE_WORKFLOW_NAMES
    restore = restore or ("both" if feature else "state")
    if restore != "state" and not feature:
        raise RunInputError(
            f"--restore {restore} restores a feature's worktree; run {origin.hex[:8]} is a "
            f"{created.workflow} run, so only --restore state applies."
        )
    if fork_key and store.stream_version(fork_id(origin, fork_key)) > 0:
        # Checked before a worktree is made for nothing; fork_run decides for sure below.
        _exists(origin, fork_id(origin, fork_key), fork_key)
        return
    repo, inputs = created.repo, dict(created.inputs)
    made: Any = None
    if feature:
        made, inputs = _fork_worktree(runtime, store, origin, created, found, restore)
        repo = str(made.worktree)
    me = os.getpid()
    try:
        new_id, made_now = fork_run(
            store,
            origin,
            found.checkpoint_id,
            forked_by=current_actor(),
            restore=restore,
            reapply_answers=reapply_answers,
            fork_key=fork_key,
            repo=repo,
            inputs=inputs,
            pid=me,
            host=host_name(),
            process_start=process_start(me),
            node_names=workflow.node_names,
            **pin_fields(workflow),
        )
    except BaseException:
        _discard(made)
        raise
    if not made_now:  # another `shep fork --id` with this key got there first
        _discard(made)
        _exists(origin, new_id, fork_key)
        return
    if made is not None:
        from shep.features.start import settle_worktree

        settle_worktree(made)
    click.echo(
        f"Fork {new_id.hex[:8]} of run {origin.hex[:8]} at checkpoint "
        f"{found.checkpoint_id} (step {found.step}, restore {restore}"
        + (", decisions reapplied" if reapply_answers else "")
        + ")"
        + (f": branch {inputs['branch']}, worktree {repo}" if feature else ""),
        err=True,
    )
    render(launch(runtime, new_id, resume=False, background=background, timeout=timeout))


def _exists(origin: UUID, fork: UUID, key: str | None) -> None:
    click.echo(fork.hex)
    click.echo(
        f"Fork {fork.hex[:8]} of run {origin.hex[:8]} already exists (--id {key}); "
        f"see `shep status {fork.hex[:8]}`.",
        err=True,
    )


def _discard(made: Any) -> None:
    if made is not None:
        from shep.features.start import discard_worktree

        discard_worktree(made)


def _fork_worktree(
    runtime: Runtime,
    store: Any,
    origin: UUID,
    created: Any,
    checkpoint: Any,
    restore: str,
) -> tuple[Any, dict[str, str]]:
    """A branch and worktree for a feature's fork: from the origin's base commit, with the
    files of the origin's newest snapshot at the checkpoint (``--restore worktree|both``).
    """
    from events.features import TaskCompleted
    from events.runs import NodeCompleted
    from shep import git
    from shep.features.start import discard_worktree, make_worktree, plan_feature
    from shep.git.command import Checkout
    from shep.home.settings import load_settings

    inputs = dict(created.inputs)
    snapshot = None
    for event in store.load(origin, types=[NodeCompleted, TaskCompleted]):
        if event.originator_version > checkpoint.originator_version:
            break
        if isinstance(event, NodeCompleted | TaskCompleted) and event.snapshot:
            snapshot = event.snapshot
    settings = load_settings(store)
    plan = plan_feature(
        runtime.home,
        Path(inputs["source_repo"]),
        inputs["description"],
        base=inputs["base"],
        prefix=settings.texts["branch_prefix"],
        check_dirty=False,
    )
    plan = dataclasses.replace(plan, base_sha=inputs["base_sha"])
    drivers = settings.flags["git_filters"]
    made = make_worktree(plan, spec_dir=inputs["spec_dir"], drivers=drivers)
    if restore in ("both", "worktree") and snapshot:
        try:
            git.restore(Checkout(made.worktree, Path(made.git_dir), drivers=drivers), snapshot)
        except BaseException:
            discard_worktree(made)
            raise
    return made, {**inputs, "branch": made.branch, "git_dir": made.git_dir}
