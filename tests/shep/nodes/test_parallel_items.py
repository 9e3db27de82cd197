"""Two questions pending at once in one run: each answer goes to its own question."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from events.inbox import QuestionAnswered, QuestionAsked
from events.runs import NodeCompleted, RunResumed, RunSuspended
from tests.shep.nodes.test_gates import _start
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
)


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DELAY", "0.01")


def _by_node(items: list[QuestionAsked]) -> dict[str, QuestionAsked]:
    return {i.node: i for i in items}


@pytest.mark.slow
def test_answers_in_reverse_order_go_to_their_own_questions(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """Both questions are pending at once; answering ask_b first resumes the run, which
    waits again on ask_a alone (ask_a is neither answered nor re-asked, join has not run,
    answers.txt does not exist); answering ask_a completes it, and answers.txt maps each
    answer to its own question, whatever the order they were given in.
    """
    run_id = _start(repo, "two-questions")
    items = wait_for_waiting(shep_home, run_id, 2)
    asked = _by_node([i for i in items if isinstance(i, QuestionAsked)])
    assert set(asked) == {"ask_a", "ask_b"}
    assert asked["ask_a"].interrupt_id != asked["ask_b"].interrupt_id
    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert sorted((i["node"], i["run_id"]) for i in inbox) == [
        ("ask_a", run_id),
        ("ask_b", run_id),
    ]
    a_id, b_id = asked["ask_a"].originator_id, asked["ask_b"].originator_id

    answered = shep("answer", b_id.hex, "--option", "y")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == f"Answered {b_id.hex[:8]}: Y\n"
    [still] = wait_for_waiting(shep_home, run_id, 1)
    assert still.originator_id == a_id
    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert decisions_of(events, a_id) == []
    assert len(of_type(run, RunResumed)) == 1
    assert [len(s.item_ids) for s in of_type(run, RunSuspended)] == [2, 1]
    assert Counter(e.node for e in of_type(run, NodeCompleted)) == {"ask_b": 1}
    assert not (repo / "answers.txt").exists()
    assert run_state(shep_home, run_id).status.value == "waiting_answer"
    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert [i["item_id"] for i in inbox] == [a_id.hex]

    answered = shep("answer", a_id.hex[:8], "alpha answer, free text")
    assert answered.returncode == 0, answered.stderr
    wait_for_status(shep_home, run_id, "completed", "failed", "interrupted")
    assert run_state(shep_home, run_id).status.value == "completed"
    assert (repo / "answers.txt").read_text() == "a=alpha answer, free text\nb=Y\n"

    events = read_events(shep_home)
    run = run_stream(events, run_id)
    assert len(of_type(events, QuestionAsked)) == 2
    answers = {d.originator_id: d for d in of_type(events, QuestionAnswered)}
    assert len(answers) == 2
    assert answers[a_id].answer == "alpha answer, free text"
    assert answers[b_id].answer == "Y"
    assert Counter(e.node for e in of_type(run, NodeCompleted)) == {
        "ask_a": 1,
        "ask_b": 1,
        "join": 1,
    }
    assert_rebuild_equals_incremental(shep_home)


def test_answers_given_at_the_same_moment_both_take_effect(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """Two terminals answer the run's two questions at once: both answers are recorded,
    one of them resumes the run and the other's decision is taken by that worker (or the
    next one): the run completes with both answers, nothing asked twice, never stranded
    waiting on a decided item.
    """
    run_id = _start(repo, "two-questions")
    asked = _by_node(
        [i for i in wait_for_waiting(shep_home, run_id, 2) if isinstance(i, QuestionAsked)]
    )
    argv = [sys.executable, "-m", "shep", "answer"]
    procs = [
        subprocess.Popen(
            [*argv, asked["ask_a"].originator_id.hex, "--option", "x"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        subprocess.Popen(
            [*argv, asked["ask_b"].originator_id.hex, "--option", "y"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    wait_for_status(shep_home, run_id, "completed", "failed", "interrupted", timeout=30)
    assert run_state(shep_home, run_id).status.value == "completed"
    assert (repo / "answers.txt").read_text() == "a=X\nb=Y\n"
    events = read_events(shep_home)
    assert len(of_type(events, QuestionAsked)) == 2
    assert len(of_type(events, QuestionAnswered)) == 2


#: `shep ARGS` in a process whose worker, just before it suspends the run, lets another
#: terminal answer ``sys.argv[1]`` (a real `shep answer`, which finds the run running).
ANSWERED_WHILE_SUSPENDING = """
import subprocess, sys
import shep.runs.runner
real = shep.runs.runner.suspend_run
def suspend_run(*args, **kwargs):
    subprocess.run([sys.executable, "-m", "shep", "answer", sys.argv[1], "--option", "x"],
                   check=True, stdin=subprocess.DEVNULL)
    return real(*args, **kwargs)
shep.runs.runner.suspend_run = suspend_run
import shep.cli
shep.cli.main(sys.argv[2:])
"""


@pytest.mark.slow
def test_answer_landing_while_the_worker_suspends_is_not_stranded(
    repo: Path, fake_claude: Path, shep_home: Path
) -> None:
    """ask_a is answered after the worker resumed for ask_b found ask_a undecided but
    before it suspended on it: `shep answer` left the running run to its worker, the
    worker suspends on an item that already has its decision, and then (not the next
    user command) starts the worker that completes the run.
    """
    run_id = _start(repo, "two-questions")
    asked = _by_node(
        [i for i in wait_for_waiting(shep_home, run_id, 2) if isinstance(i, QuestionAsked)]
    )
    a_id, b_id = asked["ask_a"].originator_id, asked["ask_b"].originator_id
    answer_b = ["answer", b_id.hex, "--option", "y", "--wait"]
    result = subprocess.run(
        [sys.executable, "-c", ANSWERED_WHILE_SUSPENDING, a_id.hex, *answer_b],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    run = run_stream(read_events(shep_home), run_id)
    assert [len(s.item_ids) for s in of_type(run, RunSuspended)] == [2, 1]
    wait_for_status(shep_home, run_id, "completed", "failed", "interrupted", timeout=30)
    assert run_state(shep_home, run_id).status.value == "completed"
    assert (repo / "answers.txt").read_text() == "a=X\nb=Y\n"
    events = read_events(shep_home)
    assert len(of_type(events, QuestionAsked)) == 2
    assert len(of_type(events, QuestionAnswered)) == 2
