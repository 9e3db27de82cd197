"""Starting a feature: check the repository and base, make the branch and worktree, create the run.

Everything that can be refused is checked before anything is made, each with
one line saying what to do. The worktree is made here (so a clash or a
permission problem is said at once), then the run is created with the
worktree as its repository; if creating the run fails, the worktree and the
branch go again. The ``setup`` node records them in the log (``WorktreeCreated``).

A process killed between making the worktree and creating its run (``feat new``,
``fork``) leaves a branch and a worktree no run knows. So a small note is written
before they are made and deleted once the run exists (``settle_worktree``): a note
whose writer is gone names a leftover, which ``shep feat gc`` reports and removes
(``shep.features.removal.leftovers``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from events.errors import FeatureError, FeatureInputError, GitError
from events.store import EventStore
from shep.workflows.analyze_repository import SHEP_OUTPUTS

#: How the note of a worktree being made is named, next to the worktree's directory.
MAKING_SUFFIX = ".shep-making"


@dataclass(frozen=True)
class FeaturePlan:
    """Where a new feature will live, decided before anything is made."""

    source_repo: Path
    base: str
    base_sha: str
    branch: str
    worktree: Path
    spec_dir: str
    #: The git directory git made for the worktree (once made): see ``shep.git.worktree``.
    git_dir: str = ""


def worktrees_root(home: Path) -> Path:
    """Where every feature worktree lives: ``$SHEP_HOME/worktrees``."""
    return home / "worktrees"


def repo_key(repo: Path) -> str:
    """The directory name of one repository's worktrees (a hash of its real path)."""
    return hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:12]


def plan_feature(
    home: Path,
    repo: Path,
    description: str,
    *,
    base: str | None,
    prefix: str,
    check_dirty: bool = True,
    publish: bool = False,
) -> FeaturePlan:
    """Check the repository and base and choose the branch and worktree (nothing is made).

    ``check_dirty``: refuse uncommitted changes on a checked-out base (a fork starts
    from a recorded commit, not from the checkout, and skips it). ``publish``: the
    feature ends by pushing its branch (``--push``, ``--pr``), so the repository must
    have a remote: said now, not after the whole run.
    """
    from shep import git

    if not description.strip():
        raise FeatureInputError('The feature needs a description: shep feat new "what it does".')
    source = git.repo_root(repo)
    current = git.current_branch(source)
    if base is None:
        if current is None:
            raise FeatureInputError(
                f"{source} is on a detached HEAD: pass --base BRANCH to say what the "
                "feature starts from and merges into."
            )
        base = current
        if not git.branch_exists(source, base):  # checked out, but no commit made it yet
            raise FeatureError(
                f"{source} has no commit yet on {base}: a feature starts from its base "
                "branch's newest commit. Commit something first (`git commit`), then run "
                "`shep feat new` again."
            )
    elif not git.branch_exists(source, base):
        raise FeatureInputError(f"{source} has no branch {base!r} (--base takes a local branch).")
    promisor = git.promisor_remote(source)
    if promisor is not None:
        raise FeatureError(
            f"{source} is a partial clone: git fetches its missing objects on demand from "
            f"{promisor}, and shep's git fetches nothing (a config the agent can write would "
            "name the command that fetches). Run the feature in a full clone (`git clone` "
            "without --filter)."
        )
    if publish and git.has_remote(source) is None:
        raise FeatureInputError(
            f"--push/--pr need a remote, and {source} has none. Add one (`git remote add "
            "origin URL`), or leave them out to merge locally."
        )
    if base == current and check_dirty:
        dirty = git.dirty_files(source, untracked_ok=SHEP_OUTPUTS)
        if dirty:
            shown = git.describe_files(dirty)
            raise FeatureError(
                f"{source} has uncommitted changes on {base} ({shown}): commit or stash them "
                "first, or pass --base with another branch."
            )
    base_sha = git.resolve_commit(source, f"refs/heads/{base}")
    slug = git.slugify(description)
    root = worktrees_root(home) / repo_key(source)
    # Free as a branch and as a directory (a leftover of an old feature counts as taken).
    branch = git.free_branch_name(source, prefix, slug, worktrees_dir=root)
    worktree = root / branch[len(prefix) :].replace("/", "-")
    return FeaturePlan(source, base, base_sha, branch, worktree, "")


def making_note(worktree: Path) -> Path:
    """The note that ``worktree`` is being made and no run has it yet."""
    return worktree.with_name(f".{worktree.name}{MAKING_SUFFIX}")


def make_worktree(
    plan: FeaturePlan, *, spec_dir: str | None = None, drivers: bool = False
) -> FeaturePlan:
    """Make the branch and worktree of ``plan``; return it with its spec directory
    (``spec_dir`` when given: a fork keeps its origin's) and its git directory.

    A note that they are being made is written first; ``settle_worktree`` deletes it
    once the run is created, ``discard_worktree`` with them. ``drivers``: the
    ``git_filters`` setting.
    """
    from shep import git
    from shep.home.procs import process_start
    from shep.workflows.feature_specs import next_spec_number, spec_dir_name

    plan.worktree.parent.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    note = {
        "repo": str(plan.source_repo),
        "branch": plan.branch,
        "worktree": str(plan.worktree),
        "base_sha": plan.base_sha,
        "pid": me,
        "process_start": process_start(me),
    }
    making_note(plan.worktree).write_text(json.dumps(note))
    git_dir = git.add_worktree(
        plan.source_repo, plan.worktree, plan.branch, plan.base_sha, drivers=drivers
    )
    slug = plan.worktree.name
    spec_dir = spec_dir or f"specs/{spec_dir_name(next_spec_number(plan.worktree), slug)}"
    return FeaturePlan(
        plan.source_repo,
        plan.base,
        plan.base_sha,
        plan.branch,
        plan.worktree,
        spec_dir,
        str(git_dir),
    )


def settle_worktree(plan: FeaturePlan) -> None:
    """The run of ``plan``'s worktree exists: it is no leftover any more."""
    with contextlib.suppress(FileNotFoundError):
        making_note(plan.worktree).unlink()


def discard_worktree(plan: FeaturePlan) -> None:
    """Undo ``make_worktree`` (the run could not be created)."""
    from shep import git

    try:
        git.remove_worktree(plan.source_repo, plan.worktree, force=True)
        git.delete_branch(plan.source_repo, plan.branch, force=True)
    except GitError:
        return  # the note stays: `shep feat gc` reports what is left
    settle_worktree(plan)


def create_feature_run(
    store: EventStore,
    plan: FeaturePlan,
    *,
    description: str,
    fast: bool,
    allow: dict[str, bool],
    push: bool,
    pr: bool,
    agent_type: str,
    model: str | None,
    created_by: str,
    host: str,
    process_start: str | None,
) -> UUID:
    """Create the feature's run (``feature`` or ``feature-fast``) on its worktree."""
    from commands.create_run import create_run
    from events.features import FEATURE, FEATURE_FAST
    from shep.workflows import get_workflow
    from shep.workflows.shape import pin_fields

    workflow = get_workflow(FEATURE_FAST if fast else FEATURE)

    def flag(on: bool) -> str:
        return "1" if on else ""

    inputs = {
        "description": description.strip(),
        "source_repo": str(plan.source_repo),
        "base": plan.base,
        "base_sha": plan.base_sha,
        "branch": plan.branch,
        "spec_dir": plan.spec_dir,
        "git_dir": plan.git_dir,
        "allow_prd": flag(allow.get("prd", False)),
        "allow_plan": flag(allow.get("plan", False)),
        "allow_merge": flag(allow.get("merge", False)),
        "push": flag(push or pr),
        "pr": flag(pr),
    }
    me = os.getpid()
    return create_run(
        store,
        workflow=workflow.name,
        agent_type=agent_type,
        model=model,
        repo=str(plan.worktree),
        inputs=inputs,
        node_names=workflow.node_names,
        created_by=created_by,
        pid=me,
        host=host,
        process_start=process_start,
        **pin_fields(workflow),
    )
