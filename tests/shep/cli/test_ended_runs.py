"""A run that ended while a person was asked something: nothing of it shows as waiting.

The history is written with the real commands into a real store (a feature
waiting at its plan gate, as ``test_feat_views`` makes it), then cancelled or
failed; the read commands run in-process through ``shep.cli.main`` and the
projections are compared with a rebuild from the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from commands.cancel_run import cancel_run
from commands.fail_run import fail_run
from events.store import EventStore
from shep.cli import main
from tests.shep.cli.test_feat_views import Clock, _waiting_feature, clock, isolated_git
from tests.shep.workflows.conftest import agent, repo
from tests.support.event_log import assert_rebuild_equals_incremental

__all__ = ["agent", "clock", "isolated_git", "repo"]  # fixtures this module uses


@pytest.fixture
def shep_out(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """``shep ARGS`` in this process: its stdout (exit 0 checked)."""

    def run(*args: str) -> str:
        capsys.readouterr()
        code = 0
        try:
            main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out

    return run


@pytest.mark.parametrize("end", ["cancelled", "failed"])
def test_a_gate_of_an_ended_run_is_no_longer_waiting(
    shep_out: Callable[..., str],
    store: EventStore,
    shep_home: Path,
    repo: Path,
    clock: Clock,
    end: str,
) -> None:
    """A feature waiting at its plan gate is cancelled (or fails): `status RUN` (text and
    JSON) and `feat show` (text and JSON) show its gate node stopped, not waiting, and
    nothing waits; the projections equal a rebuild.
    """
    run_id, _, _ = _waiting_feature(store, shep_home, repo, clock)
    short = run_id.hex[:8]
    before = json.loads(shep_out("status", short, "--json"))
    assert {n["node"]: n["status"] for n in before["nodes"]}["plan_gate"] == "waiting"
    if end == "cancelled":
        cancel_run(store, run_id, cancelled_by="tester")
    else:
        fail_run(store, run_id, error_type="WorkerError", message="the worker failed")

    status = json.loads(shep_out("status", short, "--json"))
    assert status["status"] == end
    assert status["waiting"] == []
    assert {n["node"]: n["status"] for n in status["nodes"]}["plan_gate"] == "stopped"
    assert " waiting " not in shep_out("status", short)
    shown = json.loads(shep_out("feat", "show", short, "--json"))
    assert shown["waiting"] == []
    assert {n["node"]: n["status"] for n in shown["nodes"]}["plan_gate"] == "stopped"
    text = shep_out("feat", "show", short)
    assert "waiting" not in text.replace("waiting for people", ""), text
    assert_rebuild_equals_incremental(shep_home)
