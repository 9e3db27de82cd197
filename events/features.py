"""Events of the feature workflow, on the run's own stream: its worktree, tasks, tests, merge.

A feature is a run of the ``feature`` workflow; these record what happened to
its git side (the branch and worktree, the snapshots of each task, the test
command, the merge, push and pull request, and the worktree's removal), so
``shep feat show`` and the audit trail read it all from the log.
"""

from __future__ import annotations

from typing import Any, ClassVar

from events.base import Event
from events.runs import Usage

#: The workflows whose runs are features: the full graph and ``--fast``.
FEATURE = "feature"
FEATURE_FAST = "feature-fast"
FEATURE_WORKFLOW_NAMES = frozenset({FEATURE, FEATURE_FAST})


class WorktreeCreated(Event, frozen=True, kw_only=True, tag_field="class_version", tag=2):
    """The run's branch and worktree exist: made from ``base`` at ``base_sha``.

    ``git_dir``: the git directory git made for the worktree, through which shep's own git
    reaches it (never through the worktree's ``.git`` file, which the agent can rewrite);
    empty in runs recorded before it was.
    """

    class_version: ClassVar[int] = 2

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """Version 1 (shep 0.1.0) had no ``git_dir``."""
        state.setdefault("git_dir", "")

    repo: str
    path: str
    branch: str
    base: str
    base_sha: str
    spec_dir: str
    git_dir: str = ""


class WorktreeSetupRan(Event, frozen=True, kw_only=True):
    """The ``worktree_setup_command`` setting ran in the new worktree."""

    command: str
    exit_code: int | None
    duration_ms: int
    output_tail: str = ""


class TaskStarted(Event, frozen=True, kw_only=True):
    """One task of ``tasks.yaml`` began (implement runs them phase by phase)."""

    task: str
    phase: str
    title: str
    attempt: int = 1


class TaskCompleted(Event, frozen=True, kw_only=True):
    """A task is done; ``snapshot`` is the commit of the worktree as it left it."""

    task: str
    phase: str
    duration_ms: int
    snapshot: str | None = None
    usage: Usage = Usage()


class TestsRan(Event, frozen=True, kw_only=True):
    """The project's test command ran in the worktree (``exit_code`` None: it timed out)."""

    __test__ = False  # not a pytest class

    command: str
    exit_code: int | None
    passed: bool
    duration_ms: int
    output_tail: str = ""


class MergeConflicted(Event, frozen=True, kw_only=True):
    """Squash-merging the branch into its base conflicted in ``files``; nothing was changed."""

    into: str
    files: tuple[str, ...]


class ReviewedTreeRestored(Event, frozen=True, kw_only=True):
    """The worktree's files had changed since the merge gate showed them (they made the
    tree ``found``), so before committing the merge put them back to ``approved``, the
    tree the gate showed and its approval names. What had changed is kept in the
    snapshot commit ``kept`` (the files are put back only once it is made).
    """

    approved: str
    found: str
    kept: str


class MergePrepared(Event, frozen=True, kw_only=True):
    """The squash commit of the branch is made (``commit``, with ``tree``, on top of
    ``onto``, the tip of ``into``) and ``into`` is about to be moved to it.

    Recorded before the base moves: after a crash, the merge is found by this commit
    being on the base, and by nothing else (a later commit quoting the run's trailer is
    not this run's merge).
    """

    into: str
    commit: str
    tree: str
    onto: str


class FeatureMerged(Event, frozen=True, kw_only=True):
    """The branch was squash-merged into ``into`` as ``commit`` (in the user's repository)."""

    into: str
    commit: str
    files: int
    added: int
    removed: int
    commits: int


class BranchPushed(Event, frozen=True, kw_only=True):
    """The feature branch was pushed to ``remote``."""

    remote: str
    branch: str
    commit: str


class PullRequestOpened(Event, frozen=True, kw_only=True):
    """A pull request for the branch exists (checked with ``gh`` before it was recorded)."""

    url: str
    number: int | None = None


class WorktreeRemoved(Event, frozen=True, kw_only=True):
    """The worktree (and the branch, when shep made it and it is merged or forced) is gone.

    ``branch_deleted``: the branch is gone, as git said after deleting it (or found it
    gone already), not as the command's exit status said.
    """

    path: str
    branch: str
    branch_deleted: bool
    removed_by: str
    reason: str
