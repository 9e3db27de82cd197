"""The keeper of a shared home's copy (``projections.keeper``, ``shep _keep``).

While a keeper holds its lock and has checked with the server lately, the readers
(status, inbox, logs) read the copy as it is, without importing psycopg; what
another home decides shows once the keeper applied it; a SIGKILLed keeper is not
trusted (reads pull again, and say nothing stale); with the server stopped the
keeper says so and reads say how old the copy is. A write from this home shows
in its next read even while its keeper is stopped. A read that finds no keeper
starts one and says so; doctor shows it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from commands.create_run import create_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.inbox import QuestionOption
from events.postgres_url import where
from events.sqlite_file import connect
from events.store import EventStore
from projections import keeper
from projections.mirror import copy_file
from projections.tables import VERSIONS_TABLE
from tests.shep.runs.test_background_recovery import wait_for
from tests.support.cli import shep
from tests.support.postgres_server import PostgresServer

#: What a probe process prints: whether psycopg was imported by the command it ran.
_PROBE = (
    "import sys\n"
    "from shep.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "sys.stderr.write('PSYCOPG=' + str('psycopg' in sys.modules) + '\\n')\n"
)


def probe(*args: str, env: dict[str, str] | None = None) -> tuple[str, str, bool]:
    """``shep ARGS`` in a process that reports whether it imported psycopg: (stdout,
    stderr without the report, imported)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    lines = result.stderr.splitlines()
    report = [line for line in lines if line.startswith("PSYCOPG=")]
    assert report, result.stderr
    rest = "\n".join(line for line in lines if not line.startswith("PSYCOPG="))
    return result.stdout, rest, report[-1] == "PSYCOPG=True"


def waiting_run(store: EventStore) -> UUID:
    """A run of another host suspended on one question (no process of this test resumes it)."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["ask"], created_by="me"
    )
    state = start_run(store, run_id, pid=1, host="elsewhere")
    ask = Ask(
        interrupt_id="i1",
        kind="question",
        node="ask",
        question="Which?",
        options=[QuestionOption(id="a", label="A"), QuestionOption(id="b", label="B")],
    )
    suspend_run(store, run_id, [ask], epoch=state.epoch)
    return run_id


def copy_of(home: Path) -> str:
    return copy_file(str(home), os.environ["SHEP_DATABASE_URL"])


def is_kept(home: Path) -> bool:
    """Whether readers of ``home`` would trust its copy as it is now."""
    if not os.path.exists(copy_of(home)):
        return False
    conn = connect(copy_of(home), readonly=True)
    try:
        return keeper.kept(conn, copy_of(home), where(os.environ["SHEP_DATABASE_URL"])) is not None
    finally:
        conn.close()


class Keeper:
    """A ``shep _keep`` of the test's own, stopped (SIGKILL) at the end."""

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self.home = home
        home.mkdir(mode=0o700, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shep", "_keep", "--linger", "120", "--heartbeat", "0.5"],
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for(lambda: is_kept(home), timeout=30, what="the keeper's first check")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def output(self) -> str:
        self.kill()
        assert self.process.stdout is not None
        return self.process.stdout.read()


@pytest.fixture
def on_shared(pg_url: str, monkeypatch: pytest.MonkeyPatch, shep_home: Path) -> str:
    monkeypatch.setenv("SHEP_DATABASE_URL", pg_url)
    monkeypatch.setenv("SHEP_HOST", "laptop")
    return pg_url


@pytest.fixture
def kept_home(on_shared: str, shep_home: Path) -> Iterator[Keeper]:
    started = Keeper(shep_home)
    try:
        yield started
    finally:
        started.kill()


@pytest.mark.slow
def test_status_reads_the_kept_copy_without_importing_psycopg(
    on_shared: str, kept_home: Keeper
) -> None:
    """With a keeper running, `shep status` and `shep inbox` read the copy as it is: no
    psycopg, nothing said on stderr, and the runs the keeper copied are shown."""
    with EventStore(on_shared) as store:
        run_id = waiting_run(store)
    wait_for(lambda: run_id.hex[:8] in probe("status")[0], what="the run in the copy")
    out, err, imported = probe("status")
    assert run_id.hex[:8] in out
    assert (err, imported) == ("1 waiting in the inbox: shep inbox", False)
    out, err, imported = probe("inbox", "--json")
    assert [i["run_id"] for i in json.loads(out)] == [run_id.hex]
    assert (err, imported) == ("", False)


@pytest.mark.slow
def test_a_decision_made_from_another_home_shows_once_the_keeper_applied_it(
    on_shared: str, kept_home: Keeper, tmp_path: Path
) -> None:
    """The build box answers the laptop's question; the laptop's status and inbox show it
    decided, read from the copy its keeper brought up to date (no psycopg)."""
    with EventStore(on_shared) as store:
        run_id = waiting_run(store)
    wait_for(lambda: len(json.loads(probe("inbox", "--json")[0])) == 1, what="the question")
    (item,) = json.loads(probe("inbox", "--json")[0])
    buildbox = {"SHEP_HOME": str(tmp_path / "buildbox"), "SHEP_HOST": "buildbox"}
    shep("answer", item["item_id"][:8], "--option", "b", env=buildbox, check=True)

    wait_for(lambda: json.loads(probe("inbox", "--json")[0]) == [], what="the answer")
    out, err, imported = probe("status", run_id.hex, "--json")
    assert json.loads(out)["waiting"] == []
    assert (err, imported) == ("", False)


@pytest.mark.slow
def test_a_killed_keeper_is_not_trusted(on_shared: str, kept_home: Keeper) -> None:
    """After SIGKILL the keeper's last word stays in the copy, but no lock: status asks the
    server again (imports psycopg), shows what was appended since, and says nothing stale."""
    kept_home.kill()
    with EventStore(on_shared) as store:
        run_id = waiting_run(store)
    out, err, imported = probe("status")
    assert run_id.hex[:8] in out
    assert (err, imported) == ("1 waiting in the inbox: shep inbox", True)


@pytest.mark.slow
def test_with_the_server_stopped_reads_say_how_old_the_copy_is(
    own_pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch, shep_home: Path
) -> None:
    """The keeper finds the server gone and records it; status reads the copy without
    trying the server (no connect timeout, no psycopg) and says it is as of its last copy."""
    url = own_pg_server.database()
    monkeypatch.setenv("SHEP_DATABASE_URL", url)
    with EventStore(url) as store:
        run_id = waiting_run(store)
    started = Keeper(shep_home)
    try:
        wait_for(lambda: run_id.hex[:8] in probe("status")[0], what="the run in the copy")
        conn = connect(copy_of(shep_home), readonly=True)
        word = keeper.last_word(conn)
        conn.close()
        assert word is not None
        assert word.online
        own_pg_server.stop()
        wait_for(lambda: "as of" in probe("status")[1], what="the offline notice")
        begun = time.monotonic()
        out, err, imported = probe("status")
        took = time.monotonic() - begun
        assert run_id.hex[:8] in out
        assert not imported
        assert "Cannot reach the shared store" in err
        conn = connect(copy_of(shep_home), readonly=True)
        word = keeper.last_word(conn)
        conn.close()
        assert word is not None
        assert not word.online
        assert (
            f"Showing this machine's copy of the log as of {keeper.as_of(word.synced_at)}." in err
        )
        assert took < 10, "status waited for the server"
        doctor = shep("doctor", "--json")
        (copy,) = [c for c in json.loads(doctor.stdout) if c["name"] == "shared copy"]
        assert copy["status"] == "warn"
        assert "the server is away" in copy["detail"]
    finally:
        output = started.output()
    assert "Cannot reach the shared store" in output


@pytest.mark.slow
def test_this_homes_write_shows_in_its_next_read_while_the_keeper_is_stopped(
    on_shared: str, kept_home: Keeper
) -> None:
    """A command that appends to the shared store notes how far it wrote: the next read
    shows the write even when the keeper has not applied it (here: stopped with SIGSTOP,
    its last check still fresh) by pulling it; the read after it trusts the copy again."""
    with EventStore(on_shared) as store:
        run_id = waiting_run(store)
    wait_for(lambda: run_id.hex[:8] in probe("status")[0], what="the run in the copy")
    (item,) = json.loads(probe("inbox", "--json")[0])
    kept_home.process.send_signal(signal.SIGSTOP)
    try:
        shep("answer", item["item_id"][:8], "--option", "a", check=True)
        assert not is_kept(kept_home.home), "the copy is behind this home's own write"
        out, err, imported = probe("inbox", "--json")
        assert (json.loads(out), err, imported) == ([], "", True)
        assert is_kept(kept_home.home), "the stopped keeper's last check is still trusted"
        out, err, imported = probe("inbox", "--json")
        assert (json.loads(out), err, imported) == ([], "", False)
    finally:
        kept_home.process.send_signal(signal.SIGCONT)


@pytest.mark.slow
def test_a_read_with_no_keeper_starts_one_and_says_so(
    on_shared: str, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first status on a shared home starts a keeper (one line on stderr names its pid),
    the next ones read the copy it keeps, and doctor names it; a second read does not start
    a second keeper."""
    monkeypatch.delenv(keeper.AUTOSTART_ENV)
    first = shep("status", check=True)
    assert "started a process (pid " in first.stderr
    pid = int(first.stderr.split("(pid ", 1)[1].split(")", 1)[0])
    try:
        wait_for(lambda: is_kept(shep_home), timeout=30, what="the keeper's first check")
        _, err, imported = probe("status")
        assert (err, imported) == ("", False)
        assert keeper.keeper_pid(copy_of(shep_home)) == pid
        doctor = shep("doctor", "--json")
        (copy,) = [c for c in json.loads(doctor.stdout) if c["name"] == "shared copy"]
        assert copy["status"] == "ok"
        assert copy["data"]["keeper_pid"] == pid
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not keeper.keeper_holds(copy_of(shep_home)), what="the keeper gone")


@pytest.mark.slow
def test_a_second_keeper_leaves_at_once(on_shared: str, kept_home: Keeper) -> None:
    """Two keepers of one copy: the second finds the lock taken and exits 0 (and the first
    goes on keeping)."""
    second = shep("_keep", "--linger", "5", check=True)
    assert "another keeper runs" in second.stderr
    assert kept_home.process.poll() is None


def test_a_keeper_leaves_when_nobody_reads(on_shared: str, shep_home: Path) -> None:
    """With no read for ``--linger`` seconds the keeper exits by itself and releases its lock."""
    shep_home.mkdir(mode=0o700, exist_ok=True)
    result = shep("_keep", "--linger", "1", "--heartbeat", "0.2", check=True, timeout=30)
    assert "no read for a while" in result.stderr
    assert not keeper.keeper_holds(copy_of(shep_home))


@pytest.mark.slow
def test_a_keeper_leaves_when_a_newer_shep_rebuilt_the_projections(
    on_shared: str, kept_home: Keeper
) -> None:
    """The keeper folds with the code it started with: once the copy's projections are of
    another version than its own (a newer shep rebuilt them), it leaves, and releases its
    lock, rather than fold events into tables it does not know."""
    conn = connect(copy_of(kept_home.home))
    try:
        conn.execute(f"UPDATE {VERSIONS_TABLE} SET version = version + 1 WHERE name = 'runs'")
    finally:
        conn.close()
    assert kept_home.process.wait(timeout=30) == 0
    assert not keeper.keeper_holds(copy_of(kept_home.home))


@pytest.mark.slow
def test_a_keeper_of_another_store_is_not_trusted(
    on_shared: str, kept_home: Keeper, pg_server: PostgresServer, shep_home: Path
) -> None:
    """The home is pointed at another store while its keeper keeps the copy of the first:
    reads go to the other store's own copy (asking its server, psycopg imported) and show
    its runs, not the first's; the first store's keeper goes on keeping its copy."""
    with EventStore(on_shared) as store:
        first_run = waiting_run(store)
    wait_for(lambda: first_run.hex[:8] in probe("status")[0], what="the run in the copy")
    other = pg_server.database()
    with EventStore(other) as store:
        other_run = waiting_run(store)
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "status"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SHEP_DATABASE_URL": other},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert other_run.hex[:8] in result.stdout
    assert first_run.hex[:8] not in result.stdout
    assert "PSYCOPG=True" in result.stderr
    assert copy_file(str(shep_home), other) != copy_of(shep_home)
    assert keeper.keeper_holds(copy_of(shep_home))
    assert not keeper.keeper_holds(copy_file(str(shep_home), other))
