"""What the feature workflow's gates and questions show a person: the requirements, the
plan and the merge to approve (the merge's approval names the exact tree and test
result, hashed), and the question a merge conflict asks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from events.words import counted
from shep.workflows.base import Approval, Option, Question
from shep.workflows.feature_prompts import inputs_of, spec_dir_of


def merge_approval(state: Mapping[str, Any]) -> Approval:
    inputs = inputs_of(state)
    review = state.get("review") or {}
    tests = review.get("tests") or {}
    if not tests.get("command"):
        outcome = "no test command configured or detected"
    elif tests.get("exit_code") is None:
        outcome = f"`{tests['command']}` timed out"
    else:
        word = "passed" if tests.get("passed") else f"FAILED (exit {tests.get('exit_code')})"
        reason = "" if tests.get("passed") else tests.get("reason") or ""
        outcome = f"`{tests['command']}` {word}" + (f": {reason}" if reason else "")
    summary = (
        f"Merge {inputs['branch']} into {inputs['base']}: "
        f"{counted(review.get('files', 0), 'file')} changed, "
        f"+{review.get('added', 0)} -{review.get('removed', 0)} lines, "
        f"{counted(review.get('commits', 0), 'commit')} by the agent; tests: {outcome}"
    )
    return Approval(summary=summary, hashed=_merge_hashed(inputs["base_sha"], review))


def _merge_hashed(base_sha: str, review: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """What the merge gate approves beyond its summary: the diff (the base commit and the
    worktree's tree, which name the change exactly) and the test result (command, exit).
    A review recorded before shep hashed them has neither: no decision is reapplied to it.
    """
    if not review.get("tree"):
        return ()
    tests = review.get("tests") or {}
    command = str(tests.get("command") or "")
    code = tests.get("exit_code") if command else None
    if not command:
        result = "(no test command)"
    else:
        result = f"`{command}` " + ("timed out" if code is None else f"exit {code}")
    outcome = json.dumps({"command": command, "exit_code": code}, sort_keys=True)
    tree = str(review["tree"])
    return (
        ("diff", f"{base_sha[:12]}..{tree[:12]}", _sha256(f"{base_sha}..{tree}")),
        ("tests", result, _sha256(outcome)),
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prd_approval(state: Mapping[str, Any]) -> Approval:
    from shep.workflows.feature_specs import validate_spec

    spec_dir = spec_dir_of(state)
    number = int(Path(spec_dir).name.split("-", 1)[0])
    repo = Path(state.get("repo") or ".")
    spec, _ = validate_spec(repo / spec_dir / "spec.yaml", number=number, inside=repo)
    answered = len(state.get("qa") or {})
    if spec is None:
        summary = f"Requirements for: {inputs_of(state)['description']}"
    else:
        technologies = ", ".join(spec.technologies) or "none named"
        summary = (
            f"Requirements: {spec.one_liner} (size {spec.size}; technologies: {technologies}; "
            f"{counted(answered, 'open question')} answered)"
        )
    return Approval(summary=summary, artifacts=(f"{spec_dir}/spec.yaml",))


def plan_approval(state: Mapping[str, Any]) -> Approval:
    from shep.workflows.feature_specs import validate_plan, validate_tasks

    spec_dir = spec_dir_of(state)
    repo = Path(state.get("repo") or ".")
    root = repo / spec_dir
    plan, _ = validate_plan(root / "plan.yaml", inside=repo)
    tasks = validate_tasks(root / "tasks.yaml", plan, inside=repo)[0] if plan else None
    artifacts = (f"{spec_dir}/research.yaml", f"{spec_dir}/plan.yaml", f"{spec_dir}/tasks.yaml")
    if plan is None or tasks is None:
        return Approval(summary=f"Plan for: {inputs_of(state)['description']}", artifacts=artifacts)
    parallel = sum(1 for p in plan.phases if p.parallel)
    summary = (
        f"Plan: {counted(len(plan.phases), 'phase')} ({parallel} parallel), "
        f"{counted(len(tasks.tasks), 'task')}, "
        f"{counted(len(plan.files), 'file')} to create or modify"
    )
    return Approval(summary=summary, artifacts=artifacts)


def conflict_question(state: Mapping[str, Any]) -> Question:
    inputs = inputs_of(state)
    merge = state.get("merge") or {}
    if merge.get("dirty"):
        text = (
            f"{inputs['source_repo']} has uncommitted changes on {inputs['base']} "
            f"({', '.join(merge['dirty'])}): shep will not merge over them."
        )
        retry = "I committed or stashed them: merge now"
    else:
        text = (
            f"Merging {inputs['branch']} into {inputs['base']} conflicts in: "
            f"{', '.join(merge.get('conflicts', ()))}."
        )
        retry = "I resolved it on the branch: merge again"
    return Question(
        text=text,
        options=(
            Option("retry", retry, recommended=True),
            Option("resolve", "Let the agent merge the base into the branch and resolve it"),
            Option("keep", "Keep the branch and worktree; finish without merging"),
        ),
        context=f"worktree: {state.get('repo')}",
    )


def conflict_record(state: Mapping[str, Any], answer: str, option: str | None) -> dict[str, Any]:
    choice = option or ("keep" if "keep" in answer.lower() else "retry")
    return {"route": {"retry": "merge", "resolve": "resolve", "keep": "keep"}.get(choice, "merge")}
