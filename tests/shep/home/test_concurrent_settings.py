"""Settings changed by several processes at once: every change is kept, none fails on a conflict.

The processes meet at a barrier before each change, so their reads and writes
overlap as closely as processes on one machine can make them.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import stat
import subprocess
import sys
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path

from commands.configure_agent import change_setting, configure_agent
from events.errors import InvalidSettingError, ShepError
from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged
from events.store import EventStore
from shep.agents import AGENT_SPECS
from shep.home.secrets import load_token, save_token
from shep.home.settings import load_settings

PROCESSES = 8
ROUNDS = 3


def _change_settings(db: str, index: int, barrier: Barrier) -> None:
    """One writer: in each round, wait for the others, then change a setting or the agent.

    A failed change does not stop the writer (the others would wait for it at
    the barrier); the exit code counts the failures.
    """
    failures = 0
    with EventStore(db) as store:
        for round_ in range(ROUNDS):
            barrier.wait(timeout=60)
            try:
                if index % 2:
                    configure_agent(
                        store,
                        agent_type="demo",
                        auth_method="session",
                        model=f"model-{round_}-{index}",
                        configured_by=f"writer-{index}",
                    )
                else:
                    change_setting(
                        store,
                        key="agent_timeout",
                        value=str(1000 + round_ * PROCESSES + index),
                        changed_by=f"writer-{index}",
                    )
            except ShepError as e:
                print(f"writer {index}, round {round_}: {e}", file=sys.stderr)
                failures += 1
    sys.exit(failures)


def _save_tokens(home: str, index: int, rounds: int, barrier: Barrier) -> None:
    """One writer of the secrets file: in each round, a token for its own agent in a fresh home."""
    for round_ in range(rounds):
        barrier.wait(timeout=60)
        save_token(Path(home) / str(round_), f"agent-{index}", f"token-{round_}-{index}")


def _change_one_rule_side(stores: str, key: str, value: str, rounds: int, barrier: Barrier) -> None:
    """One writer per side of heartbeat_interval <= orphan_after / 3, one store per round."""
    for round_ in range(rounds):
        barrier.wait(timeout=60)
        with (
            EventStore(Path(stores) / f"{round_}.db") as store,
            contextlib.suppress(InvalidSettingError),
        ):
            change_setting(store, key=key, value=value, changed_by=key)


def _run_all(target: object, args: list[tuple[object, ...]]) -> list[int | None]:
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=target, args=a) for a in args]  # type: ignore[attr-defined]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=110)
    return [process.exitcode for process in processes]


def test_concurrent_setting_changes_all_succeed(db_path: Path) -> None:
    """8 processes changing settings and the agent at once: all succeed, every change is logged.

    Each writer that loses the race for a version reloads and appends again,
    instead of failing with a version conflict.
    """
    EventStore(db_path).close()
    barrier = multiprocessing.get_context("spawn").Barrier(PROCESSES)
    exits = _run_all(_change_settings, [(str(db_path), i, barrier) for i in range(PROCESSES)])
    assert exits == [0] * PROCESSES
    with EventStore(db_path) as store:
        events = store.load(SETTINGS_STREAM_ID)
    assert [e.originator_version for e in events] == list(range(1, PROCESSES * ROUNDS + 1))
    timeouts = sorted(e.value for e in events if isinstance(e, SettingChanged))
    models = sorted(e.model or "" for e in events if isinstance(e, AgentConfigured))
    writers = range(PROCESSES)
    assert timeouts == sorted(
        str(float(1000 + r * PROCESSES + i)) for r in range(ROUNDS) for i in writers if i % 2 == 0
    )
    assert models == sorted(f"model-{r}-{i}" for r in range(ROUNDS) for i in writers if i % 2)


def test_concurrent_changes_never_break_the_rule_between_settings(tmp_path: Path) -> None:
    """heartbeat_interval 40 and orphan_after 100 set at once: each is valid alone, not together.

    A writer that loses the race decides again on the other's value and is
    refused, so the log never holds a pair the readers would have to skip.
    """
    rounds = 10
    stores = tmp_path / "stores"
    stores.mkdir()
    for round_ in range(rounds):
        EventStore(stores / f"{round_}.db").close()
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    sides = [("heartbeat_interval", "40"), ("orphan_after", "100")]
    exits = _run_all(
        _change_one_rule_side, [(str(stores), k, v, rounds, barrier) for k, v in sides]
    )
    assert exits == [0, 0]
    for round_ in range(rounds):
        with EventStore(stores / f"{round_}.db") as store:
            recorded = [e for e in store.load(SETTINGS_STREAM_ID) if isinstance(e, SettingChanged)]
            settings = load_settings(store)
        assert len(recorded) == 1
        assert settings.skipped == []
        assert settings.values["heartbeat_interval"] * 3 <= settings.values["orphan_after"]


def test_concurrent_token_saves_keep_every_token(tmp_path: Path) -> None:
    """Two processes storing tokens for two agents at once, 40 times over: no token is lost.

    The secrets file is read, changed and replaced under an exclusive lock, and
    stays mode 0600.
    """
    rounds = 40
    homes = tmp_path / "homes"
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    exits = _run_all(_save_tokens, [(str(homes), i, rounds, barrier) for i in range(2)])
    assert exits == [0, 0]
    lost = [
        r
        for r in range(rounds)
        if json.loads((homes / str(r) / "secrets").read_text())
        != {"agent-0": f"token-{r}-0", "agent-1": f"token-{r}-1"}
    ]
    assert lost == []
    for r in range(rounds):
        assert stat.S_IMODE((homes / str(r) / "secrets").stat().st_mode) == 0o600
        assert load_token(homes / str(r), "agent-1") == f"token-{r}-1"


def test_concurrent_cli_token_configuration_keeps_every_token(
    shep_home: Path, db_path: Path, tmp_path: Path
) -> None:
    """Several `shep settings agent --token-stdin` at once: all succeed, all tokens are stored.

    Each process blocks reading its token until all have started, then all
    tokens are written at once. The store exists already: this is about
    settings and secrets, not about creating a store from several processes.
    """
    EventStore(db_path).close()
    binary = tmp_path / "bin" / "agent"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\necho 1.2.3\n")
    binary.chmod(0o755)
    agents = sorted(t for t, spec in AGENT_SPECS.items() if spec.binary)[:4]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shep",
                "settings",
                "agent",
                "--agent",
                agent,
                "--auth",
                "token",
                "--token-stdin",
                "--binary",
                str(binary),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for agent in agents
    ]
    _wait_until_reading_stdin([p.pid for p in processes])
    for agent, process in zip(agents, processes, strict=True):
        assert process.stdin is not None
        process.stdin.write(f"token-of-{agent}\n")
        process.stdin.flush()
    results = [(p.wait(timeout=60), *p.communicate()) for p in processes]
    assert [(code, err) for code, _, err in results] == [(0, "")] * len(agents)
    assert json.loads((shep_home / "secrets").read_text()) == {a: f"token-of-{a}" for a in agents}
    with EventStore(shep_home / "shep.db") as store:
        configured = [e for e in store.load(SETTINGS_STREAM_ID) if isinstance(e, AgentConfigured)]
    assert sorted(e.agent_type for e in configured) == agents


def _wait_until_reading_stdin(pids: list[int]) -> None:
    """Wait until each process sleeps in a pipe read (its token prompt), as /proc tells.

    Where the kernel hides wait channels ("0"), wait a few seconds instead.
    """
    start = time.monotonic()
    waiting = set(pids)
    while waiting and time.monotonic() - start < 30:
        for pid in list(waiting):
            try:
                wchan = Path(f"/proc/{pid}/wchan").read_text()
            except OSError:
                wchan = "0"
            if "pipe" in wchan or (wchan == "0" and time.monotonic() - start > 3):
                waiting.discard(pid)
        time.sleep(0.02)
