"""SIGKILL around a pause for people: the run recovers, nothing is asked or done twice.

How each window is hit, deterministically, with no hook in shep's code:

- between the interrupt and the status change: the worker is a foreground
  ``shep run`` whose process replaces ``shep.runs.runner.suspend_run`` with a
  SIGKILL of itself. The graph's interrupt and its checkpoint writes are
  saved by the real checkpointer; the process dies exactly where
  ``suspend_run`` would record the item and ``RunSuspended``.
- between the decision and the resume, no worker started: a real
  ``shep answer`` whose process replaces ``shep.cli.inbox.resume_after_decision`` with a
  SIGKILL of itself: the decision is in the log, the worker never spawned.
- between the decision and the resume, worker killed before reading it: a
  real ``shep reject`` starts the worker; the test SIGKILLs it the moment the
  launcher's ``RunResumed`` (with its pid) is in the log, while ``shep
  reject`` may still be exiting, and checks that the worker had appended
  nothing (its imports alone take far longer than the 20 ms polling).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from events.base import Event
from events.checkpoints import WritesSaved
from events.inbox import ApprovalRejected, ApprovalRequested, QuestionAnswered, QuestionAsked
from events.runs import (
    NodeCompleted,
    RunInterrupted,
    RunResumed,
    RunSuspended,
)
from shep.home.procs import pid_alive
from tests.shep.nodes.test_gates import _start
from tests.shep.runs.conftest import agent_calls
from tests.support.cli import shep
from tests.support.event_log import (
    assert_rebuild_equals_incremental,
    decisions_of,
    of_type,
    read_events,
    run_state,
    run_stream,
    wait_for_status,
    wait_for_waiting,
    wait_until,
)

#: Runs the real CLI in a process that SIGKILLs itself instead of calling ``TARGET``.
KILLED_AT = """
import os, signal, sys, importlib
module, name = sys.argv[1].rsplit(".", 1)
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
setattr(importlib.import_module(module), name, die)
import shep.cli
shep.cli.main(sys.argv[2:])
"""


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DELAY", "0.01")


def _shep_killed_at(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", KILLED_AT, target, *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def _agent_done(agent_log: Path) -> Counter[str]:
    return Counter(c["node"] for c in agent_calls(agent_log) if c["phase"] == "done")


def _interrupt_writes(events: Sequence[Event]) -> list[WritesSaved]:
    return [
        e
        for e in events
        if isinstance(e, WritesSaved) and any(w.channel == "__interrupt__" for w in e.writes)
    ]


def _interrupt_id(saved: WritesSaved) -> str:
    """The id of the interrupt a checkpointed ``__interrupt__`` write holds."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    [write] = [w for w in saved.writes if w.channel == "__interrupt__"]
    [interrupt] = JsonPlusSerializer().loads_typed((write.value_type, write.value))
    return str(interrupt.id)


def _finish(shep_home: Path, run_id: str) -> None:
    """Approve the gate the run waits on, and wait for the run to complete."""
    [gate] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(gate, ApprovalRequested)
    shep("approve", gate.originator_id.hex, check=True)
    wait_for_status(shep_home, run_id, "completed", "failed", "interrupted")
    assert run_state(shep_home, run_id).status.value == "completed"


@pytest.mark.slow
def test_killed_between_interrupt_and_suspend(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path
) -> None:
    """The worker dies after the question's interrupt was checkpointed but before the item
    and RunSuspended were recorded: the next command marks the run interrupted, `shep
    resume` asks the question (once), draft is not re-run, and the answer given then is
    the one the run goes on with, to completion.
    """
    killed = _shep_killed_at(
        "shep.runs.runner.suspend_run", "run", "gated-review", "--repo", str(repo)
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    events = read_events(shep_home)
    [run_id] = {e.originator_id.hex for e in events if isinstance(e, NodeCompleted)}
    run = run_stream(events, run_id)
    assert run_state(shep_home, run_id).status.value == "running"
    assert len(_interrupt_writes(run)) == 1
    assert of_type(events, QuestionAsked) == []
    assert of_type(run, RunSuspended) == []
    assert [e.node for e in of_type(run, NodeCompleted)] == ["draft"]

    noticed = shep("status")
    assert noticed.returncode == 0, noticed.stderr
    assert run_state(shep_home, run_id).status.value == "interrupted"
    assert "1 interrupted run" in noticed.stderr

    resumed = shep("resume", run_id[:8])
    assert resumed.returncode == 0, resumed.stderr
    [question] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(question, QuestionAsked)
    assert question.node == "scope"
    assert question.interrupt_id == _interrupt_id(_interrupt_writes(run)[0])
    shep("answer", question.originator_id.hex, "--option", "large", check=True)
    _finish(shep_home, run_id)

    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert len(of_type(events, QuestionAsked)) == 1
    assert len(of_type(events, ApprovalRequested)) == 1
    assert Counter(e.node for e in of_type(run, NodeCompleted)) == {
        "draft": 1,
        "scope": 1,
        "check": 1,
        "approve": 1,
        "finish": 1,
    }
    assert _agent_done(agent_log) == {"draft": 1, "finish": 1}
    assert_rebuild_equals_incremental(shep_home)
    assert "Scope: Large: the whole package" in (repo / "shep-review.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("next_command", ["status", "resume"])
def test_decider_killed_before_starting_the_worker(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path, next_command: str
) -> None:
    """`shep answer` dies right after its decision is in the log, before any worker: the
    run waits on a decided item with no process; the next shep command starts the worker,
    which goes on with the recorded answer; nothing is asked twice or re-run. The next
    command may be `shep resume RUN`, what a user types for a run that did not go on:
    it succeeds (it does not call the worker it just started stuck).
    """
    run_id = _start(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    killed = _shep_killed_at(
        "shep.cli.inbox.resume_after_decision",
        "answer",
        question.originator_id.hex,
        "--option",
        "large",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    events = read_events(shep_home)
    [decision] = decisions_of(events, question.originator_id)
    assert isinstance(decision, QuestionAnswered)
    assert decision.option_id == "large"
    assert run_state(shep_home, run_id).status.value == "waiting_answer"
    assert of_type(run_stream(events, run_id), RunResumed) == []

    nudged = shep(next_command, *([run_id[:8]] if next_command == "resume" else []))
    assert nudged.returncode == 0, nudged.stderr
    _finish(shep_home, run_id)

    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert len(of_type(events, QuestionAsked)) == 1
    assert len(of_type(events, QuestionAnswered)) == 1
    assert len(of_type(run, RunResumed)) == 2  # the nudged worker, then the approval's
    assert Counter(e.node for e in of_type(run, NodeCompleted)) == {
        "draft": 1,
        "scope": 1,
        "check": 1,
        "approve": 1,
        "finish": 1,
    }
    assert _agent_done(agent_log) == {"draft": 1, "finish": 1}
    assert_rebuild_equals_incremental(shep_home)
    assert "Scope: Large: the whole package" in (repo / "shep-review.md").read_text()


@pytest.mark.slow
def test_worker_killed_before_reading_the_decision(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path
) -> None:
    """The worker a rejection started is SIGKILLed before it read anything: the next
    command marks the run interrupted, `shep resume` takes the recorded rejection (draft
    re-runs with its reason), the gate is asked again only as its next iteration, and no
    completed node runs twice.
    """
    run_id = _start(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    shep("answer", question.originator_id.hex, "--option", "small", check=True)
    [gate] = wait_for_waiting(shep_home, run_id, 1)
    resumes_before = len(of_type(run_stream(read_events(shep_home), run_id), RunResumed))

    reject = ["reject", gate.originator_id.hex, "--reason", "split the plan in two"]
    rejecting = subprocess.Popen(
        [sys.executable, "-m", "shep", *reject],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def new_worker() -> RunResumed | None:
        resumes = of_type(run_stream(read_events(shep_home), run_id), RunResumed)
        return resumes[-1] if len(resumes) > resumes_before else None

    resumed: RunResumed = wait_until(new_worker, timeout=30, what="the rejection's worker")
    os.kill(resumed.pid, signal.SIGKILL)
    _, err = rejecting.communicate(timeout=60)
    assert rejecting.returncode == 0, err
    assert f"Started worker {resumed.pid} in the background" in err
    run = run_stream(read_events(shep_home), run_id)
    assert run[-1] == resumed or all(
        type(e).__name__ == "HeartbeatRecorded" for e in run[run.index(resumed) + 1 :]
    ), "the worker got past its start before it was killed"
    assert run_state(shep_home, run_id).status.value == "running"
    wait_until(lambda: not pid_alive(resumed.pid), what="the worker to die")

    noticed = shep("status")
    assert noticed.returncode == 0, noticed.stderr
    run = run_stream(read_events(shep_home), run_id)
    assert isinstance(run[-1], RunInterrupted), run[-1]
    recovered = shep("resume", run_id[:8])
    assert recovered.returncode == 0, recovered.stderr
    [again] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(again, ApprovalRequested)
    assert again.iteration == 2
    assert again.originator_id != gate.originator_id
    _finish(shep_home, run_id)

    events = read_events(shep_home)
    run = run_stream(events, run_id)
    [decision] = decisions_of(events, gate.originator_id)
    assert isinstance(decision, ApprovalRejected)
    assert len(of_type(events, ApprovalRejected)) == 1
    assert len(of_type(events, QuestionAsked)) == 1
    assert len(of_type(events, ApprovalRequested)) == 2
    drafts = [c for c in agent_calls(agent_log) if c["node"] == "draft" and c["phase"] == "start"]
    assert len(drafts) == 2
    assert "split the plan in two" in drafts[1]["prompt"]
    assert Counter(e.node for e in of_type(run, NodeCompleted)) == {
        "draft": 2,
        "scope": 1,
        "check": 2,
        "approve": 2,
        "finish": 1,
    }
    assert _agent_done(agent_log) == {"draft": 2, "finish": 1}
    assert_rebuild_equals_incremental(shep_home)


@pytest.mark.slow
def test_resumed_worker_killed_between_gate_interrupt_and_suspend(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path
) -> None:
    """The worker an answer resumed (`--wait`, in the foreground) completes scope and check,
    then dies after the gate's interrupt was checkpointed but before the gate was recorded:
    after `shep resume` the gate is asked once, the answer is neither lost nor asked for
    again, and no node completed before the kill runs again.
    """
    run_id = _start(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    killed = _shep_killed_at(
        "shep.runs.runner.suspend_run",
        "answer",
        question.originator_id.hex,
        "--option",
        "large",
        "--wait",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert run_state(shep_home, run_id).status.value == "running"
    assert [e.node for e in of_type(run, NodeCompleted)] == ["draft", "scope", "check"]
    assert of_type(events, ApprovalRequested) == []
    assert len(_interrupt_writes(run)) == 2

    shep("status", check=True)
    assert run_state(shep_home, run_id).status.value == "interrupted"
    resumed = shep("resume", run_id[:8])
    assert resumed.returncode == 0, resumed.stderr
    [gate] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(gate, ApprovalRequested)
    assert gate.interrupt_id == _interrupt_id(_interrupt_writes(run)[-1])
    _finish(shep_home, run_id)

    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert len(of_type(events, QuestionAsked)) == 1
    assert len(of_type(events, QuestionAnswered)) == 1
    assert len(of_type(events, ApprovalRequested)) == 1
    assert Counter(e.node for e in of_type(run, NodeCompleted)) == {
        "draft": 1,
        "scope": 1,
        "check": 1,
        "approve": 1,
        "finish": 1,
    }
    assert _agent_done(agent_log) == {"draft": 1, "finish": 1}
    assert "Scope: Large: the whole package" in (repo / "shep-review.md").read_text()
    assert_rebuild_equals_incremental(shep_home)
