"""The read side of the CLI, run as a real subprocess: output, errors, exit codes."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from commands.complete_run import complete_run
from commands.create_run import create_run
from commands.record_agent_output import OutputItem, record_agent_output
from commands.record_node import record_node_started
from commands.start_run import start_run
from events.store import EventStore
from tests.support.cli import shep
from tests.support.histories import random_run


def test_status_lists_runs_and_json_has_fields(store: EventStore) -> None:
    """The table shows each run; --json carries the projection's fields."""
    rng = random.Random(5)
    ids = [random_run(store, rng) for _ in range(3)]
    table = shep("status", "--all", check=True).stdout.splitlines()
    assert table[0].split() == [
        "RUN",
        "WORKFLOW",
        "AGENT",
        "STATUS",
        "NODE",
        "PROGRESS",
        "AGE",
        "HEARTBEAT",
    ]
    assert {line.split()[0] for line in table[1:]} == {i.hex[:8] for i in ids}
    runs = json.loads(shep("status", "--all", "--json", check=True).stdout)
    assert {r["run_id"] for r in runs} == {i.hex for i in ids}
    assert {
        "status",
        "workflow",
        "agent_type",
        "current_node",
        "completed_nodes",
        "total_nodes",
        "created_at",
        "last_heartbeat",
        "pid",
        "host",
        "error",
    } <= set(runs[0])


def test_status_of_one_run_by_prefix(store: EventStore) -> None:
    """A unique prefix finds the run; the detail shows its nodes."""
    run_id = create_run(
        store,
        workflow="analyze-repository",
        agent_type="demo",
        repo="/r",
        node_names=["scan", "report"],
        created_by="me",
    )
    result = shep("status", run_id.hex[:6], check=True)
    assert f"run       {run_id.hex}" in result.stdout
    assert "scan" in result.stdout
    detail = json.loads(shep("status", str(run_id), "--json", check=True).stdout)
    assert sorted(n["node"] for n in detail["nodes"]) == ["report", "scan"]
    assert {n["status"] for n in detail["nodes"]} == {"pending"}


def test_unknown_run_is_exit_2_with_hint(store: EventStore) -> None:
    """An unknown run id: one line naming it and how to list runs, exit 2."""
    random_run(store, random.Random(1))
    for args in (["status", "deadbeef"], ["logs", "deadbeef"], ["logs", "not-hex!"]):
        result = shep(*args)
        assert result.returncode == 2, args
        assert result.stderr.count("\n") == 1
        assert "List runs with `shep status --all`" in result.stderr
        assert "Traceback" not in result.stderr


def test_corrupt_database_is_one_clear_line(shep_home: Path) -> None:
    """A damaged shep.db: one line saying so and what to do, exit 1; --debug shows the traceback."""
    shep_home.mkdir()
    (shep_home / "shep.db").write_bytes(b"this is not a database" * 100)
    result = shep("status")
    assert result.returncode == 1
    assert result.stderr.startswith("shep: The event store ")
    assert "is damaged or not a shep database" in result.stderr
    assert result.stderr.count("\n") == 1
    debug = shep("--debug", "status")
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr


def test_unwritable_home_is_one_clear_line(tmp_path: Path) -> None:
    """SHEP_HOME that can never be a directory (under a file): one line naming it and why,
    exit 2, for a reading command as for one that writes."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["status"], ["inbox", "--json"], ["settings", "agent", "--agent", "demo"]):
        result = shep(*args, env={"SHEP_HOME": str(blocker / "home")})
        assert (result.returncode, result.stdout) == (2, ""), args
        assert result.stderr == (
            f"shep: SHEP_HOME {blocker / 'home'} is not a directory: a part of its path is a "
            "file. Point SHEP_HOME at a directory.\n"
        )


def _make_read_only(paths: list[Path]) -> None:
    if os.geteuid() == 0:
        # Root ignores permission bits; the immutable attribute stops root too.
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a directory read-only")
        subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
    else:
        for path in paths:
            path.chmod(0o500 if path.is_dir() else 0o400)


def _make_writable(paths: list[Path]) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=True)
    for path in paths:
        path.chmod(0o700 if path.is_dir() else 0o600)


def test_read_only_home_is_one_clear_line(
    store: EventStore, shep_home: Path, db_path: Path
) -> None:
    """A read-only SHEP_HOME holding a store: one line saying it must be writable, exit 1."""
    random_run(store, random.Random(3))
    store.close()
    paths = [shep_home, db_path]
    _make_read_only(paths)
    try:
        result = shep("status")
    finally:
        _make_writable(paths)
    assert result.returncode == 1
    assert result.stderr == (
        f"shep: Cannot open or write the event store {db_path} (unable to open database file). "
        "Check that SHEP_HOME is writable.\n"
    )


def test_home_is_created_private(shep_home: Path) -> None:
    """The home directory is created with mode 0700."""
    shep("status")
    assert (shep_home.stat().st_mode & 0o777) == 0o700


def test_status_does_not_import_heavy_modules(store: EventStore) -> None:
    """`shep status` imports neither langgraph, prompt_toolkit nor eventsourcing, nor
    anything of the web face (`shep ui`'s starlette, uvicorn and jinja2)."""
    random_run(store, random.Random(2))
    code = (
        "import sys\n"
        "from shep.cli import main\n"
        "try:\n    main(['status'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'prompt_toolkit', 'eventsourcing', 'starlette', 'uvicorn', 'jinja2',"
        " 'markupsafe', 'anyio'))\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
    )
    assert "HEAVY=\n" in result.stderr, result.stderr
    assert "analyze-repository" in result.stdout or "feature" in result.stdout


def test_logs_prints_lifecycle_and_output(store: EventStore) -> None:
    """`shep logs` shows the run's events and agent output in order; --json one object a line."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=42, host="box")
    record_node_started(store, run_id, "a")
    record_agent_output(store, run_id, "a", [OutputItem(kind="text", text="hello there")])
    lines = shep("logs", run_id.hex[:8], check=True).stdout.splitlines()
    assert [line[9:] for line in lines] == [
        " run.created: wf on /r with demo (1 node) by me",
        " run.started: started by pid 42 on box",
        " [a] node.started: a started",
        " [a] text: hello there",
    ]
    out = shep("logs", run_id.hex, "--json", check=True).stdout
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["kind"] for r in rows] == ["run.created", "run.started", "node.started", "text"]
    assert rows[3]["message"] == "hello there"


def test_logs_follow_sees_other_process_and_stops_at_end(store: EventStore, db_path: Path) -> None:
    """--follow prints events another process appends, and exits when the run ends."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="me"
    )
    start_run(store, run_id, pid=1, host="h")
    follower = subprocess.Popen(
        [sys.executable, "-m", "shep", "logs", run_id.hex, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert follower.stdout is not None
        assert "run.created" in follower.stdout.readline()
        assert "run.started" in follower.stdout.readline()
        record_node_started(store, run_id, "a")
        assert "node.started" in follower.stdout.readline()
        complete_run(store, run_id, duration_ms=10)
        assert "run.completed" in follower.stdout.readline()
        assert follower.wait(timeout=30) == 0
    finally:
        follower.kill()


def test_projections_rebuild_reports_count(store: EventStore) -> None:
    """`shep projections rebuild` rebuilds every table and says from how many events."""
    rng = random.Random(3)
    for _ in range(5):
        random_run(store, rng)
    before = json.loads(shep("status", "--all", "--json", check=True).stdout)
    result = shep("projections", "rebuild", check=True)
    assert result.stdout.startswith(
        f"Rebuilt runs, logs, inbox, decisions, checkpoints, features from {store.max_position()} "
        "events in "
    )
    assert json.loads(shep("status", "--all", "--json", check=True).stdout) == before


def test_audit_verify_ok_then_detects_an_edit(store: EventStore, db_path: Path) -> None:
    """verify prints the head hash; after an edit behind the triggers, it names the position."""
    rng = random.Random(4)
    for _ in range(3):
        random_run(store, rng)
    ok = shep("audit", "verify", check=True)
    assert ok.stdout.startswith(f"OK: {store.max_position()} events verify. Head hash: ")
    conn = apsw.Connection(str(db_path))
    conn.execute("DROP TRIGGER stored_events_no_update")
    (position,) = conn.execute(
        "SELECT notification_id FROM stored_events WHERE topic LIKE '%RunCreated' "
        "ORDER BY notification_id LIMIT 1 OFFSET 1"
    ).fetchone()
    conn.execute(
        "UPDATE stored_events SET state = replace(state, 'tester', 'mallory') "
        "WHERE notification_id = ?",
        (position,),
    )
    conn.close()
    bad = shep("audit", "verify")
    assert bad.returncode == 4
    assert bad.stderr.startswith(f"shep: Hash chain broken at position {position}: ")
    assert f"{position - 1} events before it verify" in bad.stderr


def test_audit_verify_detects_a_removed_event(store: EventStore, db_path: Path) -> None:
    """Deleting an event (behind the triggers) is caught at the gap."""
    for seed in range(3):
        random_run(store, random.Random(seed))
    assert store.max_position() > 3
    conn = apsw.Connection(str(db_path))
    conn.execute("DROP TRIGGER stored_events_no_delete")
    conn.execute("DELETE FROM stored_events WHERE notification_id = 3")
    conn.close()
    bad = shep("audit", "verify")
    assert bad.returncode == 4
    assert "position 3 is missing" in bad.stderr


def test_events_cannot_be_updated_or_deleted(store: EventStore, db_path: Path) -> None:
    """The store refuses UPDATE and DELETE on events."""
    random_run(store, random.Random(8))
    conn = apsw.Connection(str(db_path))
    with pytest.raises(apsw.ConstraintError, match="append-only"):
        conn.execute("UPDATE stored_events SET topic='x'")
    with pytest.raises(apsw.ConstraintError, match="append-only"):
        conn.execute("DELETE FROM stored_events")


def test_version_and_help(shep_home: Path) -> None:
    """--version and --help work without a store."""
    assert shep("--version", check=True).stdout.startswith("shep, version ")
    assert "status" in shep("--help", check=True).stdout
    assert not shep_home.exists()
