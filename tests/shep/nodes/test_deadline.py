"""A question's deadline: the next shep command answers it with the recommended option;
a gate has no deadline and never approves itself.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
)
from events.runs import NodeCompleted
from shep.runs.inbox_watch import DEADLINE_ACTOR
from tests.shep.nodes.test_gates import _start
from tests.support.cli import shep
from tests.support.event_log import (
    assert_rebuild_equals_incremental,
    decisions_of,
    of_type,
    read_events,
    run_state,
    run_stream,
    wait_for_waiting,
)


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DELAY", "0.01")


def _deadline_line(question: QuestionAsked) -> str:
    return (
        f"Question {question.originator_id.hex[:8]} of run {question.run_id.hex[:8]} passed "
        "its deadline: answered with its recommended option 'small'."
    )


def _sleep_past(deadline: str) -> None:
    left = (datetime.fromisoformat(deadline) - datetime.now(UTC)).total_seconds()
    if left > -0.05:
        time.sleep(left + 0.1)


@pytest.mark.slow
def test_deadline_applies_recommended_option_and_gate_never_expires(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """Before its deadline a question stays pending (checked when a command could finish
    before it); after it, the next command (here `shep status`, twice at once) answers it
    once with the recommended option as `system:deadline`, prints the line, and the run
    resumes to the gate; the gate stays pending however long it waits and however many
    commands run.
    """
    run_id = _start(repo, "gated-review", "--input", "default_after=1")
    [question] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(question, QuestionAsked)
    assert question.deadline is not None
    asked_at = question.timestamp
    assert 0.9 <= (datetime.fromisoformat(question.deadline) - asked_at).total_seconds() <= 1.1
    early = shep("inbox", "--json")
    assert early.returncode == 0
    # Only when that command finished before the deadline did it certainly run before it.
    if datetime.now(UTC) < datetime.fromisoformat(question.deadline):
        assert decisions_of(read_events(shep_home), question.originator_id) == []

    _sleep_past(question.deadline)
    assert decisions_of(read_events(shep_home), question.originator_id) == []
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "shep", "status"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errs = []
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        errs.append(err)
    line = _deadline_line(question)
    assert sum(err.splitlines().count(line) for err in errs) == 1, errs

    [decision] = decisions_of(read_events(shep_home), question.originator_id)
    assert isinstance(decision, QuestionAnswered)
    assert (decision.actor, decision.option_id, decision.answer) == (
        DEADLINE_ACTOR,
        "small",
        "Small: one module",
    )

    [gate] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(gate, ApprovalRequested)
    assert "Scope: Small: one module" in (repo / "shep-review.md").read_text()
    time.sleep(1.5)
    for command in (("status",), ("inbox", "--json"), ("status", run_id), ("logs", run_id)):
        result = shep(*command)
        assert result.returncode == 0, result.stderr
        assert "deadline" not in result.stderr
    events = read_events(shep_home)
    assert of_type(events, ApprovalGranted) == []
    assert of_type(events, ApprovalRejected) == []
    assert decisions_of(events, gate.originator_id) == []
    assert run_state(shep_home, run_id).status.value == "waiting_approval"
    assert len(of_type(events, QuestionAsked)) == 1
    assert len(of_type(events, QuestionAnswered)) == 1
    completed = [e.node for e in of_type(run_stream(events, run_id), NodeCompleted)]
    assert completed == ["draft", "scope", "check"]
    assert_rebuild_equals_incremental(shep_home)


@pytest.mark.slow
def test_a_question_answered_in_time_keeps_its_answer(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """An answer given before the deadline stands: commands after the deadline change
    nothing and print no deadline line.
    """
    run_id = _start(repo, "gated-review", "--input", "default_after=1")
    [question] = wait_for_waiting(shep_home, run_id, 1)
    assert isinstance(question, QuestionAsked)
    assert question.deadline is not None
    shep("answer", question.originator_id.hex, "--option", "large", "--as", "alice", check=True)
    wait_for_waiting(shep_home, run_id, 1)
    _sleep_past(question.deadline)
    later = shep("status")
    assert "deadline" not in later.stderr
    [decision] = decisions_of(read_events(shep_home), question.originator_id)
    assert isinstance(decision, QuestionAnswered)
    assert (decision.actor, decision.option_id) == ("user:alice", "large")
