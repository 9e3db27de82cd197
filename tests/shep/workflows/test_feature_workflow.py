"""The feature workflow end to end: `shep feat new` on a real git repository, a real agent
subprocess (``fake_feature_agent.py`` as `claude`), the real store, real SIGKILLs.

Each test asserts on what a user would see: the base branch's new commit and its
files, the worktree and branch gone, the inbox, the event log, and (from the fake
agent's own log) which agent calls ran, when, and with what prompt. The longer
scenarios (crashes, conflicts, bounds, a second base) carry the ``slow`` marker:
CI runs them in its slow stage, and the default suite keeps one of each kind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from events.base import Event
from events.features import (
    FeatureMerged,
    MergeConflicted,
    TaskCompleted,
    TaskStarted,
    TestsRan,
    WorktreeCreated,
    WorktreeRemoved,
)
from events.inbox import ApprovalRequested, QuestionAnswered, QuestionAsked
from events.runs import (
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunStarted,
)
from shep.home.procs import pid_alive
from tests.shep.workflows.conftest import FeatureAgent, git, make_repo
from tests.support.cli import shep
from tests.support.event_log import (
    of_type,
    read_events,
    run_stream,
    wait_until,
)

DESCRIPTION = "Add a greeting command"
SLUG = "add-a-greeting-command"
SPEC_DIR = f"specs/001-{SLUG}"
SPEC_FILES = [f"{SPEC_DIR}/{name}.yaml" for name in ("plan", "research", "spec", "tasks")]
TASK_FILES = ["src/feature_one.py", "src/feature_two.py"]
REJECTED = "A reviewer rejected the previous result of this step. Their reason:"


# -- helpers -----------------------------------------------------------------------------------


def feat_new(
    repo: Path, *args: str, description: str = DESCRIPTION
) -> subprocess.CompletedProcess[str]:
    """``shep feat new DESCRIPTION --repo REPO ARGS`` (returns once the run waits or ends)."""
    return shep("feat", "new", description, "--repo", str(repo), *args, timeout=120)


def only_run(home: Path) -> str:
    """The id (hex) of the one run in the store."""
    [created] = of_type(read_events(home), RunCreated)
    return created.originator_id.hex


def run_events(home: Path, run_id: str) -> list[Event]:
    return run_stream(read_events(home), run_id)


def worktree_of(home: Path, run_id: str) -> Path:
    [created] = of_type(run_events(home, run_id), WorktreeCreated)
    return Path(created.path)


def branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def tree_files(repo: Path, commit: str) -> list[str]:
    return sorted(git(repo, "ls-tree", "-r", "--name-only", commit).split())


def show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def inbox() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(shep("inbox", "--json", check=True).stdout)
    return items


def decide(*args: str) -> subprocess.CompletedProcess[str]:
    """``shep answer|approve|reject ... --wait``: the run goes on in this process."""
    result = shep(*args, "--wait", timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def assert_merged(repo: Path, home: Path, run_id: str, *, base: str = "main", old_tip: str) -> str:
    """The run completed by squash-merging into ``base`` (one new commit on the old tip),
    and removed its worktree and branch; returns the new commit."""
    events = run_events(home, run_id)
    assert of_type(events, RunCompleted), [type(e).__name__ for e in events[-5:]]
    [merged] = of_type(events, FeatureMerged)
    tip = git(repo, "rev-parse", f"refs/heads/{base}")
    assert merged.commit == tip
    assert merged.into == base
    assert git(repo, "rev-list", "--parents", "-n", "1", tip).split() == [tip, old_tip]
    [created] = of_type(events, WorktreeCreated)
    [removed] = of_type(events, WorktreeRemoved)
    assert removed.branch_deleted
    assert removed.removed_by == "shep"
    assert not Path(created.path).exists()
    assert created.branch not in branches(repo)
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    return tip


def snapshot_refs(repo: Path, run_id: str) -> dict[str, str]:
    """sha -> ref of every ``refs/shep/runs/RUN/N`` in ``repo``."""
    listed = git(
        repo, "for-each-ref", "--format=%(objectname) %(refname)", f"refs/shep/runs/{run_id}/"
    )
    return dict(line.split() for line in listed.splitlines())


def recorded_snapshots(home: Path, run_id: str) -> dict[str, str]:
    """label -> sha of every snapshot the run's events recorded (nodes and tasks; the Nth
    completion of a node after its first is labelled ``node#N``)."""
    events = run_events(home, run_id)
    found: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for e in of_type(events, NodeCompleted):
        seen[e.node] += 1
        if e.snapshot:
            found[e.node if seen[e.node] == 1 else f"{e.node}#{seen[e.node]}"] = e.snapshot
    for task in of_type(events, TaskCompleted):
        if task.snapshot:
            found[f"task {task.task}"] = task.snapshot
    return found


def assert_snapshots_are_refs(repo: Path, home: Path, run_id: str) -> dict[str, str]:
    """Every snapshot the log recorded is still the commit of a ref refs/shep/runs/RUN/N
    (none was overwritten by a later snapshot, even one made by another worker)."""
    refs = snapshot_refs(repo, run_id)
    recorded = recorded_snapshots(home, run_id)
    assert recorded, "no snapshot recorded"
    for label, sha in recorded.items():
        assert sha in refs, (
            f"{label}'s snapshot {sha[:10]} is no ref under refs/shep/runs/{run_id}/"
        )
        assert refs[sha].rsplit("/", 1)[1].isdigit()
    return recorded


# -- a. the happy path ------------------------------------------------------------------------


@pytest.mark.slow
def test_allow_all_runs_the_whole_graph_to_a_merged_commit(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """--allow-all: every step runs once, in order, in the worktree; main gets one squash
    commit with the spec files and the tasks' files; the worktree and branch are gone;
    each writing node's snapshot is a ref under refs/shep/runs/RUN/ whose tree holds the
    files exactly as the agent had written them by then.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--allow-all")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    worktree = worktree_of(shep_home, run_id)
    assert worktree.parent.parent == shep_home / "worktrees"
    assert agent.called() == [
        "analyze",
        "requirements",
        "research",
        "plan",
        "implement:t1",
        "implement:t2",
    ]
    assert {c["cwd"] for c in agent.calls()} == {str(worktree)}
    assert all(c["end"]["exit"] == 0 for c in agent.calls())

    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert tree_files(repo, tip) == sorted(["README.md", "src/app.py", *SPEC_FILES, *TASK_FILES])
    assert show(repo, tip, "src/feature_one.py") == "# written by task t1\n"
    assert show(repo, tip, "src/feature_two.py") == "# written by task t2\n"
    spec = yaml.safe_load(show(repo, tip, f"{SPEC_DIR}/spec.yaml"))
    assert (spec["number"], spec["branch"]) == (1, f"shep/{SLUG}")
    assert git(repo, "log", "-1", "--format=%s", tip) == f"Add {DESCRIPTION}"
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "src" / "feature_one.py").read_text() == "# written by task t1\n"

    events = run_events(shep_home, run_id)
    assert [(e.task, e.attempt) for e in of_type(events, TaskStarted)] == [("t1", 1), ("t2", 1)]
    [tests] = of_type(events, TestsRan)
    assert (tests.command, tests.passed) == ("git status --short", True)
    assert of_type(events, ApprovalRequested) == []

    # Snapshots: every one recorded is a ref of this run, and holds what was written by then.
    at = assert_snapshots_are_refs(repo, shep_home, run_id)
    assert set(at) >= {"requirements", "research", "plan", "implement", "task t1", "task t2"}
    written = {c["key"]: c["end"]["written"] for c in agent.calls()}
    assert (
        show(repo, at["requirements"], f"{SPEC_DIR}/spec.yaml")
        == (written["requirements"][f"{SPEC_DIR}/spec.yaml"])
    )
    assert f"{SPEC_DIR}/research.yaml" not in tree_files(repo, at["requirements"])
    for name in ("plan.yaml", "tasks.yaml"):
        assert show(repo, at["plan"], f"{SPEC_DIR}/{name}") == written["plan"][f"{SPEC_DIR}/{name}"]
    assert "src/feature_one.py" not in tree_files(repo, at["plan"])
    assert "src/feature_one.py" in tree_files(repo, at["task t1"])
    assert "src/feature_two.py" not in tree_files(repo, at["task t1"])
    assert set(TASK_FILES) <= set(tree_files(repo, at["implement"]))


# -- b. a requirements question -----------------------------------------------------------------


QUESTIONS = [
    {
        "question": "Where should greetings be stored?",
        "options": [
            {"label": "SQLite", "description": "one file", "recommended": True},
            {"label": "Flat files"},
        ],
    },
    {
        "question": "Which languages first?",
        "options": [{"label": "English", "recommended": True}, {"label": "French"}],
    },
]


@pytest.mark.slow
def test_open_questions_reach_the_inbox_and_answers_reach_requirements(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """Two open questions become two inbox questions, one after the other, with the spec's
    options; the answers (an option and free text) are in the next requirements prompt,
    which then asks nothing more, and the run goes on to the merge.
    """
    agent.script(questions=QUESTIONS)
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--allow-all")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)

    [first] = inbox()
    assert (first["kind"], first["run_id"], first["node"]) == ("question", run_id, "clarify")
    assert first["prompt"] == "Where should greetings be stored?"
    assert [o["label"] for o in first["options"]] == ["SQLite", "Flat files"]
    assert [o["recommended"] for o in first["options"]] == [True, False]
    flat = first["options"][1]["id"]
    decide("answer", first["item_id"][:8], "--option", flat)

    [second] = inbox()
    assert second["prompt"] == "Which languages first?"
    decide("answer", second["item_id"][:8], "Both English and French")

    assert inbox() == []
    prompts = agent.prompts("requirements")
    assert len(prompts) == 2
    assert "Answers to your open questions:" not in prompts[0]
    answers = prompts[1].split("Answers to your open questions:\n", 1)[1].splitlines()
    assert answers[0].startswith("- Where should greetings be stored?: ")
    assert "Flat files" in answers[0]
    assert answers[1] == "- Which languages first?: Both English and French"
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert yaml.safe_load(show(repo, tip, f"{SPEC_DIR}/spec.yaml"))["open_questions"] == []
    events = read_events(shep_home)
    assert [q.question for q in of_type(events, QuestionAsked)] == [
        q["question"] for q in QUESTIONS
    ]
    assert len(of_type(events, QuestionAnswered)) == 2


def _question(text: str) -> dict[str, Any]:
    return {
        "question": text,
        "options": [{"label": "Yes", "recommended": True}, {"label": "No"}],
    }


@pytest.mark.slow
def test_requirements_iterations_bounds_the_rounds_of_questions_asked(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """requirements_iterations 1 and an agent that asks something new every round: the
    first round's question reaches the inbox; once answered, the next round's open
    question fails the run with a message naming the setting.
    """
    shep("settings", "set", "requirements_iterations", "1", check=True)
    agent.script(questions_rounds=[[_question("Round one?")], [_question("Round two?")]])
    result = feat_new(repo, "--allow-all")
    run_id = only_run(shep_home)
    assert [q.question for q in of_type(read_events(shep_home), QuestionAsked)] == ["Round one?"], (
        result.stderr
    )
    [item] = inbox()
    answered = shep("answer", item["item_id"][:8], "--option", item["options"][0]["id"], "--wait")
    assert answered.returncode != 0
    [failed] = of_type(run_events(shep_home, run_id), RunFailed)
    assert "requirements_iterations" in failed.message
    assert len(agent.prompts("requirements")) == 2


# -- c. rejection at a gate --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gate", "phase", "allow"),
    [
        ("prd", "requirements", ("--allow-plan", "--allow-merge")),
        ("plan_gate", "plan", ("--allow-prd", "--allow-merge")),
    ],
)
@pytest.mark.slow
def test_a_rejected_gate_reruns_its_phase_with_the_reason(
    repo: Path,
    agent: FeatureAgent,
    shep_home: Path,
    gate: str,
    phase: str,
    allow: tuple[str, ...],
) -> None:
    """Rejecting the prd (plan) gate re-runs requirements (plan) with the reason in its
    prompt, then asks the gate again; approving it goes on to the merge.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, *allow)
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [item] = inbox()
    assert (item["kind"], item["node"], item["phase"]) == ("approval", gate, phase)
    assert f"{SPEC_DIR}/" in json.dumps(item["artifacts"])

    reason = "cover the error cases: unknown user, empty name"
    decide("reject", run_id[:8], "--reason", reason)
    [again] = inbox()
    assert (again["node"], again["iteration"]) == (gate, 2)
    prompts = agent.prompts(phase)
    assert len(prompts) == 2
    assert reason not in prompts[0]
    assert f"Their reason:\n{reason}" in prompts[1]
    assert prompts[1].startswith(f"[shep feature: {phase}]")

    decide("approve", run_id[:8])
    assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    at = assert_snapshots_are_refs(repo, shep_home, run_id)
    assert f"{phase}#2" in at
    later = {"prd": ["research", "plan"], "plan_gate": []}[gate]
    assert [k for k in agent.called() if k in later] == later


@pytest.mark.slow
def test_a_rejected_merge_gate_revises_the_code_with_the_reason(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """Rejecting the merge gate runs `revise` (not the tasks again) with the reviewer's
    reason, runs the tests again and asks the gate again; approved, the revision is merged.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--allow-prd", "--allow-plan")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [gate] = inbox()
    assert (gate["node"], gate["phase"]) == ("merge_gate", "revise")
    reason = "log each greeting at debug level"
    decide("reject", gate["item_id"][:8], "--reason", reason)
    [again] = inbox()
    assert (again["node"], again["iteration"]) == ("merge_gate", 2)
    [revise] = agent.prompts("revise")
    assert revise.startswith("[shep feature: revise]\n")
    assert f"{REJECTED}\n{reason}" in revise
    assert agent.called()[-1] == "revise"
    assert agent.called().count("implement:t1") == 1
    assert len(of_type(run_events(shep_home, run_id), TestsRan)) == 2
    decide("approve", again["item_id"][:8])
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert show(repo, tip, "REVISION.md") == f"{reason}\n"
    assert "revise" in assert_snapshots_are_refs(repo, shep_home, run_id)


# -- d. repairs --------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_invalid_plan_is_repaired_and_the_run_goes_on(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """plan.yaml invalid once: repair (given the file and the validation errors) fixes it,
    validate_plan passes, and the run implements and merges the repaired plan.
    """
    agent.script(invalid={"plan.yaml": 1})
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--allow-all")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    assert agent.called() == [
        "analyze",
        "requirements",
        "research",
        "plan",
        "repair:plan.yaml",
        "implement:t1",
        "implement:t2",
    ]
    [repair] = agent.prompts("repair:plan.yaml")
    assert repair.startswith(f"[shep feature: repair file={SPEC_DIR}/plan.yaml]\n")
    assert "Validation errors:\n- phases: missing required field\n" in repair
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert [
        p["id"] for p in yaml.safe_load(show(repo, tip, f"{SPEC_DIR}/plan.yaml"))["phases"]
    ] == ["p1"]
    checks = [e.node for e in of_type(run_events(shep_home, run_id), NodeCompleted)]
    assert checks.count("validate_plan") == 2


def _give_up_on_the_plan(repo: Path, agent: FeatureAgent, home: Path) -> str:
    """A feature whose plan.yaml stays invalid through its 3 repairs; the failed run's id."""
    agent.script(invalid={"plan.yaml": 4})
    result = feat_new(repo, "--allow-all")
    assert result.returncode != 0
    assert "phases: missing required field" in result.stderr
    return only_run(home)


@pytest.mark.slow
def test_an_unrepairable_plan_fails_the_run_with_the_validation_errors(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """plan.yaml invalid 4 times: plan, then 3 repairs, then the run fails with the
    validation errors and says `shep resume` runs plan again; nothing is merged and the
    worktree stays for the next attempt.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    run_id = _give_up_on_the_plan(repo, agent, shep_home)
    events = run_events(shep_home, run_id)
    [failed] = of_type(events, RunFailed)
    assert [e.node for e in of_type(events, NodeFailed)] == ["give_up"]
    assert "still invalid after 3 repairs" in failed.message
    assert "phases: missing required field" in failed.message
    assert "`shep resume` runs the plan step again" in failed.message
    assert agent.called()[3:] == ["plan", *["repair:plan.yaml"] * 3]
    assert git(repo, "rev-parse", "main") == old_tip
    assert worktree_of(shep_home, run_id).is_dir()
    status = json.loads(shep("status", run_id, "--json", check=True).stdout)
    assert status["status"] == "failed"


@pytest.mark.slow
def test_resume_after_giving_up_reruns_the_plan_step_not_a_repair(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """After the run gave up on plan.yaml, `shep resume` runs the plan step again (not a
    4th repair); its valid plan is implemented and merged.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    run_id = _give_up_on_the_plan(repo, agent, shep_home)
    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert agent.called()[7:] == ["plan", "implement:t1", "implement:t2"]
    assert_merged(repo, shep_home, run_id, old_tip=old_tip)


def test_an_agent_that_exits_non_zero_fails_the_run_with_its_message(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """research's agent call fails (an error result, exit 1): the run fails with the
    agent's own message, on stderr and in the log; nothing after research ran; nothing is
    merged; the worktree stays.
    """
    agent.script(calls={"research": [{"exit": 1}]})
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--allow-all")
    assert result.returncode != 0
    assert "fake agent failed on research as scripted" in result.stderr
    assert "Traceback" not in result.stderr
    run_id = only_run(shep_home)
    [failed] = of_type(run_events(shep_home, run_id), RunFailed)
    assert "fake agent failed on research as scripted" in failed.message
    assert agent.called() == ["analyze", "requirements", "research"]
    assert git(repo, "rev-parse", "main") == old_tip
    assert worktree_of(shep_home, run_id).is_dir()


# -- e. SIGKILL mid-implement --------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_during_the_second_task_resumes_without_redoing_finished_tasks(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """The worker is SIGKILLed while the agent is on task t2 (having half-written its file).
    `shep resume` restores the worktree to t1's snapshot, runs t2 again (not t1), then t3;
    the merged tree holds each task's file once and nothing of the cut-off attempt.
    """
    tasks = [{"id": f"t{n}", "phase": "p1", "files": [f"src/step_{n}.py"]} for n in (1, 2, 3)]
    agent.script(tasks=tasks, calls={"implement:t2": [{"hang": True, "hang_seconds": 60}]})
    old_tip = git(repo, "rev-parse", "HEAD")
    started = feat_new(repo, "--allow-all", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert run_id == only_run(shep_home)

    wait_until(lambda: any(r["event"] == "hang" for r in agent.records()), what="t2 to be cut off")
    worker = json.loads(shep("status", run_id, "--json", check=True).stdout)["pid"]
    [started_event] = of_type(run_events(shep_home, run_id), RunStarted)
    assert worker == started_event.pid
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: not pid_alive(worker), timeout=10, what="the worker to die")
    agent.kill_leftovers()  # the agent it had started would otherwise write on later

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert agent.called() == [
        "analyze",
        "requirements",
        "research",
        "plan",
        "implement:t1",
        "implement:t2",
        "implement:t2",
        "implement:t3",
    ]
    events = run_events(shep_home, run_id)
    assert [(e.task, e.attempt) for e in of_type(events, TaskStarted)] == [
        ("t1", 1),
        ("t2", 1),
        ("t2", 2),
        ("t3", 1),
    ]
    assert [e.task for e in of_type(events, TaskCompleted)] == ["t1", "t2", "t3"]
    assert [e.attempt for e in of_type(events, NodeStarted, node="implement")] == [1, 2]
    assert [e.attempt for e in of_type(events, NodeStarted, node="plan")] == [1]
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    for n in (1, 2, 3):
        assert show(repo, tip, f"src/step_{n}.py") == f"# written by task t{n}\n"
    at = assert_snapshots_are_refs(repo, shep_home, run_id)
    assert "src/step_3.py" not in tree_files(repo, at["task t2"])
    assert show(repo, at["task t2"], "src/step_2.py") == "# written by task t2\n"


@pytest.mark.slow
def test_the_cut_off_agent_cannot_write_into_the_resumed_feature(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """SIGKILL the worker while t2's agent call runs, and leave that agent alone (as a
    crash does): `shep resume` must stop it, so nothing it writes after waking up reaches
    the worktree, the merge gate's review or the merged commit.
    """
    tasks = [{"id": f"t{n}", "phase": "p1", "files": [f"src/step_{n}.py"]} for n in (1, 2, 3)]
    wake = tmp_path / "wake-the-cut-off-agent"
    agent.script(
        tasks=tasks,
        calls={"implement:t2": [{"hang": True, "hang_seconds": 60, "until": str(wake)}]},
    )
    old_tip = git(repo, "rev-parse", "HEAD")
    started = feat_new(repo, "--allow-prd", "--allow-plan", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_until(lambda: any(r["event"] == "hang" for r in agent.records()), what="t2 to be cut off")
    [cut_off] = [c for c in agent.calls() if c["key"] == "implement:t2"]
    [owner] = of_type(run_events(shep_home, run_id), RunStarted)
    os.kill(owner.pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(owner.pid), timeout=10, what="the worker to die")

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    left_alive = pid_alive(cut_off["pid"])
    wake.touch()
    wait_until(lambda: not pid_alive(cut_off["pid"]), timeout=30, what="the cut-off agent")
    [gate] = inbox()
    decide("approve", gate["item_id"][:8])
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert show(repo, tip, "src/step_2.py") == "# written by task t2\n"
    assert not left_alive, "the cut-off agent was still running after `shep resume`"


@pytest.mark.slow
def test_sigkill_in_a_parallel_phase_reruns_the_cut_off_task_from_clean_files(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """A parallel phase: t1 finishes while t2 (another file) has half-written its file and
    hangs; SIGKILL the worker, resume: t1 is not run again, t2 is, and the merged t2 file
    holds t2's work once, nothing of the cut-off attempt.
    """
    agent.script(
        phases=[{"id": "p1", "name": "Side by side", "parallel": True}],
        tasks=[
            {"id": "t1", "phase": "p1", "files": ["src/one.py"]},
            {"id": "t2", "phase": "p1", "files": ["src/two.py"]},
        ],
        after_hang_of={"implement:t1": "implement:t2"},
        calls={"implement:t2": [{"hang": True, "hang_seconds": 60}]},
    )
    old_tip = git(repo, "rev-parse", "HEAD")
    started = feat_new(repo, "--allow-all", "--background")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_until(
        lambda: of_type(run_events(shep_home, run_id), TaskCompleted, task="t1"),
        what="t1 to complete while t2 hangs",
    )
    assert any(r["event"] == "hang" for r in agent.records())
    [owner] = of_type(run_events(shep_home, run_id), RunStarted)
    os.kill(owner.pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(owner.pid), timeout=10, what="the worker to die")
    agent.kill_leftovers()

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    implement = [k for k in agent.called() if k.startswith("implement")]
    assert sorted(implement[:2]) == ["implement:t1", "implement:t2"]
    assert implement[2:] == ["implement:t2"]
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert show(repo, tip, "src/one.py") == "# written by task t1\n"
    assert show(repo, tip, "src/two.py") == "# written by task t2\n"


# -- f. parallel tasks -------------------------------------------------------------------------


@pytest.mark.slow
def test_parallel_tasks_with_disjoint_files_overlap_and_sharing_tasks_take_turns(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """In a parallel phase, t1..t3 (disjoint files) run at the same time; t4 and t5 (the
    same file) run one after the other, in file order; phases run in plan order; the
    merged shared file has both tasks' lines in order.
    """
    agent.script(
        phases=[
            {"id": "p1", "name": "Side by side", "parallel": True},
            {"id": "p2", "name": "Shared file", "parallel": True},
        ],
        tasks=[
            {"id": "t1", "phase": "p1", "files": ["src/a.py"]},
            {"id": "t2", "phase": "p1", "files": ["src/b.py"]},
            {"id": "t3", "phase": "p1", "files": ["src/c.py"]},
            {"id": "t4", "phase": "p2", "files": ["src/shared.py", "src/d.py"]},
            {"id": "t5", "phase": "p2", "files": ["src/shared.py"]},
        ],
        sleep={f"implement:t{n}": 1.0 for n in range(1, 6)},
    )
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--allow-all")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    calls = {c["key"]: c for c in agent.calls() if c["step"] == "implement"}
    assert sorted(calls) == [f"implement:t{n}" for n in range(1, 6)]
    span = {k[len("implement:") :]: (c["time"], c["end"]["time"]) for k, c in calls.items()}
    side_by_side = [span[t] for t in ("t1", "t2", "t3")]
    assert max(start for start, _ in side_by_side) < min(end for _, end in side_by_side)
    assert span["t4"][0] >= max(end for _, end in side_by_side)
    assert span["t5"][0] >= span["t4"][1]
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert show(repo, tip, "src/shared.py") == "# written by task t4\n# written by task t5\n"
    for name, task in (("a", "t1"), ("b", "t2"), ("c", "t3"), ("d", "t4")):
        assert show(repo, tip, f"src/{name}.py") == f"# written by task {task}\n"


# -- g. merge conflicts ------------------------------------------------------------------------


def _wait_at_merge_gate_then_conflict(repo: Path, agent: FeatureAgent, shep_home: Path) -> str:
    """Start a feature whose task changes src/app.py; while it waits at the merge gate,
    commit a conflicting change to src/app.py on main; approve; return the run id once
    it asks the conflict question."""
    agent.script(tasks=[{"id": "t1", "phase": "p1", "files": ["src/app.py"]}])
    result = feat_new(repo, "--allow-prd", "--allow-plan")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [gate] = inbox()
    assert gate["node"] == "merge_gate"
    assert "tests: `git status --short` passed" in gate["prompt"]
    with (repo / "src" / "app.py").open("a") as f:
        f.write("print('the user was here')\n")
    git(repo, "commit", "-q", "-am", "user change")
    decide("approve", gate["item_id"][:8])
    return run_id


@pytest.mark.slow
def test_a_merge_conflict_asks_and_keep_leaves_the_branch_and_the_users_checkout(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """Approving the merge after main changed the same lines: nothing is merged, the
    user's checkout (HEAD, files, index) is untouched, a `conflict` question lists the
    file; answering `keep` ends the run with the branch and the worktree kept.
    """
    run_id = _wait_at_merge_gate_then_conflict(repo, agent, shep_home)
    user_tip = git(repo, "rev-parse", "HEAD")
    [question] = inbox()
    assert (question["kind"], question["node"]) == ("question", "conflict")
    assert "conflicts in: src/app.py" in question["prompt"]
    assert [o["id"] for o in question["options"]] == ["retry", "resolve", "keep"]
    [conflicted] = of_type(run_events(shep_home, run_id), MergeConflicted)
    assert (conflicted.into, conflicted.files) == ("main", ("src/app.py",))
    assert git(repo, "rev-parse", "HEAD") == user_tip
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "src" / "app.py").read_text() == "print('hello')\nprint('the user was here')\n"
    assert not (repo / ".git" / "MERGE_HEAD").exists()

    decide("answer", question["item_id"][:8], "--option", "keep")
    events = run_events(shep_home, run_id)
    assert of_type(events, RunCompleted)
    assert of_type(events, FeatureMerged) == []
    assert of_type(events, WorktreeRemoved) == []
    assert git(repo, "rev-parse", "main") == user_tip
    worktree = worktree_of(shep_home, run_id)
    assert worktree.is_dir()
    assert f"shep/{SLUG}" in branches(repo)
    assert (worktree / "src" / "app.py").read_text() == "print('hello')\n# written by task t1\n"
    assert inbox() == []


@pytest.mark.slow
def test_a_merge_conflict_resolved_by_the_agent_merges_both_sides(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """Answering `resolve`: the agent merges main into the branch in the worktree and
    resolves it; the merge runs again and main gets both sides' lines in one squash commit.
    """
    run_id = _wait_at_merge_gate_then_conflict(repo, agent, shep_home)
    user_tip = git(repo, "rev-parse", "HEAD")
    [question] = inbox()
    decide("answer", question["item_id"][:8], "--option", "resolve")
    [resolve] = agent.prompts("resolve")
    assert "conflicts in: src/app.py" in resolve
    tip = assert_merged(repo, shep_home, run_id, old_tip=user_tip)
    app = show(repo, tip, "src/app.py")
    assert "print('the user was here')\n" in app
    assert "# written by task t1\n" in app
    assert "<<<<<<<" not in app
    assert (repo / "src" / "app.py").read_text() == app


@pytest.mark.slow
def test_uncommitted_changes_in_the_users_checkout_ask_and_retry_merges_after_commit(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """The user edits README.md (uncommitted) on main while the feature waits at the merge
    gate; approving it does not merge over the edit: a `conflict` question names the file
    and the edit stays as it was. The user commits it and answers `retry`: the squash
    commit lands on top of the user's commit.
    """
    result = feat_new(repo, "--allow-prd", "--allow-plan")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [gate] = inbox()
    (repo / "README.md").write_text("# app\n\nwork in progress\n")
    decide("approve", gate["item_id"][:8])
    [question] = inbox()
    assert question["node"] == "conflict"
    assert "has uncommitted changes on main (README.md)" in question["prompt"]
    assert (repo / "README.md").read_text() == "# app\n\nwork in progress\n"
    assert git(repo, "status", "--porcelain") == "M README.md"
    assert of_type(run_events(shep_home, run_id), FeatureMerged) == []

    git(repo, "commit", "-q", "-am", "user README")
    user_tip = git(repo, "rev-parse", "HEAD")
    decide("answer", question["item_id"][:8], "--option", "retry")
    tip = assert_merged(repo, shep_home, run_id, old_tip=user_tip)
    assert show(repo, tip, "README.md") == "# app\n\nwork in progress\n"
    assert set(TASK_FILES) <= set(tree_files(repo, tip))
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.slow
def test_sigkill_right_after_the_base_moved_still_records_the_merge(
    repo: Path, agent: FeatureAgent, shep_home: Path, tmp_path: Path
) -> None:
    """The user's post-merge hook (run: merge_hooks is on) SIGKILLs the worker the moment
    `git merge --ff-only` moved main (before shep recorded anything): `shep resume` finds
    the squash commit it recorded as prepared already there, makes no second one, and
    the log still says the feature was merged, with that commit.
    """
    shep("settings", "set", "merge_hooks", "on", check=True)
    marker = tmp_path / "killed"
    hook = repo / ".git" / "hooks" / "post-merge"
    hook.write_text(
        "#!/bin/sh\n"
        f'[ -e "{marker}" ] && exit 0\n'
        "worker=$(awk '{print $4}' /proc/$PPID/stat)\n"
        f'echo "$worker" > "{marker}"\n'
        'kill -9 "$worker"\n'
    )
    hook.chmod(0o755)
    old_tip = git(repo, "rev-parse", "HEAD")
    killed = feat_new(repo, "--allow-all")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_id = only_run(shep_home)
    squash = git(repo, "rev-parse", "main")
    assert squash != old_tip
    assert of_type(run_events(shep_home, run_id), FeatureMerged) == []

    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert git(repo, "rev-parse", "main") == squash, "a second squash commit"
    events = run_events(shep_home, run_id)
    assert of_type(events, RunCompleted)
    [removed] = of_type(events, WorktreeRemoved)
    assert removed.reason == "merged"
    assert [e.commit for e in of_type(events, FeatureMerged)] == [squash]
    assert assert_merged(repo, shep_home, run_id, old_tip=old_tip) == squash


# -- h. fast, --base, refusals ------------------------------------------------------------------


@pytest.mark.slow
def test_fast_goes_straight_to_the_code_and_merges(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """--fast: one `fast` agent call writes the code, the tests run, the merge gate waits;
    approved, main gets the code and no spec files.
    """
    old_tip = git(repo, "rev-parse", "HEAD")
    result = feat_new(repo, "--fast")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [created] = of_type(read_events(shep_home), RunCreated)
    assert created.workflow == "feature-fast"
    [gate] = inbox()
    assert (gate["node"], gate["phase"]) == ("merge_gate", "fast")
    decide("approve", gate["item_id"][:8])
    assert agent.called() == ["fast"]
    [prompt] = agent.prompts("fast")
    assert prompt.startswith("[shep feature: fast]\n")
    assert f"Feature: {DESCRIPTION}\n" in prompt
    tip = assert_merged(repo, shep_home, run_id, old_tip=old_tip)
    assert tree_files(repo, tip) == ["README.md", "src/app.py", "src/fast.py"]
    assert show(repo, tip, "src/fast.py") == "FAST = True\n"


@pytest.mark.slow
def test_base_names_another_branch_to_start_from_and_merge_into(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """--base develop while main is checked out: the worktree starts from develop's tip, the
    squash commit lands on develop, and main and the user's checkout are untouched.
    """
    git(repo, "checkout", "-q", "-b", "develop")
    (repo / "DEVELOP.md").write_text("only on develop\n")
    git(repo, "add", "DEVELOP.md")
    git(repo, "commit", "-q", "-m", "develop work")
    develop = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    main = git(repo, "rev-parse", "HEAD")

    result = feat_new(repo, "--allow-all", "--base", "develop")
    assert result.returncode == 0, result.stderr
    run_id = only_run(shep_home)
    [created] = of_type(run_events(shep_home, run_id), WorktreeCreated)
    assert (created.base, created.base_sha) == ("develop", develop)
    tip = assert_merged(repo, shep_home, run_id, base="develop", old_tip=develop)
    assert "DEVELOP.md" in tree_files(repo, tip)
    assert set(TASK_FILES) <= set(tree_files(repo, tip))
    assert git(repo, "rev-parse", "main") == main
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / "DEVELOP.md").exists()


def _not_a_repo(tmp_path: Path) -> tuple[Path, str]:
    plain = tmp_path / "plain"
    plain.mkdir()
    return plain, "not"


def _bare(tmp_path: Path) -> tuple[Path, str]:
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    return bare, "bare"


def _dirty(tmp_path: Path) -> tuple[Path, str]:
    repo = make_repo(tmp_path / "dirty")
    (repo / "src" / "app.py").write_text("print('edited')\n")
    return repo, "uncommitted changes"


def _no_such_base(tmp_path: Path) -> tuple[Path, str]:
    return make_repo(tmp_path / "nobase"), "no branch 'nope'"


@pytest.mark.parametrize(
    ("make", "extra"),
    [(_not_a_repo, ()), (_bare, ()), (_dirty, ()), (_no_such_base, ("--base", "nope"))],
    ids=["not-a-repo", "bare", "dirty-base", "unknown-base"],
)
def test_feat_new_refusals_are_one_line_and_make_nothing(
    tmp_path: Path,
    agent: FeatureAgent,
    shep_home: Path,
    make: Any,
    extra: tuple[str, ...],
) -> None:
    """Not a git repository, a bare one, uncommitted changes on the base, an unknown
    --base: one line on stderr saying so, exit code non-zero, no run, no worktree, no
    branch, no agent call.
    """
    target, words = make(tmp_path)
    before = branches(target) if (target / ".git").is_dir() else None
    result = feat_new(target, "--allow-all", *extra)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("shep: "), lines[0]
    assert words in lines[0].lower(), lines[0]
    assert "Traceback" not in result.stderr
    assert of_type(read_events(shep_home), RunCreated) == []
    worktrees = shep_home / "worktrees"
    assert not worktrees.exists() or not any(worktrees.rglob("*"))
    assert agent.calls() == []
    if before is not None:
        assert branches(target) == before
