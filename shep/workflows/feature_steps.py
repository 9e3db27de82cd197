"""The feature workflow's steps of Python: the worktree's setup, implement (the tasks,
phase by phase), the tests, the merge and the questions and approvals around them.

The graph that wires them is ``shep.workflows.feature``; their prompts are in
``shep.workflows.feature_prompts``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from events.display import printable
from events.errors import StepFailedError
from events.features import (
    BranchPushed,
    FeatureMerged,
    MergeConflicted,
    MergePrepared,
    PullRequestOpened,
    ReviewedTreeRestored,
    TaskCompleted,
    TaskStarted,
    TestsRan,
    WorktreeCreated,
    WorktreeRemoved,
    WorktreeSetupRan,
)
from events.run_ids import RUN_ID_ENV
from events.runs import NodeCompleted, Usage
from events.words import counted
from shep.git.command import Checkout
from shep.workflows.base import (
    StepIO,
)
from shep.workflows.feature_prompts import spec_dir_of, task_prompt
from shep.workflows.test_command import detect_test_command, failure_reason

#: Bytes of a command's output kept in its event.
OUTPUT_TAIL = 4000


# -- setup ------------------------------------------------------------------------------------


def run_command(
    command: str, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int | None, str, int]:
    """Run a command line (no shell) in ``cwd``; (exit code or None on timeout, output tail, ms).

    The command runs in its own process group, stopped whole on timeout (TERM, then
    KILL: ``shep.agents.process.kill_group``, as for an agent). A leftover child that keeps
    the output pipe open cannot hold the step: its output is given up after a few seconds.
    """
    import shlex
    import subprocess

    from shep.agents.process import kill_group

    started = time.monotonic()
    try:
        argv = shlex.split(command)
    except ValueError as e:
        return 127, f"cannot run {command!r}: {e}", 0
    try:
        process = subprocess.Popen(
            argv,
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
        kill_group(process, 2.0)
        try:
            output, _ = process.communicate(timeout=5.0)
        except subprocess.TimeoutExpired:
            output = b""
        code = None
    tail = output[-OUTPUT_TAIL:].decode("utf-8", "replace")
    return code, tail, int((time.monotonic() - started) * 1000)


def _feature_env(io: StepIO) -> dict[str, str]:
    inputs = io.inputs
    return {
        RUN_ID_ENV: io.run_id,
        "SHEP_WORKTREE": str(io.repo),
        "SHEP_BRANCH": inputs["branch"],
        "SHEP_BASE": inputs["base"],
        "SHEP_REPO": inputs["source_repo"],
        "SHEP_SPEC_DIR": inputs["spec_dir"],
    }


def _worktree(io: StepIO) -> Any:
    """The worktree as shep's git reaches it: through the git directory shep made for it
    (a ``shep.git.command.Checkout``; see ``shep.git.worktree``).
    """
    from shep.git.worktree import feature_checkout

    return feature_checkout(io.inputs, io.repo, drivers=bool(io.setting("git_filters")))


def setup(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    from shep import git

    inputs = io.inputs
    git_dir = inputs.get("git_dir", "")
    if not os.path.lexists(io.repo / ".git"):
        # Made by `shep feat new`; gone since (removed by hand): make it again.
        made = git.add_worktree(
            Path(inputs["source_repo"]),
            io.repo,
            inputs["branch"],
            inputs["base_sha"],
            drivers=bool(io.setting("git_filters")),
        )
        if git_dir and not git.same_path(made, git_dir):
            raise StepFailedError(
                f"git made the worktree {io.repo} again with its git directory at {made}, "
                f"not at {git_dir} as recorded; remove the worktree (`shep feat rm`) and "
                "fork the run instead."
            )
        git_dir = str(made)
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
        git_dir=git_dir or str(_worktree(io).git_dir),
    )
    return {}


# -- implement ---------------------------------------------------------------------------------


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
    worktree = _worktree(io)
    git.restore(worktree, latest)
    for task_id in sorted(cut_off):
        task = tasks.get(task_id)
        earlier = before.get(task_id)
        if task is not None and earlier and earlier != latest and task.files:
            for refused in git.restore_paths(worktree, earlier, list(task.files)):
                io.message(f"not restored: {refused}")
    io.message(f"restored the worktree to {latest[:10]} (cut off: {', '.join(sorted(cut_off))})")


def implement(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    """Run the tasks phase by phase; each task's completion is an event, so a resumed
    implement starts at the first unfinished task, with the worktree as the last finished
    one left it.
    """
    from concurrent.futures import ThreadPoolExecutor

    from shep.workflows.feature_specs import parallel_groups, validate_plan, validate_tasks

    spec_dir = io.repo / spec_dir_of(state)
    plan, errors = validate_plan(spec_dir / "plan.yaml", inside=io.repo)
    tasks = validate_tasks(spec_dir / "tasks.yaml", plan, inside=io.repo)[0] if plan else None
    if plan is None or tasks is None:
        raise StepFailedError(f"the plan no longer validates: {'; '.join(errors)}")
    history = io.history(TaskStarted, TaskCompleted, NodeCompleted)
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
            task_prompt(state, task), writes=True, label=f"task {task.id}: {task.title}"
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
    return {"results": {"implement": f"{count} of {counted(total, 'task')} implemented this time"}}


# -- tests, merge -----------------------------------------------------------------------------


def tests(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    """Run the project's test command (never fails the run) on the agent's work, and
    measure that work for review.

    The work is snapshotted before the command runs, and the worktree put back to that
    snapshot after it: what the command leaves behind (bytecode, caches, build output,
    rewritten fixtures; ignored or not) is not the agent's work, so it is neither counted
    on the merge gate nor merged (an ignored leftover stays on disk, and ``git add -A``
    never takes it). A tests step resumed after a crash starts from the worktree as it
    finds it.
    """
    from shep import git

    inputs = io.inputs
    # What the merge gate shows and the merge commits, before any test touches it.
    worktree = _worktree(io)
    snapshot = io.snapshot("review")
    if snapshot is None:
        # What the gate approves is the worktree's files as a tree: without it, it would
        # approve (and the merge commit) HEAD's, which the agent's work is not in.
        raise StepFailedError(
            f"could not snapshot the work in {io.repo} for review (said above); "
            f"`shep resume {io.run_id[:8]}` tries again."
        )
    command = str(io.setting("test_command") or "") or detect_test_command(
        io.repo, Path(inputs["source_repo"])
    )
    tests: dict[str, Any] = {"command": command}
    if command:
        io.message(f"tests: {command}")
        timeout = float(io.setting("test_timeout"))
        code, tail, ms = run_command(command, io.repo, _feature_env(io), timeout)
        tests.update(exit_code=code, passed=code == 0, output_tail=tail[-1500:])
        if code:
            tests["reason"] = failure_reason(tail)
        io.record(
            TestsRan,
            command=command,
            exit_code=code,
            passed=code == 0,
            duration_ms=ms,
            output_tail=tail,
        )
        git.restore(worktree, snapshot)
    stat = git.diff_stat(worktree, inputs["base_sha"], snapshot)
    commits = git.diff_stat(worktree, inputs["base_sha"], f"refs/heads/{inputs['branch']}").commits
    review = {
        "files": stat.files,
        "added": stat.added,
        "removed": stat.removed,
        "commits": commits,
        "tests": tests,
        # What the merge gate approves, by content: the base and the worktree's tree.
        "tree": git.tree_of(worktree, snapshot),
    }
    return {"review": review}


def merge(state: Mapping[str, Any], io: StepIO) -> dict[str, Any]:
    """Commit the branch, then squash-merge it into the base (or push and open a PR).

    The squash commit is recorded (``MergePrepared``) before the base moves to it, so a
    merge made just before the worker died is found on the base by that commit, recorded
    and not made again; no other commit counts, whatever its message says.
    """
    from shep import git
    from shep.git import merge as git_merge
    from shep.workflows.analyze_repository import SHEP_OUTPUTS

    inputs = io.inputs
    source = Path(inputs["source_repo"])
    branch, base = inputs["branch"], inputs["base"]
    history = io.history(FeatureMerged, PullRequestOpened, WorktreeRemoved, MergePrepared)
    merged = any(isinstance(e, FeatureMerged) for e in history) or _found_merge(io, history)
    opened = any(isinstance(e, PullRequestOpened) for e in history)
    if merged or opened:
        if not any(isinstance(e, WorktreeRemoved) for e in history):
            reason = "merged" if merged else "pull request opened"
            _remove_worktree(io, delete_branch=merged, reason=reason)
        return {"route": "done"}
    title = _title(io, state)
    worktree = _worktree(io)
    approved = _approved_tree(state)
    if approved:
        _back_to_the_approved_tree(io, worktree, approved)
    git.commit_all(worktree, f"{title}\n\nshep feature run {io.run_id[:8]}", branch=branch)
    if approved and git.tree_of(worktree, f"refs/heads/{branch}") != approved:
        raise StepFailedError(
            f"the files of {io.repo} changed while shep committed them, so they are not what "
            f"the merge gate approved (tree {approved[:12]}); nothing was merged. "
            f"`shep resume {io.run_id[:8]}` merges what was approved."
        )
    if (inputs.get("pr") or inputs.get("push")) and _publish(io, title):
        return {"route": "done"}
    drivers = bool(io.setting("git_filters"))
    # shep's own report, untracked in the user's checkout, is no reason to wait, unless
    # the merge would write over it.
    changed = set(git.changed_paths(source, inputs["base_sha"], branch))
    untracked_ok = [path for path in SHEP_OUTPUTS if path not in changed]
    if git.current_branch(source) == base:
        dirty = git.dirty_files(Checkout(source, drivers=drivers), untracked_ok=untracked_ok)
        if dirty:
            return {
                "route": "conflict",
                "merge": {"dirty": dirty[:20], "conflicts": []},
            }
    stat = git.diff_stat(source, inputs["base_sha"], branch)
    body = inputs["description"] if inputs["description"] != title else ""
    message = "\n\n".join(part for part in (title, body, f"Shep-Run: {io.run_id}") if part)
    squash = git_merge.prepare_squash(
        source, base, branch, message, drivers=drivers, untracked_ok=untracked_ok
    )
    if squash.conflicts:
        io.append(MergeConflicted, into=base, files=tuple(squash.conflicts))
        return {"route": "conflict", "merge": {"conflicts": list(squash.conflicts), "dirty": []}}
    if squash.commit is not None and squash.tree is not None:
        io.append(
            MergePrepared, into=base, commit=squash.commit, tree=squash.tree, onto=squash.onto
        )
        hooks = bool(io.setting("merge_hooks"))
        git_merge.advance_base(source, squash, hooks=hooks, drivers=drivers)
        _record_merge(io, squash.commit, stat)
        io.message(f"merged into {base} as {squash.commit[:10]}")
    else:
        io.message(f"nothing to merge: {branch} has no changes against {base}")
    _remove_worktree(io, delete_branch=True, reason="merged" if squash.commit else "no changes")
    return {"route": "done", "merge": {"commit": squash.commit, "conflicts": [], "dirty": []}}


def _approved_tree(state: Mapping[str, Any]) -> str:
    """The tree the merge gate showed (and its approval names), which the merge commits;
    empty after a conflict, which the user (or the resolve step, on their word) resolves
    on the branch, and for a review recorded before shep named the tree.
    """
    if (state.get("merge") or {}).get("conflicts"):
        return ""
    return str((state.get("review") or {}).get("tree") or "")


def _back_to_the_approved_tree(io: StepIO, worktree: Checkout, approved: str) -> None:
    """Put the worktree's files back to the tree the merge gate approved when they changed
    since (a process the agent left running, say): what is merged is what was approved.
    What changed is kept in a snapshot first, and recorded (``ReviewedTreeRestored``).
    """
    from shep import git

    found = git.files_tree(worktree)
    if found == approved:
        return
    kept = io.snapshot("changed after review")
    if kept is None:  # not put back unless kept: they may be work nobody has anywhere else
        raise StepFailedError(
            f"the files of {io.repo} changed after the merge gate showed them, and could not "
            f"be kept in a snapshot (said above), so shep merged nothing. `shep resume "
            f"{io.run_id[:8]}` tries again."
        )
    git.restore(worktree, approved)
    io.append(ReviewedTreeRestored, approved=approved, found=found, kept=kept)


def _found_merge(io: StepIO, history: Sequence[Any]) -> bool:
    """Whether a squash commit this run recorded (``MergePrepared``) is on the base: the
    worker died after moving the base, before recording the merge. Then it is recorded.
    """
    from shep import git
    from shep.git import merge as git_merge

    inputs = io.inputs
    source, base = Path(inputs["source_repo"]), inputs["base"]
    if any(isinstance(e, PullRequestOpened) for e in history):
        return False
    for prepared in reversed([e for e in history if isinstance(e, MergePrepared)]):
        if prepared.into == base and git_merge.is_merged(source, prepared.commit, base):
            stat = git.diff_stat(source, inputs["base_sha"], inputs["branch"])
            _record_merge(io, prepared.commit, stat)
            return True
    return False


def _publish(io: StepIO, title: str) -> bool:
    """Push the branch, and open its pull request with ``--pr``; whether one was opened
    (the run then ends here, without a merge).
    """
    from shep import git
    from shep.git import merge as git_merge

    inputs = io.inputs
    source, branch = Path(inputs["source_repo"]), inputs["branch"]
    remote = git.has_remote(source)
    if remote is None:
        raise StepFailedError(
            f"--push/--pr need a remote, and {source} has none. Add one (`git remote add`), "
            "then `shep resume`."
        )
    git_merge.push(source, branch, remote)
    io.append(BranchPushed, remote=remote, branch=branch, commit=git.resolve_commit(source, branch))
    if not inputs.get("pr"):
        return False
    pr = git_merge.open_pull_request(source, branch, inputs["base"], title, inputs["description"])
    io.append(PullRequestOpened, url=pr.url, number=pr.number)
    _remove_worktree(io, delete_branch=False, reason="pull request opened")
    return True


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
    spec, _ = validate_spec(
        io.repo / inputs["spec_dir"] / "spec.yaml", number=number, inside=io.repo
    )
    # The agent's words (or the description) as `git log` will show them: escaped.
    return printable(spec.one_liner if spec else inputs["description"].splitlines()[0][:72])


def _remove_worktree(io: StepIO, *, delete_branch: bool, reason: str) -> None:
    """Remove the worktree, and the branch after a merge; record what git says is gone."""
    from shep import git

    source = Path(io.inputs["source_repo"])
    branch = io.inputs["branch"]
    git.remove_worktree(source, io.repo, force=True)
    # The branch deletion is part of the merge in the user's repository: their hooks
    # run there only when they asked (merge_hooks).
    user = Checkout(source, hooks=bool(io.setting("merge_hooks")))
    deleted = git.delete_branch(user, branch, force=True) if delete_branch else False
    io.append(
        WorktreeRemoved,
        path=str(io.repo),
        branch=branch,
        branch_deleted=deleted,
        removed_by="shep",
        reason=reason,
    )
