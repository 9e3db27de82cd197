"""The supervisor as processes: started in the background by workers, killed, timed out.

Real subprocesses throughout: ``shep`` commands, background workers running
``gated-review`` with the fake claude, the supervisor that a worker (or a
user's cosign vote) starts, and the fake evaluator (tests/shep/supervisor/fake_evaluator.py)
that the supervisor consults through the executor port. One configured binary
serves both: the fake answers the supervisor's prompt with a verdict and hands
workflow steps to the fake claude.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import apsw
import pytest

from events.base import Event
from events.inbox import (
    ApprovalGranted,
    ApprovalRequested,
    ApprovalVoted,
    QuestionAnswered,
    QuestionAsked,
)
from events.runs import RunResumed, RunStarted
from events.store import EventStore
from events.supervisor import SupervisorDecisionMade, SupervisorDecisionRefused
from shep.home.procs import pid_alive
from shep.supervisor.prompt import PROMPT_VERSION
from tests.shep.runs.conftest import agent_calls
from tests.shep.supervisor.fake_evaluator import calls, install
from tests.support.cli import shep
from tests.support.event_log import (
    decisions_of,
    of_type,
    read_events,
    run_state,
    run_stream,
    wait_for_status,
    wait_for_waiting,
    wait_until,
)
from tests.support.store_items import ask_on_new_run, gate

ROOT = Path(__file__).resolve().parents[3]
SUPERVISOR = "supervisor:global@1"
ANSWER_LARGE = json.dumps(
    {"verdict": "answer", "answer": "large", "rationale": "The change is wide.", "confidence": 0.8}
)
APPROVE = json.dumps(
    {"verdict": "approve", "rationale": "The review file is what was asked.", "confidence": 0.9}
)
ESCALATE = json.dumps({"verdict": "escalate", "rationale": "A person should choose."})


@dataclass(frozen=True)
class Fake:
    """The fake evaluator as installed: its binary, its call log, the agent's log."""

    binary: Path
    log: Path
    agent_log: Path

    def calls(self, phase: str = "start") -> list[dict[str, Any]]:
        return [c for c in calls(self.log) if c["phase"] == phase]


@pytest.fixture(autouse=True)
def workflows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers (and the CLI) register tests/support/workflows.py's gated-review."""
    monkeypatch.setenv("SHEP_WORKFLOW_MODULES", "tests.support.workflows")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    return root


@pytest.fixture
def evaluator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    """The fake evaluator is the configured claude-code binary; heartbeats are fast.

    At the end, a fake evaluator still running (a test orphaned or hung it) is killed.
    """
    binary = install(tmp_path / "bin")
    fake = Fake(binary, tmp_path / "evaluator.jsonl", tmp_path / "agent.jsonl")
    for var in (
        "FAKE_FAIL",
        "FAKE_AGENT_FAIL",
        "FAKE_VERDICT",
        "FAKE_VERDICT_QUESTION",
        "FAKE_VERDICT_GATE",
        "FAKE_HOLD",
        "FAKE_EVALUATOR_DELAY",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FAKE_EVALUATOR_LOG", str(fake.log))
    monkeypatch.setenv("FAKE_AGENT_LOG", str(fake.agent_log))
    monkeypatch.setenv("FAKE_STATE", str(tmp_path / "fake-state"))
    monkeypatch.setenv("FAKE_DELAY", "0.01")
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    shep("settings", "agent", "--agent", "claude-code", "--binary", str(binary), check=True)
    shep("settings", "set", "heartbeat_interval", "0.2", check=True)
    yield fake
    for pid in {call["pid"] for call in fake.calls()}:
        if pid_alive(pid) and _is_fake(pid, binary):
            os.kill(pid, signal.SIGKILL)


def _is_fake(pid: int, binary: Path) -> bool:
    try:
        return str(binary).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def collaboration(on: bool = True) -> None:
    shep("settings", "flags", "enable" if on else "disable", "collaboration", check=True)


def configure(*args: str) -> None:
    shep("supervisor", "configure", *args, check=True)


def start_run(repo: Path) -> str:
    result = shep("run", "gated-review", "--repo", str(repo), "--background", check=True)
    return result.stdout.strip()


def tracked(home: Path) -> int:
    """The supervisor's tracked log position (0: none), read without writing."""
    conn = apsw.Connection(str(home / "shep.db"), flags=apsw.SQLITE_OPEN_READONLY)
    conn.setbusytimeout(10_000)
    try:
        row = conn.execute(
            "SELECT notification_id FROM tracking WHERE application_name='supervisor'"
        ).fetchone()
    finally:
        conn.close()
    return int(row[0]) if row else 0


def position_of(home: Path, asked: type[Event], item_id: UUID) -> int:
    """The log position an item was asked at."""
    with EventStore(home / "shep.db") as store:
        return next(
            p for p, e in store.positions_of([asked], after=0) if e.originator_id == item_id
        )


def supervisor_events(home: Path) -> list[Event]:
    return [
        e
        for e in read_events(home)
        if isinstance(e, SupervisorDecisionMade | SupervisorDecisionRefused)
    ]


def made_on(home: Path, item_id: UUID) -> list[SupervisorDecisionMade]:
    return [
        e
        for e in supervisor_events(home)
        if isinstance(e, SupervisorDecisionMade) and e.subject_id == item_id
    ]


def worker_pid(home: Path, run_id: str) -> int:
    """The pid of the run's latest worker."""
    owners = of_type(run_stream(read_events(home), run_id), RunStarted) + of_type(
        run_stream(read_events(home), run_id), RunResumed
    )
    return max(owners, key=lambda e: e.originator_version).pid


def wait_gone(pid: int, timeout: float = 30) -> None:
    wait_until(lambda: not pid_alive(pid), timeout=timeout, what=f"process {pid} to exit")


# -- the flag ---------------------------------------------------------------------------


@pytest.mark.slow
def test_flag_off_a_suspended_run_starts_no_supervisor(
    repo: Path, evaluator: Fake, shep_home: Path
) -> None:
    """A policy covers the run's question but the collaboration flag is off: the worker
    that suspends the run starts no supervisor (no log, no lock file), nothing is
    evaluated or recorded, and the question waits in the inbox. Turning the flag on then
    proves the policy did cover it: `shep supervisor run` decides it.
    """
    configure("--autonomy", "autonomous")
    run_id = start_run(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    wait_gone(worker_pid(shep_home, run_id))

    assert not (shep_home / "logs" / "supervisor.log").exists()
    assert not (shep_home / "supervisor.lock").exists()
    assert supervisor_events(shep_home) == []
    assert tracked(shep_home) == 0
    assert evaluator.calls() == []
    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert [i["item_id"] for i in inbox] == [question.originator_id.hex]

    collaboration(on=True)
    ran = shep("supervisor", "run", env={"FAKE_VERDICT": ESCALATE})
    assert ran.returncode == 0, ran.stderr
    [made] = made_on(shep_home, question.originator_id)
    assert (made.decision, made.acted) == ("escalate", False)


# -- end to end -------------------------------------------------------------------------


@pytest.mark.slow  # three workers and two supervisors start: ~10 s
def test_background_supervisor_completes_a_run_with_no_human(
    repo: Path, evaluator: Fake, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An autonomous policy, the flag on: the worker that suspends the run on its question
    starts the supervisor, which answers it (with the evaluator's answer, not the
    recommended one) and resumes the run; the gate that follows is approved the same way,
    and the run completes. Every decision is the supervisor's; `why` and the audit export
    show them.
    """
    monkeypatch.setenv("FAKE_VERDICT_QUESTION", ANSWER_LARGE)
    monkeypatch.setenv("FAKE_VERDICT_GATE", APPROVE)
    collaboration(on=True)
    configure("--autonomy", "autonomous")
    run_id = start_run(repo)
    state = wait_for_status(shep_home, run_id, "completed", "failed", "interrupted", timeout=90)
    assert state.status.value == "completed"

    events = read_events(shep_home)
    question = of_type(events, QuestionAsked, run_id=UUID(run_id))
    approval = of_type(events, ApprovalRequested, run_id=UUID(run_id))
    assert len(question) == len(approval) == 1
    [answered] = decisions_of(events, question[0].originator_id)
    assert isinstance(answered, QuestionAnswered)
    assert (answered.actor, answered.option_id) == (SUPERVISOR, "large")
    [granted] = decisions_of(events, approval[0].originator_id)
    assert isinstance(granted, ApprovalGranted)
    assert (granted.actor, granted.policy) == (SUPERVISOR, "global@1")
    assert "Scope: Large" in (repo / "shep-review.md").read_text()
    assert [c["node"] for c in agent_calls(evaluator.agent_log) if c["phase"] == "done"] == [
        "draft",
        "finish",
    ]
    made = [e for e in supervisor_events(shep_home) if isinstance(e, SupervisorDecisionMade)]
    assert [(m.item_kind, m.decision, m.acted) for m in made] == [
        ("question", "answer", True),
        ("gate", "approve", True),
    ]
    assert tracked(shep_home) == position_of(
        shep_home, ApprovalRequested, approval[0].originator_id
    )

    # The evaluator: one call per item, the supervisor's prompt, no tools, not in the repo.
    consulted = evaluator.calls()
    assert len(consulted) == 2
    for call in consulted:
        assert call["prompt"].startswith("You are shep's supervisor")
        assert "--allowedTools" not in call["argv"]
        assert Path(call["cwd"]).resolve() != repo.resolve()
        assert not Path(call["cwd"]).exists()  # its empty directory is gone

    why = shep("supervisor", "why", run_id[:8])
    assert why.returncode == 0, why.stderr
    assert f"scope  {SUPERVISOR}: answer 'Large: the whole package'" in why.stdout
    assert f"approve  {SUPERVISOR}: approve" in why.stdout
    assert "why: The change is wide." in why.stdout
    assert f"policy global@1, prompt {PROMPT_VERSION}, claude-code" in why.stdout
    assert "did not decide the item" not in why.stdout

    exported = shep("audit", "export", "--kind", "decisions")
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    by_supervisor = [line for line in lines if line.get("actor") == SUPERVISOR]
    assert {line["item"] for line in by_supervisor} == {
        question[0].originator_id.hex,
        approval[0].originator_id.hex,
    }


# -- crashes and timeouts ---------------------------------------------------------------


@pytest.mark.slow
def test_supervisor_killed_while_evaluating_decides_the_item_once_after_restart(
    repo: Path, evaluator: Fake, shep_home: Path
) -> None:
    """SIGKILL of `shep supervisor run` while its evaluator is consulted (after it read
    the gate, before it recorded anything): nothing was recorded and the tracking did not
    move; the next `shep supervisor run` stops the evaluator left hanging, evaluates the
    gate again and decides it, once, with the tracking at the gate's position; a third
    run finds nothing to do.
    """
    collaboration(on=True)
    configure("--autonomy", "autonomous")
    with EventStore(shep_home / "shep.db") as store:
        # resumed: the run is this process's (no worker to start once the gate is decided)
        _, [item] = ask_on_new_run(store, repo, [gate("g1")], resumed=True)
    first = subprocess.Popen(
        [sys.executable, "-m", "shep", "supervisor", "run"],
        env={**os.environ, "FAKE_FAIL": "hang"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        [hung] = wait_until(evaluator.calls, timeout=30, what="the evaluator to be consulted")
        assert first.poll() is None
        os.killpg(first.pid, signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert supervisor_events(shep_home) == []
    assert tracked(shep_home) == 0
    assert decisions_of(read_events(shep_home), item) == []

    again = shep("supervisor", "run")
    assert again.returncode == 0, again.stderr
    assert "approve under global@1" in again.stdout
    # The killed supervisor's evaluator (its own session) was left hanging: stopped now.
    assert f"stopped evaluator {hung['pid']}: its supervisor is gone" in again.stderr
    assert not pid_alive(hung["pid"])
    [made] = made_on(shep_home, item)
    assert (made.decision, made.acted) == ("approve", True)
    [granted] = decisions_of(read_events(shep_home), item)
    assert granted.actor == SUPERVISOR
    assert tracked(shep_home) == position_of(shep_home, ApprovalRequested, item)
    assert len(evaluator.calls()) == 2

    third = shep("supervisor", "run")
    assert third.returncode == 0, third.stderr
    assert third.stdout.strip() == "Nothing to decide."
    assert len(made_on(shep_home, item)) == 1
    assert len(evaluator.calls()) == 2


@pytest.mark.slow
def test_evaluator_timeout_escalates_and_kills_the_evaluator(
    repo: Path, evaluator: Fake, shep_home: Path
) -> None:
    """A policy with a 2 s evaluator timeout and an evaluator that hangs: the supervisor
    kills it after 2 s and escalates, saying why; the gate stays in the inbox, and no
    evaluator process is left behind.
    """
    collaboration(on=True)
    configure("--autonomy", "autonomous", "--timeout", "2")
    with EventStore(shep_home / "shep.db") as store:
        _, [item] = ask_on_new_run(store, repo, [gate("g1")], resumed=False)
    started = time.monotonic()
    ran = shep("supervisor", "run", env={"FAKE_FAIL": "hang"})
    took = time.monotonic() - started
    [hung] = evaluator.calls()
    assert ran.returncode == 0, ran.stderr
    assert 2 <= took < 30
    assert "escalate under global@1" in ran.stdout
    [made] = made_on(shep_home, item)
    assert (made.decision, made.acted) == ("escalate", False)
    assert "the evaluator failed" in made.rationale
    assert "did not finish within 2 s" in made.rationale
    assert decisions_of(read_events(shep_home), item) == []
    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert [i["item_id"] for i in inbox] == [item.hex]
    assert not pid_alive(hung["pid"])
    assert evaluator.calls("done") == []


# -- cosign -----------------------------------------------------------------------------


def _answer_the_question(home: Path, run_id: str) -> ApprovalRequested:
    """Answer the run's question as a user; return the gate it then waits on."""
    [question] = wait_for_waiting(home, run_id, 1)
    assert isinstance(question, QuestionAsked)
    shep("answer", question.originator_id.hex, "--option", "small", check=True)
    [approval] = wait_for_waiting(home, run_id, 1)
    assert isinstance(approval, ApprovalRequested)
    return approval


@pytest.mark.slow
def test_cosign_supervisor_signs_first_then_the_users_approval_closes_the_gate(
    repo: Path, evaluator: Fake, shep_home: Path
) -> None:
    """Under cosign the supervisor's approval alone does not open the gate: it is still
    in `shep inbox` and the run still waits; `shep approve` then closes it, co-signed by
    the supervisor, and the run completes.
    """
    collaboration(on=True)
    configure("--autonomy", "cosign")
    run_id = start_run(repo)
    approval = _answer_the_question(shep_home, run_id)
    gate_id = approval.originator_id
    [made] = wait_until(
        lambda: made_on(shep_home, gate_id), timeout=60, what="the supervisor's co-signature"
    )
    assert (made.decision, made.acted, made.cosign_pending) == ("approve", False, True)

    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert gate_id.hex in [i["item_id"] for i in inbox]
    assert run_state(shep_home, run_id).status.value == "waiting_approval"
    assert decisions_of(read_events(shep_home), gate_id) == []

    approved = shep("approve", gate_id.hex[:8])
    assert approved.returncode == 0, approved.stderr
    assert f"co-signed by {SUPERVISOR}" in approved.stdout
    assert wait_for_status(shep_home, run_id, "completed", "failed").status.value == "completed"
    [granted] = decisions_of(read_events(shep_home), gate_id)
    assert isinstance(granted, ApprovalGranted)
    assert granted.actor.startswith("user:")
    assert granted.cosigned_by == SUPERVISOR

    why = shep("supervisor", "why", gate_id.hex[:8], check=True).stdout
    assert "co-signature, waiting for a user's" in why
    assert f"co-signed by {SUPERVISOR}" in why


@pytest.mark.slow  # three workers and two supervisors start: ~10 s
def test_cosign_user_signs_first_then_the_background_supervisor_closes_the_gate(
    repo: Path, evaluator: Fake, shep_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under cosign a user's approval before the supervisor's is one of two signatures:
    the gate stays in the inbox; the supervisor the worker started then approves too,
    which opens the gate (co-signed by the user) and resumes the run to completion.
    """
    hold = tmp_path / "hold"
    monkeypatch.setenv("FAKE_HOLD", str(hold))
    collaboration(on=True)
    configure("--autonomy", "cosign")
    run_id = start_run(repo)
    [question] = wait_for_waiting(shep_home, run_id, 1)
    # The supervisor has had its say on the question (cosign: advice only) before the
    # evaluator is held for the gate.
    wait_until(lambda: made_on(shep_home, question.originator_id), what="the question's advice")
    hold.touch()
    approval = _answer_the_question(shep_home, run_id)
    gate_id = approval.originator_id
    wait_until(
        lambda: any("approval gate to decide" in c["prompt"] for c in evaluator.calls()),
        timeout=60,
        what="the evaluator to be consulted on the gate",
    )

    approved = shep("approve", gate_id.hex[:8], "--comment", "fine by me")
    assert approved.returncode == 0, approved.stderr
    assert "one of two signatures" in approved.stdout
    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert gate_id.hex in [i["item_id"] for i in inbox]
    events = read_events(shep_home)
    assert decisions_of(events, gate_id) == []
    [vote] = [e for e in events if isinstance(e, ApprovalVoted) and e.originator_id == gate_id]
    assert vote.actor.startswith("user:")

    hold.unlink()
    assert wait_for_status(shep_home, run_id, "completed", "failed").status.value == "completed"
    [granted] = decisions_of(read_events(shep_home), gate_id)
    assert isinstance(granted, ApprovalGranted)
    assert (granted.actor, granted.cosigned_by) == (SUPERVISOR, vote.actor)
    [made] = made_on(shep_home, gate_id)
    assert (made.decision, made.acted, made.cosign_pending) == ("approve", True, False)


@pytest.mark.slow
def test_an_evaluator_that_crashes_or_babbles_escalates_with_the_reason(
    repo: Path, evaluator: Fake, shep_home: Path
) -> None:
    """The real executor, a misbehaving CLI: one that exits non-zero and one whose reply
    holds no JSON verdict each give an escalation naming what went wrong, act on nothing,
    and were asked with the policy's model.
    """
    collaboration(on=True)
    configure("--autonomy", "autonomous", "--model", "fake-opus")
    said = {}
    for failure in ("crash", "garbage"):
        with EventStore(shep_home / "shep.db") as store:
            _, [item] = ask_on_new_run(store, repo, [gate(failure)], resumed=False)
        ran = shep("supervisor", "run", env={"FAKE_FAIL": failure})
        assert ran.returncode == 0, ran.stderr
        [made] = made_on(shep_home, item)
        assert (made.decision, made.acted, made.model) == ("escalate", False, "fake-opus")
        assert decisions_of(read_events(shep_home), item) == []
        said[failure] = made.rationale
    assert said["crash"].startswith("the evaluator failed: ")
    assert said["garbage"] == "the evaluator's reply had no JSON verdict"
    assert [c["model"] for c in evaluator.calls()] == ["fake-opus", "fake-opus"]


def test_follow_decides_items_as_they_come_until_interrupted(
    repo: Path, evaluator: Fake, shep_home: Path
) -> None:
    """`shep supervisor run --follow` keeps deciding new items (in log order, each once)
    until Ctrl-C, then exits 0.
    """
    collaboration(on=True)
    configure("--autonomy", "autonomous")
    follower = subprocess.Popen(
        [sys.executable, "-m", "shep", "supervisor", "run", "--follow"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        items = []
        for name in ("first", "second"):
            with EventStore(shep_home / "shep.db") as store:
                _, [item] = ask_on_new_run(store, repo, [gate(name)], resumed=True)
            items.append(item)
            wait_until(lambda: made_on(shep_home, items[-1]), what=f"the {name} gate decided")
        os.killpg(follower.pid, signal.SIGINT)
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait()
    assert follower.returncode == 0, err
    assert [line.split()[0] for line in out.splitlines()] == [i.hex[:8] for i in items]
    for item in items:
        assert [e.actor for e in decisions_of(read_events(shep_home), item)] == [SUPERVISOR]
    assert len(evaluator.calls()) == 2
