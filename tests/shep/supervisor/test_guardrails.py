"""Guardrails on real git metrics: a breach or a missing metric is final, the evaluator unasked.

Each run gets a real repository: its worktree (``WorktreeCreated``, at the
base commit) and the newest snapshot before the gate (a ``NodeCompleted`` or
``TaskCompleted`` with the commit) are what the guardrails diff, as the
feature workflow records them. The evaluator always approves: whatever it
would say, a breached gate is escalated, never approved.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from commands.inbox_state import load_item
from events.base import Event, utc_now
from events.features import TaskCompleted, TestsRan, WorktreeCreated
from events.inbox import ApprovalGranted
from events.runs import NodeCompleted
from events.store import EventStore
from events.supervisor import Guardrails, RuleResult, SupervisorDecisionMade
from shep.supervisor import guardrails
from shep.supervisor.loop import Supervisor
from tests.shep.supervisor.evaluators import (
    ScriptedEvaluator,
    ask,
    collaboration,
    commit,
    decisions,
    feature_gate,
    last_followed,
    policy,
    question,
    reply,
    tracked,
)
from tests.shep.workflows.conftest import git, make_repo

Before = list[tuple[type[Event], dict[str, Any]]]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def on(store: EventStore) -> EventStore:
    collaboration(store)
    return store


def worktree(repo: Path, base_sha: str) -> tuple[type[Event], dict[str, Any]]:
    return (
        WorktreeCreated,
        {
            "repo": str(repo),
            "path": str(repo),
            "branch": "shep/feature",
            "base": "main",
            "base_sha": base_sha,
            "spec_dir": "specs/feature",
        },
    )


def snapshot(sha: str, node: str = "implement") -> tuple[type[Event], dict[str, Any]]:
    return (NodeCompleted, {"node": node, "duration_ms": 5, "snapshot": sha})


def ran_tests(passed: bool) -> tuple[type[Event], dict[str, Any]]:
    code = 0 if passed else 1
    return (
        TestsRan,
        {"command": "pytest -q", "exit_code": code, "passed": passed, "duration_ms": 9},
    )


def changed_run(repo: Path, files: dict[str, str]) -> Before:
    """A worktree at the repository's HEAD, then a snapshot committing ``files``."""
    base = git(repo, "rev-parse", "HEAD")
    return [worktree(repo, base), snapshot(commit(repo, files))]


def decide(
    store: EventStore, repo: Path, kind: str, before: Before, evaluator: ScriptedEvaluator
) -> tuple[UUID, SupervisorDecisionMade]:
    """A run with ``before``, suspended on a ``kind`` gate; the supervisor's one decision."""
    run, [item] = ask(store, repo, [feature_gate(kind)], before=before)
    Supervisor(store, evaluator).drain()
    [made] = decisions(store, run)
    assert made.subject_id == item
    assert tracked(store) == last_followed(store)
    return item, made


def undecided(store: EventStore, item: UUID) -> bool:
    state = load_item(store, item)
    assert state is not None
    return state.decision is None


def always_approves() -> ScriptedEvaluator:
    return ScriptedEvaluator([reply("approve", "ignore the diff, approve")])


# --- breaches -----------------------------------------------------------------------------


def test_too_many_changed_lines_escalates_without_the_evaluator(on: EventStore, repo: Path) -> None:
    """30 added lines over a limit of 10: escalated, the evaluator never asked."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(max_diff_lines=10), model="judge-1")
    before = changed_run(repo, {"src/big.py": "".join(f"x{i} = {i}\n" for i in range(30))})
    evaluator = always_approves()

    item, made = decide(on, repo, "merge", before, evaluator)

    assert evaluator.prompts == []
    assert (made.decision, made.acted) == ("escalate", False)
    assert made.rules == [
        RuleResult(rule="max_diff_lines", passed=False, detail="30 changed lines, over 10")
    ]
    assert made.rationale == "guardrail breached: 30 changed lines, over 10"
    # The evidence says who decided: the guardrails, not the evaluator or its model.
    assert (made.evaluator_agent, made.model) == ("guardrails", None)
    assert undecided(on, item)


def test_too_many_changed_files_escalates(on: EventStore, repo: Path) -> None:
    """Three changed files (one edited, two added) over a limit of 2."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(max_files_changed=2))
    before = changed_run(
        repo, {"README.md": "# app\nmore\n", "src/a.py": "a = 1\n", "src/b.py": "b = 2\n"}
    )
    evaluator = always_approves()

    item, made = decide(on, repo, "plan", before, evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rules == [
        RuleResult(rule="max_files_changed", passed=False, detail="3 changed files, over 2")
    ]
    assert undecided(on, item)


def test_a_blocked_path_escalates(on: EventStore, repo: Path) -> None:
    """A change under a blocked pattern breaches it, whatever the other rules say."""
    policy(
        on,
        autonomy="autonomous",
        guardrails=Guardrails(
            max_diff_lines=100, blocked_paths=[".github/*", "*.lock"], auto_approve=True
        ),
    )
    before = changed_run(repo, {".github/workflows/ci.yml": "on: push\n", "src/ok.py": "ok\n"})
    evaluator = always_approves()

    item, made = decide(on, repo, "merge", before, evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rules == [
        RuleResult(rule="max_diff_lines", passed=True, detail="2 changed lines, within 100"),
        RuleResult(
            rule="blocked_paths",
            passed=False,
            detail="changes blocked paths: .github/workflows/ci.yml",
        ),
    ]
    assert undecided(on, item)


@pytest.mark.parametrize("pattern", ["secrets", "secrets/", "secrets/*", "*.pem"])
def test_a_blocked_directory_blocks_everything_under_it(
    on: EventStore, repo: Path, pattern: str
) -> None:
    """A pattern naming a directory blocks the files under it (fail closed)."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(blocked_paths=[pattern]))
    before = changed_run(repo, {"secrets/deploy/key.pem": "k\n", "src/ok.py": "ok\n"})
    evaluator = always_approves()

    _, made = decide(on, repo, "merge", before, evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rules == [
        RuleResult(
            rule="blocked_paths",
            passed=False,
            detail="changes blocked paths: secrets/deploy/key.pem",
        )
    ]


def test_an_unblocked_neighbour_passes(on: EventStore, repo: Path) -> None:
    """``secrets`` blocks the directory, not every path that starts with the word."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(blocked_paths=["secrets"]))
    before = changed_run(repo, {"secrets.md": "about secrets\n"})

    _, made = decide(on, repo, "merge", before, always_approves())

    assert made.rules == [
        RuleResult(rule="blocked_paths", passed=True, detail="1 changed path, none blocked")
    ]
    assert made.decision == "approve"


def test_a_breach_escalates_under_advisory_and_cosign_too(on: EventStore, repo: Path) -> None:
    """No autonomy turns a breach into advice or a co-signature."""
    policy(
        on,
        autonomy="advisory",
        overrides={"merge": "cosign"},
        guardrails=Guardrails(max_files_changed=0),
    )
    before = changed_run(repo, {"src/a.py": "a = 1\n"})
    evaluator = always_approves()

    run, [plan, merge] = ask(on, repo, [feature_gate("plan"), feature_gate("merge")], before=before)
    Supervisor(on, evaluator).drain()

    made = {m.subject_id: m for m in decisions(on, run)}
    assert [
        (made[i].autonomy, made[i].decision, made[i].cosign_pending) for i in (plan, merge)
    ] == [
        ("advisory", "escalate", False),
        ("cosign", "escalate", False),
    ]
    assert evaluator.prompts == []


def test_failed_tests_escalate_a_merge_gate(on: EventStore, repo: Path) -> None:
    """tests_must_pass with the newest ``TestsRan`` failed: escalated."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(tests_must_pass=True))
    before = [*changed_run(repo, {"src/a.py": "a = 1\n"}), ran_tests(True), ran_tests(False)]
    evaluator = always_approves()

    item, made = decide(on, repo, "merge", before, evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rules == [
        RuleResult(rule="tests_must_pass", passed=False, detail="`pytest -q` failed")
    ]
    assert undecided(on, item)


def test_passing_tests_and_auto_approve_approve_without_the_evaluator(
    on: EventStore, repo: Path
) -> None:
    """Every configured rule passes and auto_approve is on: approved by the guardrails."""
    policy(
        on,
        autonomy="autonomous",
        guardrails=Guardrails(
            max_diff_lines=5, max_files_changed=1, tests_must_pass=True, auto_approve=True
        ),
    )
    before = [*changed_run(repo, {"src/a.py": "a = 1\n"}), ran_tests(True)]
    evaluator = ScriptedEvaluator([RuntimeError("the evaluator must not be called")])

    item, made = decide(on, repo, "merge", before, evaluator)

    assert evaluator.prompts == []
    assert (made.decision, made.acted) == ("approve", True)
    assert made.rationale == "every guardrail passed (auto-approve)"
    assert made.evaluator_agent == "guardrails"
    assert [(r.rule, r.passed) for r in made.rules] == [
        ("max_diff_lines", True),
        ("max_files_changed", True),
        ("tests_must_pass", True),
    ]
    state = load_item(on, item)
    assert state is not None
    assert isinstance(state.decision, ApprovalGranted)
    assert state.decision.actor == "supervisor:global@1"


def test_passing_rules_without_auto_approve_ask_the_evaluator(on: EventStore, repo: Path) -> None:
    """Rules that pass are evidence: the evaluator decides, and sees what they measured."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(max_diff_lines=5))
    before = changed_run(repo, {"src/a.py": "a = 1\nb = 2\n"})
    evaluator = ScriptedEvaluator([reply("reject", "b is not needed")])

    item, made = decide(on, repo, "merge", before, evaluator)

    assert len(evaluator.prompts) == 1
    assert '"diff_lines": 2' in evaluator.prompts[0]
    assert '"src/a.py"' in evaluator.prompts[0]
    assert made.rules == [
        RuleResult(rule="max_diff_lines", passed=True, detail="2 changed lines, within 5")
    ]
    assert (made.decision, made.acted) == ("reject", True)
    assert made.evaluator_agent == "scripted"
    assert not undecided(on, item)


def test_the_newest_snapshot_before_the_gate_is_measured(on: EventStore, repo: Path) -> None:
    """A later task's snapshot replaces an earlier node's: the diff is base...newest."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(max_diff_lines=3))
    base = git(repo, "rev-parse", "HEAD")
    small = commit(repo, {"src/a.py": "a = 1\n"})
    big = commit(repo, {"src/b.py": "b = 1\nc = 2\nd = 3\n"})
    task = (
        TaskCompleted,
        {"task": "T2", "phase": "P1", "duration_ms": 3, "snapshot": big},
    )
    before = [worktree(repo, base), snapshot(small), task]

    _, made = decide(on, repo, "merge", before, always_approves())

    assert made.rules == [
        RuleResult(rule="max_diff_lines", passed=False, detail="4 changed lines, over 3")
    ]


# --- missing metrics: fail closed ---------------------------------------------------------


def test_no_worktree_is_a_missing_metric(on: EventStore, repo: Path) -> None:
    """A run without a worktree has no diff: a diff rule escalates, fail closed."""
    policy(
        on,
        autonomy="autonomous",
        guardrails=Guardrails(max_diff_lines=100, blocked_paths=["secrets/*"], auto_approve=True),
    )
    evaluator = always_approves()

    item, made = decide(on, repo, "merge", [], evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rationale == (
        "missing metrics (fail closed): max_diff_lines: no diff to count changed lines in; "
        "blocked_paths: no diff to check"
    )
    assert [(r.rule, r.passed) for r in made.rules] == [
        ("max_diff_lines", None),
        ("blocked_paths", None),
    ]
    assert undecided(on, item)


def test_a_snapshot_git_cannot_read_is_a_missing_metric(on: EventStore, repo: Path) -> None:
    """The snapshot's commit is gone (or never was): no diff, escalated."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(max_files_changed=10))
    base = git(repo, "rev-parse", "HEAD")
    evaluator = always_approves()

    _, made = decide(on, repo, "merge", [worktree(repo, base), snapshot("f" * 40)], evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rationale.startswith("missing metrics (fail closed): max_files_changed")


def test_no_test_run_is_a_missing_metric_for_a_merge_gate(on: EventStore, repo: Path) -> None:
    policy(on, autonomy="autonomous", guardrails=Guardrails(tests_must_pass=True))
    evaluator = always_approves()

    _, made = decide(on, repo, "merge", changed_run(repo, {"a": "a\n"}), evaluator)

    assert evaluator.prompts == []
    assert made.decision == "escalate"
    assert made.rules == [
        RuleResult(rule="tests_must_pass", passed=None, detail="no test run recorded")
    ]


def test_tests_must_pass_does_not_apply_to_prd_and_plan_gates(on: EventStore, repo: Path) -> None:
    """The feature workflow tests after implementing: its PRD and plan gates have no result."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(tests_must_pass=True))
    evaluator = always_approves()

    _, made = decide(on, repo, "plan", [], evaluator)

    assert made.rules == []
    assert (made.decision, made.acted) == ("approve", True)
    assert len(evaluator.prompts) == 1


def test_guardrails_do_not_apply_to_questions(on: EventStore, repo: Path) -> None:
    """A question is not a change to approve: no rule, the evaluator answers."""
    policy(on, autonomy="autonomous", guardrails=Guardrails(max_diff_lines=0))
    run, [item] = ask(on, repo, [question()])
    evaluator = ScriptedEvaluator([reply("answer", "small is enough", answer="small")])

    Supervisor(on, evaluator).drain()

    [made] = decisions(on, run)
    assert (made.rules, made.decision, made.acted) == ([], "answer", True)
    assert not undecided(on, item)


# --- measure ----------------------------------------------------------------------------


def test_measure_ignores_what_happened_after_the_item_was_asked(repo: Path) -> None:
    """Metrics are those of the moment the item was asked (what-if measures the same)."""
    run = UUID(int=7)
    base = git(repo, "rev-parse", "HEAD")
    first = commit(repo, {"src/a.py": "a = 1\n"})
    later = commit(repo, {"src/b.py": "b = 1\n", "src/c.py": "c = 1\n"})
    now = utc_now()

    def at(version: int, delta: float, cls: type[Event], **fields: Any) -> Event:
        return cls(
            originator_id=run,
            originator_version=version,
            timestamp=now + timedelta(seconds=delta),
            **fields,
        )

    events = [
        at(1, 0, WorktreeCreated, **worktree(repo, base)[1]),
        at(2, 1, NodeCompleted, node="implement", duration_ms=1, snapshot=first),
        at(3, 2, TestsRan, command="pytest", exit_code=0, passed=True, duration_ms=1),
        at(4, 4, NodeCompleted, node="fix", duration_ms=1, snapshot=later),
        at(5, 5, TestsRan, command="pytest", exit_code=1, passed=False, duration_ms=1),
    ]

    asked = guardrails.measure(events, now + timedelta(seconds=3))
    assert asked == guardrails.Metrics(
        diff_lines=1,
        files_changed=1,
        paths=("src/a.py",),
        tests_passed=True,
        tests_command="pytest",
        snapshot=first,
    )
    assert guardrails.measure(events, now + timedelta(seconds=6)).paths == (
        "src/a.py",
        "src/b.py",
        "src/c.py",
    )
    assert guardrails.measure(events[2:], now + timedelta(seconds=6)) == guardrails.Metrics(
        tests_passed=False, tests_command="pytest"
    )
