"""shep fork: a new run from a checkpoint of another, with its lineage, worktree and decisions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from events.checkpoints import CheckpointSaved
from events.features import TaskCompleted
from events.inbox import ApprovalGranted, QuestionAnswered
from events.runs import NodeCompleted, NodeStarted, RunCreated, RunForked
from events.store import EventStore

pytestmark = pytest.mark.timeout(240)

DESCRIPTION = "Add a low-stock report"


class Shep:
    def __init__(self, home: Path, cwd: Path) -> None:
        self.home, self.cwd = home, cwd
        self.env = {**os.environ, "SHEP_HOME": str(home), "SHEP_DEMO_DELAY": "0"}
        self.env.pop("SHEP_WORKFLOW_MODULES", None)

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "shep", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if ok and done.returncode != 0:
            raise AssertionError(f"shep {args} exited {done.returncode}:\n{done.stderr}")
        return done

    def events(self, run_id: UUID) -> list[Any]:
        with EventStore(self.home / "shep.db") as store:
            return store.load(run_id)

    def inbox(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self("inbox", "--json").stdout)
        return items

    def decide_all(self, run: str) -> None:
        """Answer (recommended option) and approve until ``run`` no longer waits."""
        for _ in range(12):
            items = [i for i in self.inbox() if i["run_id"].startswith(run)]
            if not items:
                return
            item = items[0]
            if item["kind"] == "question":
                option = next(o for o in item["options"] if o["recommended"])
                self("answer", item["item_id"][:8], "--option", option["id"], "--wait")
            else:
                self("approve", item["item_id"][:8], "--wait")
        raise AssertionError("the run kept asking")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def shep(tmp_path: Path) -> Shep:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("print('hi')\n")
    _git(repo.parent, "init", "-q", "-b", "main", str(repo))
    _git(repo, "config", "user.name", "Tester")
    _git(repo, "config", "user.email", "tester@example.com")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    runner = Shep(tmp_path / "home", repo)
    runner("settings", "agent", "--agent", "demo")
    runner("settings", "set", "test_command", "git status --short")
    return runner


def _feature(shep: Shep) -> UUID:
    shep("feat", "new", DESCRIPTION)
    run = next(r for r in json.loads(shep("status", "--json", "--all").stdout))["run_id"]
    shep.decide_all(run[:8])
    return UUID(run)


def _checkpoint_before(events: list[Any], node: str) -> CheckpointSaved:
    """The newest checkpoint before ``node`` first started."""
    found = None
    for event in events:
        if isinstance(event, NodeStarted) and event.node == node:
            break
        if isinstance(event, CheckpointSaved) and event.checkpoint_ns == "":
            found = event
    assert found is not None
    return found


def _runs(shep: Shep) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(shep("status", "--json", "--all").stdout)
    return runs


@pytest.mark.slow
def test_a_feature_fork_goes_on_from_the_checkpoint_with_the_files_of_its_snapshot(
    shep: Shep,
) -> None:
    origin = _feature(shep)
    events = shep.events(origin)
    checkpoint = _checkpoint_before(events, "implement")
    done = shep("fork", origin.hex[:8], "--at", checkpoint.checkpoint_id[:20], "--id", "k1")
    runs = [r for r in _runs(shep) if r["run_id"] != origin.hex]
    assert len(runs) == 1
    fork = UUID(runs[0]["run_id"])
    assert f"Fork {fork.hex[:8]} of run {origin.hex[:8]}" in done.stderr

    # Lineage both ways, in one transaction.
    created = shep.events(fork)[0]
    assert isinstance(created, RunCreated)
    assert (created.origin_run_id, created.origin_checkpoint_id) == (
        origin,
        checkpoint.checkpoint_id,
    )
    assert created.fork_restore == "both"
    [forked] = [e for e in shep.events(origin) if isinstance(e, RunForked)]
    assert (forked.fork_run_id, forked.checkpoint_id, forked.fork_key) == (
        fork,
        checkpoint.checkpoint_id,
        "k1",
    )

    # The steps before the checkpoint never ran in the fork; implement did.
    fork_events = shep.events(fork)
    started = [e.node for e in fork_events if isinstance(e, NodeStarted)]
    assert "requirements" not in started
    assert "plan" not in started
    assert "implement" in started
    # The worktree began as the origin's snapshot at that checkpoint: the plan is there,
    # none of the tasks' files.
    snapshot = [
        e.snapshot
        for e in events[: events.index(checkpoint)]
        if isinstance(e, NodeCompleted | TaskCompleted) and e.snapshot
    ][-1]
    planned = _git(shep.cwd, "ls-tree", "-r", "--name-only", snapshot).split()
    assert any(p.endswith("plan.yaml") for p in planned)
    assert not any(p.endswith("core.py") for p in planned)
    # It stops at the merge gate: the origin's decisions are not carried over.
    waiting = [i for i in shep.inbox() if i["run_id"] == fork.hex]
    assert [i["node"] for i in waiting] == ["merge_gate"]
    # A branch and worktree of its own (the origin's were removed when it merged).
    assert created.inputs["branch"] in _git(shep.cwd, "branch", "--list", created.inputs["branch"])
    worktree = Path(created.repo)
    assert (worktree / created.inputs["spec_dir"] / "plan.yaml").is_file()
    assert any(worktree.rglob("core.py"))  # implement wrote the tasks' files again

    # The same key: the same fork, nothing new.
    again = shep("fork", origin.hex[:8], "--at", checkpoint.checkpoint_id[:20], "--id", "k1")
    assert again.stdout.strip() == fork.hex
    assert "already exists" in again.stderr
    assert len(_runs(shep)) == 2
    assert len([e for e in shep.events(origin) if isinstance(e, RunForked)]) == 1


@pytest.mark.slow
def test_reapply_answers_gives_the_fork_the_origins_decisions_on_record(shep: Shep) -> None:
    origin = _feature(shep)
    events = shep.events(origin)
    checkpoint = _checkpoint_before(events, "analyze")
    shep("fork", origin.hex[:8], "--at", checkpoint.checkpoint_id, "--reapply-answers")
    fork = UUID(next(r["run_id"] for r in _runs(shep) if r["run_id"] != origin.hex))
    status = next(r for r in _runs(shep) if r["run_id"] == fork.hex)
    assert status["status"] == "completed"  # nobody was asked again
    assert not [i for i in shep.inbox() if i["run_id"] == fork.hex]
    with EventStore(shep.home / "shep.db") as store:
        items = _all_item_events(store)
    origin_decisions = {
        e.originator_id: e
        for e in items
        if isinstance(e, QuestionAnswered | ApprovalGranted) and e.run_id == origin
    }
    reapplied = [
        e for e in items if isinstance(e, QuestionAnswered | ApprovalGranted) and e.run_id == fork
    ]
    # The question and the three gates, each decided again on the fork's own item, by the
    # same person, naming the origin's item.
    assert len(reapplied) == len(origin_decisions) == 4
    for decision in reapplied:
        assert decision.reapplied_from in origin_decisions
        first = origin_decisions[decision.reapplied_from]
        assert (decision.actor, type(decision)) == (first.actor, type(first))
        assert decision.originator_id != first.originator_id
    # The origin merged; the fork, with the same files, finds nothing more to merge.
    assert "FeatureMerged" not in {type(e).__name__ for e in shep.events(fork)}
    # Each gate's decision was reapplied because what it showed is byte-identical
    # (the spec files; for the merge gate the diff and the test result).
    with EventStore(shep.home / "shep.db") as store:
        items = _fork_items(store, fork)
    gates = {node: s[0] for node, s in items.items() if node in ("prd", "plan_gate", "merge_gate")}
    assert set(gates) == {"prd", "plan_gate", "merge_gate"}
    for gate in gates.values():
        assert gate.reapply.startswith("reapplied: "), gate.reapply
        assert " byte-identical to what item " in gate.reapply
    assert [a.kind for a in gates["merge_gate"].artifacts] == ["diff", "tests"]


def _all_item_events(store: EventStore) -> list[Any]:
    import apsw

    from events.catalog import decode_event

    conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT topic, state FROM stored_events WHERE topic LIKE 'events.inbox:%'"
        ).fetchall()
    finally:
        conn.close()
    return [decode_event(str(topic), bytes(state)) for topic, state in rows]  # type: ignore[arg-type]


def test_fork_refusals_are_one_line(shep: Shep) -> None:
    shep("run", "analyze-repository")
    run = _runs(shep)[0]["run_id"]
    bad = shep("fork", run[:8], "--at", "nope", ok=False)
    assert bad.returncode != 0
    assert "has no checkpoint 'nope'" in bad.stderr
    assert "Traceback" not in bad.stderr
    worktree = shep("fork", run[:8], "--at", "1", "--restore", "worktree", ok=False)
    assert worktree.returncode != 0
    assert len(worktree.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_an_analysis_fork_reruns_only_the_steps_after_its_checkpoint(shep: Shep) -> None:
    shep("run", "analyze-repository")
    origin = UUID(_runs(shep)[0]["run_id"])
    checkpoint = _checkpoint_before(shep.events(origin), "patterns")
    shep("fork", origin.hex, "--at", checkpoint.checkpoint_id)
    fork = UUID(next(r["run_id"] for r in _runs(shep) if r["run_id"] != origin.hex))
    started = [e.node for e in shep.events(fork) if isinstance(e, NodeStarted)]
    assert started == ["patterns", "report"]
    assert next(r for r in _runs(shep) if r["run_id"] == fork.hex)["status"] == "completed"


def _fork_items(store: EventStore, fork: UUID) -> dict[str, list[Any]]:
    """The fork's item streams by node, each as its events (asked first)."""
    streams: dict[UUID, list[Any]] = {}
    for event in _all_item_events(store):
        streams.setdefault(event.originator_id, []).append(event)
    return {s[0].node: s for s in streams.values() if getattr(s[0], "run_id", None) == fork}


@pytest.mark.slow
def test_the_merge_gate_of_a_fork_whose_worktree_differs_waits(shep: Shep) -> None:
    """A feature fork at the checkpoint before its tests, with --reapply-answers and the
    state only (so the worktree lacks what implement wrote): its merge gate shows another
    diff than the one the origin's approver saw, so it waits for a person, and its item
    says why. The same fork of an identical worktree (the first test of this file's
    reapply) goes through; the gates passed before the checkpoint are not asked again.
    """
    origin = _feature(shep)
    checkpoint = _checkpoint_before(shep.events(origin), "tests")
    shep(
        "fork",
        origin.hex[:8],
        "--at",
        checkpoint.checkpoint_id,
        "--restore",
        "state",
        "--reapply-answers",
    )
    fork = UUID(next(r["run_id"] for r in _runs(shep) if r["run_id"] != origin.hex))
    assert next(r for r in _runs(shep) if r["run_id"] == fork.hex)["status"] == ("waiting_approval")
    assert [i["node"] for i in shep.inbox() if i["run_id"] == fork.hex] == ["merge_gate"]
    with EventStore(shep.home / "shep.db") as store:
        items = _fork_items(store, fork)
    assert list(items) == ["merge_gate"]
    [asked] = items["merge_gate"]  # asked, and nobody decided
    assert asked.reapply.startswith("not reapplied: diff ")
    assert " differs (item " in asked.reapply
    assert [a.kind for a in asked.artifacts] == ["diff", "tests"]
    assert "FeatureMerged" not in {type(e).__name__ for e in shep.events(fork)}


@pytest.mark.slow
def test_a_fork_at_a_question_asks_it_again_from_its_own_worktree(shep: Shep) -> None:
    """A fork from the checkpoint before the clarify question asks that question again,
    and its gate's summary counts the answer: a question's and a gate's step read the
    spec in the fork's worktree. The copied state names the origin's worktree, removed
    when the origin merged, where clarify found no open question and the fork failed."""
    from events.inbox import QuestionAsked

    origin = _feature(shep)
    assert not Path(shep.events(origin)[0].repo).exists()  # merged, worktree removed
    checkpoint = _checkpoint_before(shep.events(origin), "clarify")
    shep("fork", origin.hex[:8], "--at", checkpoint.checkpoint_id)
    fork = next(r["run_id"] for r in _runs(shep) if r["run_id"] != origin.hex)
    waiting = [i for i in shep.inbox() if i["run_id"] == fork]
    assert [i["node"] for i in waiting] == ["clarify"]
    with EventStore(shep.home / "shep.db") as store:
        asked = [e for e in _all_item_events(store) if isinstance(e, QuestionAsked)]
    assert {e.question for e in asked if e.run_id == origin} == {waiting[0]["prompt"]}
    option = next(o for o in waiting[0]["options"] if o["recommended"])
    shep("answer", waiting[0]["item_id"][:8], "--option", option["id"], "--wait")
    [gate] = [i for i in shep.inbox() if i["run_id"] == fork]
    assert gate["node"] == "prd", gate
    assert "1 open question answered" in json.dumps(gate), gate
