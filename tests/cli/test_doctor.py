"""`shep doctor` and `shep --version`, run as a user runs them, on homes made for real: a
healthy one, and one with each problem doctor looks for."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from events import versions
from events.base import utc_now
from events.settings import SETTINGS_STREAM_ID, SettingChanged
from events.store import EventStore
from projections.tables import PROJECTION_VERSIONS
from tests.shep.agents.conftest import pid_gone
from tests.support.cli import shep

TOKEN = "sk-ant-SECRET-doctor-0123456789-never-print-me"
#: A PATH with git (and sh) but none of the agent CLIs the machine may have installed.
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


def _lines(out: str) -> dict[str, str]:
    """``{check name: its whole line}`` of doctor's text output."""
    found = {}
    for line in out.splitlines():
        name = line[6:].split(":", 1)[0]
        found[name] = line
    return found


def _fake_claude(where: Path, body: str) -> Path:
    """An executable named `claude` in ``where`` running the shell ``body``."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "claude"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _configure_claude(tmp_path: Path, version: str = "2.1.197") -> Path:
    """Set the home up with claude-code, found on PATH as `claude` (a fake answering
    --version with ``version``); the directory holding it."""
    bin_dir = tmp_path / "agent-bin"
    _fake_claude(bin_dir, f"echo '{version} (Claude Code)'")
    done = shep(
        "settings", "agent", "--agent", "claude-code", "--auth", "session",
        env={"PATH": f"{bin_dir}:{BASE_PATH}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return bin_dir


def _changes(n: int) -> list[SettingChanged]:
    return [
        SettingChanged(originator_id=SETTINGS_STREAM_ID, originator_version=v,
                       timestamp=utc_now(), key="heartbeat_interval", value=f"{20 + v}.0",
                       changed_by="tester@host")
        for v in range(2, n + 2)
    ]  # fmt: skip


def _healthy_demo_home() -> None:
    assert shep("settings", "agent", "--agent", "demo").returncode == 0
    assert shep("status").returncode == 0  # builds and catches up the projections


def test_version_on_an_empty_home_says_so_and_creates_nothing(shep_home: Path) -> None:
    """`shep --version` names shep's version, the schema versions it writes and, on an empty
    home, that there is no store yet, without creating the home."""
    done = shep("--version")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"shep, version {versions.SHEP_VERSION}"
    assert lines[1].startswith(
        f"writes: store schema {versions.STORE_SCHEMA_VERSION}, "
        f"checkpoint state {versions.CHECKPOINT_STATE_VERSION}, settings (AgentConfigured 1, "
    )
    assert f"projections (runs {PROJECTION_VERSIONS['runs']}, " in lines[1]
    assert lines[2] == f"store: no store yet ({shep_home / 'shep.db'})"
    assert not shep_home.exists()


def test_version_reads_an_older_store_without_migrating_it(shep_home: Path) -> None:
    """`shep --version` says which shep wrote the store and its schema, read-only: an older
    store is named as it is and left as it is (no migration, no copy aside)."""
    assert shep("settings", "agent", "--agent", "demo").returncode == 0
    db = shep_home / "shep.db"
    assert shep("--version").stdout.splitlines()[2] == (
        f"store: {db}: schema {versions.STORE_SCHEMA_VERSION}, "
        f"written by shep {versions.SHEP_VERSION}"
    )
    conn = apsw.Connection(str(db))
    conn.execute("DROP TABLE shep_meta; PRAGMA user_version=1")  # as shep 0.1.0 left it
    conn.close()
    done = shep("--version")
    assert done.stdout.splitlines()[2] == f"store: {db}: schema 1, written by shep 0.1.0"
    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA user_version").fetchall() == [(1,)]
    conn.close()
    assert sorted(p.name for p in shep_home.iterdir() if ".bak-" in p.name) == []


def test_version_imports_no_langgraph(shep_home: Path) -> None:
    """`shep --version` stays cheap: it imports neither LangGraph nor eventsourcing."""
    assert shep("settings", "agent", "--agent", "demo").returncode == 0
    code = (
        "import sys\n"
        "from shep.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'eventsourcing', 'prompt_toolkit'))\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY=\n" in done.stderr, done.stderr
    assert "store: " in done.stdout


def test_doctor_on_a_healthy_home_exits_0(shep_home: Path) -> None:
    """A home with its store, current projections, the demo agent and git: every check is
    ok, one line each, exit 0, and nothing is changed (the log's head stays where it was)."""
    _healthy_demo_home()
    db = shep_home / "shep.db"
    before = db.read_bytes()
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done.stdout)
    assert list(lines) == [
        "versions", "home", "store", "projections", "locks", "disk", "agent", "git",
        "shared store",
    ]  # fmt: skip
    assert all(line.startswith("ok    ") for line in lines.values()), done.stdout
    assert lines["home"] == f"ok    home: {shep_home}, private (mode 0700)"
    assert lines["store"] == (
        f"ok    store: {db}: schema {versions.STORE_SCHEMA_VERSION}, written by shep "
        f"{versions.SHEP_VERSION}; quick_check ok"
    )
    assert lines["agent"] == "ok    agent: demo: built in, nothing to install"
    assert lines["shared store"] == (
        "ok    shared store: not configured: the log is this home's shep.db"
    )
    assert done.stderr == ""
    assert db.read_bytes() == before


def test_doctor_on_an_empty_home_creates_nothing(shep_home: Path) -> None:
    """On an empty home doctor says there is no store yet, asks for an agent (exit 1), and
    creates nothing."""
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 1
    lines = _lines(done.stdout)
    assert lines["store"] == (
        f"ok    store: no store yet ({shep_home / 'shep.db'}): the first command that writes "
        "makes it"
    )
    assert lines["agent"].startswith("FAIL  agent: no agent configured. Choose one: ")
    assert done.stderr == "shep: needs action: agent (see above)\n"
    assert not shep_home.exists()


def test_doctor_and_version_after_a_first_read_describe_the_store_as_it_is(
    shep_home: Path,
) -> None:
    """A first command that only reads makes shep.db with its (empty) tables but writes no
    event, so no schema version yet: doctor and --version say that, not "no tables yet"
    nor "schema 0". A pre-versioning log (events, user_version 0) reads as schema 1."""
    assert shep("status", "--json").stdout == "[]\n"
    db = shep_home / "shep.db"
    conn = apsw.Connection(str(db))
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"stored_events", "runs"} <= tables
    assert conn.execute("PRAGMA user_version").fetchall() == [(0,)]
    conn.close()
    no_schema = "no events yet (the first one written records its schema)"
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert _lines(done.stdout)["store"] == f"ok    store: {db}: {no_schema}; quick_check ok"
    assert shep("--version").stdout.splitlines()[2] == f"store: {db}: {no_schema}"

    conn = apsw.Connection(str(db))
    conn.execute("INSERT INTO stored_events VALUES (1, 'x', 1, 'topic', x'00', x'00')")
    conn.close()
    assert (
        shep("--version").stdout.splitlines()[2] == f"store: {db}: schema 1, written by shep 0.1.0"
    )


def test_doctor_finds_a_corrupt_store(shep_home: Path) -> None:
    """A store whose pages were overwritten fails SQLite's quick_check: one FAIL line
    saying what to do, exit 1."""
    _healthy_demo_home()
    db = shep_home / "shep.db"
    with EventStore(db) as store:  # enough events for the log to span many pages
        store.append(_changes(300))
    with open(db, "r+b") as f:
        f.seek(4096 * 3)
        f.write(os.urandom(4096 * 4))
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 1, done.stdout
    store_line = _lines(done.stdout)["store"]
    assert store_line.startswith(f"FAIL  store: The event store {db} is damaged") or (
        store_line.startswith(f"FAIL  store: {db} fails SQLite's quick_check: ")
    ), store_line
    assert store_line.endswith(
        f"Restore {db} from a backup, or move it aside (mv {db} {db}.damaged); "
        "`shep audit verify` says where the damage starts."
    )
    assert "needs action: store" in done.stderr


def test_doctor_finds_projections_behind_the_log(shep_home: Path) -> None:
    """An event appended after the projections were caught up: a warn line naming how far
    behind they are and what catches them up; nothing needs action (exit 0)."""
    _healthy_demo_home()
    assert shep("settings", "set", "heartbeat_interval", "20").returncode == 0
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 0, done.stdout
    line = _lines(done.stdout)["projections"]
    assert line.startswith("warn  projections: runs, logs, inbox, decisions, checkpoints, ")
    assert "1 event behind the log" in line
    assert line.endswith("Any command catches them up: shep status")
    assert shep("status").returncode == 0
    assert _lines(shep("doctor", env={"PATH": BASE_PATH}).stdout)["projections"].startswith(
        "ok    projections: all 6 current"
    )


def test_doctor_finds_a_projection_of_another_version(shep_home: Path) -> None:
    """A projection built by another version of shep is named with both versions (rebuilt
    alone by the next command), not rebuilt by doctor."""
    _healthy_demo_home()
    conn = apsw.Connection(str(shep_home / "shep.db"))
    conn.execute("UPDATE projection_versions SET version = 1 WHERE name = 'runs'")
    conn.close()
    done = shep("doctor", env={"PATH": BASE_PATH})
    line = _lines(done.stdout)["projections"]
    assert line == (
        f"warn  projections: runs (built by version 1, this shep's is "
        f"{PROJECTION_VERSIONS['runs']}): rebuilt alone from the log by the next command. "
        "Rebuild now if you like: shep projections rebuild runs"
    )
    conn = apsw.Connection(str(shep_home / "shep.db"))
    assert conn.execute("SELECT version FROM projection_versions WHERE name='runs'").fetchall() == [
        (1,)
    ]
    conn.close()


def test_doctor_finds_the_agent_binary_missing(tmp_path: Path) -> None:
    """The configured agent's binary is no longer on PATH: FAIL with the install command."""
    _configure_claude(tmp_path)
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 1
    assert _lines(done.stdout)["agent"] == (
        "FAIL  agent: Claude Code is not installed: `claude` was not found. "
        "Install it with `npm install -g @anthropic-ai/claude-code`."
    )
    assert done.stderr == "shep: needs action: agent (see above)\n"


def test_doctor_checks_the_agent_version_against_the_verified_one(tmp_path: Path) -> None:
    """The agent CLI's --version against the version shep is verified with: the same is ok,
    an older one needs an upgrade (FAIL, exit 1), a newer one is a warn (exit 0)."""
    bin_dir = _configure_claude(tmp_path)
    claude = bin_dir / "claude"
    env = {"PATH": f"{bin_dir}:{BASE_PATH}"}
    same = shep("doctor", env=env)
    assert same.returncode == 0, same.stdout
    assert _lines(same.stdout)["agent"] == (
        f"ok    agent: claude-code 2.1.197 ({claude}), the version shep is verified with"
    )
    _fake_claude(bin_dir, "echo '2.0.14 (Claude Code)'")
    old = shep("doctor", env=env)
    assert old.returncode == 1
    assert _lines(old.stdout)["agent"] == (
        f"FAIL  agent: claude-code 2.0.14 ({claude}) is older than 2.1.197, the version shep "
        "is verified with. Upgrade it to 2.1.197 or later: "
        "npm install -g @anthropic-ai/claude-code"
    )
    _fake_claude(bin_dir, "echo '2.3.0 (Claude Code)'")
    new = shep("doctor", env=env)
    assert new.returncode == 0
    assert _lines(new.stdout)["agent"] == (
        f"warn  agent: claude-code 2.3.0 ({claude}); shep is verified with 2.1.197, "
        "not this newer one"
    )


@pytest.mark.slow
def test_doctor_gives_up_on_an_agent_that_hangs(tmp_path: Path) -> None:
    """An agent CLI whose --version hangs (in a child of its own) does not hang doctor: it
    is stopped, children included, after --agent-timeout, and named in a FAIL line."""
    bin_dir = _configure_claude(tmp_path)
    pidfile = tmp_path / "hung.pid"
    _fake_claude(bin_dir, f"sleep 120 & echo $! > {pidfile}; wait")
    done = shep("doctor", "--agent-timeout", "1", env={"PATH": f"{bin_dir}:{BASE_PATH}"})
    assert done.returncode == 1
    assert _lines(done.stdout)["agent"] == (
        "FAIL  agent: Claude Code: `claude --version` did not answer within 1 s; shep stopped it."
    )
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not pid_gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_gone(child)


def test_doctor_prints_an_agents_version_text_escaped(tmp_path: Path) -> None:
    """What an agent CLI prints is untrusted: a terminal escape in its --version reaches
    doctor's output as visible text, never as an escape."""
    bin_dir = _configure_claude(tmp_path)
    _fake_claude(bin_dir, r"printf 'nightly\033]0;owned\007\n'")
    done = shep("doctor", env={"PATH": f"{bin_dir}:{BASE_PATH}"})
    assert "\x1b" not in done.stdout
    assert "nightly\\x1b]0;owned\\x07" in _lines(done.stdout)["agent"]


def test_doctor_never_prints_a_token_and_finds_a_token_file_others_can_read(
    fake_claude_home: Path,
) -> None:
    """A secrets file readable by others is a FAIL with the chmod to run; the token itself
    is in neither the text nor the JSON output."""
    secrets = fake_claude_home / "secrets"
    secrets.chmod(0o644)
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 1
    assert _lines(done.stdout)["home"] == (
        f"FAIL  home: {secrets} may be read by others (mode 0644); it may hold a token or a "
        f"password. Make it private: chmod 600 {secrets}"
    )
    as_json = shep("doctor", "--json", env={"PATH": BASE_PATH})
    assert TOKEN not in done.stdout + done.stderr + as_json.stdout + as_json.stderr


@pytest.fixture
def fake_claude_home(tmp_path: Path, shep_home: Path) -> Path:
    """A home set up with claude-code and a token (stored in $SHEP_HOME/secrets)."""
    bin_dir = tmp_path / "agent-bin"
    _fake_claude(bin_dir, "echo '2.1.197 (Claude Code)'")
    done = subprocess.run(
        [sys.executable, "-m", "shep", "settings", "agent", "--agent", "claude-code",
         "--auth", "token", "--token-stdin"],
        input=TOKEN + "\n", capture_output=True, text=True, check=False,
        env={**os.environ, "PATH": f"{bin_dir}:{BASE_PATH}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return shep_home


def test_doctor_finds_git_missing(shep_home: Path) -> None:
    """No git on PATH: FAIL saying which git to install."""
    _healthy_demo_home()
    done = shep("doctor", env={"PATH": "/nonexistent"})
    assert done.returncode == 1
    assert _lines(done.stdout)["git"] == (
        "FAIL  git: git is not installed or not on PATH; install git 2.38 or newer."
    )


@pytest.mark.slow
def test_doctor_finds_the_shared_store_unreachable(shep_home: Path) -> None:
    """A shared store URL nothing answers at: FAIL naming the server (never the password)
    and the way back to the home's own file; the home is not created."""
    url = "postgresql://shep:hunter2secret@127.0.0.1:1/team"
    done = shep("doctor", env={"PATH": BASE_PATH, "SHEP_DATABASE_URL": url})
    assert done.returncode == 1
    line = _lines(done.stdout)["shared store"]
    assert line.startswith("FAIL  shared store: Cannot reach the shared store at 127.0.0.1:1/team")
    assert line.endswith("Or point this home back at its own shep.db: unset SHEP_DATABASE_URL")
    versions_line = shep("--version", env={"SHEP_DATABASE_URL": url}).stdout.splitlines()[2]
    assert versions_line.startswith(
        "store: shared store postgresql://shep:***@127.0.0.1:1/team: cannot be read: "
        "Cannot reach the shared store"
    )
    as_json = shep("doctor", "--json", env={"PATH": BASE_PATH, "SHEP_DATABASE_URL": url})
    assert "hunter2secret" not in done.stdout + done.stderr + as_json.stdout + versions_line
    assert not shep_home.exists()


def test_doctor_reports_a_reachable_shared_store(pg_url: str, shep_home: Path) -> None:
    """A shared store that answers: its schema and newest writer, ok."""
    env = {"PATH": BASE_PATH, "SHEP_DATABASE_URL": pg_url}
    assert shep("settings", "agent", "--agent", "demo", env=env).returncode == 0
    done = shep("doctor", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _lines(done.stdout)["shared store"].startswith(
        f"ok    shared store: {pg_url.split('@', maxsplit=1)[0].split(':', maxsplit=1)[0]}"
    )
    assert (
        f"reachable, schema {versions.STORE_SCHEMA_VERSION}, newest writer shep "
        in (_lines(done.stdout)["shared store"])
    )


def test_doctor_reports_a_damaged_store_file(shep_home: Path) -> None:
    """A damaged $SHEP_HOME/store (where the shared store's URL is kept) is reported as the
    home's FAIL, not a crash, and the other checks still run."""
    _healthy_demo_home()
    (shep_home / "store").write_text("{not json")
    (shep_home / "store").chmod(0o600)
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 1
    assert _lines(done.stdout)["home"].startswith(
        f"FAIL  home: {shep_home / 'store'} is damaged. Point this home at its store again"
    )
    assert _lines(done.stdout)["git"].startswith("ok    git: ")


def test_doctor_json_is_a_list_of_checks(shep_home: Path) -> None:
    """--json prints the checks as a list of objects (name, status, detail, action, data);
    the versions check carries the versions this shep writes and the store's."""
    _healthy_demo_home()
    done = shep("doctor", "--json", env={"PATH": BASE_PATH})
    assert done.returncode == 0
    checks = json.loads(done.stdout)
    assert [c["name"] for c in checks][:2] == ["versions", "home"]
    assert {tuple(sorted(c)) for c in checks} == {("action", "data", "detail", "name", "status")}
    shep_versions = checks[0]["data"]["shep"]
    assert shep_versions["store_schema"] == versions.STORE_SCHEMA_VERSION
    assert shep_versions["checkpoint_state"] == versions.CHECKPOINT_STATE_VERSION
    assert shep_versions["projections"] == PROJECTION_VERSIONS
    store = checks[0]["data"]["store"]
    assert (store["schema"], store["written_by"]) == (
        versions.STORE_SCHEMA_VERSION,
        versions.SHEP_VERSION,
    )


def test_doctor_names_a_home_others_can_read(shep_home: Path) -> None:
    """A home others may read: a warn with the chmod that makes it private."""
    _healthy_demo_home()
    shep_home.chmod(0o755)
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 0
    assert _lines(done.stdout)["home"] == (
        f"warn  home: {shep_home} may be read by others (mode 0755); the log holds prompts "
        f"and agents' output. Make it private: chmod 700 {shep_home}"
    )
    assert stat.S_IMODE(shep_home.stat().st_mode) == 0o755


def test_doctor_names_leftovers_of_a_killed_upgrade_and_who_holds_a_lock(
    shep_home: Path,
) -> None:
    """A copy a killed upgrade left (``shep.db.bak-*.tmp``) is a warn saying what to remove;
    a lock file held by a live process is named with its pid."""
    _healthy_demo_home()
    leftover = shep_home / "shep.db.bak-0.1.0.tmp"
    leftover.write_bytes(b"partial copy")
    done = shep("doctor", env={"PATH": BASE_PATH})
    assert done.returncode == 0
    assert _lines(done.stdout)["locks"] == (
        f"warn  locks: 1 file left by a killed upgrade or write: {leftover}. "
        f"Remove them: rm {leftover}"
    )
    leftover.unlink()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         f"fd = os.open({str(shep_home / 'supervisor.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        line = _lines(shep("doctor", env={"PATH": BASE_PATH}).stdout)["locks"]
        assert line == (
            f"ok    locks: supervisor.lock held by pid {holder.pid} (a supervisor is running)"
        )
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_doctor_names_who_holds_the_store_write_lock(shep_home: Path) -> None:
    """A process that keeps the store's write lock (a transaction left open) is named: a
    warn line with its pid, and doctor does not wait on it for longer than its check."""
    _healthy_demo_home()
    db = shep_home / "shep.db"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import apsw, time\n"
         f"c = apsw.Connection({str(db)!r})\nc.execute('BEGIN IMMEDIATE')\n"
         "print('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        done = shep("doctor", env={"PATH": BASE_PATH})
        assert done.returncode == 0
        assert _lines(done.stdout)["locks"] == (
            f"warn  locks: {db}'s write lock stayed taken for over 2 s (processes with it "
            f"open: pid {holder.pid}). If no shep command is working, stop the process "
            "holding it."
        )
    finally:
        holder.kill()
        holder.wait()


def test_doctor_finds_git_too_old(tmp_path: Path, shep_home: Path) -> None:
    """A git older than the oldest shep works with (2.38: merge-tree --write-tree): FAIL
    saying which to install."""
    _healthy_demo_home()
    bin_dir = tmp_path / "old-git"
    bin_dir.mkdir()
    (bin_dir / "git").write_text("#!/bin/sh\necho 'git version 2.30.1'\n")
    (bin_dir / "git").chmod(0o755)
    done = shep("doctor", env={"PATH": f"{bin_dir}:{BASE_PATH}"})
    assert done.returncode == 1
    assert _lines(done.stdout)["git"] == (
        "FAIL  git: git 2.30.1 is older than 2.38, the oldest shep works with. "
        "Upgrade git to 2.38 or newer."
    )


def test_doctor_compares_the_stores_schema_with_this_sheps(shep_home: Path) -> None:
    """A store of an older schema is a warn saying the next command migrates it (and where
    the copy goes); one of a newer schema is a FAIL naming the shep to upgrade to. Doctor
    migrates neither."""
    _healthy_demo_home()
    db = shep_home / "shep.db"
    conn = apsw.Connection(str(db))
    conn.execute("DROP TABLE shep_meta; PRAGMA user_version=1")  # as shep 0.1.0 left it
    conn.close()
    old = shep("doctor", env={"PATH": BASE_PATH})
    assert old.returncode == 0, old.stdout
    assert _lines(old.stdout)["store"] == (
        f"warn  store: {db}: schema 1, written by shep 0.1.0; quick_check ok; the next "
        f"command migrates it to schema {versions.STORE_SCHEMA_VERSION}, after copying it to "
        f"{db}.bak-0.1.0"
    )
    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA user_version").fetchall() == [(1,)]
    newer = versions.STORE_SCHEMA_VERSION + 1
    conn.execute(
        f"CREATE TABLE shep_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
        f"INSERT INTO shep_meta VALUES ('schema_written_by', '9.1.0'), "
        f"('newest_writer', '9.1.0'); PRAGMA user_version={newer}"
    )
    conn.close()
    new = shep("doctor", env={"PATH": BASE_PATH})
    assert new.returncode == 1
    assert _lines(new.stdout)["store"] == (
        f"FAIL  store: {db}: schema {newer}, written by shep 9.1.0; quick_check ok; this shep "
        f"writes schema {versions.STORE_SCHEMA_VERSION} and will not write to it. "
        "Upgrade shep to 9.1.0 or later."
    )
    assert shep("--version").stdout.splitlines()[2] == (
        f"store: {db}: schema {newer}, written by shep 9.1.0"
    )
