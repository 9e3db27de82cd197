"""Removing a feature's worktree (``shep feat rm`` and ``gc``): decided, then carried out.

The decision reads the run's stream, never the features projection. Anything
``rm`` will not do without ``--force`` is refused with one line
(``FeatureError``) before anything changes; then git removes the worktree (and
the branch shep made, once merged) and ``WorktreeRemoved`` records it.

``gc`` also removes leftovers: a branch and worktree made for a run that was never
created (``leftovers``, from the notes ``shep.features.start.make_worktree`` writes).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from events.errors import FeatureError, GitError, RemovalRefusedError
from events.runs import FINAL_STATUSES

if TYPE_CHECKING:
    from commands.run_state import RunState
    from events.store import EventStore


@dataclass
class Feature:
    """What the run's stream says about the feature's worktree and branch."""

    run_id: UUID
    state: RunState
    source_repo: str
    worktree: str
    branch: str
    created: bool  # WorktreeCreated recorded (and not removed since)
    created_branch: str | None
    removed: bool
    merged: bool
    #: The git directory shep made for the worktree ("" in runs that did not record it).
    git_dir: str = ""

    @property
    def short(self) -> str:
        return self.run_id.hex[:8]


def load_feature(store: EventStore, run_id: UUID) -> Feature:
    """The feature as its run's stream tells it (the projection may lag or be rebuilt)."""
    from commands.run_state import load_run
    from events.features import FeatureMerged, WorktreeCreated, WorktreeRemoved
    from events.runs import RunCreated

    state = load_run(store, run_id)
    inputs: dict[str, str] = {}
    worktree = source = git_dir = ""
    created_branch: str | None = None
    created = removed = merged = False
    for event in store.load(
        run_id, types=(RunCreated, WorktreeCreated, WorktreeRemoved, FeatureMerged)
    ):
        if isinstance(event, RunCreated):
            inputs, worktree = dict(event.inputs), event.repo
            source, git_dir = inputs.get("source_repo", ""), inputs.get("git_dir", "")
        elif isinstance(event, WorktreeCreated):
            worktree, source, created_branch = event.path, event.repo, event.branch
            git_dir = event.git_dir or git_dir
            created, removed = True, False
        elif isinstance(event, WorktreeRemoved):
            removed = True
        elif isinstance(event, FeatureMerged):
            merged = True
    return Feature(
        run_id=run_id,
        state=state,
        source_repo=source,
        worktree=worktree,
        branch=inputs.get("branch", ""),
        created=created,
        created_branch=created_branch,
        removed=removed,
        merged=merged,
        git_dir=git_dir,
    )


@dataclass(frozen=True)
class Removal:
    """What removing a feature's worktree will do, decided before anything is done."""

    feature: Feature
    exists: bool  # the directory is there (else only its git entry is pruned)
    owned: bool  # shep made the branch checked out there: it may delete it
    delete_branch: bool


def plan_removal(feature: Feature, *, force: bool) -> Removal:
    """Check everything ``rm`` refuses without --force; raise FeatureError (one line) on the
    first, before anything is changed.
    """
    from shep import git

    sid, path = feature.short, feature.worktree
    exists = os.path.lexists(path)
    if feature.removed and not exists:
        raise FeatureError(f"The worktree of feature {sid} ({path}) was removed already.")
    status = feature.state.status
    if status not in FINAL_STATUSES and not force:
        raise RemovalRefusedError(
            f"Feature {sid} is {status.value}, not finished",
            f"`shep cancel {sid}` first, or pass --force to cancel it and remove its worktree.",
        )
    if not feature.source_repo:
        raise FeatureError(f"Feature {sid} records no source repository; remove {path} by hand.")
    checked_out: str | None = feature.branch
    if exists:
        tree = next(
            (
                t
                for t in git.worktrees(feature.source_repo)
                if os.path.realpath(t.path) == os.path.realpath(path)
            ),
            None,
        )
        if tree is None:
            raise FeatureError(
                f"{path} is not a worktree of {feature.source_repo}; shep leaves it alone "
                "(delete it by hand if it is not wanted)."
            )
        checked_out = tree.branch
    owned = feature.created and checked_out == feature.branch == feature.created_branch
    if not owned and not force:
        keep = "pass --force to remove the worktree anyway (no branch is deleted)."
        if not feature.created:
            raise RemovalRefusedError(
                f"Feature {sid} never recorded making its worktree, so shep cannot tell its "
                "branch is its own",
                keep,
            )
        raise RemovalRefusedError(
            f"{path} is on branch {checked_out or '(detached HEAD)'}, not {feature.branch} "
            "that shep created",
            keep,
        )
    if exists and not force:
        from shep.git.worktree import feature_checkout

        where = {"source_repo": feature.source_repo, "git_dir": feature.git_dir}
        dirty = git.dirty_files(feature_checkout(where, path))
        if dirty:
            shown = git.describe_files(dirty)
            raise RemovalRefusedError(
                f"{path} has uncommitted changes ({shown})",
                "commit or discard them, or pass --force to remove them with the worktree.",
            )
    return Removal(
        feature=feature,
        exists=exists,
        owned=owned,
        delete_branch=owned and (feature.merged or force),
    )


def carry_out(store: EventStore, removal: Removal, *, force: bool, reason: str) -> list[str]:
    """Remove the worktree (and the branch when planned), then record it; what was done,
    one line each, as plain text (the CLI makes it printable).
    """
    from commands.remove_worktree import remove_worktree
    from shep import git
    from shep.home.identity import current_actor

    feature = removal.feature
    path, branch = feature.worktree, feature.branch
    git.remove_worktree(feature.source_repo, path, force=force)
    done = [
        f"Removed worktree {path}."
        if removal.exists
        else f"Recorded the removal of {path}: its directory was already gone."
    ]
    deleted = False
    if removal.delete_branch:
        existed = git.branch_exists(feature.source_repo, branch)
        try:
            deleted = git.delete_branch(feature.source_repo, branch, force=True)
        except GitError as e:
            done.append(f"Kept branch {branch}: {e}")
        else:
            done.append(f"Deleted branch {branch}." if existed else f"Branch {branch} was gone.")
    elif removal.owned:
        done.append(
            f"Kept branch {branch}: it is not merged (`git branch -D {branch}` deletes it)."
        )
    elif branch:
        done.append(f"Kept branch {branch}: shep did not record creating it.")
    remove_worktree(
        store,
        feature.run_id,
        path=path,
        branch=branch,
        branch_deleted=deleted,
        removed_by=current_actor(),
        reason=reason + ("" if removal.exists else " (directory already gone)"),
    )
    return done


def disk_usage(path: str | os.PathLike[str]) -> int:
    """Bytes the files under ``path`` take on disk, like ``du``: allocated blocks, each
    hard-linked file once, symbolic links not followed; unreadable parts count as nothing.
    """
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [os.fspath(path)]
    try:
        root = os.lstat(stack[0])
    except OSError:
        return 0
    total += _allocated(root)
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += _allocated(st)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def _allocated(st: os.stat_result) -> int:
    blocks = getattr(st, "st_blocks", None)
    return blocks * 512 if blocks is not None else st.st_size


# -- leftovers: a branch and worktree whose run was never created ----------------------------


@dataclass(frozen=True)
class Leftover:
    """A branch and worktree ``shep feat new`` or ``shep fork`` made for a run it never
    created (it was killed in between), as its note says (``shep.features.start.making_note``).
    """

    note: Path
    repo: str
    branch: str
    worktree: str
    base_sha: str


def leftovers(home: Path, known_worktrees: set[str]) -> list[Leftover]:
    """The notes of worktrees being made whose maker is gone: leftovers. A note whose
    worktree a run has (its maker died just after creating the run) is deleted; the
    note of a maker still running is left alone. ``known_worktrees``: the real paths of
    every feature's worktree.
    """
    from shep.features.start import MAKING_SUFFIX, worktrees_root
    from shep.home.procs import worker_alive

    found: list[Leftover] = []
    for note in sorted(worktrees_root(home).glob(f"*/.*{MAKING_SUFFIX}")):
        try:
            data = json.loads(note.read_text())
            pid, started = int(data["pid"]), data.get("process_start")
            leftover = Leftover(
                note,
                str(data["repo"]),
                str(data["branch"]),
                str(data["worktree"]),
                str(data["base_sha"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written this very moment, or not ours to read
        if worker_alive(pid, started):
            continue
        if os.path.realpath(leftover.worktree) in known_worktrees:
            with contextlib.suppress(FileNotFoundError):
                note.unlink()
            continue
        found.append(leftover)
    return found


def remove_leftover(leftover: Leftover) -> list[str]:
    """Remove a leftover's worktree and branch, then its note; what was done, one line
    each. Nothing in them is anybody's work (no run ever ran there: the files are a
    checkout of a commit, or a snapshot still in ``refs/shep/runs``), so the worktree
    goes whatever it holds; the branch goes only while it is at the commit it was made
    at (GitError when git refuses).
    """
    from shep import git

    repo, branch, path = leftover.repo, leftover.branch, leftover.worktree
    done: list[str] = []
    if os.path.lexists(path):
        git.remove_worktree(repo, path, force=True)
        done.append(f"Removed worktree {path}.")
    else:
        git.remove_worktree(repo, path, force=True)  # only prunes its entry, if any
    if git.branch_exists(repo, branch):
        if git.resolve_commit(repo, f"refs/heads/{branch}") == leftover.base_sha:
            git.delete_branch(repo, branch, force=True)
            done.append(f"Deleted branch {branch}.")
        else:
            done.append(f"Kept branch {branch}: it has commits since it was made.")
    with contextlib.suppress(FileNotFoundError):
        leftover.note.unlink()
    return done
