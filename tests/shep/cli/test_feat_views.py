"""`shep feat ls`, `show`, `rm` and `gc`, and the features projection they read.

Histories are written with the real commands into a real store; features that
rm and gc work on have real branches and worktrees (``shep.features.start`` makes
them in a repository made with git in ``tmp_path``). The CLI runs in-process
through ``shep.cli.main``, so errors go through the one error edge users meet.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from commands.answer_question import answer_question
from commands.complete_run import complete_run
from commands.create_run import create_run
from commands.fail_run import fail_run
from commands.record_node import record_node_started
from commands.resume_run import resume_run
from commands.run_state import append_to_run, load_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.errors import AmbiguousRunIdError, FeatureNotFoundError
from events.features import (
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
from events.inbox import QuestionOption, item_stream_id
from events.runs import NodeCompleted, RunStatus, Usage
from events.store import EventStore
from projections.catch_up import catch_up, rebuild
from projections.database import open_database
from projections.feature_queries import get_feature, resolve_feature_id
from projections.features import FEATURE_WORKFLOWS
from shep import git as sgit
from shep.cli import main
from shep.cli.feat_views import DurationError, human_size, parse_duration
from shep.features.start import FeaturePlan, create_feature_run, make_worktree, plan_feature
from shep.git.merge import advance_base, prepare_squash
from shep.home.identity import host_name
from shep.home.procs import process_start
from tests.projections.test_rebuild import snapshot
from tests.shep.workflows.conftest import agent, git, repo
from tests.support.event_log import assert_rebuild_equals_incremental

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent", "repo"]

ACTOR = "tester@test-host"
NOTICE = re.compile(r"^\d+ waiting in the inbox: shep inbox$")
FULL_PHASES = ["setup", "analyze", "requirements", "research", "plan", "implement", "tests"]


@dataclass
class Result:
    code: int
    out: str
    err: list[str]  # stderr lines, the inbox notice left out


@pytest.fixture
def feat(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """``shep feat ARGS`` in this process: exit code, stdout, stderr lines."""
    monkeypatch.setenv("SHEP_ACTOR", ACTOR)

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(["feat", *args])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        return Result(code, out.out, [x for x in out.err.splitlines() if not NOTICE.match(x)])

    return run


class Clock:
    """The time commands stamp on events: real unless set (``at``), then moved by ``tick``.

    freezegun's datetimes are not ``datetime`` to msgspec, so the commands' clock is
    replaced instead.
    """

    def __init__(self) -> None:
        self.at: datetime | None = None

    def __call__(self) -> datetime:
        return self.at or datetime.now(UTC)

    def tick(self, seconds: float) -> None:
        assert self.at is not None
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    import commands.create_run
    import commands.run_state
    import commands.suspend_run
    import events.base

    fake = Clock()
    for module in (events.base, commands.run_state, commands.create_run, commands.suspend_run):
        monkeypatch.setattr(module, "utc_now", fake)
    return fake


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config leaks in."""
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


# -- building histories ---------------------------------------------------------------------


def _append(store: EventStore, run_id: UUID, event_type: type[Any], **fields: Any) -> None:
    append_to_run(store, run_id, [(event_type, fields)])


def _node(
    store: EventStore,
    run_id: UUID,
    node: str,
    *,
    ms: int = 1000,
    usage: Usage | None = None,
    snapshot: str | None = None,
    iteration: int = 1,
) -> None:
    record_node_started(store, run_id, node, iteration=iteration)
    _append(
        store,
        run_id,
        NodeCompleted,
        node=node,
        duration_ms=ms,
        usage=usage or Usage(),
        snapshot=snapshot,
    )


def _me() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": host_name(), "process_start": process_start(os.getpid())}


def new_feature(
    store: EventStore, home: Path, repo: Path, description: str, *, setup: bool = True
) -> tuple[UUID, FeaturePlan]:
    """A feature as `shep feat new` makes it (branch, worktree, run), started by this
    process, its setup step done (``WorktreeCreated``) unless ``setup`` is false.
    """
    plan = make_worktree(plan_feature(home, repo, description, base=None, prefix="shep/"))
    run_id = create_feature_run(
        store,
        plan,
        description=description,
        fast=False,
        allow={},
        push=False,
        pr=False,
        agent_type="claude-code",
        model=None,
        created_by="tester",
        host=host_name(),
        process_start=process_start(os.getpid()),
    )
    start_run(store, run_id, **_me())
    if setup:
        record_node_started(store, run_id, "setup", kind="deterministic")
        append_to_run(
            store,
            run_id,
            [
                (
                    WorktreeCreated,
                    {
                        "repo": str(plan.source_repo),
                        "path": str(plan.worktree),
                        "branch": plan.branch,
                        "base": plan.base,
                        "base_sha": plan.base_sha,
                        "spec_dir": plan.spec_dir,
                    },
                ),
                (NodeCompleted, {"node": "setup", "duration_ms": 50}),
            ],
        )
    return run_id, plan


def _merge(store: EventStore, run_id: UUID, plan: FeaturePlan) -> str:
    """Commit a file on the feature's branch and squash-merge it into its base, as the merge
    step does; the merge commit.
    """
    (plan.worktree / "feature.txt").write_text("done\n")
    sgit.commit_all(plan.worktree, "the feature", branch=plan.branch)
    merged = prepare_squash(plan.source_repo, plan.base, plan.branch, "squash")
    assert merged.commit is not None
    advance_base(plan.source_repo, merged)
    _append(
        store,
        run_id,
        FeatureMerged,
        into=plan.base,
        commit=merged.commit,
        files=1,
        added=1,
        removed=0,
        commits=1,
    )
    return merged.commit


def _events(store: EventStore, run_id: UUID, kind: type[Any]) -> list[Any]:
    return [e for e in store.load(run_id) if isinstance(e, kind)]


@pytest.fixture
def conn(store: EventStore, db_path: Path) -> Iterator[Any]:
    connection = open_database(db_path)
    yield connection
    connection.close()


# -- the projection -------------------------------------------------------------------------


def test_feature_workflows_are_those_of_the_workflow_module() -> None:
    """The read side's feature workflow names are the workflows' own."""
    from events.features import FEATURE, FEATURE_FAST

    assert {FEATURE, FEATURE_FAST} == FEATURE_WORKFLOWS


def _history(store: EventStore) -> tuple[UUID, UUID]:
    """A feature taken through every feature event, and an analyze run (no feature)."""
    inputs = {
        "description": "Add a login page\nwith a form",
        "source_repo": "/src/app",
        "base": "main",
        "base_sha": "b" * 40,
        "branch": "shep/add-login-page",
        "spec_dir": "specs/001-add-login-page",
    }
    run_id = create_run(
        store,
        workflow="feature",
        agent_type="claude-code",
        repo="/home/.shep/worktrees/k/add-login-page",
        inputs=inputs,
        node_names=FULL_PHASES,
        created_by="tester",
    )
    other = create_run(
        store,
        workflow="analyze-repository",
        agent_type="claude-code",
        repo="/src/app",
        node_names=["scan"],
        created_by="tester",
    )
    start_run(store, run_id, pid=1, host="h")
    start_run(store, other, pid=1, host="h")
    _node(store, other, "scan", snapshot="e" * 40)
    record_node_started(store, run_id, "setup")
    _append(
        store,
        run_id,
        WorktreeCreated,
        repo="/src/app",
        path="/home/.shep/worktrees/k/add-login-page",
        branch="shep/add-login-page",
        base="main",
        base_sha="b" * 40,
        spec_dir="specs/001-add-login-page",
    )
    _node(store, run_id, "requirements", snapshot="1" * 40)
    record_node_started(store, run_id, "validate_spec")  # within the requirements phase
    _node(store, run_id, "implement")
    record_node_started(store, run_id, "implement", iteration=2)
    for task in ("t1", "t2", "t3"):
        _append(store, run_id, TaskStarted, task=task, phase="p1", title=f"do {task}")
    _append(store, run_id, TaskStarted, task="t1", phase="p1", title="do t1", attempt=2)
    for task, sha in (("t1", "2" * 40), ("t2", "3" * 40)):
        _append(
            store,
            run_id,
            TaskCompleted,
            task=task,
            phase="p1",
            duration_ms=10,
            snapshot=sha,
            usage=Usage(input_tokens=5, output_tokens=1, cost_usd=0.5),
        )
    _append(store, run_id, TestsRan, command="make test", exit_code=2, passed=False, duration_ms=9)
    _append(store, run_id, TestsRan, command="make test", exit_code=0, passed=True, duration_ms=8)
    _append(store, run_id, MergeConflicted, into="main", files=("a.py", "b.py"))
    _append(store, run_id, BranchPushed, remote="origin", branch="shep/add-login-page", commit="c")
    _append(store, run_id, PullRequestOpened, url="https://example.com/pr/7", number=7)
    _append(
        store,
        run_id,
        FeatureMerged,
        into="main",
        commit="9" * 40,
        files=2,
        added=3,
        removed=1,
        commits=2,
    )
    _append(
        store,
        run_id,
        WorktreeRemoved,
        path="/home/.shep/worktrees/k/add-login-page",
        branch="shep/add-login-page",
        branch_deleted=True,
        removed_by="someone",
        reason="merged",
    )
    return run_id, other


def test_projection_row_follows_the_feature_events(store: EventStore, conn: Any) -> None:
    """Every feature event lands in its row; tasks count distinct ids; the phase is the newest
    phase node begun (a validator stays in its phase); other workflows' runs get no row.
    """
    run_id, other = _history(store)
    catch_up(conn)
    assert [r[0] for r in conn.execute("SELECT run_id FROM features")] == [run_id.hex]
    row = get_feature(conn, run_id.hex)
    expected = {
        "workflow": "feature",
        "description": "Add a login page\nwith a form",
        "source_repo": "/src/app",
        "base": "main",
        "base_sha": "b" * 40,
        "branch": "shep/add-login-page",
        "worktree": "/home/.shep/worktrees/k/add-login-page",
        "spec_dir": "specs/001-add-login-page",
        "phases": FULL_PHASES,
        "phase": "implement",
        "node": None,  # the removal ends whatever ran
        "status": "running",
        "worktree_created": True,
        "tasks_total": 3,
        "tasks_done": 2,
        "tests_command": "make test",
        "tests_passed": True,
        "tests_exit": 0,
        "merge_conflicts": None,  # the merge that followed cleared them
        "merged_commit": "9" * 40,
        "merged_into": "main",
        "pr_url": "https://example.com/pr/7",
        "pr_number": 7,
        "pushed": True,
        "pushed_remote": "origin",
        "branch_deleted": True,
        "removed_by": "someone",
        "removal_reason": "merged",
        "last_snapshot": "3" * 40,
    }
    assert {k: row[k] for k in expected} == expected
    assert row["worktree_removed_at"] is not None
    assert [(t["task"], t["state"], t["attempts"], t["snapshot"]) for t in row["tasks"]] == [
        ("t2", "done", 1, "3" * 40),
        ("t3", "running", 1, None),
        ("t1", "done", 2, "2" * 40),
    ]
    assert row["tasks"][2]["cost_usd"] == 0.5
    with pytest.raises(FeatureNotFoundError, match="not a feature"):
        resolve_feature_id(conn, other.hex[:8])


def test_projection_phase_and_node_while_running(store: EventStore, conn: Any) -> None:
    """While a validator of the requirements runs: phase requirements, node validate_spec;
    a conflict recorded and not followed by a merge is listed.
    """
    run_id = create_run(
        store,
        workflow="feature-fast",
        agent_type="claude-code",
        repo="/wt",
        inputs={"branch": "shep/x"},
        node_names=FULL_PHASES,
        created_by="t",
    )
    start_run(store, run_id, pid=1, host="h")
    _node(store, run_id, "requirements")
    record_node_started(store, run_id, "validate_spec")
    _append(store, run_id, MergeConflicted, into="main", files=("a.py",))
    catch_up(conn)
    row = get_feature(conn, run_id.hex)
    assert (row["phase"], row["node"], row["merge_conflicts"]) == (
        "requirements",
        "validate_spec",
        ["a.py"],
    )
    assert (row["workflow"], row["description"], row["worktree_created"]) == (
        "feature-fast",
        "",
        False,
    )


def test_projection_rebuilds_to_the_same_rows(store: EventStore, conn: Any) -> None:
    """Caught up one event at a time or rebuilt from the log: the same features and tasks."""
    _history(store)
    catch_up(conn, batch_size=1)
    incremental = snapshot(conn)
    assert incremental["features"]
    assert len(incremental["feature_tasks"]) == 3
    rebuild(conn, batch_size=3)
    assert snapshot(conn) == incremental


def test_resolve_by_id_branch_and_spec(store: EventStore, conn: Any) -> None:
    """A feature is found by a prefix of its id, its exact branch, or its spec directory's name
    (with or without its number); several matches and none are errors.
    """
    ids = []
    for n, slug in enumerate(("login", "logout", "login")):
        ids.append(
            create_run(
                store,
                workflow="feature",
                agent_type="claude-code",
                repo=f"/wt/{n}",
                inputs={"branch": f"shep/{slug}-{n}", "spec_dir": f"specs/00{n + 1}-{slug}"},
                node_names=FULL_PHASES,
                created_by="t",
                run_id=UUID(int=(n + 1) << 100 | n),
            )
        )
    catch_up(conn)
    assert resolve_feature_id(conn, ids[1].hex[:8]) == ids[1].hex
    assert resolve_feature_id(conn, "shep/login-2") == ids[2].hex
    assert resolve_feature_id(conn, "002-logout") == ids[1].hex
    assert resolve_feature_id(conn, "logout") == ids[1].hex
    assert resolve_feature_id(conn, "specs/003-login") == ids[2].hex
    with pytest.raises(AmbiguousRunIdError, match="matches several features by spec"):
        resolve_feature_id(conn, "login")
    with pytest.raises(AmbiguousRunIdError, match="by id"):
        resolve_feature_id(conn, "0")
    with pytest.raises(FeatureNotFoundError, match="No feature 'nope'"):
        resolve_feature_id(conn, "nope")
    with pytest.raises(FeatureNotFoundError):
        resolve_feature_id(conn, "log%")  # LIKE wildcards are literal


# -- ls and show ----------------------------------------------------------------------------


def test_ls_with_no_features(feat: Callable[..., Result], shep_home: Path) -> None:
    """No store: a friendly line, `[]` with --json, and no store is made."""
    assert feat("ls") == Result(
        0, "No features in progress (`shep feat ls --all` shows finished ones too).\n", []
    )
    assert feat("ls", "--json") == Result(0, "[]\n", [])
    assert feat("ls", "--all", "--json") == Result(0, "[]\n", [])
    assert not (shep_home / "shep.db").exists()
    missing = feat("show", "abc")
    assert (missing.code, missing.out) == (2, "")
    assert missing.err == [
        "shep: No feature 'abc': none has been started yet (`shep feat new \"DESCRIPTION\"`)."
    ]


def test_ls_lists_unfinished_features_and_all_with_all(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """ls: features not finished, newest first (no other workflow's runs); --all adds the
    finished ones; --json gives the same as objects.
    """
    done, _ = new_feature(store, shep_home, repo, "Add a health endpoint")
    complete_run(store, done, duration_ms=5)
    running, plan = new_feature(store, shep_home, repo, "Add a login page " + "x" * 60)
    record_node_started(store, running, "analyze")
    create_run(
        store,
        workflow="analyze-repository",
        agent_type="claude-code",
        repo=str(repo),
        node_names=["scan"],
        created_by="t",
    )
    listed = feat("ls")
    assert listed.code == 0
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "PHASE", "TASKS", "BRANCH", "DESCRIPTION", "AGE"]
    assert len(lines) == 2
    assert lines[1].split()[:5] == [running.hex[:8], "running", "analyze", "-", plan.branch]
    assert "Add a login page xxx" in lines[1]
    assert "..." in lines[1]  # the description is cut
    everything = feat("ls", "--all").out.splitlines()
    assert [x.split()[0] for x in everything[1:]] == [running.hex[:8], done.hex[:8]]
    as_json = json.loads(feat("ls", "--json").out)
    assert [(f["id"], f["run_id"], f["status"], f["phase"]) for f in as_json] == [
        (running.hex[:8], running.hex, "running", "analyze")
    ]
    assert as_json[0]["branch"] == plan.branch
    assert as_json[0]["worktree"] == str(plan.worktree)
    assert len(json.loads(feat("ls", "--all", "--json").out)) == 2


OPTIONS = [
    QuestionOption(id="pg", label="PostgreSQL", recommended=True),
    QuestionOption(id="lite", label="SQLite"),
]


def _waiting_feature(
    store: EventStore, home: Path, repo: Path, clock: Clock
) -> tuple[UUID, FeaturePlan, UUID]:
    """A feature that ran analyze (30 s, usage), asked a question at clarify answered after
    90 s, ran plan (snapshot), two tasks (usage to implement), tests, and now waits at the
    plan gate, asked five minutes after 10:00.
    """
    clock.at = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    run_id, plan = new_feature(store, home, repo, "Add a login page")
    _node(
        store,
        run_id,
        "analyze",
        ms=30_000,
        usage=Usage(input_tokens=100, output_tokens=20, cost_usd=0.25),
    )
    _node(store, run_id, "requirements", ms=2000, snapshot="a" * 40)
    state = load_run(store, run_id)
    suspend_run(
        store,
        run_id,
        [
            Ask(
                interrupt_id="q1",
                kind="question",
                node="clarify",
                question="Which database?",
                options=OPTIONS,
            )
        ],
        epoch=state.epoch,
    )
    clock.tick(90)
    answer_question(store, item_stream_id(run_id, "q1"), actor="user:t", option_id="pg")
    resume_run(store, run_id, **_me())
    _append(store, run_id, NodeCompleted, node="clarify", duration_ms=0, waited_ms=90_000)
    _node(store, run_id, "plan", ms=4000, snapshot="b" * 40)
    record_node_started(store, run_id, "implement", kind="deterministic")
    for task, sha in (("t1", "c" * 40), ("t2", "d" * 40)):
        _append(store, run_id, TaskStarted, task=task, phase="p1", title=f"Do {task}")
        _append(
            store,
            run_id,
            TaskCompleted,
            task=task,
            phase="p1",
            duration_ms=500,
            snapshot=sha,
            usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.5),
        )
    _append(store, run_id, NodeCompleted, node="implement", duration_ms=1500, snapshot="d" * 40)
    _append(
        store,
        run_id,
        TestsRan,
        command="make test",
        exit_code=1,
        passed=False,
        duration_ms=3,
        output_tail="E boom\nFAILED t\n",
    )
    clock.tick(210)
    state = load_run(store, run_id)
    suspend_run(
        store,
        run_id,
        [
            Ask(
                interrupt_id="g1",
                kind="approval",
                node="plan_gate",
                summary="Plan and tasks for: Add a login page",
                phase="plan",
            )
        ],
        epoch=state.epoch,
    )
    clock.at = None
    return run_id, plan, item_stream_id(run_id, "g1")


def test_show_times_each_node_and_says_what_it_waits_for(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path, clock: Clock
) -> None:
    """show --json: each node's status, iterations, agent time and time waiting for a person
    (given to the node that asked), tokens and cost (tasks' usage to implement), snapshots of
    nodes and tasks, tasks, tests, the pending gate, branch and base; show prints them.
    """
    run_id, plan, gate_id = _waiting_feature(store, shep_home, repo, clock)
    shown = feat("show", plan.branch, "--json")
    assert (shown.code, shown.err) == (0, [])
    d = json.loads(shown.out)
    assert (d["run_id"], d["status"], d["branch"], d["base"], d["base_sha"]) == (
        run_id.hex,
        "waiting_approval",
        plan.branch,
        "main",
        plan.base_sha,
    )
    assert (d["worktree"], d["worktree_exists"], d["spec_dir"]) == (
        str(plan.worktree),
        True,
        plan.spec_dir,
    )
    nodes = {n["node"]: n for n in d["nodes"]}
    assert list(nodes) == [
        "setup", "analyze", "requirements", "clarify", "plan", "implement", "plan_gate"
    ]  # fmt: skip
    assert nodes["analyze"] | {} == {
        "node": "analyze",
        "phase": "analyze",
        "status": "completed",
        "starts": 1,
        "completions": 1,
        "iterations": 1,
        "agent_ms": 30_000,
        "waiting_ms": 0,
        "input_tokens": 100,
        "output_tokens": 20,
        "cost_usd": 0.25,
    }
    assert (nodes["clarify"]["phase"], nodes["clarify"]["status"]) == ("requirements", "completed")
    assert (nodes["clarify"]["waiting_ms"], nodes["clarify"]["agent_ms"]) == (90_000, 0)
    assert (nodes["implement"]["input_tokens"], nodes["implement"]["cost_usd"]) == (20, 1.0)
    gate = nodes["plan_gate"]
    assert (gate["phase"], gate["status"], gate["starts"]) == ("plan", "waiting", 1)
    assert gate["waiting_ms"] > 300_000  # asked in 2024, still pending
    assert d["totals"]["agent_ms"] == 50 + 30_000 + 2000 + 4000 + 1500
    assert d["totals"]["cost_usd"] == 1.25
    assert [w["item_id"] for w in d["waiting"]] == [gate_id.hex]
    assert d["snapshots"] == [
        {"at": "requirements", "sha": "a" * 40},
        {"at": "plan", "sha": "b" * 40},
        {"at": "task t1", "sha": "c" * 40},
        {"at": "task t2", "sha": "d" * 40},
        {"at": "implement", "sha": "d" * 40},
    ]
    assert [(t["task"], t["phase"], t["state"]) for t in d["tasks"]] == [
        ("t1", "p1", "done"),
        ("t2", "p1", "done"),
    ]
    assert (d["tests"]["command"], d["tests"]["passed"], d["tests"]["exit_code"]) == (
        "make test",
        False,
        1,
    )
    assert d["merge"] == {"merged": None, "conflicted": None, "pushed": None, "pull_request": None}

    text = feat("show", run_id.hex[:8]).out
    assert f"waiting   approval {gate_id.hex[:8]} at plan_gate" in text
    assert "phase     plan (waiting: plan_gate)" in text
    assert f"worktree  {plan.worktree}  (present)" in text
    assert "tests     `make test` FAILED (exit 1)" in text
    assert "result    not merged" in text
    assert re.search(r"requirements\s+clarify\s+completed\s+1\s+0\.0s\s+1m30s", text)
    assert re.search(r"analyze\s+analyze\s+completed\s+1\s+30\.0s\s+-\s+100/20\s+\$0\.2500", text)
    assert f"task t2       {'d' * 40}" in text
    assert re.search(r"plan_gate\s+waiting\s+1\s+0\.0s\s+\d+d\d\dh\s", text)
    assert "  FAILED t" in text  # the failed tests' output
    listed = feat("ls").out.splitlines()[1]
    assert "plan (waiting: plan_gate)" in listed
    assert "2/2" in listed


def test_show_merged_and_vanished(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """A merged feature shows its merge; one whose worktree was deleted by hand says it is
    missing and how to record it.
    """
    run_id, plan = new_feature(store, shep_home, repo, "Add a banner")
    commit = _merge(store, run_id, plan)
    shutil.rmtree(plan.worktree)
    d = json.loads(feat("show", run_id.hex, "--json").out)
    assert d["merge"]["merged"]["commit"] == commit
    assert d["worktree_exists"] is False
    text = feat("show", run_id.hex).out
    assert f"result    merged into main as {commit[:10]} (1 file, +1 -0, 1 commit)" in text
    assert f"MISSING: gone, but shep did not remove it; `shep feat rm {run_id.hex[:8]}`" in text


# -- rm -------------------------------------------------------------------------------------


def _refused(
    feat: Callable[..., Result], store: EventStore, run_id: UUID, line: str, *args: str
) -> None:
    """`shep feat rm ARGS` exits 1 with ``line`` as its one stderr line and records nothing."""
    before = len(store.load(run_id))
    result = feat("rm", *args)
    assert (result.code, result.err, result.out) == (1, [f"shep: {line}"], "")
    assert len(store.load(run_id)) == before


def test_rm_refuses_without_force(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """Refused, each in one line and with nothing changed: a run not finished, uncommitted
    work, a worktree on a branch shep did not create, a worktree never recorded as made.
    """
    run_id, plan = new_feature(store, shep_home, repo, "Add a footer")
    sid = run_id.hex[:8]
    _refused(
        feat,
        store,
        run_id,
        f"Feature {sid} is running, not finished: `shep cancel {sid}` first, or pass --force "
        "to cancel it and remove its worktree.",
        sid,
    )
    complete_run(store, run_id, duration_ms=1)
    (plan.worktree / "notes.txt").write_text("mine\n")
    (plan.worktree / "README.md").write_text("changed\n")
    _refused(
        feat,
        store,
        run_id,
        f"{plan.worktree} has uncommitted changes (README.md, notes.txt): commit or discard "
        "them, or pass --force to remove them with the worktree.",
        plan.branch,
    )
    git(plan.worktree, "switch", "-q", "-c", "my-own")
    _refused(
        feat,
        store,
        run_id,
        f"{plan.worktree} is on branch my-own, not {plan.branch} that shep created: pass "
        "--force to remove the worktree anyway (no branch is deleted).",
        sid,
    )
    assert plan.worktree.is_dir()
    assert sgit.branch_exists(repo, plan.branch)

    bare, _bare_plan = new_feature(store, shep_home, repo, "Add a header", setup=False)
    fail_run(store, bare, error_type="X", message="boom")
    _refused(
        feat,
        store,
        bare,
        f"Feature {bare.hex[:8]} never recorded making its worktree, so shep cannot tell its "
        f"branch is its own: pass --force to remove the worktree anyway (no branch is deleted).",
        bare.hex,
    )
    missing = feat("rm", "nothing-like-it")
    assert (missing.code, missing.err) == (
        2,
        ["shep: No feature 'nothing-like-it' (by id, branch or spec). List them with "
         "`shep feat ls --all`."],
    )  # fmt: skip


def test_rm_removes_a_merged_feature_and_its_branch(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """A finished, merged feature: worktree and branch gone, WorktreeRemoved recorded with the
    actor; the projection shows it; a second rm says it is done already.
    """
    run_id, plan = new_feature(store, shep_home, repo, "Add a sitemap")
    _merge(store, run_id, plan)
    complete_run(store, run_id, duration_ms=1)
    result = feat("rm", plan.branch)
    assert result == Result(
        0, f"Removed worktree {plan.worktree}.\nDeleted branch {plan.branch}.\n", []
    )
    assert not plan.worktree.exists()
    assert not sgit.branch_exists(repo, plan.branch)
    assert all(w.path != plan.worktree for w in sgit.worktrees(repo))
    (removed,) = _events(store, run_id, WorktreeRemoved)
    assert (removed.path, removed.branch, removed.branch_deleted, removed.removed_by) == (
        str(plan.worktree),
        plan.branch,
        True,
        ACTOR,
    )
    assert removed.reason == "shep feat rm"
    d = json.loads(feat("show", run_id.hex, "--json").out)
    assert (d["removed_by"], d["branch_deleted"]) == (ACTOR, True)
    assert d["worktree_removed_at"] is not None
    again = feat("rm", run_id.hex)
    assert (again.code, again.err) == (
        1,
        [f"shep: The worktree of feature {run_id.hex[:8]} ({plan.worktree}) was removed already."],
    )
    assert_rebuild_equals_incremental(shep_home)


def test_rm_keeps_an_unmerged_branch(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """Not merged (a failed feature): the worktree goes, the branch stays, and rm says so."""
    run_id, plan = new_feature(store, shep_home, repo, "Add a search box")
    fail_run(store, run_id, error_type="X", message="boom")
    result = feat("rm", run_id.hex[:8])
    assert result.code == 0
    assert result.out.splitlines() == [
        f"Removed worktree {plan.worktree}.",
        f"Kept branch {plan.branch}: it is not merged (`git branch -D {plan.branch}` deletes it).",
    ]
    assert not plan.worktree.exists()
    assert sgit.branch_exists(repo, plan.branch)
    (removed,) = _events(store, run_id, WorktreeRemoved)
    assert removed.branch_deleted is False


def test_rm_force_cancels_and_removes_everything(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """--force on a running feature with uncommitted work: the run is cancelled, the worktree
    removed with its changes, the unmerged branch deleted.
    """
    run_id, plan = new_feature(store, shep_home, repo, "Add dark mode")
    (plan.worktree / "wip.txt").write_text("half done\n")
    result = feat("rm", run_id.hex, "--force")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"Cancelled run {run_id.hex[:8]}.",
        f"Removed worktree {plan.worktree}.",
        f"Deleted branch {plan.branch}.",
    ]
    assert load_run(store, run_id).status is RunStatus.CANCELLED
    assert not plan.worktree.exists()
    assert not sgit.branch_exists(repo, plan.branch)
    (removed,) = _events(store, run_id, WorktreeRemoved)
    assert (removed.branch_deleted, removed.reason) == (True, "shep feat rm --force")


def test_rm_force_never_deletes_a_branch_shep_did_not_make(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """--force on a worktree switched to the user's branch: the worktree goes, no branch does."""
    run_id, plan = new_feature(store, shep_home, repo, "Add a map")
    complete_run(store, run_id, duration_ms=1)
    git(plan.worktree, "switch", "-q", "-c", "users-branch")
    result = feat("rm", run_id.hex, "--force")
    assert result.out.splitlines() == [
        f"Removed worktree {plan.worktree}.",
        f"Kept branch {plan.branch}: shep did not record creating it.",
    ]
    assert sgit.branch_exists(repo, "users-branch")
    assert sgit.branch_exists(repo, plan.branch)


def test_rm_records_a_worktree_that_vanished(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """A worktree deleted by hand: rm prunes git's entry and records the removal."""
    run_id, plan = new_feature(store, shep_home, repo, "Add a chart")
    complete_run(store, run_id, duration_ms=1)
    shutil.rmtree(plan.worktree)
    result = feat("rm", run_id.hex)
    assert result.out.splitlines()[0] == (
        f"Recorded the removal of {plan.worktree}: its directory was already gone."
    )
    assert all(w.path != plan.worktree for w in sgit.worktrees(repo))
    (removed,) = _events(store, run_id, WorktreeRemoved)
    assert removed.reason == "shep feat rm (directory already gone)"


# -- gc -------------------------------------------------------------------------------------


def test_parse_duration() -> None:
    """72h, 3d, 90m, 2w, 30s and plain seconds; anything else is one clear error."""
    assert [parse_duration(t) for t in ("72h", "3d", "90m", "3600", "1.5h", "2W", " 30s ")] == [
        259_200, 259_200, 5400, 3600, 5400, 1_209_600, 30,
    ]  # fmt: skip
    for bad in ("", "h", "3x", "-1h", "1e3", "3 days", "nan"):
        with pytest.raises(DurationError, match="--older-than takes a duration such as 72h"):
            parse_duration(bad)
    assert [human_size(n) for n in (0, 512, 4096, 5 * 1024 * 1024 + 300_000)] == [
        "0 B", "512 B", "4.0 KiB", "5.3 MiB",
    ]  # fmt: skip


def test_gc_bad_duration_is_one_line(feat: Callable[..., Result]) -> None:
    """A duration gc cannot read: exit 2, one line, nothing else."""
    assert feat("gc", "--older-than", "3 fortnights") == Result(
        2,
        "",
        [
            "shep: --older-than takes a duration such as 72h, 3d, 90m or 3600 (seconds), "
            "not '3 fortnights'."
        ],
    )


def test_gc_removes_old_finished_worktrees_and_reports_the_rest(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path, clock: Clock
) -> None:
    """gc: finished features older than the threshold lose their worktree (merged: the branch
    too), with the space each held; a young one, a running one and a dirty one are kept;
    an orphan directory and a vanished worktree are reported; --dry-run changes nothing.
    """
    clock.at = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
    old_merged, merged_plan = new_feature(store, shep_home, repo, "Add a merged thing")
    _merge(store, old_merged, merged_plan)
    complete_run(store, old_merged, duration_ms=1)
    clock.tick(60)
    old_failed, failed_plan = new_feature(store, shep_home, repo, "Add a failed thing")
    fail_run(store, old_failed, error_type="X", message="boom")
    clock.tick(60)
    old_dirty, dirty_plan = new_feature(store, shep_home, repo, "Add a dirty thing")
    complete_run(store, old_dirty, duration_ms=1)
    clock.tick(60)
    old_vanished, vanished_plan = new_feature(store, shep_home, repo, "Add a lost thing")
    complete_run(store, old_vanished, duration_ms=1)
    clock.at = None
    (failed_plan.worktree / "big.bin").write_bytes(os.urandom(200_000))
    git(failed_plan.worktree, "add", "big.bin")
    git(failed_plan.worktree, "commit", "-q", "-m", "big")
    (dirty_plan.worktree / "scratch.txt").write_text("mine\n")
    shutil.rmtree(vanished_plan.worktree)
    young, young_plan = new_feature(store, shep_home, repo, "Add a young thing")
    complete_run(store, young, duration_ms=1)
    running, running_plan = new_feature(store, shep_home, repo, "Add a running thing")
    shutil.rmtree(running_plan.worktree)  # vanished while the run goes on
    orphan = shep_home / "worktrees" / "0123abcd" / "stray"
    orphan.mkdir(parents=True)
    (orphan / "file.txt").write_bytes(b"x" * 10_000)

    dry = feat("gc", "--dry-run")
    assert (dry.code, dry.err) == (0, [])
    lines = dry.out.splitlines()
    assert [x.split()[:3] for x in lines if x.startswith("would remove")] == [
        ["would", "remove", old_vanished.hex[:8]],
        ["would", "remove", old_failed.hex[:8]],
        ["would", "remove", old_merged.hex[:8]],
    ]  # newest first
    failed_line = next(x for x in lines if old_failed.hex[:8] in x)
    assert re.search(r"  (1\d\d|2\d\d)\.\d KiB  \(failed \d+d ago\)$", failed_line), failed_line
    assert (
        f"kept     {old_dirty.hex[:8]}  {dirty_plan.worktree}: {dirty_plan.worktree} has "
        f"uncommitted changes (scratch.txt) (`shep feat rm {old_dirty.hex[:8]} --force` "
        "removes it anyway)"
    ) in lines
    assert (
        f"missing  {running.hex[:8]}  {running_plan.worktree} (running): gone, but shep did not "
        f"remove it; `shep feat rm {running.hex[:8]}` records it."
    ) in lines
    orphan_line = next(x for x in lines if x.startswith("orphan"))
    assert orphan_line.startswith(f"orphan   {orphan}  ")
    assert "KiB: no feature uses it" in orphan_line
    assert lines[-1].startswith("Would free ")
    assert lines[-1].endswith(" from 3 worktrees.")
    assert not _events(store, old_merged, WorktreeRemoved)
    assert merged_plan.worktree.exists()
    assert failed_plan.worktree.exists()

    done = feat("gc")
    assert (done.code, done.err) == (0, [])
    lines = done.out.splitlines()
    assert [x.split()[1] for x in lines if x.startswith("removed")] == [
        old_vanished.hex[:8],
        old_failed.hex[:8],
        old_merged.hex[:8],
    ]
    assert f"         Deleted branch {merged_plan.branch}." in lines
    assert any(
        x.startswith(f"         Kept branch {failed_plan.branch}: it is not merged") for x in lines
    )
    assert lines[-1].startswith("Freed ")
    assert not merged_plan.worktree.exists()
    assert not failed_plan.worktree.exists()
    assert not sgit.branch_exists(repo, merged_plan.branch)
    assert sgit.branch_exists(repo, failed_plan.branch)
    assert dirty_plan.worktree.exists()
    assert young_plan.worktree.exists()
    assert orphan.exists()  # reported, never touched
    for run_id in (old_merged, old_failed, old_vanished):
        (removed,) = _events(store, run_id, WorktreeRemoved)
        assert removed.removed_by == ACTOR
        assert removed.reason.startswith("shep feat gc: ")
    for run_id in (old_dirty, young, running):
        assert not _events(store, run_id, WorktreeRemoved)

    again = feat("gc").out.splitlines()
    assert not any(x.startswith("removed") for x in again)
    assert any(x.startswith(f"kept     {old_dirty.hex[:8]}  ") for x in again)
    assert again[-1] == "Nothing removed: 1 worktree kept (see above)."
    everything = feat("gc", "--older-than", "0").out.splitlines()
    assert [x.split()[1] for x in everything if x.startswith("removed")] == [young.hex[:8]]
    assert_rebuild_equals_incremental(shep_home)


def test_gc_that_keeps_every_old_worktree_says_so(
    feat: Callable[..., Result], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """gc that finds an old worktree but keeps it (uncommitted changes) ends by saying it
    was kept, not that no worktree was old enough; nothing old at all says that."""
    nothing = feat("gc", "--older-than", "1s")
    assert (nothing.code, nothing.err) == (0, [])
    assert nothing.out == "Nothing to remove: no finished feature's worktree is older than 1s.\n"
    run_id, plan = new_feature(store, shep_home, repo, "Add a dirty thing")
    complete_run(store, run_id, duration_ms=1)
    (plan.worktree / "scratch.txt").write_text("mine\n")
    for args in (["--older-than", "0"], ["--older-than", "0", "--dry-run"]):
        done = feat("gc", *args)
        assert (done.code, done.err) == (0, [])
        lines = done.out.splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith(f"kept     {run_id.hex[:8]}  {plan.worktree}: ")
        assert "has uncommitted changes (scratch.txt)" in lines[0]
        would = "would be " if "--dry-run" in args else ""
        assert lines[1] == f"Nothing {would}removed: 1 worktree kept (see above)."
    assert plan.worktree.exists()
