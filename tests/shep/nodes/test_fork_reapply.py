"""`shep fork --reapply-answers` on a gated run: a gate's decision only on what it decided on.

The origin (``gated-review``) answered its question and approved its gate on the
review file the check step wrote from the agent's draft. A fork from the start
reruns the agent: when the draft comes out the same, the file is byte-identical
and the approval is reapplied; when it comes out different, the fork's gate
waits for a person, while the question's answer is reapplied as before. Each
fork's items record why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from events.checkpoints import CheckpointSaved
from events.inbox import ApprovalGranted, ApprovalRequested, QuestionAnswered, QuestionAsked
from events.store import EventStore
from tests.shep.nodes.test_gates import _start, _waiting_on
from tests.shep.runs.test_background_recovery import run_row, wait_for
from tests.support.cli import shep

pytestmark = pytest.mark.slow


def _decided_origin(repo: Path) -> str:
    run_id = _start(repo)
    question = _waiting_on(run_id, "question")
    shep("answer", str(question["item_id"])[:8], "--option", "small", check=True)
    _waiting_on(run_id, "approval")
    shep("approve", run_id[:8], "--comment", "the draft reads right", check=True)
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="the origin to complete")
    return run_id


def _first_checkpoint(home: Path, run_id: str) -> str:
    with EventStore(home / "shep.db") as store:
        saved = [
            e
            for e in store.load(UUID(run_id))
            if isinstance(e, CheckpointSaved) and e.checkpoint_ns == ""
        ]
    return saved[0].checkpoint_id


def _fork(origin: str, checkpoint: str) -> str:
    before = {r["run_id"] for r in json.loads(shep("status", "--all", "--json").stdout)}
    done = shep("fork", origin[:8], "--at", checkpoint, "--reapply-answers", timeout=120)
    assert done.returncode == 0, done.stderr
    after = {r["run_id"] for r in json.loads(shep("status", "--all", "--json").stdout)}
    [fork] = after - before
    return str(fork)


def _items(home: Path, run_id: str) -> list[list[Any]]:
    """The item streams of ``run_id``, each as its events (asked first)."""
    import apsw

    from events.catalog import decode_event

    conn = apsw.Connection(str(home / "shep.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT originator_id, topic, state FROM stored_events "
            "WHERE topic LIKE 'events.inbox:%' ORDER BY notification_id"
        ).fetchall()
    finally:
        conn.close()
    streams: dict[str, list[Any]] = {}
    for stream, topic, state in rows:
        streams.setdefault(str(stream), []).append(decode_event(str(topic), bytes(state)))
    return [s for s in streams.values() if getattr(s[0], "run_id", None) == UUID(run_id)]


def test_the_same_draft_reapplies_the_approval_a_changed_one_waits(
    repo: Path,
    fake_claude: Path,
    shep_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fork 1 (the agent drafts the same): question and gate reapplied, the fork completes,
    the gate's item says its artifacts are byte-identical. Fork 2 (the agent drafts
    otherwise): the answer is reapplied, the gate waits in the inbox with no decision, its
    item saying the review file differs.
    """
    origin = _decided_origin(repo)
    checkpoint = _first_checkpoint(shep_home, origin)
    same = _fork(origin, checkpoint)
    monkeypatch.setenv("FAKE_SUFFIX", "\nA second take: touch the tests too.")
    changed = _fork(origin, checkpoint)

    # What happened: the same draft went through, the changed one waits for a person.
    why = {
        fork: [getattr(e, "reapply", None) for stream in _items(shep_home, fork) for e in stream]
        for fork in (same, changed)
    }
    assert run_row(same)["status"] == "completed", why
    assert run_row(changed)["status"] == "waiting_approval", why
    waiting = [i for i in json.loads(shep("inbox", "--json").stdout) if i["run_id"] == changed]
    assert [i["kind"] for i in waiting] == ["approval"]

    # What the forks recorded, and why.
    [(question, answered), (gate, approved)] = _items(shep_home, same)
    assert isinstance(question, QuestionAsked)
    assert isinstance(answered, QuestionAnswered)
    assert answered.reapplied_from is not None
    assert isinstance(gate, ApprovalRequested)
    assert isinstance(approved, ApprovalGranted)
    assert approved.actor.startswith("user:")
    assert gate.reapply is not None
    assert gate.reapply.startswith("reapplied: 1 artifact byte-identical to what item ")

    [(question, answered), gate_events] = _items(shep_home, changed)
    assert isinstance(answered, QuestionAnswered)  # the answer is reapplied as documented
    assert answered.reapplied_from is not None
    assert [type(e) for e in gate_events] == [ApprovalRequested]  # nobody approved it
    gate = gate_events[0]
    assert gate.reapply is not None
    assert gate.reapply.startswith("not reapplied: file shep-review.md differs (item ")
    assert gate.reapply.endswith("); waits for a person")
