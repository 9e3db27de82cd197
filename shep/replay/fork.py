"""Forking a run: a new run that goes on from one checkpoint of another (LangGraph time
travel), with a branch and worktree of its own for a feature, restored from the snapshot
taken at that checkpoint. Every face forks through ``fork_run_at``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:
    from shep.home.runtime import Runtime


@dataclass(frozen=True)
class Forked:
    """A fork, as recorded (or found: ``existed``, the same ``fork_key`` made it before)."""

    run_id: UUID
    origin: UUID
    existed: bool
    checkpoint_id: str = ""
    step: int | None = None
    restore: str = "state"
    reapplied: bool = False
    #: A feature's fork: its own branch and worktree.
    branch: str | None = None
    worktree: str | None = None

    @property
    def line(self) -> str:
        """What the person is told."""
        return (
            f"Fork {self.run_id.hex[:8]} of run {self.origin.hex[:8]} at checkpoint "
            f"{self.checkpoint_id} (step {self.step}, restore {self.restore}"
            + (", decisions reapplied" if self.reapplied else "")
            + ")"
            + (f": branch {self.branch}, worktree {self.worktree}" if self.branch else "")
        )


def fork_run_at(
    runtime: Runtime,
    origin: UUID,
    checkpoint: str,
    *,
    restore: str | None = None,
    reapply_answers: bool = False,
    fork_key: str | None = None,
) -> Forked:
    """Record a fork of run ``origin`` at ``checkpoint`` (an id or a unique prefix), ready
    to launch. ``restore``: the workflow state, the feature's worktree files, or both (the
    default for features; state for others). The fork records its origin and checkpoint,
    and the origin records the fork; the same ``fork_key`` on the same run gives the same
    fork.
    """
    from commands.fork_run import find_checkpoint, fork_id, fork_run
    from events.errors import RunInputError
    from events.features import FEATURE_WORKFLOW_NAMES
    from events.runs import RunCreated
    from shep.home.identity import current_actor, host_name
    from shep.home.procs import process_start
    from shep.workflows import get_workflow
    from shep.workflows.shape import pin_fields

    store = runtime.store()
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
        return Forked(fork_id(origin, fork_key), origin, existed=True)
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
            **pin_fields(workflow, runtime.home),
        )
    except BaseException:
        _discard(made)
        raise
    if not made_now:  # another fork with this key got there first
        _discard(made)
        return Forked(new_id, origin, existed=True)
    if made is not None:
        from shep.features.start import settle_worktree

        settle_worktree(made)
    return Forked(
        new_id,
        origin,
        existed=False,
        checkpoint_id=found.checkpoint_id,
        step=found.step,
        restore=restore,
        reapplied=reapply_answers,
        branch=inputs["branch"] if feature else None,
        worktree=repo if feature else None,
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
        publish=bool(inputs.get("push") or inputs.get("pr")),
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
