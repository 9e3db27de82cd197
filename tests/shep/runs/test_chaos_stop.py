"""SIGSTOP/SIGCONT (and SIGKILL) workers around orphan detection and resume.

Each trial stops a run's worker at a random moment, lets its heartbeat go
stale, and takes the run over (or not) while the old worker sleeps; the old
worker then wakes at a random moment. Every run must complete with each node
completed exactly once, and no event may come from a worker that was fenced off.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import apsw
import msgspec
import pytest

from events.audit import verify_chain
from events.base import Event
from events.runs import (
    AgentStarted,
    HeartbeatRecorded,
    NodeCompleted,
    NodeStarted,
    RunCompleted,
    RunCreated,
    RunInterrupted,
    RunResumed,
    RunStarted,
)
from shep.home.procs import worker_alive
from shep.workflows import get_workflow
from tests.shep.runs.chaos_stop import StopChaos, StopReport, fencing_problems, log_problems

TRIALS = int(os.environ.get("SHEP_CHAOS_STOP_TRIALS", "50"))
SEED = int(os.environ.get("SHEP_CHAOS_SEED", "1"))


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[StopChaos]:
    driver = StopChaos(tmp_path, seed=SEED)
    yield driver
    driver.close()


def _check_every_run(chaos: StopChaos, report: StopReport) -> None:
    """The guarantees, for every run of the session; failures name the run and show its stream."""
    nodes = get_workflow("analyze-repository").node_names
    calls = chaos.agent_calls()
    workers: dict[int, str | None] = {}
    for run_id in report.runs:
        assert chaos.run_state(run_id).status.value == "completed", chaos.describe(run_id)
        events = chaos.events(run_id)
        problems = fencing_problems(run_id, events, calls, list(nodes))
        assert problems == [], "\n".join(problems) + "\n" + chaos.describe(run_id)
        for e in events:
            if isinstance(e, RunStarted | RunResumed):
                workers[e.pid] = e.process_start

    # Every worker that ever owned a run is gone: woken old workers exit once fenced
    # off (one stopped before it was handed the run waits up to a minute for that).
    lingering = [p for p, s in workers.items() if worker_alive(p, s)]
    deadline = time.monotonic() + 90
    while any(worker_alive(p, s) for p, s in workers.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [p for p, s in workers.items() if worker_alive(p, s)]
    assert alive == [], f"workers still running: {alive}"
    print(f"{len(workers)} workers, {len(lingering)} still exiting after the last run ended")

    assert log_problems(chaos.db) == []
    conn = apsw.Connection(str(chaos.db))
    chain = verify_chain(conn)
    conn.close()
    assert chain.ok, chain.problem
    assert chaos.shep("status").returncode == 0  # projections caught up
    incremental = chaos.projection_tables()
    assert chaos.shep("projections", "rebuild").returncode == 0
    assert chaos.projection_tables() == incremental


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_chaos_stop_and_takeover(chaos: StopChaos) -> None:
    """SHEP_CHAOS_STOP_TRIALS (50) stops or kills at random moments, with random takeovers and
    wake-ups: a stopped worker is never taken for an orphan here, every run completes, each
    node exactly once, and nothing is appended by, or started for, a fenced-off worker.
    """
    report = chaos.run_trials(TRIALS)
    assert len(report.trials) >= TRIALS
    print(f"\n{len(report.trials)} trials on {len(report.runs)} runs in {report.seconds:.0f}s")
    for kind, count in sorted(report.counts().items()):
        print(f"  {kind}: {count}")
    print(f"  stopped holding the write lock: {sum(t.in_transaction for t in report.trials)}")
    _check_every_run(chaos, report)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_force_takes_over_a_worker_stopped_inside_a_write_transaction(
    chaos: StopChaos,
) -> None:
    """The rare moment a random SIGSTOP can land on, made certain: the worker stops while it
    holds the store's write lock. No command can read the store until it runs again, but
    `shep resume --force` exists for a stuck or stopped worker: it must stop that worker
    (freeing the lock) and take the run over, with the same guarantees as every trial.
    """
    report = chaos.run_trials(1, max_per_run=1, plan=[("stop-locked", "force")])
    assert report.trials[0].in_transaction
    _check_every_run(chaos, report)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_chaos_stop_smoke(chaos: StopChaos) -> None:
    """One trial of each takeover in the default suite, with the same guarantees: another
    host's orphan check then resume, resume --force, and SIGKILL then resume.
    """
    plan = [("stop", "elsewhere"), ("stop", "force"), ("kill", "resume")]
    report = chaos.run_trials(3, max_per_run=3, plan=plan)
    assert [(t.action, t.takeover) for t in report.trials] == plan or any(
        t.in_transaction for t in report.trials
    )
    _check_every_run(chaos, report)


# -- the checker itself, on a made-up history (fast) ------------------------------------

RUN = UUID(int=7)
NODES = ["scan", "dependencies", "patterns", "report"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _numbered(events: list[Event]) -> list[Event]:
    return [msgspec.structs.replace(e, originator_version=i) for i, e in enumerate(events, 1)]


def _history() -> tuple[list[Event], list[dict[str, Any]]]:
    """Worker 100 (epoch 1) completes scan, is stopped in dependencies and interrupted;
    worker 200 (epoch 2) re-runs dependencies and finishes.
    """
    common: dict[str, Any] = {"originator_id": RUN, "originator_version": 0}
    events: list[Event] = [
        RunCreated(
            **common,
            timestamp=_at(0),
            workflow="analyze-repository",
            agent_type="claude-code",
            repo="/r",
            node_names=NODES,
            created_by="me",
        ),
        RunStarted(**common, timestamp=_at(1), pid=100, host="h", epoch=1),
        NodeStarted(**common, timestamp=_at(2), node="scan"),
        AgentStarted(**common, timestamp=_at(2.4), node="scan", agent="claude-code", pid=1),
        HeartbeatRecorded(**common, timestamp=_at(3), pid=100, host="h"),
        NodeCompleted(**common, timestamp=_at(4), node="scan", duration_ms=1),
        NodeStarted(**common, timestamp=_at(5), node="dependencies"),
        AgentStarted(**common, timestamp=_at(5.4), node="dependencies", agent="claude-code", pid=2),
        RunInterrupted(**common, timestamp=_at(20), reason="stale", epoch=1, detected_by_pid=9),
        RunResumed(**common, timestamp=_at(21), pid=200, host="h", epoch=2),
    ]
    calls = [
        {"run": RUN.hex, "node": "scan", "time": _at(2.5).timestamp(), "pid": 1, "worker": 100},
        {
            "run": RUN.hex,
            "node": "dependencies",
            "time": _at(5.5).timestamp(),
            "pid": 2,
            "worker": 100,
        },
    ]
    for i, node in enumerate(NODES[1:]):
        start = 22 + 2 * i
        events.append(NodeStarted(**common, timestamp=_at(start), node=node))
        events.append(
            AgentStarted(
                **common, timestamp=_at(start + 0.4), node=node, agent="claude-code", pid=3 + i
            )
        )
        calls.append(
            {
                "run": RUN.hex,
                "node": node,
                "time": _at(start + 0.5).timestamp(),
                "pid": 3 + i,
                "worker": 200,
            }
        )
        events.append(NodeCompleted(**common, timestamp=_at(start + 1), node=node, duration_ms=1))
    events.append(RunCompleted(**common, timestamp=_at(30), duration_ms=1))
    return _numbered(events), calls


def test_a_clean_takeover_history_has_no_fencing_problems() -> None:
    """The checker accepts a history where the new owner alone writes after the takeover."""
    events, calls = _history()
    assert fencing_problems(RUN.hex, events, calls, NODES) == []


def test_an_agent_killed_unrecorded_by_a_stopping_worker_is_no_fencing_problem() -> None:
    """SIGTERM reaches a worker between starting an agent and recording it (``resume --force``
    on a worker stopped under the write lock): the worker kills that agent, beats once more
    and records its own interruption. Nothing of the agent reached the log: accepted.
    """
    events, calls = _history()
    common: dict[str, Any] = {"originator_id": RUN, "originator_version": 0}
    events = [e for e in events if not (isinstance(e, AgentStarted) and e.pid == 2)]
    at = next(i for i, e in enumerate(events) if isinstance(e, RunInterrupted))
    events[at : at + 1] = [
        HeartbeatRecorded(**common, timestamp=_at(5.6), pid=100, host="h"),
        RunInterrupted(
            **common,
            timestamp=_at(5.7),
            reason="worker stopped by SIGTERM",
            epoch=1,
            detected_by_pid=100,
        ),
    ]
    assert fencing_problems(RUN.hex, _numbered(events), calls, NODES) == []
    # the same unrecorded agent followed by more work of its worker is caught
    events.insert(at + 1, NodeCompleted(**common, timestamp=_at(5.65), node="x", duration_ms=1))
    problems = fencing_problems(RUN.hex, _numbered(events), calls, NODES)
    assert any("has no AgentStarted, yet that worker went on" in p for p in problems), problems


def _late_heartbeat(events: list[Event], calls: list[dict[str, Any]]) -> None:
    events.insert(
        11,
        HeartbeatRecorded(
            originator_id=RUN, originator_version=0, timestamp=_at(23), pid=100, host="h"
        ),
    )


def _stale_batch(events: list[Event], calls: list[dict[str, Any]]) -> None:
    events.insert(
        10,
        NodeCompleted(
            originator_id=RUN,
            originator_version=0,
            timestamp=_at(6),
            node="dependencies",
            duration_ms=1,
        ),
    )


def _between_owners(events: list[Event], calls: list[dict[str, Any]]) -> None:
    events.insert(
        9,
        HeartbeatRecorded(
            originator_id=RUN, originator_version=0, timestamp=_at(20.5), pid=100, host="h"
        ),
    )


def _late_agent(events: list[Event], calls: list[dict[str, Any]]) -> None:
    """The old worker started an agent (and recorded it) after the takeover."""
    calls.append(
        {"run": RUN.hex, "node": "patterns", "time": _at(23).timestamp(), "pid": 50, "worker": 100}
    )
    events.insert(
        -1,
        AgentStarted(
            originator_id=RUN,
            originator_version=0,
            timestamp=_at(23),
            node="patterns",
            agent="claude-code",
            pid=50,
        ),
    )


def _unrecorded_agent(events: list[Event], calls: list[dict[str, Any]]) -> None:
    """An agent started without its AgentStarted, by a worker that went on."""
    calls.append(
        {
            "run": RUN.hex,
            "node": "patterns",
            "time": _at(22.7).timestamp(),
            "pid": 60,
            "worker": 200,
        }
    )


def _twice(events: list[Event], calls: list[dict[str, Any]]) -> None:
    events.insert(
        -1,
        NodeCompleted(
            originator_id=RUN, originator_version=0, timestamp=_at(29), node="report", duration_ms=1
        ),
    )


def _nobody_s_agent(events: list[Event], calls: list[dict[str, Any]]) -> None:
    calls[0]["worker"] = 1


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (_late_heartbeat, "heartbeat of pid 100, owner is pid 200"),
        (_stale_batch, "before its owner (epoch 2, pid 200) began"),
        (_between_owners, "appended after the run stopped being epoch 1's"),
        (_late_agent, "agent pid 50 is worker 100's, the owner is pid 200"),
        (_unrecorded_agent, "has no AgentStarted, yet that worker went on recording"),
        (_twice, "node completions"),
        (_nobody_s_agent, "has no owner of the run as its parent"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[1:] or None,
)
def test_fencing_problems_finds_each_kind_of_fenced_off_write(
    break_it: Callable[[list[Event], list[dict[str, Any]]], None], expected: str
) -> None:
    """A heartbeat or a batch of the old worker after the takeover, an event while no one owns
    the run, an agent call the old worker started after it was fenced, a node completed twice,
    an agent call of no owner: each is reported.
    """
    events, calls = _history()
    break_it(events, calls)
    problems = fencing_problems(RUN.hex, _numbered(events), calls, NODES)
    assert any(expected in p for p in problems), problems
