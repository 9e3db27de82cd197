"""SIGSTOP/SIGCONT (and SIGKILL) workers around orphan detection and resume.

Each trial stops a run's worker at a random moment, lets its heartbeat go
stale, and takes the run over (or not) while the old worker sleeps; the old
worker then wakes at a random moment. Every run must complete with each node
completed exactly once, and no event may come from a worker that was fenced off.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from events.audit import verify_chain
from events.runs import RunResumed, RunStarted
from shep.recovery import worker_alive
from shep.workflows import get_workflow
from tests.runtime.chaos_stop import StopChaos, StopReport, fencing_problems, log_problems

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
    deadline = time.monotonic() + 90
    while any(worker_alive(p, s) for p, s in workers.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [p for p, s in workers.items() if worker_alive(p, s)]
    assert alive == [], f"workers still running: {alive}"

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
