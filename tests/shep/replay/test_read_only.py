"""`shep replay` changes nothing: no byte of the store, no file, no agent, no network."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from events.base import utc_now
from events.runs import HeartbeatRecorded
from events.store import EventStore
from shep.agents.process import AgentProcess
from shep.cli import main
from tests.shep.replay.conftest import ROOT, Recorded
from tests.support.cli import shep

STORE_FILES = ("shep.db", "shep.db-wal", "shep.db-shm")


def _fingerprint(home: Path) -> dict[str, tuple[str, int, int] | None]:
    """sha256, size and mtime (ns) of each store file; None for one that is absent."""
    found: dict[str, tuple[str, int, int] | None] = {}
    for name in STORE_FILES:
        path = home / name
        if not path.exists():
            found[name] = None
            continue
        stat = path.stat()
        found[name] = (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            stat.st_size,
            stat.st_mtime_ns,
        )
    return found


def _replays(history: Recorded) -> list[list[str]]:
    return [
        ["replay", history.gated, "--json"],
        ["replay", history.gated],
        ["replay", history.feature, "--at", "last"],
        ["replay", history.gated, "--tree"],
        ["replay", "ffffffff"],
    ]


def _assert_replays_change_nothing(history: Recorded) -> None:
    before, files = _fingerprint(history.home), sorted(os.listdir(history.home))
    time.sleep(0.01)  # a write would move an mtime visibly
    for args in _replays(history):
        shep(*args)
    assert _fingerprint(history.home) == before
    assert sorted(os.listdir(history.home)) == files


def test_store_files_are_unchanged_after_a_clean_close(history: Recorded) -> None:
    """As the recording left the store (the last writer closed it: no -wal or -shm file):
    every byte, size and mtime of shep.db is the same after replays, and no file (no -wal,
    no -shm) appeared in SHEP_HOME.
    """
    assert _fingerprint(history.home)["shep.db-wal"] is None
    _assert_replays_change_nothing(history)


def test_store_files_are_unchanged_after_a_killed_writer(history: Recorded) -> None:
    """A writer killed with its last commit still in the WAL leaves shep.db-wal and
    shep.db-shm behind: replays read that commit and change none of the three files.
    """
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(history.home / "shep.db"), history.analyze],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "ready"
    writer.kill()
    writer.wait(timeout=30)
    assert (history.home / "shep.db-wal").stat().st_size > 0
    _assert_replays_change_nothing(history)
    _assert_reads_the_fork(history)


#: Appends a fork record to a run (a frame of its own) and keeps the store open.
WRITER = """
import sys
from uuid import UUID, uuid4
from events.base import utc_now
from events.runs import RunForked
from events.store import EventStore
store = EventStore(sys.argv[1])
run = UUID(sys.argv[2])
store.append([RunForked(originator_id=run, originator_version=store.stream_version(run) + 1,
    timestamp=utc_now(), fork_run_id=uuid4(), checkpoint_id="cp-from-the-wal",
    forked_by="user:writer", restore="state")])
print("ready", flush=True)
sys.stdin.readline()
store.close()
"""


@contextmanager
def _writer_holding_the_store(history: Recorded) -> Iterator[None]:
    """Another process with the store open for writing, a commit of its own in the WAL."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(history.home / "shep.db"), history.analyze],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert writer.stdout is not None
    assert writer.stdin is not None
    try:
        assert writer.stdout.readline().strip() == "ready"
        yield
    finally:
        writer.stdin.write("\n")
        writer.stdin.flush()
        writer.wait(timeout=30)


def test_store_files_are_unchanged_while_another_process_writes(history: Recorded) -> None:
    """With a writer holding the store open (its commit still in the WAL), replays read its
    latest event and change no byte of the three files meanwhile.
    """
    with _writer_holding_the_store(history):
        _assert_replays_change_nothing(history)
        _assert_reads_the_fork(history)


def _assert_reads_the_fork(history: Recorded) -> None:
    """The replay's last frame is the writer's fork record, which is only in the WAL."""
    done = shep("replay", history.analyze, "--json", "--at", "last", check=True)
    assert '"title":"Forked as run ' in done.stdout
    assert "cp-from-the-wal" in done.stdout


def test_no_agent_no_network_no_langgraph(
    history: Recorded, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process, with sockets, agent processes and every program but `git diff`
    refusing to start, replays of every run (JSON, text, tree) succeed; nothing imported
    LangGraph.
    """

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"replay tried to start or connect: {args[:2]}")

    real_popen = subprocess.Popen

    def only_git_diff(argv: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(argv, list) and argv[0] == "git" and "diff" in argv):
            refuse(argv)
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(AgentProcess, "_start", refuse)
    monkeypatch.setattr(subprocess, "Popen", only_git_diff)
    for name in [m for m in sys.modules if m == "langgraph" or m.startswith("langgraph.")]:
        monkeypatch.delitem(sys.modules, name)

    for args in (
        ["replay", history.gated, "--json"],
        ["replay", history.gated],
        ["replay", history.feature, "--json"],
        ["replay", history.analyze, "--tree"],
    ):
        try:
            main(args)
        except SystemExit as exited:  # main exits only on errors
            raise AssertionError(f"{args}: {capsys.readouterr().err}") from exited
    out = capsys.readouterr().out
    assert "FEATURE-add-a-greeting-function.md" in out  # the git diff stat ran
    assert not [m for m in sys.modules if m == "langgraph" or m.startswith("langgraph.")]


def test_replay_imports_no_langgraph(history: Recorded) -> None:
    """A fresh `shep replay` process never imports LangGraph (it costs a second)."""
    code = (
        "import sys\n"
        "from shep.cli import main\n"
        "try:\n"
        f"    main(['replay', {history.gated!r}, '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('LANGGRAPH', any(m.startswith('langgraph') for m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert "LANGGRAPH False" in done.stderr, done.stderr


def test_heartbeats_appended_meanwhile_do_not_break_a_replay(history: Recorded) -> None:
    """Events appended to the run after its end (a late heartbeat) are read without a frame."""
    with EventStore(history.home / "shep.db") as store:
        from uuid import UUID

        run = UUID(history.analyze)
        store.append(
            [
                HeartbeatRecorded(
                    originator_id=run,
                    originator_version=store.stream_version(run) + 1,
                    timestamp=utc_now(),
                    pid=1,
                    host="h",
                )
            ]
        )
    done = shep("replay", history.analyze, "--json", check=True)
    assert len(done.stdout.splitlines()) == 6
