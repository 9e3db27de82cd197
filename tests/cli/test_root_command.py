"""The root `shep` command as a person meets it: no arguments, a typo, `--help`, the notices.

The commands run as real subprocesses (``python -m shep``) on a real store.
Runs are made at the store level with the real commands; an orphan is a run
whose recorded worker pid belongs to a process that has exited.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from commands.create_run import create_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.inbox import QuestionOption
from events.store import EventStore
from shep.home.identity import host_name
from shep.home.procs import process_start
from tests.support.cli import shep


def _orphan(store: EventStore, repo: str = "/r") -> str:
    """A run started by a worker that is gone: any shep command marks it interrupted."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    run_id = create_run(
        store,
        workflow="analyze-repository",
        agent_type="demo",
        repo=repo,
        node_names=["scan", "report"],
        created_by="me",
    )
    start_run(store, run_id, pid=gone.pid, host=host_name(), process_start="gone:1")
    return run_id.hex


def test_shep_alone_prints_its_help_and_exits_0() -> None:
    """`shep` with no arguments is a person asking what shep does: the help, exit 0."""
    result = shep()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: shep [OPTIONS] COMMAND [ARGS]...")
    assert "  status " in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("typed", "meant"), [("stauts", "status"), ("inbx", "inbox"), ("replya", "replay")]
)
def test_a_mistyped_command_gets_a_did_you_mean(typed: str, meant: str) -> None:
    """A top-level typo names the command meant (never an internal one), exit 2."""
    result = shep(typed)
    assert result.returncode == 2
    assert f"No such command '{typed}'." in result.stderr
    assert f"Did you mean '{meant}'?" in result.stderr
    assert "_worker" not in result.stderr
    assert "Traceback" not in result.stderr


def test_help_runs_nothing_but_the_help(store: EventStore, shep_home: Path) -> None:
    """`shep CMD --help` (and -h, and of a subcommand) prints the help and nothing else
    happens: an orphaned run stays running and a question past its deadline stays
    pending (no event is appended); the next real command does mark the orphan.
    """
    orphan = _orphan(store)
    waiting = create_run(
        store,
        workflow="gated-review",
        agent_type="claude-code",
        repo="/r",
        node_names=["scope"],
        created_by="me",
    )
    me = os.getpid()
    state = start_run(store, waiting, pid=me, host=host_name(), process_start=process_start(me))
    ask = Ask(
        interrupt_id="q",
        kind="question",
        node="scope",
        question="How large?",
        options=[
            QuestionOption(id="small", label="Small", recommended=True),
            QuestionOption(id="large", label="Large"),
        ],
        default_after=0.01,
    )
    suspend_run(store, waiting, [ask], epoch=state.epoch)
    time.sleep(0.05)
    before = store.max_position()
    for args in (
        ("status", "--help"),
        ("inbox", "-h"),
        ("feat", "new", "--help"),
        ("settings", "agent", "--help"),
        ("logs", orphan[:8], "--help"),
    ):
        result = shep(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("Usage: shep "), result.stdout
        assert result.stderr == "", (args, result.stderr)
    assert store.max_position() == before, "a --help appended events"
    status = shep("status", orphan[:8])
    assert "status    interrupted" in status.stdout


def test_the_interrupted_notice_says_how_to_resume(store: EventStore) -> None:
    """The notice of a run found interrupted points at what to do, `shep resume RUN`, not
    at the command that printed it; with two, at `shep resume RUN` and where they are listed.
    """
    run = _orphan(store)
    status = shep("status")
    assert status.returncode == 0, status.stderr
    assert status.stderr.splitlines() == [f"1 interrupted run: shep resume {run[:8]}"]
    _orphan(store)
    _orphan(store)
    listed = shep("status")
    assert listed.stderr.splitlines() == ["2 interrupted runs: shep resume RUN"]
    _orphan(store)
    _orphan(store)
    elsewhere = shep("inbox")
    assert elsewhere.stderr.splitlines() == [
        "2 interrupted runs: `shep status` lists them, `shep resume RUN` continues one"
    ]
