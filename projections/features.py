"""The features projection: one row per run of a feature workflow, and one per task it began.

A feature is a run of ``feature`` or ``feature-fast``. Its row says where the
work lives (source repository, base, branch, worktree, spec directory), how
far it got (the phase, the tasks begun and done, the last snapshot, the tests)
and how it ended on the git side (merged, pushed, pull request, worktree
removed). The run's status is not copied: queries join ``runs``, which folds
the status events once.
"""

from __future__ import annotations

import json

from events.base import Event
from events.features import (
    FEATURE_WORKFLOW_NAMES,
    BranchPushed,
    FeatureMerged,
    MergeConflicted,
    PullRequestOpened,
    TaskCompleted,
    TaskStarted,
    TestsRan,
    WorktreeCreated,
    WorktreeRemoved,
)
from events.runs import NodeCompleted, NodeFailed, NodeStarted, RunCreated
from projections.base import Batch, Projection

#: The workflows whose runs are features (kept as the name tests know it by).
FEATURE_WORKFLOWS = FEATURE_WORKFLOW_NAMES

DDL = (
    "CREATE TABLE IF NOT EXISTS features ("
    "run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', "
    "source_repo TEXT NOT NULL DEFAULT '', base TEXT NOT NULL DEFAULT '', "
    "base_sha TEXT NOT NULL DEFAULT '', branch TEXT NOT NULL DEFAULT '', worktree TEXT NOT NULL, "
    "spec_dir TEXT NOT NULL DEFAULT '', phases TEXT NOT NULL DEFAULT '[]', phase TEXT, node TEXT, "
    "created_at TEXT NOT NULL, worktree_created INTEGER NOT NULL DEFAULT 0, "
    "tasks_total INTEGER NOT NULL DEFAULT 0, tasks_done INTEGER NOT NULL DEFAULT 0, "
    "tests_command TEXT, tests_passed INTEGER, tests_exit INTEGER, tests_at TEXT, "
    "merge_conflicts TEXT, merged_commit TEXT, merged_into TEXT, pr_url TEXT, pr_number INTEGER, "
    "pushed INTEGER NOT NULL DEFAULT 0, pushed_remote TEXT, worktree_removed_at TEXT, "
    "branch_deleted INTEGER NOT NULL DEFAULT 0, removed_by TEXT, removal_reason TEXT, "
    "last_snapshot TEXT, updated_at TEXT NOT NULL)",
    # `shep feat show BRANCH`: a branch name finds its feature without a scan.
    "CREATE INDEX IF NOT EXISTS features_branch ON features (branch)",
    "CREATE TABLE IF NOT EXISTS feature_tasks ("
    "run_id TEXT NOT NULL, task TEXT NOT NULL, phase TEXT NOT NULL, title TEXT NOT NULL, "
    "state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 1, started_at TEXT NOT NULL, "
    "finished_at TEXT, duration_ms INTEGER, snapshot TEXT, "
    "input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0, "
    "cost_usd REAL, PRIMARY KEY (run_id, task)) WITHOUT ROWID",
)

#: Task states: begun (and not done since), done.
TASK_RUNNING = "running"
TASK_DONE = "done"

_TOUCH = "UPDATE features SET updated_at=? WHERE run_id=?"


def _is_feature(b: Batch) -> bool:
    """Whether the event's run is a feature: asked once per run and batch (most runs of a
    batch are created in it, and told then).
    """
    key = ("feature", b.stream)
    known: bool | None = b.memo.get(key)
    if known is None:
        row = b.cursor.execute("SELECT 1 FROM features WHERE run_id=?", (b.stream,)).fetchone()
        known = b.memo[key] = row is not None
    return known


def _update(b: Batch, assignments: str, *params: object) -> None:
    if _is_feature(b):
        b.cursor.execute(f"UPDATE features SET {assignments} WHERE run_id=?", (*params, b.stream))
        b.latest(_TOUCH, b.stream, (b.at, b.stream))


def _created(b: Batch, event: Event) -> None:
    assert isinstance(event, RunCreated)
    b.memo[("feature", b.stream)] = event.workflow in FEATURE_WORKFLOWS
    if event.workflow not in FEATURE_WORKFLOWS:
        return
    inputs = event.inputs
    b.cursor.execute(
        "INSERT INTO features (run_id, workflow, description, source_repo, base, base_sha, "
        "branch, worktree, spec_dir, phases, created_at, updated_at) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            b.stream,
            event.workflow,
            inputs.get("description", ""),
            inputs.get("source_repo", ""),
            inputs.get("base", ""),
            inputs.get("base_sha", ""),
            inputs.get("branch", ""),
            event.repo,
            inputs.get("spec_dir", ""),
            json.dumps(list(event.node_names)),
            b.at,
            b.at,
        ),
    )


def _worktree_created(b: Batch, event: Event) -> None:
    assert isinstance(event, WorktreeCreated)
    # Made again (by hand, or a setup step that found it gone) after a removal: it is back.
    _update(
        b,
        "source_repo=?, worktree=?, branch=?, base=?, base_sha=?, "
        "spec_dir=coalesce(nullif(?, ''), spec_dir), worktree_created=1, "
        "worktree_removed_at=NULL, branch_deleted=0, removed_by=NULL, removal_reason=NULL",
        event.repo,
        event.path,
        event.branch,
        event.base,
        event.base_sha,
        event.spec_dir,
    )


def _node_started(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeStarted)
    # The phase is the newest node that is one of the workflow's phases: a validator,
    # gate or repair step runs within the phase before it.
    _update(
        b,
        "node=?, phase=CASE WHEN EXISTS (SELECT 1 FROM json_each(phases) WHERE value=?) "
        "THEN ? ELSE phase END",
        event.node,
        event.node,
        event.node,
    )


def _node_completed(b: Batch, event: Event) -> None:
    assert isinstance(event, NodeCompleted)
    _update(b, "node=NULL, last_snapshot=coalesce(?, last_snapshot)", event.snapshot)


def _node_failed(b: Batch, event: Event) -> None:
    _update(b, "node=NULL")


def _count_tasks(b: Batch) -> None:
    _update(
        b,
        "tasks_total=(SELECT count(*) FROM feature_tasks WHERE run_id=?), "
        "tasks_done=(SELECT count(*) FROM feature_tasks WHERE run_id=? AND state=?)",
        b.stream,
        b.stream,
        TASK_DONE,
    )


def _task_started(b: Batch, event: Event) -> None:
    assert isinstance(event, TaskStarted)
    b.cursor.execute(
        "INSERT INTO feature_tasks (run_id, task, phase, title, state, attempts, started_at) "
        "VALUES (?,?,?,?,?,1,?) ON CONFLICT (run_id, task) DO UPDATE SET "
        "phase=excluded.phase, title=excluded.title, state=excluded.state, "
        "attempts=attempts+1, started_at=excluded.started_at, finished_at=NULL",
        (b.stream, event.task, event.phase, event.title, TASK_RUNNING, b.at),
    )
    _count_tasks(b)


def _task_completed(b: Batch, event: Event) -> None:
    assert isinstance(event, TaskCompleted)
    u = event.usage
    b.cursor.execute(
        "INSERT INTO feature_tasks (run_id, task, phase, title, state, started_at) "
        "VALUES (?,?,?,'',?,?) ON CONFLICT (run_id, task) DO UPDATE SET state=excluded.state",
        (b.stream, event.task, event.phase, TASK_DONE, b.at),
    )
    b.cursor.execute(
        "UPDATE feature_tasks SET finished_at=?, duration_ms=?, snapshot=?, "
        "input_tokens=input_tokens+?, output_tokens=output_tokens+?, "
        "cost_usd=CASE WHEN ? IS NULL THEN cost_usd ELSE coalesce(cost_usd, 0) + ? END "
        "WHERE run_id=? AND task=?",
        (
            b.at,
            event.duration_ms,
            event.snapshot,
            u.input_tokens,
            u.output_tokens,
            u.cost_usd,
            u.cost_usd,
            b.stream,
            event.task,
        ),
    )
    _count_tasks(b)
    if event.snapshot:
        _update(b, "last_snapshot=?", event.snapshot)


def _tests(b: Batch, event: Event) -> None:
    assert isinstance(event, TestsRan)
    _update(
        b,
        "tests_command=?, tests_passed=?, tests_exit=?, tests_at=?",
        event.command,
        int(event.passed),
        event.exit_code,
        b.at,
    )


def _conflicted(b: Batch, event: Event) -> None:
    assert isinstance(event, MergeConflicted)
    _update(b, "merge_conflicts=?", json.dumps(list(event.files)))


def _merged(b: Batch, event: Event) -> None:
    assert isinstance(event, FeatureMerged)
    _update(b, "merged_commit=?, merged_into=?, merge_conflicts=NULL", event.commit, event.into)


def _pushed(b: Batch, event: Event) -> None:
    assert isinstance(event, BranchPushed)
    _update(b, "pushed=1, pushed_remote=?", event.remote)


def _pull_request(b: Batch, event: Event) -> None:
    assert isinstance(event, PullRequestOpened)
    _update(b, "pr_url=?, pr_number=?", event.url, event.number)


def _removed(b: Batch, event: Event) -> None:
    assert isinstance(event, WorktreeRemoved)
    _update(
        b,
        "worktree_removed_at=?, branch_deleted=?, removed_by=?, removal_reason=?, node=NULL",
        b.at,
        int(event.branch_deleted),
        event.removed_by,
        event.reason,
    )


FEATURES = Projection(
    name="features",
    ddl=DDL,
    tables=("features", "feature_tasks"),
    handlers={
        RunCreated: _created,
        WorktreeCreated: _worktree_created,
        NodeStarted: _node_started,
        NodeCompleted: _node_completed,
        NodeFailed: _node_failed,
        TaskStarted: _task_started,
        TaskCompleted: _task_completed,
        TestsRan: _tests,
        MergeConflicted: _conflicted,
        FeatureMerged: _merged,
        BranchPushed: _pushed,
        PullRequestOpened: _pull_request,
        WorktreeRemoved: _removed,
    },
)
