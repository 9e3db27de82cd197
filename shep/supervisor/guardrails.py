"""The deterministic half of a supervisor decision: the metrics of an item, and the guardrails.

Metrics come from the log and the repository, as they were when the item was
asked: a feature run's changes are its newest worktree snapshot before the
item against the commit its branch was made from; its tests are its newest
``TestsRan`` before the item. A run without a worktree, or a snapshot git can
no longer read, has no such metrics: any rule that needs one fails closed.

Rules apply to approval gates (a question is not a change to approve).
``tests_must_pass`` applies to the merge gate and to gates of other workflows:
the feature workflow runs its tests only after implementing, so its PRD and
plan gates have no test result to check. ``blocked_paths`` are fnmatch
patterns (``*`` matches ``/`` too); one that names a directory blocks
everything under it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass
from datetime import datetime

from events.base import Event
from events.features import TaskCompleted, TestsRan, WorktreeCreated
from events.inbox_status import ItemKind
from events.runs import NodeCompleted
from events.supervisor import Guardrails, RuleResult
from events.words import counted


@dataclass(frozen=True)
class Metrics:
    """What the guardrails measure; None where it could not be measured."""

    diff_lines: int | None = None
    files_changed: int | None = None
    paths: tuple[str, ...] | None = None
    tests_passed: bool | None = None
    tests_command: str | None = None
    snapshot: str | None = None

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["paths"] = list(self.paths) if self.paths is not None else None
        return data


def measure(run_events: list[Event], asked_at: datetime) -> Metrics:
    """The metrics of a run's item, from the run's events up to when it was asked
    (``asked_at``): later events are not looked at, so what-if measures the same.
    """
    from events.errors import GitError
    from shep import git

    worktree: WorktreeCreated | None = None
    snapshot: str | None = None
    tests: TestsRan | None = None
    for event in run_events:
        if event.timestamp > asked_at:
            break
        if isinstance(event, WorktreeCreated):
            worktree = event
        elif isinstance(event, NodeCompleted | TaskCompleted) and event.snapshot:
            snapshot = event.snapshot
        elif isinstance(event, TestsRan):
            tests = event
    tests_passed = tests.passed if tests is not None else None
    tests_command = tests.command if tests is not None else None
    if worktree is None or snapshot is None:
        return Metrics(tests_passed=tests_passed, tests_command=tests_command)
    try:
        stat = git.diff_stat(worktree.repo, worktree.base_sha, snapshot)
        paths = git.changed_paths(worktree.repo, worktree.base_sha, snapshot)
    except (GitError, OSError):
        return Metrics(tests_passed=tests_passed, tests_command=tests_command)
    return Metrics(
        diff_lines=stat.added + stat.removed,
        files_changed=stat.files,
        paths=tuple(paths),
        tests_passed=tests_passed,
        tests_command=tests_command,
        snapshot=snapshot,
    )


def check(rules: Guardrails, metrics: Metrics, kind: str) -> list[RuleResult]:
    """Each configured rule as checked on ``metrics`` for an item of ``kind``."""
    if kind == ItemKind.QUESTION:
        return []
    results: list[RuleResult] = []
    if rules.max_diff_lines is not None:
        results.append(
            _limit("max_diff_lines", metrics.diff_lines, rules.max_diff_lines, "changed line")
        )
    if rules.max_files_changed is not None:
        results.append(
            _limit(
                "max_files_changed", metrics.files_changed, rules.max_files_changed, "changed file"
            )
        )
    if rules.blocked_paths:
        if metrics.paths is None:
            results.append(RuleResult(rule="blocked_paths", passed=None, detail="no diff to check"))
        else:
            hits = [path for path in metrics.paths if _blocked(path, rules.blocked_paths)]
            detail = (
                f"changes blocked paths: {', '.join(hits[:5])}"
                if hits
                else f"{counted(len(metrics.paths), 'changed path')}, none blocked"
            )
            results.append(RuleResult(rule="blocked_paths", passed=not hits, detail=detail))
    if rules.tests_must_pass and kind not in ("prd", "plan"):
        if metrics.tests_passed is None:
            results.append(
                RuleResult(rule="tests_must_pass", passed=None, detail="no test run recorded")
            )
        else:
            detail = f"`{metrics.tests_command}` " + (
                "passed" if metrics.tests_passed else "failed"
            )
            results.append(
                RuleResult(rule="tests_must_pass", passed=metrics.tests_passed, detail=detail)
            )
    return results


def _blocked(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` matches a pattern, or lies under a directory a pattern names
    (``secrets`` and ``secrets/`` block ``secrets/key.pem``: a guardrail fails closed)."""
    for pattern in patterns:
        directory = pattern.rstrip("/")
        if fnmatch.fnmatchcase(path, pattern) or (
            directory and fnmatch.fnmatchcase(path, f"{directory}/*")
        ):
            return True
    return False


def _limit(rule: str, value: int | None, limit: int, noun: str) -> RuleResult:
    if value is None:
        return RuleResult(rule=rule, passed=None, detail=f"no diff to count {noun}s in")
    passed = value <= limit
    verdict = "within" if passed else "over"
    return RuleResult(rule=rule, passed=passed, detail=f"{counted(value, noun)}, {verdict} {limit}")


def outcome(results: list[RuleResult]) -> str:
    """``breach`` (a rule failed: final), ``missing`` (a metric was missing: escalate),
    ``pass`` (every rule passed), or ``none`` (no rule applies)."""
    if any(r.passed is False for r in results):
        return "breach"
    if any(r.passed is None for r in results):
        return "missing"
    return "pass" if results else "none"
