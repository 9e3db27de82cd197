"""feature and feature-fast: from a one-sentence description to merged code, in its own worktree.

``shep feat new`` makes the branch and the worktree (``shep.feature``), then
runs one of these graphs with the worktree as the run's repository:

- **feature**: setup -> analyze -> requirements (-> clarify, one inbox
  question per open question, -> requirements again) -> validate_spec ->
  [prd] -> research -> validate_research -> plan -> validate_plan ->
  [plan_gate] -> implement (the tasks, phase by phase) -> tests ->
  [merge_gate] -> merge;
- **feature-fast**: setup -> fast (implement straight from the description)
  -> tests -> [merge_gate] -> merge.

Each spec file is checked by a validate step; invalid output goes to a repair
step (write tools only, few turns) at most ``MAX_REPAIRS`` times, then the run
fails with the errors, and ``shep resume`` runs the producing step again.
A gate in brackets is skipped when the run's ``allow_*`` input is set. A
rejection sends the run back to the phase with the reason. Every node that
may change files ends with a snapshot of the worktree (``NodeCompleted.snapshot``,
``TaskCompleted.snapshot``).
"""

from __future__ import annotations

import contextlib
import operator
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from events.errors import StepFailedError
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
    WorktreeSetupRan,
)
from events.runs import NodeCompleted, Usage
from shep.workflows.base import (
    AgentStep,
    Approval,
    ApprovalGate,
    DeterministicStep,
    NodeKit,
    Option,
    Question,
    QuestionStep,
    StepIO,
    StepState,
    Workflow,
    add_step,
    route_gate,
)

FEATURE = "feature"
FEATURE_FAST = "feature-fast"
#: How many times a repair step may try to fix one invalid file.
MAX_REPAIRS = 3
#: Bytes of a command's output kept in its event.
OUTPUT_TAIL = 4000


class FeatureState(StepState, total=False):
    """The feature graphs' state beyond the node kinds' own keys.

    ``qa``: every open question answered so far, question -> answer.
    ``checks``: each validator's latest errors (``[]``: valid). ``repairs``:
    repairs so far per validator. ``route``: where the latest validator or
    merge sends the run. ``repair``: what the repair step fixes now.
    ``review``: the diff against the base and the test result, for the merge gate.
    """

    qa: Annotated[dict[str, str], operator.or_]
    checks: Annotated[dict[str, list[str]], operator.or_]
    repairs: Annotated[dict[str, int], operator.or_]
    route: str
    repair: dict[str, Any]
    review: dict[str, Any]
    merge: dict[str, Any]


# -- inputs and prompts ---------------------------------------------------------------------


def _inputs(state: Mapping[str, Any]) -> Mapping[str, str]:
    return state.get("inputs") or {}


def _spec_dir(state: Mapping[str, Any]) -> str:
    return _inputs(state)["spec_dir"]


def _header(step: str, state: Mapping[str, Any]) -> str:
    inputs = _inputs(state)
    return (
        f"[shep feature: {step}]\n"
        f"Feature: {inputs['description']}\n"
        f"Spec directory: {inputs['spec_dir']}\n"
        f"Branch: {inputs['branch']} (based on {inputs['base']})\n"
    )


SPEC_SCHEMA = """\
spec.yaml holds (YAML, snake_case keys):
  name: short name of the feature
  number: {number}
  branch: {branch}
  one_liner: one-line summary
  summary: a paragraph
  phase: requirements
  content: the requirements in Markdown (what, why, acceptance criteria)
  technologies: [list of technologies involved]
  size: one of XS, S, M, L, XL
  open_questions: what you still need a person to decide; each
    {{question: ..., options: [{{label: ..., description: ..., recommended: true|false}}, ...]}}
    with 2 to 9 options and exactly one recommended. Leave it [] when nothing is unclear."""

RESEARCH_SCHEMA = """\
research.yaml holds:
  decisions: a non-empty list of
    {title: ..., chosen: ..., rejected: [alternatives considered], rationale: ...}"""

PLAN_SCHEMA = """\
plan.yaml holds:
  phases: [{id: p1, name: ..., parallel: true|false}, ...]   (ids unique)
  files: [{path: relative/path, action: create|modify}, ...]  (not empty)
tasks.yaml holds:
  tasks: [{id: t1, title: ..., state: todo, phase: <an id of plan.yaml's phases>,
           acceptance: [criteria, ...], files: [the files this task writes],
           description: ...}, ...]
Tasks of a parallel phase run at the same time when their files do not overlap."""


def _analyze_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("analyze", state)
        + "\nStudy this repository (read only: do not change files): what it is, how it is "
        "built and tested, its conventions, and where this feature would fit. Reply with a "
        "concise analysis."
    )


def _requirements_prompt(state: Mapping[str, Any]) -> str:
    inputs = _inputs(state)
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    text = (
        _header("requirements", state)
        + f"\nWrite the feature's requirements to {inputs['spec_dir']}/spec.yaml.\n"
        + SPEC_SCHEMA.format(number=number, branch=inputs["branch"])
    )
    analysis = (state.get("results") or {}).get("analyze")
    if analysis:
        text += f"\n\nWhat the analysis of the repository found:\n{analysis}"
    qa = state.get("qa") or {}
    if qa:
        text += "\n\nAnswers to your open questions:\n" + "".join(
            f"- {question}: {answer}\n" for question, answer in qa.items()
        )
        text += "Take them into account; ask only what is still open."
    return text


def _research_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("research", state)
        + f"\nRead {_spec_dir(state)}/spec.yaml and research how to build it in this "
        f"repository. Write the technical decisions to {_spec_dir(state)}/research.yaml.\n"
        + RESEARCH_SCHEMA
    )


def _plan_prompt(state: Mapping[str, Any]) -> str:
    spec_dir = _spec_dir(state)
    return (
        _header("plan", state)
        + f"\nFrom {spec_dir}/spec.yaml and {spec_dir}/research.yaml, plan the "
        f"implementation: write {spec_dir}/plan.yaml and {spec_dir}/tasks.yaml.\n" + PLAN_SCHEMA
    )


def _fast_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("fast", state)
        + "\nImplement this feature in this repository now: write the code and its tests, "
        "following the repository's conventions. Do not commit; shep commits the branch."
    )


def _revise_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("revise", state)
        + "\nThe implementation of this feature was reviewed before merging. Change the "
        "code as the reviewer asks. Do not commit; shep commits the branch."
    )


def _repair_prompt(state: Mapping[str, Any]) -> str:
    repair = state.get("repair") or {}
    errors = "".join(f"- {error}\n" for error in repair.get("errors", ()))
    return (
        _header(f"repair file={repair.get('file', '')}", state)
        + f"\n{repair.get('file')} does not validate. Fix exactly these problems by rewriting "
        f"the file; change nothing else.\nValidation errors:\n{errors}\n{repair.get('schema', '')}"
    )


def _resolve_prompt(state: Mapping[str, Any]) -> str:
    inputs = _inputs(state)
    files = ", ".join((state.get("merge") or {}).get("conflicts", ()))
    return (
        _header("resolve", state)
        + f"\nMerging this branch into {inputs['base']} conflicts in: {files}. In this "
        f"worktree, run `git merge {inputs['base']}`, resolve every conflict keeping both "
        "sides' intent, and commit the merge."
    )


# -- setup ------------------------------------------------------------------------------------


def run_command(
    command: str, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int | None, str, int]:
    """Run a command line (no shell) in ``cwd``; (exit code or None on timeout, output tail, ms).

    The command runs in its own process group, killed whole on timeout.
    """
    import shlex
    import signal
    import subprocess

    started = time.monotonic()
    try:
        process = subprocess.Popen(
            shlex.split(command),
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        return 127, f"cannot run {command!r}: {e.strerror or e}", 0
    try:
        output, _ = process.communicate(timeout=timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    tail = output[-OUTPUT_TAIL:].decode("utf-8", "replace")
    return code, tail, int((time.monotonic() - started) * 1000)


def _feature_env(io: StepIO) -> dict[str, str]:
    inputs = io.inputs
    return {
        "SHEP_RUN_ID": io.run_id,
        "SHEP_WORKTREE": str(io.repo),
        "SHEP_BRANCH": inputs["branch"],
        "SHEP_BASE": inputs["base"],
        "SHEP_REPO": inputs["source_repo"],
        "SHEP_SPEC_DIR": inputs["spec_dir"],
    }


def _setup(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    from shep import git

    inputs = io.inputs
    if not (io.repo / ".git").exists():
        # Made by `shep feat new`; gone since (removed by hand): make it again.
        git.add_worktree(Path(inputs["source_repo"]), io.repo, inputs["branch"], inputs["base_sha"])
        io.message(f"made the worktree again at {io.repo}")
    command = str(io.setting("worktree_setup_command") or "")
    if command:
        io.message(f"worktree setup: {command}")
        timeout = float(io.setting("worktree_setup_timeout"))
        code, tail, ms = run_command(command, io.repo, _feature_env(io), timeout)
        # At once, not with the step's completion: a failure's output must be on record.
        io.append(
            WorktreeSetupRan, command=command, exit_code=code, duration_ms=ms, output_tail=tail
        )
        if code != 0:
            why = f"timed out after {timeout:g}s" if code is None else f"exited with {code}"
            raise StepFailedError(
                f"worktree_setup_command {command!r} {why}. Its output ends with:\n{tail[-1500:]}"
            )
    io.record(
        WorktreeCreated,
        repo=inputs["source_repo"],
        path=str(io.repo),
        branch=inputs["branch"],
        base=inputs["base"],
        base_sha=inputs["base_sha"],
        spec_dir=inputs["spec_dir"],
    )
    return {}


# -- validation and repair --------------------------------------------------------------------


def _validator(
    name: str,
    kind: str,
    check: Callable[[Path, Mapping[str, Any]], tuple[str, list[str]]],
    schema: str,
) -> DeterministicStep:
    """A step that validates ``kind``'s file(s) and routes: on, to repair, or to give up."""

    def run(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
        file, errors = check(io.repo, state)
        if not errors:
            return {"checks": {kind: []}, "repairs": {kind: 0}, "route": "ok"}
        repairs = (state.get("repairs") or {}).get(kind, 0)
        io.message(f"{file}: {len(errors)} validation error(s)")
        repair = {"kind": kind, "file": file, "errors": errors, "validator": name}
        if repairs >= MAX_REPAIRS:
            return {"checks": {kind: errors}, "repair": repair, "route": "give_up"}
        return {
            "checks": {kind: errors},
            "repairs": {kind: repairs + 1},
            "repair": {**repair, "schema": schema},
            "route": "repair",
        }

    return DeterministicStep(name=name, title=f"Validate {kind}", run=run)


def _check_spec(worktree: Path, state: Mapping[str, Any]) -> tuple[str, list[str]]:
    from shep.workflows.feature_specs import validate_spec

    inputs = _inputs(state)
    relative = f"{inputs['spec_dir']}/spec.yaml"
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    _, errors = validate_spec(worktree / relative, number=number, branch=inputs["branch"])
    return relative, errors


def _check_research(worktree: Path, state: Mapping[str, Any]) -> tuple[str, list[str]]:
    from shep.workflows.feature_specs import validate_research

    relative = f"{_spec_dir(state)}/research.yaml"
    return relative, validate_research(worktree / relative)[1]


def _check_plan(worktree: Path, state: Mapping[str, Any]) -> tuple[str, list[str]]:
    from shep.workflows.feature_specs import validate_plan, validate_tasks

    spec_dir = _spec_dir(state)
    plan, errors = validate_plan(worktree / spec_dir / "plan.yaml")
    if plan is None:
        return f"{spec_dir}/plan.yaml", errors
    tasks_errors = validate_tasks(worktree / spec_dir / "tasks.yaml", plan)[1]
    return f"{spec_dir}/tasks.yaml", errors + tasks_errors


def _give_up(producers: Mapping[str, str]) -> DeterministicStep:
    """Fail the run with the errors; resumed, send it back to the step that wrote the file."""

    def run(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
        repair = state.get("repair") or {}
        kind = repair.get("kind", "")
        producer = producers[kind]
        if io.attempt == 1:
            errors = "; ".join(repair.get("errors", ()))
            raise StepFailedError(
                f"{repair.get('file')} is still invalid after {MAX_REPAIRS} repairs: {errors}. "
                f"`shep resume` runs the {producer} step again."
            )
        io.message(f"resumed: {producer} writes {repair.get('file')} again")
        return {"repairs": {kind: 0}, "route": producer}

    return DeterministicStep(name="give_up", title="Give up on an invalid file", run=run)


# -- requirements' questions -------------------------------------------------------------------


def _open_questions(state: Mapping[str, Any], worktree: Path | None = None) -> list[Any]:
    """The latest spec's open questions that have no answer yet."""
    from shep.workflows.feature_specs import validate_spec

    inputs = _inputs(state)
    root = Path(worktree or state.get("repo") or ".")
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    spec, _ = validate_spec(root / inputs["spec_dir"] / "spec.yaml", number=number)
    answered = state.get("qa") or {}
    if spec is None:
        return []
    return [q for q in spec.open_questions if q.question not in answered]


def _validate_spec_step() -> DeterministicStep:
    base = _validator("validate_spec", "spec", _check_spec, SPEC_SCHEMA)

    def run(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
        update = base.run(state, io)
        if update["route"] != "ok":
            return update
        if _open_questions(state, io.repo):
            done = int((state.get("iterations") or {}).get("requirements", 0))
            bound = int(io.setting("requirements_iterations"))
            if done > bound:
                raise StepFailedError(
                    f"requirements still has open questions after {bound} rounds of "
                    f"answers (requirements_iterations is {bound}). Raise it with `shep settings "
                    "workflow --requirements-iterations N`, then `shep resume`."
                )
            return {**update, "route": "clarify"}
        return update

    return DeterministicStep(name=base.name, title=base.title, run=run)


def _clarify_question(state: Mapping[str, Any]) -> Question:
    pending = _open_questions(state)
    if not pending:
        raise StepFailedError("clarify was reached with no open question")
    question = pending[0]
    options = tuple(
        Option(id=str(i), label=o.label, description=o.description, recommended=o.recommended)
        for i, o in enumerate(question.options, start=1)
    )
    return Question(
        text=question.question,
        options=options,
        context=f"Requirements of: {_inputs(state)['description']}",
    )


def _clarify_record(state: Mapping[str, Any], answer: str, option: str | None) -> dict[str, Any]:
    pending = _open_questions(state)
    return {"qa": {pending[0].question: answer}} if pending else {}


# -- implement ---------------------------------------------------------------------------------


def _task_prompt(state: Mapping[str, Any], task: Any) -> str:
    acceptance = "".join(f"- {line}\n" for line in task.acceptance)
    return (
        _header(f"implement task={task.id}", state)
        + f"\nImplement task {task.id}: {task.title}\n"
        + (f"{task.description}\n" if task.description else "")
        + f"Files: {', '.join(task.files)}\n"
        + f"Acceptance:\n{acceptance}"
        + f"The whole plan is in {_spec_dir(state)}/plan.yaml and tasks.yaml; do only this "
        "task. Do not commit; shep commits the branch."
    )


def _restore_cut_off(
    io: StepIO, history: Sequence[Any], tasks: Mapping[str, Any], cut_off: set[str]
) -> None:
    """Put the worktree back as it was before the cut-off tasks wrote anything.

    The files go back to the newest snapshot; a cut-off task of a parallel phase may
    have half-written its files into a sibling's snapshot, so its own files go back
    further, to the newest snapshot before it started.
    """
    from shep import git

    latest: str | None = None
    before: dict[str, str | None] = {}
    for event in history:
        if isinstance(event, TaskCompleted | NodeCompleted) and event.snapshot:
            latest = event.snapshot
        elif isinstance(event, TaskStarted) and event.task in cut_off:
            before[event.task] = latest
    if latest is None:
        return
    git.restore(io.repo, latest)
    for task_id in sorted(cut_off):
        task = tasks.get(task_id)
        earlier = before.get(task_id)
        if task is not None and earlier and earlier != latest and task.files:
            git.restore_paths(io.repo, earlier, list(task.files))
    io.message(f"restored the worktree to {latest[:10]} (cut off: {', '.join(sorted(cut_off))})")


def _implement(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    """Run the tasks phase by phase; each task's completion is an event, so a resumed
    implement starts at the first unfinished task, with the worktree as the last finished
    one left it.
    """
    from concurrent.futures import ThreadPoolExecutor

    from shep.workflows.feature_specs import parallel_groups, validate_plan, validate_tasks

    spec_dir = io.repo / _spec_dir(state)
    plan, errors = validate_plan(spec_dir / "plan.yaml")
    tasks = validate_tasks(spec_dir / "tasks.yaml", plan)[0] if plan else None
    if plan is None or tasks is None:
        raise StepFailedError(f"the plan no longer validates: {'; '.join(errors)}")
    history = io.history()
    done = {e.task for e in history if isinstance(e, TaskCompleted)}
    started = {e.task for e in history if isinstance(e, TaskStarted)}
    cut_off = started - done
    if cut_off:
        _restore_cut_off(io, history, {t.id: t for t in tasks.tasks}, cut_off)
    attempts = {
        t: sum(1 for e in history if isinstance(e, TaskStarted) and e.task == t) for t in started
    }

    def one(task: Any) -> None:
        began = time.monotonic()
        io.append(
            TaskStarted,
            task=task.id,
            phase=task.phase,
            title=task.title,
            attempt=attempts.get(task.id, 0) + 1,
        )
        result = io.agent(
            _task_prompt(state, task), writes=True, label=f"task {task.id}: {task.title}"
        )
        snapshot = io.snapshot(f"task {task.id}")
        usage = result.usage
        io.append(
            TaskCompleted,
            task=task.id,
            phase=task.phase,
            duration_ms=int((time.monotonic() - began) * 1000),
            snapshot=snapshot,
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost_usd=usage.cost_usd,
            ),
        )

    count = 0
    for group in parallel_groups(plan, tasks.tasks):
        todo = [task for task in group if task.id not in done]
        if len(todo) > 1:
            io.message(f"tasks {', '.join(t.id for t in todo)} in parallel")
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                for future in [pool.submit(one, task) for task in todo]:
                    future.result()
        elif todo:
            one(todo[0])
        count += len(todo)
    total = len(tasks.tasks)
    return {"results": {"implement": f"{count} of {total} tasks implemented this time"}}


# -- tests, merge -----------------------------------------------------------------------------


def detect_test_command(worktree: Path) -> str | None:
    """The project's test command, when the repository says it plainly; None otherwise."""
    import json

    package = worktree / "package.json"
    if package.is_file():
        with contextlib.suppress(OSError, ValueError):
            script = (json.loads(package.read_text()).get("scripts") or {}).get("test", "")
            if script and "no test specified" not in script:
                return "npm test"
    makefile = worktree / "Makefile"
    if makefile.is_file():
        with contextlib.suppress(OSError):
            if any(line.startswith("test:") for line in makefile.read_text().splitlines()):
                return "make test"
    python = any((worktree / f).is_file() for f in ("pyproject.toml", "setup.py", "pytest.ini"))
    if python and ((worktree / "tests").is_dir() or (worktree / "test").is_dir()):
        return "python -m pytest -q"
    if (worktree / "Cargo.toml").is_file():
        return "cargo test"
    if (worktree / "go.mod").is_file():
        return "go test ./..."
    return None


def _tests(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    """Run the project's test command (never fails the run), and measure the diff for review."""
    from shep import git

    inputs = io.inputs
    command = str(io.setting("test_command") or "") or detect_test_command(io.repo)
    tests: dict[str, Any] = {"command": command}
    if command:
        io.message(f"tests: {command}")
        timeout = float(io.setting("test_timeout"))
        code, tail, ms = run_command(command, io.repo, _feature_env(io), timeout)
        tests.update(exit_code=code, passed=code == 0, output_tail=tail[-1500:])
        io.record(
            TestsRan,
            command=command,
            exit_code=code,
            passed=code == 0,
            duration_ms=ms,
            output_tail=tail,
        )
    head = io.snapshot("review") or git.resolve_commit(io.repo, "HEAD")
    stat = git.diff_stat(io.repo, inputs["base_sha"], head)
    commits = git.diff_stat(io.repo, inputs["base_sha"], "HEAD").commits
    review = {
        "files": stat.files,
        "added": stat.added,
        "removed": stat.removed,
        "commits": commits,
        "tests": tests,
    }
    return {"review": review}


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _merge_approval(state: Mapping[str, Any]) -> Approval:
    inputs = _inputs(state)
    review = state.get("review") or {}
    tests = review.get("tests") or {}
    if not tests.get("command"):
        outcome = "no test command configured or detected"
    elif tests.get("exit_code") is None:
        outcome = f"`{tests['command']}` timed out"
    else:
        word = "passed" if tests.get("passed") else f"FAILED (exit {tests.get('exit_code')})"
        outcome = f"`{tests['command']}` {word}"
    summary = (
        f"Merge {inputs['branch']} into {inputs['base']}: "
        f"{_count(review.get('files', 0), 'file')} changed, "
        f"+{review.get('added', 0)} -{review.get('removed', 0)} lines, "
        f"{_count(review.get('commits', 0), 'commit')} by the agent; tests: {outcome}"
    )
    return Approval(summary=summary)


def _merge(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    """Commit the branch, then squash-merge it into the base (or push and open a PR)."""
    from shep import git

    inputs = io.inputs
    source = Path(inputs["source_repo"])
    branch, base = inputs["branch"], inputs["base"]
    history = io.history()
    trailer = f"Shep-Run: {io.run_id}"
    merged = any(isinstance(e, FeatureMerged) for e in history)
    opened = any(isinstance(e, PullRequestOpened) for e in history)
    if not merged and not opened:
        # The squash commit names the run: a merge made just before the worker died is
        # found on the base, recorded, and not made again.
        earlier = git.find_commit(source, inputs["base_sha"], f"refs/heads/{base}", trailer)
        if earlier is not None:
            _record_merge(io, earlier, git.diff_stat(source, inputs["base_sha"], branch))
            merged = True
    if merged or opened:
        if not any(isinstance(e, WorktreeRemoved) for e in history):
            reason = "merged" if merged else "pull request opened"
            _remove_worktree(io, delete_branch=merged, reason=reason)
        return {"route": "done"}
    title = _title(io, state)
    git.commit_all(io.repo, f"{title}\n\nshep feature run {io.run_id[:8]}")
    if inputs.get("pr") or inputs.get("push"):
        remote = git.has_remote(source)
        if remote is None:
            raise StepFailedError(
                f"--push/--pr need a remote, and {source} has none. Add one (`git remote add`), "
                "then `shep resume`."
            )
        git.push(source, branch, remote)
        io.append(
            BranchPushed, remote=remote, branch=branch, commit=git.resolve_commit(source, branch)
        )
        if inputs.get("pr"):
            pr = git.open_pull_request(source, branch, base, title, inputs["description"])
            io.append(PullRequestOpened, url=pr.url, number=pr.number)
            _remove_worktree(io, delete_branch=False, reason="pull request opened")
            return {"route": "done"}
    if git.current_branch(source) == base:
        dirty = git.dirty_files(source)
        if dirty:
            return {
                "route": "conflict",
                "merge": {"dirty": dirty[:20], "conflicts": []},
            }
    stat = git.diff_stat(source, inputs["base_sha"], branch)
    body = inputs["description"] if inputs["description"] != title else ""
    message = "\n\n".join(part for part in (title, body, trailer) if part)
    result = git.squash_merge(source, base, branch, message)
    if result.conflicts:
        io.append(MergeConflicted, into=base, files=tuple(result.conflicts))
        return {"route": "conflict", "merge": {"conflicts": list(result.conflicts), "dirty": []}}
    if result.commit:
        _record_merge(io, result.commit, stat)
        io.message(f"merged into {base} as {result.commit[:10]}")
    else:
        io.message(f"nothing to merge: {branch} has no changes against {base}")
    _remove_worktree(io, delete_branch=True, reason="merged" if result.commit else "no changes")
    return {"route": "done", "merge": {"commit": result.commit, "conflicts": [], "dirty": []}}


def _record_merge(io: StepIO, commit: str, stat: Any) -> None:
    io.append(
        FeatureMerged,
        into=io.inputs["base"],
        commit=commit,
        files=stat.files,
        added=stat.added,
        removed=stat.removed,
        commits=stat.commits,
    )


def _title(io: StepIO, state: Mapping[str, Any]) -> str:
    from shep.workflows.feature_specs import validate_spec

    inputs = io.inputs
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    spec, _ = validate_spec(io.repo / inputs["spec_dir"] / "spec.yaml", number=number)
    return spec.one_liner if spec is not None else inputs["description"].splitlines()[0][:72]


def _remove_worktree(io: StepIO, *, delete_branch: bool, reason: str) -> None:
    from shep import git

    source = Path(io.inputs["source_repo"])
    branch = io.inputs["branch"]
    git.remove_worktree(source, io.repo, force=True)
    deleted = git.delete_branch(source, branch, force=True) if delete_branch else False
    io.append(
        WorktreeRemoved,
        path=str(io.repo),
        branch=branch,
        branch_deleted=deleted,
        removed_by="shep",
        reason=reason,
    )


def _prd_approval(state: Mapping[str, Any]) -> Approval:
    from shep.workflows.feature_specs import validate_spec

    spec_dir = _spec_dir(state)
    number = int(Path(spec_dir).name.split("-", 1)[0])
    spec, _ = validate_spec(Path(state.get("repo") or ".") / spec_dir / "spec.yaml", number=number)
    answered = len(state.get("qa") or {})
    if spec is None:
        summary = f"Requirements for: {_inputs(state)['description']}"
    else:
        technologies = ", ".join(spec.technologies) or "none named"
        summary = (
            f"Requirements: {spec.one_liner} (size {spec.size}; technologies: {technologies}; "
            f"{_count(answered, 'open question')} answered)"
        )
    return Approval(summary=summary, artifacts=(f"{spec_dir}/spec.yaml",))


def _plan_approval(state: Mapping[str, Any]) -> Approval:
    from shep.workflows.feature_specs import validate_plan, validate_tasks

    spec_dir = _spec_dir(state)
    root = Path(state.get("repo") or ".") / spec_dir
    plan, _ = validate_plan(root / "plan.yaml")
    tasks = validate_tasks(root / "tasks.yaml", plan)[0] if plan else None
    artifacts = (f"{spec_dir}/research.yaml", f"{spec_dir}/plan.yaml", f"{spec_dir}/tasks.yaml")
    if plan is None or tasks is None:
        return Approval(summary=f"Plan for: {_inputs(state)['description']}", artifacts=artifacts)
    parallel = sum(1 for p in plan.phases if p.parallel)
    summary = (
        f"Plan: {_count(len(plan.phases), 'phase')} ({parallel} parallel), "
        f"{_count(len(tasks.tasks), 'task')}, {_count(len(plan.files), 'file')} to create or modify"
    )
    return Approval(summary=summary, artifacts=artifacts)


def _conflict_question(state: Mapping[str, Any]) -> Question:
    inputs = _inputs(state)
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


def _conflict_record(state: Mapping[str, Any], answer: str, option: str | None) -> dict[str, Any]:
    choice = option or ("keep" if "keep" in answer.lower() else "retry")
    return {"route": {"retry": "merge", "resolve": "resolve", "keep": "keep"}.get(choice, "merge")}


# -- the steps and the graphs -------------------------------------------------------------------

SETUP = DeterministicStep(name="setup", title="Worktree setup", run=_setup)
ANALYZE = AgentStep(name="analyze", title="Analyze", instruction="", prompt=_analyze_prompt)
REQUIREMENTS = AgentStep(
    name="requirements",
    title="Requirements",
    instruction="",
    prompt=_requirements_prompt,
    writes=True,
)
VALIDATE_SPEC = _validate_spec_step()
CLARIFY = QuestionStep(
    name="clarify", title="Open question", ask=_clarify_question, record=_clarify_record
)
PRD = ApprovalGate(
    name="prd",
    title="Approve the requirements",
    phase="requirements",
    approval=_prd_approval,
)
RESEARCH = AgentStep(
    name="research", title="Research", instruction="", prompt=_research_prompt, writes=True
)
VALIDATE_RESEARCH = _validator("validate_research", "research", _check_research, RESEARCH_SCHEMA)
PLAN = AgentStep(name="plan", title="Plan", instruction="", prompt=_plan_prompt, writes=True)
VALIDATE_PLAN = _validator("validate_plan", "plan", _check_plan, PLAN_SCHEMA)
PLAN_GATE = ApprovalGate(
    name="plan_gate",
    title="Approve the plan",
    phase="plan",
    approval=_plan_approval,
)
REPAIR = AgentStep(
    name="repair",
    title="Repair",
    instruction="",
    prompt=_repair_prompt,
    write_only=True,
    max_turns=5,
)
GIVE_UP = _give_up({"spec": "requirements", "research": "research", "plan": "plan"})
IMPLEMENT = DeterministicStep(name="implement", title="Implement", run=_implement, writes=True)
FAST = AgentStep(name="fast", title="Implement", instruction="", prompt=_fast_prompt, writes=True)
REVISE = AgentStep(
    name="revise", title="Revise", instruction="", prompt=_revise_prompt, writes=True
)
TESTS = DeterministicStep(name="tests", title="Tests", run=_tests)
MERGE = DeterministicStep(name="merge", title="Merge", run=_merge)
CONFLICT = QuestionStep(
    name="conflict", title="Merge conflict", ask=_conflict_question, record=_conflict_record
)
RESOLVE = AgentStep(
    name="resolve", title="Resolve", instruction="", prompt=_resolve_prompt, writes=True
)


#: The full graph's steps up to the tests (``_tail`` adds the rest).
_FULL_HEAD = (
    SETUP,
    ANALYZE,
    REQUIREMENTS,
    VALIDATE_SPEC,
    CLARIFY,
    PRD,
    RESEARCH,
    VALIDATE_RESEARCH,
    PLAN,
    VALIDATE_PLAN,
    PLAN_GATE,
    REPAIR,
    GIVE_UP,
    IMPLEMENT,
    REVISE,
)


def _merge_gate(phase: str) -> ApprovalGate:
    return ApprovalGate(
        name="merge_gate", title="Approve the merge", phase=phase, approval=_merge_approval
    )


def _allowed(gate: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda state: bool(_inputs(state).get(f"allow_{gate}"))


def _to(gate: ApprovalGate, after: str, allowed: str) -> Callable[[Mapping[str, Any]], str]:
    """Route to ``gate``, or straight to ``after`` when the run's input allows it."""
    skip = _allowed(allowed)
    return lambda state: after if skip(state) else gate.name


def _route(state: Mapping[str, Any]) -> str:
    return str(state.get("route") or "ok")


def _tail(graph: Any, kit: NodeKit, gate: ApprovalGate) -> None:
    """tests -> [merge_gate] -> merge (-> conflict -> merge | resolve | END) -> END."""
    from langgraph.graph import END

    for step in (TESTS, gate, MERGE, CONFLICT, RESOLVE):
        add_step(graph, kit, step)
    graph.add_conditional_edges("tests", _to(gate, "merge", "merge"), [gate.name, "merge"])
    graph.add_conditional_edges("merge_gate", route_gate(gate, "merge"), [gate.phase, "merge"])
    graph.add_conditional_edges(
        "merge", lambda s: "conflict" if _route(s) == "conflict" else END, ["conflict", END]
    )
    graph.add_conditional_edges(
        "conflict",
        lambda s: {"merge": "merge", "resolve": "resolve"}.get(_route(s), END),
        ["merge", "resolve", END],
    )
    graph.add_edge("resolve", "merge")


def _build_full(kit: NodeKit) -> Any:
    from langgraph.graph import START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(FeatureState)
    merge_gate = _merge_gate("revise")
    for step in _FULL_HEAD:
        add_step(graph, kit, step)
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "analyze")
    graph.add_edge("analyze", "requirements")
    graph.add_edge("requirements", "validate_spec")
    after_spec = _to(PRD, "research", "prd")
    graph.add_conditional_edges(
        "validate_spec",
        lambda s: {"repair": "repair", "give_up": "give_up", "clarify": "clarify"}.get(
            _route(s), after_spec(s)
        ),
        ["repair", "give_up", "clarify", "prd", "research"],
    )
    graph.add_conditional_edges(
        "clarify",
        lambda s: "clarify" if _open_questions(s) else "requirements",
        ["clarify", "requirements"],
    )
    graph.add_conditional_edges("prd", route_gate(PRD, "research"), ["requirements", "research"])
    graph.add_edge("research", "validate_research")
    graph.add_conditional_edges(
        "validate_research",
        lambda s: {"repair": "repair", "give_up": "give_up"}.get(_route(s), "plan"),
        ["repair", "give_up", "plan"],
    )
    graph.add_edge("plan", "validate_plan")
    after_plan = _to(PLAN_GATE, "implement", "plan")
    graph.add_conditional_edges(
        "validate_plan",
        lambda s: {"repair": "repair", "give_up": "give_up"}.get(_route(s), after_plan(s)),
        ["repair", "give_up", "plan_gate", "implement"],
    )
    graph.add_conditional_edges(
        "plan_gate", route_gate(PLAN_GATE, "implement"), ["plan", "implement"]
    )
    graph.add_conditional_edges(
        "repair",
        lambda s: str((s.get("repair") or {}).get("validator", "validate_spec")),
        ["validate_spec", "validate_research", "validate_plan"],
    )
    graph.add_conditional_edges("give_up", _route, ["requirements", "research", "plan"])
    graph.add_edge("implement", "tests")
    graph.add_edge("revise", "tests")
    _tail(graph, kit, merge_gate)
    return graph


def _build_fast(kit: NodeKit) -> Any:
    from langgraph.graph import START, StateGraph

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(FeatureState)
    for step in (SETUP, FAST):
        add_step(graph, kit, step)
    graph.add_edge(START, "setup")
    graph.add_edge("setup", "fast")
    graph.add_edge("fast", "tests")
    _tail(graph, kit, _merge_gate("fast"))
    return graph


FULL_STEPS = (*_FULL_HEAD, TESTS, _merge_gate("revise"), MERGE, CONFLICT, RESOLVE)
FAST_STEPS = (SETUP, FAST, TESTS, _merge_gate("fast"), MERGE, CONFLICT, RESOLVE)
#: The inputs `shep feat new` records (see ``shep.feature``).
INPUTS: Mapping[str, str] = {
    "description": "what the feature is, in a sentence or more",
    "source_repo": "the user's repository",
    "base": "the branch the feature starts from and merges into",
    "base_sha": "the base's commit when the feature started",
    "branch": "the feature's branch",
    "spec_dir": "specs/NNN-slug, in the worktree",
    "allow_prd": "skip the requirements gate when set",
    "allow_plan": "skip the plan gate when set",
    "allow_merge": "skip the merge gate when set",
    "push": "push the branch when set",
    "pr": "push and open a pull request instead of merging locally when set",
}

#: The phase of each node that is not one itself (progress, `shep feat show`).
PHASE_OF: Mapping[str, str] = {
    "validate_spec": "requirements",
    "clarify": "requirements",
    "prd": "requirements",
    "validate_research": "research",
    "validate_plan": "plan",
    "plan_gate": "plan",
    "revise": "implement",
    "merge_gate": "merge",
    "conflict": "merge",
    "resolve": "merge",
}
_FAST_PHASE_OF: Mapping[str, str] = {**PHASE_OF, "revise": "fast"}

FEATURE_WORKFLOW = Workflow(
    name=FEATURE,
    description="A feature from a description to a merged commit: requirements, research, "
    "plan, tasks, tests, merge (use `shep feat new`).",
    steps=FULL_STEPS,
    build=_build_full,
    inputs=INPUTS,
    phases=("setup", "analyze", "requirements", "research", "plan", "implement", "tests", "merge"),
    phase_of=PHASE_OF,
)
FEATURE_FAST_WORKFLOW = Workflow(
    name=FEATURE_FAST,
    description="A feature implemented straight from its description, then the merge gate "
    "(`shep feat new --fast`).",
    steps=FAST_STEPS,
    build=_build_fast,
    inputs=INPUTS,
    phases=("setup", "fast", "tests", "merge"),
    phase_of=_FAST_PHASE_OF,
)
FEATURE_WORKFLOWS: Sequence[Workflow] = (FEATURE_WORKFLOW, FEATURE_FAST_WORKFLOW)
