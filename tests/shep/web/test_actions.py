"""The page's approve, cancel, resume and fork, through a real `shep ui` process over HTTP: each
is the core's own (``shep.runs``), as from the CLI, with real workers and a real store;
each is refused without the token, from another Origin, without the CSRF token, and by a
read-only server, deciding nothing."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import pytest

from commands.mark_interrupted import mark_interrupted
from events.inbox import ApprovalGranted, ApprovalVoted
from events.store import EventStore
from shep.home.identity import user_actor
from shep.home.procs import pid_alive
from tests.shep.runs.conftest import agent_calls, agent_log, fake_claude, repo
from tests.shep.runs.test_background_recovery import run_row, start_background, wait_for
from tests.shep.web.ui_server import Reply, UiServer
from tests.support.cli import shep
from tests.support.store_items import ask_on_new_run, gate, question

__all__ = ["agent_log", "fake_claude", "repo"]

ROOT = Path(__file__).resolve().parents[3]


def _csrf(server: UiServer) -> str:
    found = re.search(r'data-csrf="([0-9a-f]+)"', server.get("/").body)
    assert found is not None
    return found[1]


def _post(server: UiServer, path: str, form: dict[str, str] | None = None, **kw: Any) -> Reply:
    """What the page's script posts: the form with the CSRF token, this server's Origin,
    and ``X-CSRF-Token`` (so the reply is JSON)."""
    csrf = _csrf(server)
    headers = {"Origin": server.base, "X-CSRF-Token": csrf, **kw.pop("headers", {})}
    body = urlencode({**(form or {}), "csrf": csrf})
    return server.request("POST", path, body=body, headers=headers, **kw)


def _message(reply: Reply) -> str:
    return str(json.loads(reply.body)["message"])


def _events(home: Path, item: str) -> list[Any]:
    with EventStore(home / "shep.db") as store:
        return list(store.load(UUID(item)))


@pytest.fixture
def waiting_gate(shep_home: Path, tmp_path: Path) -> dict[str, str]:
    """A home whose run waits on a gate (the run handed back to this test process, so a
    decision starts no worker), and a question."""
    shep_home.mkdir(mode=0o700)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "shep-review.md").write_text("# Review\n")
    with EventStore(shep_home / "shep.db") as store:
        run, items = ask_on_new_run(
            store, tmp_path / "repo", [question("q1"), gate("g1")], resumed=True
        )
    return {"run": run.hex, "question": items[0].hex, "gate": items[1].hex}


@pytest.fixture
def server(waiting_gate: dict[str, str]) -> Iterator[UiServer]:
    started = UiServer.start(env={"PYTHONPATH": str(ROOT)})
    try:
        yield started
    finally:
        started.stop()


def test_approve_cancel_and_resume_are_refused_without_token_origin_or_csrf(
    server: UiServer, waiting_gate: dict[str, str], shep_home: Path
) -> None:
    """No cookie, a foreign or missing Origin, no CSRF token or a forged one: each action
    is refused (403) before anything is decided; the gate stays pending, the run waits."""
    ids = waiting_gate
    csrf = _csrf(server)
    for path, form in (
        (f"/items/{ids['gate']}/approve", {"comment": "ok"}),
        (f"/runs/{ids['run']}/cancel", {}),
        (f"/runs/{ids['run']}/resume", {}),
        (f"/runs/{ids['run']}/fork", {"checkpoint": "0"}),
    ):
        good = urlencode({**form, "csrf": csrf})
        mine = {"Origin": server.base}
        assert server.request("POST", path, body=good, headers=mine, cookie=False).status == 403
        assert server.request("POST", path, body=good).status == 403, "no Origin"
        for origin in ("http://evil.example", "null"):
            refused = server.request("POST", path, body=good, headers={"Origin": origin})
            assert refused.status == 403, (path, origin)
        no_csrf = server.request("POST", path, body=urlencode(form), headers=mine)
        assert no_csrf.status == 403
        assert "no CSRF token" in no_csrf.body
        forged = urlencode({**form, "csrf": server.token})
        assert server.request("POST", path, body=forged, headers=mine).status == 403
    assert [type(e).__name__ for e in _events(shep_home, ids["gate"])] == ["ApprovalRequested"]
    assert run_row(ids["run"])["status"] == "running"


def test_a_read_only_server_refuses_approve_cancel_and_resume(
    waiting_gate: dict[str, str], shep_home: Path
) -> None:
    """--read-only: the page's own CSRF token and Origin are not enough; nothing is recorded."""
    ids = waiting_gate
    server = UiServer.start("--read-only", env={"PYTHONPATH": str(ROOT)})
    try:
        for path in (
            f"/items/{ids['gate']}/approve",
            f"/runs/{ids['run']}/cancel",
            f"/runs/{ids['run']}/resume",
            f"/runs/{ids['run']}/fork",
        ):
            reply = _post(server, path, {"checkpoint": "0"})
            assert reply.status == 403, path
            assert "read-only" in reply.body
    finally:
        server.stop()
    assert [type(e).__name__ for e in _events(shep_home, ids["gate"])] == ["ApprovalRequested"]
    assert run_row(ids["run"])["status"] == "running"


def test_an_approval_is_recorded_as_the_cli_records_it_and_a_second_is_a_409(
    server: UiServer, waiting_gate: dict[str, str], shep_home: Path
) -> None:
    """Approved on the page with a comment and a name: ApprovalGranted by `user:<name>`,
    the reply is `shep approve`'s line; approving it again is refused (409) with who
    decided and when, as the CLI says; a question is not approved; `supervisor:` is not
    a name a person may take."""
    ids = waiting_gate
    claimed = _post(server, f"/items/{ids['gate']}/approve", {"as": "supervisor:me"})
    assert claimed.status == 400
    assert "decide only through shep itself" in _message(claimed)
    wrong = _post(server, f"/items/{ids['question']}/approve", {})
    assert wrong.status == 400
    assert "is a question" in _message(wrong)
    reply = _post(server, f"/items/{ids['gate']}/approve", {"comment": "looks right", "as": "ann"})
    assert reply.status == 200, reply.body
    assert _message(reply) == f"Approved {ids['gate'][:8]} (approve of run {ids['run'][:8]})."
    granted = [e for e in _events(shep_home, ids["gate"]) if isinstance(e, ApprovalGranted)]
    assert [(e.actor, e.rationale) for e in granted] == [("user:ann", "looks right")]
    again = _post(server, f"/items/{ids['gate']}/approve", {})
    assert again.status == 409
    assert _message(again).startswith(f"Item {ids['gate'][:8]} was already approved")
    assert "by user:ann at " in _message(again)
    page = server.get(f"/items/{ids['gate']}").body
    assert "Approved" in page
    assert "by <strong>user:ann</strong>" in page


def test_under_a_cosign_policy_the_pages_approval_is_a_vote(
    server: UiServer, waiting_gate: dict[str, str], shep_home: Path
) -> None:
    """Collaboration on and a cosign policy: the page's approval is one of two signatures
    (ApprovalVoted, the gate stays open and pending in the inbox), and the reply says so."""
    ids = waiting_gate
    shep("settings", "flags", "enable", "collaboration", check=True)
    shep("supervisor", "configure", "--autonomy", "cosign", check=True)
    reply = _post(server, f"/items/{ids['gate']}/approve", {"comment": "fine by me"})
    assert reply.status == 200, reply.body
    assert "one of two signatures" in _message(reply)
    events = _events(shep_home, ids["gate"])
    votes = [e for e in events if isinstance(e, ApprovalVoted)]
    assert [(v.actor, v.rationale) for v in votes] == [(user_actor(None), "fine by me")]
    assert not [e for e in events if isinstance(e, ApprovalGranted)]
    inbox = json.loads(shep("inbox", "--json", check=True).stdout)
    assert ids["gate"] in [i["item_id"] for i in inbox]


def test_what_the_core_says_while_it_approves_ends_the_reply(
    server: UiServer, waiting_gate: dict[str, str], shep_home: Path
) -> None:
    """The gate's run was interrupted meanwhile (its worker gone): the approval is recorded,
    no worker starts, and the reply ends with the core's notice (``runtime.say``) that
    the run goes on once resumed, instead of only reaching the server's log."""
    ids = waiting_gate
    with EventStore(shep_home / "shep.db") as store:
        mark_interrupted(store, UUID(ids["run"]), reason="test: its worker is gone")
    reply = _post(server, f"/items/{ids['gate']}/approve", {})
    assert reply.status == 200, reply.body
    short = ids["run"][:8]
    assert _message(reply) == (
        f"Approved {ids['gate'][:8]} (approve of run {short}). Run {short} is interrupted; it "
        f"goes on with this decision once you `shep resume {short}`."
    )
    assert run_row(ids["run"])["status"] == "interrupted"


@pytest.mark.slow
def test_a_gate_approved_on_the_page_resumes_the_run_to_completion(
    fake_claude: Path, repo: Path, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gated-review, its question answered from the CLI, waits on its gate: approved over
    HTTP, a detached worker (named in the reply) takes the run to completed."""
    monkeypatch.setenv("SHEP_WORKFLOW_MODULES", "tests.support.workflows")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    run = shep("run", "gated-review", "--repo", str(repo), "--background", check=True)
    run_id = run.stdout.strip()
    wait_for(lambda: run_row(run_id)["status"] == "waiting_answer", what="the question")
    shep("answer", run_id[:8], "--option", "small", check=True)
    wait_for(lambda: run_row(run_id)["status"] == "waiting_approval", what="the gate")
    [item] = [
        i for i in json.loads(shep("inbox", "--json", check=True).stdout) if i["run_id"] == run_id
    ]
    server = UiServer.start()
    try:
        reply = _post(server, f"/items/{item['item_id']}/approve", {"comment": "ship it"})
        assert reply.status == 200, reply.body
        message = _message(reply)
        assert message.startswith(f"Approved {item['item_id'][:8]} (approve of run {run_id[:8]})")
        assert "Started worker " in message
        wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    finally:
        server.stop()
    out = shep("audit", "export", "--kind", "decisions", check=True).stdout
    decisions = [json.loads(line) for line in out.splitlines()]
    mine = [d for d in decisions if d.get("run") == run_id and d.get("actor")]
    me = user_actor(None)
    assert [(d["verdict"], d["actor"]) for d in mine] == [("answered", me), ("approved", me)]
    assert mine[1]["reason"] == "ship it"


@pytest.mark.slow
def test_cancel_on_the_page_stops_the_runs_worker_and_agent(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running run whose agent hangs: Cancel records it and stops the worker and the
    agent (real processes, gone after); cancelling it again is a 409 one-liner."""
    monkeypatch.setenv("FAKE_FAIL", "hang")
    run_id = start_background(repo)
    wait_for(lambda: any(c["phase"] == "start" for c in agent_calls(agent_log)), what="agent")
    agent_pid = agent_calls(agent_log)[0]["pid"]
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    server = UiServer.start()
    try:
        running = _post(server, f"/runs/{run_id}/resume")
        assert running.status == 409
        assert _message(running).startswith(f"Run {run_id[:8]} is still running (worker ")
        reply = _post(server, f"/runs/{run_id}/cancel", timeout=60)
        assert reply.status == 200, reply.body
        assert _message(reply).endswith(f"Cancelled run {run_id[:8]}.")
        assert not pid_alive(worker_pid)
        wait_for(lambda: not pid_alive(agent_pid), timeout=10, what="the agent to exit")
        row = run_row(run_id)
        assert row["status"] == "cancelled"
        again = _post(server, f"/runs/{run_id}/cancel")
        assert again.status == 409
        assert _message(again).endswith(" is cancelled; cannot cancel it.")
        assert "\n" not in _message(again)
    finally:
        server.stop()


@pytest.mark.slow
def test_resume_on_the_page_finishes_an_interrupted_run_and_refuses_a_completed_one(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker is SIGKILLed mid-node; once the run is interrupted, Resume starts a
    detached worker that completes it (completed nodes not run again). Resuming the
    completed run, or a running one, is a 409 one-line refusal: never a forced take-over."""
    monkeypatch.setenv("FAKE_DELAY", "1.0")
    run_id = start_background(repo)
    wait_for(
        lambda: any(
            c["node"] == "dependencies" and c["phase"] == "start" for c in agent_calls(agent_log)
        ),
        what="the second node",
    )
    worker_pid = run_row(run_id)["pid"]
    assert isinstance(worker_pid, int)
    os.kill(worker_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(worker_pid), timeout=10, what="the worker to die")
    wait_for(lambda: run_row(run_id)["status"] == "interrupted", what="the interruption")
    monkeypatch.setenv("FAKE_DELAY", "0.05")
    server = UiServer.start()
    try:
        reply = _post(server, f"/runs/{run_id[:8]}/resume", timeout=60)
        assert reply.status == 200, reply.body
        assert _message(reply).startswith(f"Resumed run {run_id[:8]}. Started worker ")
        wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
        done = _post(server, f"/runs/{run_id}/resume")
        assert done.status == 409
        assert _message(done) == f"Run {run_id} is completed; cannot resume it."
    finally:
        server.stop()
    starts = [c["node"] for c in agent_calls(agent_log) if c["phase"] == "start"]
    assert starts.count("scan") == 1, "a completed node ran again"
    assert starts.count("dependencies") == 2, "the node in flight is re-run"


def test_a_fork_without_a_checkpoint_it_can_find_is_a_one_line_400(
    server: UiServer, waiting_gate: dict[str, str], shep_home: Path
) -> None:
    """No checkpoint given, an unknown one, or a restore that is none of the three: one line,
    and no fork is recorded."""
    run = waiting_gate["run"]
    none = _post(server, f"/runs/{run}/fork", {"checkpoint": " "})
    assert none.status == 400
    assert _message(none) == "Fork from which checkpoint? Give its id (the Replay shows each)."
    unknown = _post(server, f"/runs/{run}/fork", {"checkpoint": "nosuch"})
    assert unknown.status == 400
    assert _message(unknown).startswith(f"Run {run[:8]} has no checkpoint 'nosuch'")
    odd = _post(server, f"/runs/{run}/fork", {"checkpoint": "x", "restore": "all"})
    assert odd.status == 400
    assert _message(odd) == "Restore 'all'? Use both, state or worktree."
    with EventStore(shep_home / "shep.db") as store:
        assert not [e for e in store.load(UUID(run)) if type(e).__name__ == "RunForked"]


@pytest.mark.slow
def test_fork_on_the_page_starts_a_run_from_the_checkpoint_that_completes(
    repo: Path, fake_claude: Path, agent_log: Path, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A completed run forked on the page at its first node's checkpoint: the fork records
    its origin and checkpoint, runs in a detached worker, re-runs only the steps after the
    checkpoint, and completes; the origin records the fork."""
    from events.checkpoints import CheckpointSaved
    from events.runs import RunCreated, RunForked

    monkeypatch.setenv("FAKE_DELAY", "0.05")
    run_id = start_background(repo)
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="the origin to complete")
    with EventStore(shep_home / "shep.db") as store:
        saved = [e for e in store.load(UUID(run_id)) if isinstance(e, CheckpointSaved)]
    after_scan = next(e for e in saved if e.checkpoint_ns == "" and e.step == 1)
    calls_before = len(agent_calls(agent_log))
    server = UiServer.start()
    try:
        reply = _post(
            server, f"/runs/{run_id[:8]}/fork", {"checkpoint": after_scan.checkpoint_id[:24]}
        )
        assert reply.status == 200, reply.body
        message = _message(reply)
        found = re.match(r"Fork ([0-9a-f]{8}) of run ([0-9a-f]{8}) at checkpoint (\S+) ", message)
        assert found is not None, message
        assert found[2] == run_id[:8]
        assert found[3] == after_scan.checkpoint_id
        assert "Started worker " in message
        fork = found[1]
        wait_for(lambda: run_row(fork)["status"] == "completed", what="the fork to complete")
    finally:
        server.stop()
    fork_id = str(run_row(fork)["run_id"])
    with EventStore(shep_home / "shep.db") as store:
        created = store.load(UUID(fork_id), types=[RunCreated])[0]
        forked = [e for e in store.load(UUID(run_id)) if isinstance(e, RunForked)]
    assert isinstance(created, RunCreated)
    assert (created.origin_run_id, created.origin_checkpoint_id) == (
        UUID(run_id),
        after_scan.checkpoint_id,
    )
    assert [f.fork_run_id for f in forked] == [UUID(fork_id)]
    again = [c["node"] for c in agent_calls(agent_log)[calls_before:] if c["phase"] == "start"]
    assert "scan" not in again, "the fork re-ran a step before its checkpoint"
    assert again, "the fork ran no step after its checkpoint"
