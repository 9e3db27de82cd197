"""``shep doctor``'s checks of the home: what a support thread asks first, one answer each.

Each check says what it found in one line and, when something needs doing, what
to do. Reading only: the home is never created, the store is opened read-only
(never migrated, no projection caught up), so a doctor run changes nothing it
reports on. The agent CLI's and git's checks live with them
(``shep.agents.health``, ``shep.git.health``); the face puts them together.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import stat
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import apsw

from events import versions
from events.errors import ShepError
from events.postgres_url import redacted
from events.sqlite_file import connect, store_error
from events.words import counted
from projections.state import has_schema, head_position, positions, stored_versions
from projections.tables import PROJECTION_NAMES, PROJECTION_VERSIONS
from shep.home.procs import lock_holders
from shep.home.versions import StoreVersions, WrittenVersions, get_store_versions

if TYPE_CHECKING:
    from events.settings import AgentConfigured
    from shep.home.runtime import Runtime

Status = Literal["ok", "warn", "fail"]

#: Free space under which writes are about to fail (``fail``) or soon may (``warn``).
DISK_FAIL_BYTES = 100 * 1000 * 1000
DISK_WARN_BYTES = 1000 * 1000 * 1000
#: How long the store's write lock may stay taken before the check names who holds it.
WRITE_LOCK_WAIT_MS = 2000
#: The lock files of a home (``flock``: released when their holder exits), and who takes each.
HOME_LOCKS = {
    "supervisor.lock": "a supervisor is running",
    "secrets.lock": "a token or the store's URL is being saved",
    "shep.db-rebuild.lock": "projections are being rebuilt",
}
#: Files only shep's own code writes that hold secrets: private to their owner.
PRIVATE_FILES = ("secrets", "store")


@dataclass(frozen=True)
class Check:
    """One answer: ``name`` (what was checked), ``status``, ``detail`` (what was found, one
    line), ``action`` (what to do; empty when nothing) and ``data`` (for ``--json``)."""

    name: str
    status: Status
    detail: str
    action: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def check_versions(runtime: Runtime) -> tuple[Check, StoreVersions]:
    """What this shep writes, and what the store says (read-only; also ``--version``)."""
    written = WrittenVersions()
    store = get_store_versions(runtime.db_file, runtime.store_url)
    data = {"shep": asdict(written), "store": store_data(store)}
    return Check("versions", "ok", f"shep {written.shep}", data=data), store


def store_data(store: StoreVersions) -> dict[str, Any]:
    """The store's versions as plain values (``--json``): its error as its message."""
    data = {f.name: getattr(store, f.name) for f in fields(store)}
    data["projections"] = dict(store.projections)
    data["error"] = str(store.error) if store.error is not None else None
    return data


def check_home(runtime: Runtime) -> Check:
    """The home: exists, a directory this user may use, private, its secret files private."""
    home = runtime.home_dir
    data: dict[str, Any] = {"path": home, "exists": os.path.isdir(home)}
    if runtime.store_file_error is not None:
        return Check("home", "fail", str(runtime.store_file_error), data=data)
    try:
        info = os.stat(home)
    except FileNotFoundError:
        return Check(
            "home",
            "ok",
            f"{home} does not exist yet: the first command that writes makes it",
            data=data,
        )
    except OSError as e:
        return Check(
            "home",
            "fail",
            f"{home} cannot be read ({e.strerror})",
            "Check the permissions of its parent directories, or point SHEP_HOME elsewhere.",
            data,
        )
    if not stat.S_ISDIR(info.st_mode):
        return Check(
            "home",
            "fail",
            f"{home} is not a directory",
            "Point SHEP_HOME at a directory.",
            data,
        )
    mode = stat.S_IMODE(info.st_mode)
    data["mode"] = f"{mode:04o}"
    if not os.access(home, os.R_OK | os.W_OK | os.X_OK):
        return Check(
            "home",
            "fail",
            f"{home} is not writable by this user (mode {mode:04o})",
            f"Make it yours (chmod u+rwx {home}), or point SHEP_HOME at a writable directory.",
            data,
        )
    for name in PRIVATE_FILES:
        path = os.path.join(home, name)
        try:
            file_mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            continue
        if file_mode & 0o077:
            return Check(
                "home",
                "fail",
                f"{path} may be read by others (mode {file_mode:04o}); it may hold a token "
                "or a password",
                f"Make it private: chmod 600 {path}",
                data,
            )
    if mode & 0o077:
        return Check(
            "home",
            "warn",
            f"{home} may be read by others (mode {mode:04o}); the log holds prompts and "
            "agents' output",
            f"Make it private: chmod 700 {home}",
            data,
        )
    return Check("home", "ok", f"{home}, private (mode {mode:04o})", data=data)


def check_store(runtime: Runtime, store: StoreVersions) -> list[Check]:
    """The SQLite file (on a shared store: this home's copy of the log): its integrity
    (``PRAGMA quick_check``), its schema against ours, and its projections."""
    path = runtime.db_file
    if not os.path.exists(path):
        detail = f"no store yet ({path}): the first command that writes makes it"
        return [Check("store", "ok", detail, data={"path": path, "exists": False})]
    try:
        conn = connect(path, readonly=True)
    except apsw.Error as e:
        return [_damaged(path, store_error(e, path))]
    try:
        found = _integrity(conn)
        if found is not None:
            return [_damaged(path, found)]
        checks = [] if runtime.shared else [_schema(path, store)]
        checks.append(check_projections(conn))
        return checks
    except ShepError as e:
        return [_damaged(path, e)]
    except apsw.Error as e:
        return [_damaged(path, store_error(e, path))]
    finally:
        conn.close()


def _integrity(conn: apsw.Connection) -> ShepError | None:
    from events.errors import StoreCorruptedError

    rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
    if rows == ["ok"]:
        return None
    first = rows[0] if rows else "no answer"
    more = f" (and {counted(len(rows) - 1, 'more problem')})" if len(rows) > 1 else ""
    return StoreCorruptedError(f"{conn.filename} fails SQLite's quick_check: {first}{more}")


def _damaged(path: str, error: ShepError) -> Check:
    return Check(
        "store",
        "fail",
        str(error),
        f"Restore {path} from a backup, or move it aside (mv {path} {path}.damaged); "
        "`shep audit verify` says where the damage starts.",
        {"path": path, "exists": True, "integrity": "damaged"},
    )


def _schema(path: str, store: StoreVersions) -> Check:
    ours = versions.STORE_SCHEMA_VERSION
    data = {"path": path, "exists": True, "integrity": "ok", "schema": store.schema}
    by = f", written by shep {store.written_by}" if store.written_by else ""
    found = f"{path}: {store.schema_said}{by}; quick_check ok"
    if store.schema is None:
        return Check("store", "ok", found, data=data)
    if store.schema > ours:
        return Check(
            "store",
            "fail",
            f"{found}; this shep writes schema {ours} and will not write to it",
            f"Upgrade shep to {store.newest_writer or 'a newer version'} or later.",
            data,
        )
    if store.schema < ours:
        return Check(
            "store",
            "warn",
            f"{found}; the next command migrates it to schema {ours}, after copying it to "
            f"{path}.bak-{store.written_by or 'schema-' + str(store.schema)}",
            data=data,
        )
    return Check("store", "ok", found, data=data)


def check_projections(conn: apsw.Connection) -> Check:
    """The projections: built by this shep's version of each, and caught up with the log."""
    if not has_schema(conn, indexes=False):
        return Check(
            "projections", "ok", "not built yet: the next command builds them from the log"
        )
    built = stored_versions(conn)
    head = head_position(conn)
    at = positions(conn)
    behind = {name: head - at[name] for name in PROJECTION_NAMES if at[name] < head}
    data: dict[str, Any] = {"head": head, "positions": at, "versions": built}
    changed = [n for n in PROJECTION_NAMES if built.get(n) != PROJECTION_VERSIONS[n]]
    if changed:
        names = ", ".join(
            f"{n} (built by version {built.get(n, 0)}, this shep's is {PROJECTION_VERSIONS[n]})"
            for n in changed
        )
        return Check(
            "projections",
            "warn",
            f"{names}: rebuilt alone from the log by the next command",
            f"Rebuild now if you like: shep projections rebuild {' '.join(changed)}",
            data,
        )
    if behind:
        worst = max(behind.values())
        names = ", ".join(behind)
        return Check(
            "projections",
            "warn",
            f"{names} {counted(worst, 'event')} behind the log (at {head}); a worker may be "
            "writing, or none read since",
            "Any command catches them up: shep status",
            data,
        )
    return Check(
        "projections",
        "ok",
        f"all {len(PROJECTION_NAMES)} current (versions of this shep), at the log's head "
        f"({counted(head, 'event')})",
        data=data,
    )


def check_locks(runtime: Runtime) -> Check:
    """The store's write lock (taken for long?) and the home's lock files (who holds them),
    and what a killed upgrade or secrets write left behind."""
    home = runtime.home_dir
    if not os.path.isdir(home):
        return Check("locks", "ok", "none (no home yet)")
    held = []
    for name, meaning in HOME_LOCKS.items():
        holders = _flock_holders(os.path.join(home, name))
        if holders:
            held.append(f"{name} held by pid {', '.join(map(str, holders))} ({meaning})")
    leftovers = sorted(
        glob.glob(os.path.join(glob.escape(home), "*.bak-*.tmp*"))
        + glob.glob(os.path.join(glob.escape(home), ".secrets-*"))
    )
    data: dict[str, Any] = {"held": held, "leftovers": leftovers}
    writer = _write_lock_holder(runtime.db_file)
    if writer is not None:
        data["store_write_lock"] = writer
        return Check(
            "locks",
            "warn",
            f"{runtime.db_file}'s write lock stayed taken for over "
            f"{WRITE_LOCK_WAIT_MS / 1000:g} s ({writer})",
            "If no shep command is working, stop the process holding it.",
            data,
        )
    if leftovers:
        return Check(
            "locks",
            "warn",
            f"{counted(len(leftovers), 'file')} left by a killed upgrade or write: "
            f"{', '.join(leftovers)}",
            f"Remove them: rm {' '.join(leftovers)}",
            data,
        )
    return Check("locks", "ok", "; ".join(held) if held else "none held", data=data)


def _flock_holders(path: str) -> list[int]:
    """Pids holding the ``flock`` on ``path`` (empty: free, or no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock_holders(path, "FLOCK") or [0]
        fcntl.flock(fd, fcntl.LOCK_UN)
        return []
    finally:
        os.close(fd)


def _write_lock_holder(db_file: str) -> str | None:
    """Who holds the store's write lock, if it stays taken for ``WRITE_LOCK_WAIT_MS``."""
    if not os.path.exists(db_file) or not os.access(db_file, os.W_OK):
        return None
    try:
        conn = apsw.Connection(db_file, flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error:
        return None
    try:
        conn.setbusytimeout(WRITE_LOCK_WAIT_MS)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return None
    except apsw.BusyError:
        pids = []
        for path in (db_file, db_file + "-shm"):
            pids += lock_holders(path, "POSIX")
        mine = os.getpid()
        others = sorted(set(pids) - {mine})
        return (
            f"processes with it open: pid {', '.join(map(str, others))}"
            if others
            else ("by a process this system does not name")
        )
    except apsw.Error:
        return None
    finally:
        conn.close()


def check_disk(runtime: Runtime) -> Check:
    """Free space where the home is (or would be)."""
    where = runtime.home_dir
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        free = shutil.disk_usage(where).free
    except OSError as e:
        return Check("disk", "warn", f"cannot tell the free space at {where} ({e.strerror})")
    size = _size(free)
    data = {"path": where, "free_bytes": free}
    if free < DISK_FAIL_BYTES:
        return Check(
            "disk",
            "fail",
            f"{size} free at {where}: writes to the store are about to fail",
            "Free some space.",
            data,
        )
    if free < DISK_WARN_BYTES:
        return Check("disk", "warn", f"{size} free at {where}", "Free some space soon.", data)
    return Check("disk", "ok", f"{size} free at {where}", data=data)


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def check_shared_store(runtime: Runtime, store: StoreVersions) -> Check:
    """The shared store, if this home is on one: reachable, and its schema against ours."""
    if runtime.store_url is None:
        return Check("shared store", "ok", "not configured: the log is this home's shep.db")
    where = redacted(runtime.store_url)
    data: dict[str, Any] = {"url": where, "schema": store.schema}
    if store.error is not None:
        from shep.home.secrets import STORE_URL_ENV

        back = (
            f"unset {STORE_URL_ENV}"
            if os.environ.get(STORE_URL_ENV)
            else "shep settings store --local"
        )
        return Check(
            "shared store",
            "fail",
            str(store.error),
            f"Or point this home back at its own shep.db: {back}",
            data,
        )
    ours = versions.STORE_SCHEMA_VERSION
    if not store.exists:
        return Check(
            "shared store",
            "ok",
            f"{where}: reachable, no tables yet (made by the first write)",
            data=data,
        )
    by = f", newest writer shep {store.newest_writer}" if store.newest_writer else ""
    found = f"{where}: reachable, schema {store.schema}{by}"
    if store.schema is not None and store.schema > ours:
        return Check(
            "shared store",
            "fail",
            f"{found}; this shep (schema {ours}) will not write to it",
            f"Upgrade shep to {store.newest_writer or 'a newer version'} or later.",
            data,
        )
    if store.schema is not None and store.schema < ours:
        return Check(
            "shared store",
            "warn",
            f"{found}; the next command migrates it to schema {ours}",
            data=data,
        )
    return Check("shared store", "ok", found, data=data)


def configured_agent(runtime: Runtime, store: StoreVersions) -> AgentConfigured | ShepError | None:
    """The agent the home is set up with, read-only from its log (None: none configured;
    the error when the log cannot be read). On a shared store, from the server: this
    home's copy of the log may not have caught up with it."""
    if runtime.store_url is not None:
        return store.error or _shared_agent(runtime.store_url)
    if not os.path.exists(runtime.db_file):
        return None
    from shep.home.settings import read_agent_configured

    try:
        conn = connect(runtime.db_file, readonly=True)
    except apsw.Error as e:
        return store_error(e, runtime.db_file)
    try:
        return read_agent_configured(conn)
    except ShepError as e:
        return e
    except apsw.SQLError:
        return None  # no events table yet
    except apsw.Error as e:
        return store_error(e, runtime.db_file)
    finally:
        conn.close()


def _shared_agent(url: str) -> AgentConfigured | ShepError | None:
    from events.base import topic_of
    from events.postgres import PgDatastore, PgProcessRecorder
    from events.postgres_url import store_error as pg_error
    from events.settings import SETTINGS_STREAM_ID, AgentConfigured
    from shep.home.settings import agent_configured_from
    from shep.home.versions import SHARED_STORE_TIMEOUT

    try:
        datastore = PgDatastore(
            url, pool_size=1, max_overflow=0, connect_timeout=SHARED_STORE_TIMEOUT
        )
        try:
            rows = PgProcessRecorder(datastore).select_events_of_topics(
                SETTINGS_STREAM_ID, [topic_of(AgentConfigured)]
            )
        finally:
            datastore.close()
        return agent_configured_from(rows[-1].state) if rows else None
    except ShepError as e:
        return e
    except Exception as e:
        return pg_error(e, url)


def check_keeper(runtime: Runtime) -> list[Check]:
    """On a shared store: which process keeps this home's copy of the log current, if one
    does (``projections.keeper``), and whether the copy it keeps is current."""
    if runtime.store_url is None:
        return []
    import time

    from projections.keeper import FRESH, as_of, keeper_pid, last_word, linger_words

    pid = keeper_pid(runtime.db_file)
    if pid is None:
        return [
            Check(
                "shared copy",
                "ok",
                "no keeper runs: each read asks the server first (the next one starts a keeper)",
                data={"keeper_pid": None},
            )
        ]
    word = None
    if os.path.exists(runtime.db_file):
        try:
            conn = connect(runtime.db_file, readonly=True)
            try:
                word = last_word(conn)
            finally:
                conn.close()
        except apsw.Error:
            word = None
    kept = (
        f"kept current by process {pid} (shep _keep), which stops "
        f"{linger_words()} after the last read"
    )
    data: dict[str, Any] = {
        "keeper_pid": pid,
        "checked_at": word.checked_at if word else None,
        "online": word.online if word else None,
        "synced_at": word.synced_at if word else None,
    }
    if word is None or not -1.0 <= time.time() - word.checked_at <= FRESH:
        return [
            Check(
                "shared copy",
                "warn",
                f"{kept}; it has not checked with the server lately: reads ask it themselves",
                data=data,
            )
        ]
    if not word.online:
        return [
            Check(
                "shared copy",
                "warn",
                f"{kept}; the server is away ({word.error}): reads show the copy as of "
                f"{as_of(word.synced_at)}",
                data=data,
            )
        ]
    return [Check("shared copy", "ok", f"{kept}; current as of {as_of(word.synced_at)}", data=data)]
