"""A rejected gate sends its phase back to the agent with the reason, as often as it takes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from events.inbox import ApprovalGranted, ApprovalRejected, ApprovalRequested, QuestionAsked
from events.runs import NodeCompleted, NodeStarted, RunCompleted
from tests.shep.nodes.test_gates import _start
from tests.shep.runs.conftest import agent_calls
from tests.support.cli import shep
from tests.support.event_log import (
    assert_rebuild_equals_incremental,
    of_type,
    read_events,
    run_stream,
    wait_for_status,
    wait_for_waiting,
)

REASONS = (
    "reason-one: the plan skips the tests",
    "reason-two: name the modules",
    "reason-three: too long",
    "reason-four: missing rollback",
    "reason-five: wrong order",
)


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DELAY", "0.01")


def _draft_prompts(agent_log: Path) -> list[str]:
    return [
        c["prompt"]
        for c in agent_calls(agent_log)
        if c["node"] == "draft" and c["phase"] == "start"
    ]


@pytest.mark.slow
def test_reject_loops_back_with_reason_until_approved(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path
) -> None:
    """Each rejection re-runs draft (next iteration) with that rejection's reason, and only
    that one, in the agent's prompt; the question is not asked again; status shows the
    iteration (and the gate node as waiting); the 5th rejection of draft warns with the
    count; approval completes the run; every node completed exactly as often as the loop
    implies; the projections equal a rebuild from the log.
    """
    run_id = _start(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(question, QuestionAsked)
    answered = shep("answer", question.originator_id.hex[:8], "--option", "small")
    assert answered.returncode == 0, answered.stderr

    for number, reason in enumerate(REASONS, start=1):
        [gate] = wait_for_waiting(shep_home, run_id, 1)
        assert isinstance(gate, ApprovalRequested)
        assert (gate.node, gate.phase, gate.iteration) == ("approve", "draft", number)
        rejected = shep("reject", run_id[:8], "--reason", reason)
        assert rejected.returncode == 0, rejected.stderr
        assert rejected.stdout == (
            f"Rejected {gate.originator_id.hex[:8]}: draft of run {run_id[:8]} runs again "
            "with your reason.\n"
        )
        warning = (
            f"shep: warning: draft of run {run_id[:8]} has been rejected {number} times; "
            "consider `shep cancel` or a clearer reason."
        )
        if number < 5:
            assert "warning" not in rejected.stderr
        else:
            assert warning in rejected.stderr.splitlines(), rejected.stderr

        [next_gate] = wait_for_waiting(shep_home, run_id, 1)
        assert isinstance(next_gate, ApprovalRequested)
        assert next_gate.iteration == number + 1
        prompts = _draft_prompts(agent_log)
        assert len(prompts) == number + 1
        assert reason in prompts[-1]
        assert all(old not in prompts[-1] for old in REASONS if old != reason)

        status = json.loads(shep("status", run_id, "--json", check=True).stdout)
        draft = next(n for n in status["nodes"] if n["node"] == "draft")
        gate_row = next(n for n in status["nodes"] if n["node"] == "approve")
        assert draft["iteration"] == number + 1
        assert draft["status"] == "completed"
        assert gate_row["iteration"] == number + 1
        assert gate_row["status"] == "waiting"
        assert status["current_iteration"] == number + 1
        assert status["status"] == "waiting_approval"
        if number == 1:
            assert "draft #2" in shep("status", run_id, check=True).stdout

    assert "Draft a change plan" in _draft_prompts(agent_log)[0]
    assert all("reason" not in p for p in _draft_prompts(agent_log)[:1])

    approved = shep("approve", run_id[:8])
    assert approved.returncode == 0, approved.stderr
    wait_for_status(shep_home, run_id, "completed", "failed", "interrupted")
    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert of_type(run, RunCompleted)

    completed = Counter(e.node for e in of_type(run, NodeCompleted))
    loops = len(REASONS) + 1
    assert completed == {"draft": loops, "scope": 1, "check": loops, "approve": loops, "finish": 1}
    started = Counter(e.node for e in of_type(run, NodeStarted))
    assert started == completed
    assert [e.iteration for e in of_type(run, NodeStarted, node="draft")] == list(
        range(1, loops + 1)
    )
    assert len(of_type(events, QuestionAsked)) == 1
    gates = of_type(events, ApprovalRequested)
    assert [g.iteration for g in gates] == list(range(1, loops + 1))
    assert len({g.originator_id for g in gates}) == loops
    assert [e.rationale for e in of_type(events, ApprovalRejected)] == list(REASONS)
    assert len(of_type(events, ApprovalGranted)) == 1

    calls = Counter(c["node"] for c in agent_calls(agent_log) if c["phase"] == "done")
    assert calls == {"draft": loops, "finish": 1}
    assert_rebuild_equals_incremental(shep_home)


@pytest.mark.slow
def test_logs_show_the_iteration_and_the_rejection(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path
) -> None:
    """`shep logs` tells a loop's second pass from the first: the re-run node's lines say
    its iteration, and the rejection that caused it (who, why) is in the run's log.
    """
    run_id = _start(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    shep("answer", question.originator_id.hex[:8], "--option", "small", check=True)
    wait_for_waiting(shep_home, run_id, 1)
    shep("reject", run_id[:8], "--reason", "reason-one: the plan skips the tests", check=True)
    [gate] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(gate, ApprovalRequested)
    assert gate.iteration == 2

    lines = shep("logs", run_id, check=True).stdout.splitlines()
    draft_started = [line for line in lines if "[draft] node.started" in line]
    assert len(draft_started) == 2
    assert "2" in draft_started[1].split("node.started:", 1)[1], lines
    assert any("reason-one: the plan skips the tests" in line for line in lines), lines
