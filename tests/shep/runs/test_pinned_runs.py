"""Runs pinned to their workflow's version: a plug-in workflow changed between a run's start
and its approval is migrated when it says how, refused otherwise (with a fork that works).

Everything goes through the real ``shep`` command line in subprocesses, with the demo
agent, and a real plug-in module (``SHEP_WORKFLOW_MODULES``) rewritten on disk between
the run's start and its approval, as an upgrade would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from events.checkpoints import CheckpointSaved
from events.inbox import ApprovalGranted
from events.runs import NodeCompleted, RunCreated, RunMigrated
from events.store import EventStore
from events.versions import SHEP_VERSION

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[3]

#: The plug-in workflow: draft (agent, writes plan.md) -> review (gate on plan.md) -> LAST
#: (agent). Version 1 calls the last step ``summarize``; version 2 renamed it ``report``.
MODULE = """
from shep.workflows.base import (
    AgentStep, Approval, ApprovalGate, Migration, StepState, Workflow, linear,
)

class State(StepState, total=False):
    budget: int

DRAFT = AgentStep(
    name="draft", title="Draft", instruction="Draft a plan for {{repo}}.", artifact="plan.md"
)
REVIEW = ApprovalGate(
    name="review", title="Review", phase="draft",
    approval=lambda state: Approval(summary="The draft is ready", artifacts=("plan.md",)),
)
LAST = AgentStep(name="{last}", title="Last", instruction="Sum up the plan.")
STEPS = (DRAFT, REVIEW, LAST)
WORKFLOWS = [
    Workflow(
        name="pinflow", description="a plug-in workflow that changes", steps=STEPS,
        build=linear(STEPS, State), version="{version}", migrations={migrations},
    )
]
"""
V1 = MODULE.format(last="summarize", version="1", migrations="{}")
V2 = MODULE.format(last="report", version="2", migrations="{}")
V2_MIGRATED = MODULE.format(
    last="report", version="2", migrations='{"1": Migration(renamed={"summarize": "report"})}'
)
#: A migration that changes the checkpoint: a new state key with its default.
V2_DEFAULTS = MODULE.format(
    last="report",
    version="2",
    migrations='{"1": Migration(renamed={"summarize": "report"}, defaults={"budget": 3})}',
)


class Shep:
    """The real CLI on one home, with the plug-in module in ``plug/pinflow.py``."""

    def __init__(self, tmp: Path) -> None:
        self.home, self.repo, self.plug = tmp / "home", tmp / "repo", tmp / "plug"
        self.repo.mkdir()
        (self.repo / "app.py").write_text("print('hi')\n")
        self.plug.mkdir()
        self.env = {
            **os.environ,
            "SHEP_HOME": str(self.home),
            "SHEP_DEMO_DELAY": "0",
            "SHEP_WORKFLOW_MODULES": "pinflow",
            "PYTHONPATH": f"{self.plug}{os.pathsep}{ROOT}",
            # The module is rewritten within a second: no stale bytecode.
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def module(self, text: str) -> None:
        (self.plug / "pinflow.py").write_text(text)

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "shep", *args],
            cwd=self.repo,
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

    def status(self, run_id: UUID) -> str:
        runs = json.loads(self("status", "--json", "--all").stdout)
        return str(next(r for r in runs if r["run_id"] == run_id.hex)["status"])

    def waiting_run(self) -> UUID:
        """Start a run of version 1 that waits at its gate; its id."""
        self.module(V1)
        self("run", "pinflow", "--repo", str(self.repo))
        runs = json.loads(self("status", "--json", "--all").stdout)
        (run,) = runs
        assert run["status"] == "waiting_approval"
        return UUID(run["run_id"])


@pytest.fixture
def shep(tmp_path: Path) -> Shep:
    runner = Shep(tmp_path)
    runner("settings", "agent", "--agent", "demo")
    return runner


def _completed(events: list[Any]) -> list[str]:
    return [e.node for e in events if isinstance(e, NodeCompleted)]


@pytest.mark.slow
def test_a_run_records_the_workflow_it_started_with(shep: Shep) -> None:
    """``RunCreated`` pins the run: shep's version, the workflow's and its graph's print."""
    run = shep.waiting_run()
    created = shep.events(run)[0]
    assert isinstance(created, RunCreated)
    assert created.shep_version == SHEP_VERSION
    assert created.workflow_version == "1"
    assert created.graph_fingerprint is not None
    assert re.fullmatch(r"[0-9a-f]{16}", created.graph_fingerprint)


@pytest.mark.slow
def test_a_changed_workflow_without_a_migration_is_refused_and_a_fork_goes_on(
    shep: Shep,
) -> None:
    """Approving a run whose workflow changed and declares no migration is
    refused with one line naming both versions and the ways out; nothing is recorded and
    the run still waits. The suggested ``shep fork`` works: the fork runs the new graph
    from that checkpoint, asks the gate again and completes."""
    run = shep.waiting_run()
    short = run.hex[:8]
    before = len(shep.events(run))
    shep.module(V2)

    refused = shep("approve", short, "--wait", ok=False)
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    line = lines[0]
    assert "pinflow version 1" in line
    assert "version 2" in line
    assert f"finish the run with shep {SHEP_VERSION}" in line
    assert len(shep.events(run)) == before  # nothing recorded: the approval neither
    assert shep.status(run) == "waiting_approval"
    assert [i["run_id"] for i in json.loads(shep("inbox", "--json").stdout)] == [run.hex]

    found = re.search(rf"`shep fork {short} --at (\S+)`", line)
    assert found, line
    shep("fork", short, "--at", found.group(1))
    runs = json.loads(shep("status", "--json", "--all").stdout)
    fork = UUID(next(r["run_id"] for r in runs if r["run_id"] != run.hex))
    assert shep.status(fork) == "waiting_approval"  # the gate is asked again, on the fork
    created = shep.events(fork)[0]
    assert isinstance(created, RunCreated)
    assert created.workflow_version == "2"
    shep("approve", fork.hex[:8], "--wait")
    assert shep.status(fork) == "completed"
    assert _completed(shep.events(fork))[-1] == "report"
    assert shep.status(run) == "waiting_approval"  # the origin is left as it was


@pytest.mark.slow
def test_a_changed_workflow_with_a_migration_goes_on_after_the_approval(shep: Shep) -> None:
    """A workflow that declares how runs of version 1 cross over: the approval is
    recorded and used, the migration is recorded naming both versions and prints (and
    shown by replay), and the run completes through the renamed node."""
    run = shep.waiting_run()
    pinned = shep.events(run)[0]
    shep.module(V2_MIGRATED)
    shep("approve", run.hex[:8], "--wait")
    assert shep.status(run) == "completed"
    events = shep.events(run)
    (migrated,) = [e for e in events if isinstance(e, RunMigrated)]
    assert (migrated.from_version, migrated.to_version) == ("1", "2")
    assert migrated.from_fingerprint == pinned.graph_fingerprint
    assert migrated.to_fingerprint != pinned.graph_fingerprint
    assert migrated.renamed == {"summarize": "report"}
    frames = [
        json.loads(line) for line in shep("replay", run.hex[:8], "--json").stdout.splitlines()
    ]
    (frame,) = [f for f in frames if f["status"] == "migrated"]
    assert frame["title"] == "Migrated from pinflow version 1 to 2"
    assert _completed(events)[-2:] == ["review", "report"]
    assert any(isinstance(e, ApprovalGranted) for e in _item_events(shep, events))
    # Pinned to the new version now: another resume needs no migration.
    assert shep("resume", run.hex[:8], ok=False).returncode == 2  # completed: bad input


@pytest.mark.slow
def test_a_migration_that_changes_the_checkpoint_keeps_the_decision(shep: Shep) -> None:
    """A migration that must change the run's checkpoint (a state key added with its
    default) saves a new checkpoint with ``RunMigrated``; the gate waiting on the old one
    is not asked again: the approval given is reapplied (recorded, on the same
    byte-identical artifact) and the run completes."""
    from shep.replay.state import checkpoint_state

    run = shep.waiting_run()
    shep.module(V2_DEFAULTS)
    shep("approve", run.hex[:8], "--wait")
    assert shep.status(run) == "completed"
    events = shep.events(run)
    (migrated,) = [e for e in events if isinstance(e, RunMigrated)]
    assert migrated.defaults == ["budget"]
    assert migrated.checkpoint_id is not None
    (saved,) = [
        e
        for e in events
        if isinstance(e, CheckpointSaved) and e.checkpoint_id == migrated.checkpoint_id
    ]
    assert checkpoint_state(saved)["budget"] == 3
    assert _completed(events)[-2:] == ["review", "report"]
    with EventStore(shep.home / "shep.db") as store:
        granted = [
            e
            for _, e in store.positions_of([ApprovalGranted], after=0)
            if isinstance(e, ApprovalGranted) and e.run_id == run
        ]
    # The person's, then the same decision given again on the new checkpoint's gate.
    assert [g.reapplied_from for g in granted] == [None, granted[0].originator_id]
    assert json.loads(shep("inbox", "--json").stdout) == []


def _item_events(shep: Shep, events: list[Any]) -> list[Any]:
    from events.runs import RunSuspended

    items = [i for e in events if isinstance(e, RunSuspended) for i in e.item_ids]
    return [e for item in items for e in shep.events(item)]


@pytest.mark.slow
def test_a_run_from_before_pins_resumes_under_a_changed_workflow(shep: Shep) -> None:
    """A run created with no pin (as shep 0.1.0 wrote ``RunCreated``) is pinned to nothing
    known: it is not stranded by a changed workflow, it resumes as it always did."""
    from commands.create_run import create_run
    from commands.mark_interrupted import mark_interrupted

    shep.module(V1)
    shep("workflows")  # the home exists
    with EventStore(shep.home / "shep.db") as store:
        run = create_run(
            store,
            workflow="pinflow",
            agent_type="demo",
            repo=str(shep.repo),
            node_names=["draft", "review", "summarize"],
            created_by="user:old",
        )
        mark_interrupted(store, run, reason="shep 0.1.0 stopped", detected_by_pid=1)
        created = store.load(run)[0]
        assert isinstance(created, RunCreated)
        assert created.graph_fingerprint is None
    shep.module(V2)
    shep("resume", run.hex[:8])
    assert shep.status(run) == "waiting_approval"
    shep("approve", run.hex[:8], "--wait")
    assert shep.status(run) == "completed"
    assert _completed(shep.events(run)) == ["draft", "review", "report"]
