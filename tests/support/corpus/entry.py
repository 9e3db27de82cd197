"""One entry of the corpus of real stores (``tests/support/histories/<version>/``): its files,
how it is unpacked, what a user reads from it, and how those reads are compared.

An entry is a whole world made by really running one version of shep
(``python -m tests.support.corpus.make``): a shep home and the git repositories its
runs work on. The store records absolute paths (each run's repository, a
feature's worktree under the home), and git's worktrees link to each other by
absolute paths, so a world lives at the same place on every machine:
``/tmp/shep-histories/<version>`` (``world_root``). The maker and the test take
a lock there, so two checkouts on one machine take turns.

Files of an entry:

- ``shep.db.gz``: the home's store, checkpointed, vacuumed and gzipped.
- ``world.tar.gz``: everything else of the world (the repositories, the home's
  settings, logs and worktrees), with times and owners zeroed.
- ``runs.json``: each run of the story by name: its id, its status, and what
  brings it to completion (``answer``, ``approve``, ``resume``; nothing for a
  run that is over).
- ``outputs/``: what a user sees, as ``reads`` gives it: ``status.json``,
  ``inbox.json``, ``logs/<name>.jsonl``, ``replay/<name>.jsonl``,
  ``audit-export.jsonl.gz`` and ``head.txt`` (the ``audit verify`` head hash).
- ``shared.sql.gz``: the same store moved into a shared store (``shep store migrate``)
  and dumped (``pg_dump``, plain SQL), where PostgreSQL was installed (``shared.py``).
- ``changes``: the differences a later shep may show, each documented (see
  ``accepted_changes``).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
HISTORIES = ROOT / "tests" / "support" / "histories"
#: Where every world is unpacked: the same absolute path everywhere (see the module's doc).
WORLDS = Path("/tmp/shep-histories")
#: How the world's root is written in the recorded outputs.
ROOT_MASK = "<world>"

#: A run id, a checkpoint id and a hash look alike; a pid in prose: "worker 2187".
_PID_PROSE = re.compile(r"\b((?:[Ww]orker|pid|process) )\d{2,8}\b")
#: When an export was made (its first line), and the hashes over its lines that include it
#: (its last line; the test verifies a fresh export with ``audit verify --export`` instead).
_EXPORTED_AT = re.compile(r'("exported_at": ?)"[^"]*"')
_EXPORT_SUMS = re.compile(r'("(?:lines|start)_sha256": ?)"[0-9a-f]{64}"')


def world_root(version: str) -> Path:
    """Where the world of ``version`` lives while it is made or read."""
    return WORLDS / version


@contextlib.contextmanager
def world_lock() -> Iterator[None]:
    """One maker or test at a time on this machine (the worlds' paths are fixed)."""
    WORLDS.mkdir(parents=True, exist_ok=True)
    with (WORLDS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def environment(root: Path) -> dict[str, str]:
    """The environment every command of a world runs in: built from scratch (a user
    ``alice`` on host ``vm``, UTC), the home at ``root/home``, this checkout's shep and its
    test workflows (``gated-review``), and the demo agent at a fast pace."""
    user = root / "user"
    return {
        "PATH": os.pathsep.join([str(root / "bin"), os.environ.get("PATH", "/usr/bin:/bin")]),
        "HOME": str(user),
        "USER": "alice",
        "LOGNAME": "alice",
        "SHEP_HOST": "vm",
        "SHEP_HOME": str(root / "home"),
        "SHEP_WORKFLOW_MODULES": "tests.support.workflows",
        "SHEP_DEMO_DELAY": "0.05",
        "TZ": "UTC",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
        "GIT_CONFIG_NOSYSTEM": "1",
        "TMPDIR": str(root / "tmp"),
    }


def prepare(root: Path) -> dict[str, str]:
    """The world's fixed parts that are not part of an entry (the user's git identity,
    ``shep`` on PATH as this interpreter's); returns its environment."""
    for sub in ("bin", "user", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "user" / ".gitconfig").write_text(
        "[user]\n\tname = Alice\n\temail = alice@example.com\n"
        "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
    )
    shep = root / "bin" / "shep"
    shep.write_text(f'#!/bin/sh\nexec "{sys.executable}" -P -m shep "$@"\n')
    shep.chmod(0o755)
    return environment(root)


def shep(
    env: Mapping[str, str],
    *args: str,
    code: int | None = 0,
    timeout: float = 300,
    cwd: Path | None = None,
) -> str:
    """``shep ARGS`` in the world; its stdout. Another exit code than ``code`` (None: any)
    raises, with the command's output."""
    done = subprocess.run(
        ["shep", *args],
        env=dict(env),
        cwd=cwd or Path(env["SHEP_HOME"]).parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if code is not None and done.returncode != code:
        raise AssertionError(
            f"`shep {' '.join(args)}` exited {done.returncode}, expected {code}:\n"
            f"{done.stdout}{done.stderr}"
        )
    return done.stdout


def wait_for(done: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll ``done`` until it holds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.2)


def _processes(root: Path) -> list[int]:
    """Pids of the processes whose SHEP_HOME is in the world (workers, agents, supervisor)."""
    needle = f"SHEP_HOME={root}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(v.startswith(needle) for v in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def settle(root: Path, timeout: float = 180) -> None:
    """Wait until no process of the world runs. Workers, agents and the supervisor end by
    themselves; the keeper of a shared home's copy lingers after the last read, so it is
    told to go as a person would: its file removed (it leaves within a heartbeat)."""
    for lock in (root / "home").glob("shared-cache*.keeper"):
        lock.unlink(missing_ok=True)
    wait_for(lambda: not _processes(root), "the world's processes to end", timeout)


def mask(text: str, root: Path) -> str:
    """What varies between machines, or between two readings of one store, made stable:
    the world's root, a pid in prose, when an export was made. The maker and the test
    both mask with this."""
    text = _PID_PROSE.sub(r"\1<pid>", text.replace(str(root), ROOT_MASK))
    text = _EXPORT_SUMS.sub(r'\1"<sha256>"', text)
    return _EXPORTED_AT.sub(r'\1"<time>"', text)


def reads(env: Mapping[str, str], runs: Mapping[str, str], root: Path) -> dict[str, str]:
    """What a user sees of the store, by output file name (masked): status, the inbox,
    each run's logs and replay, the audit export and the head hash ``audit verify`` gives."""
    found = {
        "status.json": shep(env, "status", "--json"),
        "inbox.json": shep(env, "inbox", "--json"),
        "audit-export.jsonl": shep(env, "audit", "export"),
        "head.txt": verified_head(env) + "\n",
    }
    for name, run in sorted(runs.items()):
        found[f"logs/{name}.jsonl"] = shep(env, "logs", run, "--json")
        found[f"replay/{name}.jsonl"] = shep(env, "replay", run, "--json")
    return {path: mask(text, root) for path, text in found.items()}


#: Outputs recorded gzipped.
GZIPPED = frozenset({"audit-export.jsonl"})

_HEAD = re.compile(r"\b([0-9a-f]{64})\b")


def verified_head(env: Mapping[str, str]) -> str:
    """The head hash ``shep audit verify`` reports (it exits 0: the chain holds)."""
    said = shep(env, "audit", "verify")
    found = _HEAD.search(said)
    if found is None:
        raise AssertionError(f"`shep audit verify` named no head hash:\n{said}")
    return found.group(1)


# -- packing and unpacking -------------------------------------------------------------------


def pack_store(db: Path, target: Path) -> None:
    """``db`` vacuumed into one file (no WAL), gzipped without a name or a time."""
    import apsw

    clean = db.with_name("packed.db")
    clean.unlink(missing_ok=True)
    conn = apsw.Connection(str(db))
    try:
        conn.execute("VACUUM INTO ?", (str(clean),))
    finally:
        conn.close()
    with (
        clean.open("rb") as source,
        target.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as out,
    ):
        shutil.copyfileobj(source, out)
    clean.unlink()


_SKIPPED = re.compile(
    r"(^|/)(shep\.db(-wal|-shm|\.bak-.*)?|packed\.db|.*\.lock|.*\.sock|hooks/.*\.sample)$"
)


def pack_world(root: Path, parts: tuple[str, ...], target: Path) -> None:
    """``parts`` of the world (relative to ``root``) as a tar.gz: sorted, times and
    owners zeroed, the store and locks left out."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if _SKIPPED.search(info.name):
            return None
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for part in parts:
            for path in sorted([root / part, *(root / part).rglob("*")]):
                tar.add(path, arcname=str(path.relative_to(root)), recursive=False, filter=clean)
    with (
        target.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as out,
    ):
        out.write(buffer.getvalue())


@dataclass(frozen=True)
class Entry:
    """One version's entry of the corpus."""

    path: Path

    @property
    def version(self) -> str:
        return self.path.name

    @property
    def runs(self) -> dict[str, dict[str, Any]]:
        runs: dict[str, dict[str, Any]] = json.loads((self.path / "runs.json").read_text())
        return runs

    def outputs(self) -> dict[str, str]:
        """The recorded outputs by name (a gzipped one, ``NAME.gz``, read as ``NAME``)."""
        folder = self.path / "outputs"
        found = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            name = str(path.relative_to(folder))
            if name.endswith(".gz"):
                found[name.removesuffix(".gz")] = gzip.decompress(path.read_bytes()).decode()
            else:
                found[name] = path.read_text()
        return found

    def write_outputs(self, outputs: Mapping[str, str]) -> None:
        """Record ``outputs`` (the audit export gzipped: it is the bulk of them)."""
        folder = self.path / "outputs"
        for name, text in outputs.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name in GZIPPED:
                packed = gzip.compress(text.encode(), compresslevel=9, mtime=0)
                path.with_name(path.name + ".gz").write_bytes(packed)
            else:
                path.write_text(text)

    def unpack(self) -> dict[str, str]:
        """The world made anew at its root (whatever was there is removed); its environment."""
        root = world_root(self.version)
        if root.exists():
            shutil.rmtree(root)
        env = prepare(root)
        world = self.path / "world.tar.gz"
        if world.exists():
            with tarfile.open(world) as tar:
                tar.extractall(root, filter="tar")
        home = root / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        with gzip.open(self.path / "shep.db.gz") as packed, (home / "shep.db").open("wb") as db:
            shutil.copyfileobj(packed, db)
        return env


def entries() -> list[Entry]:
    """Every entry of the corpus, oldest version first."""
    from events.versions import version_key

    found = [Entry(p) for p in HISTORIES.iterdir() if (p / "shep.db.gz").is_file()]
    return sorted(found, key=lambda e: version_key(e.version))


# -- accepted differences --------------------------------------------------------------------


def accepted_changes(entry: Entry) -> dict[str, set[str]]:
    """The entry's ``changes`` file: by output file (a glob), the JSON keys whose values a
    later shep may show differently, or ``*`` for the whole file. One a line::

        status.json  pinned_version   # 0.3.0 records the workflow's version on each run

    Blank lines and ``#`` comments are ignored; each line must say why (a comment)."""
    accepted: dict[str, set[str]] = {}
    path = entry.path / "changes"
    if not path.exists():
        return accepted
    for number, line in enumerate(path.read_text().splitlines(), 1):
        body, _, why = line.partition("#")
        if not body.strip():
            continue
        fields = body.split()
        if len(fields) != 2 or not why.strip():
            raise AssertionError(f"{path}:{number}: expected `FILE KEY  # why`, got {line!r}")
        accepted.setdefault(fields[0], set()).add(fields[1])
    return accepted


def _drop(value: Any, keys: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _drop(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_drop(v, keys) for v in value]
    return value


def comparable(name: str, text: str, accepted: Mapping[str, set[str]]) -> Any:
    """An output as compared: parsed JSON (one value, or one a line) with the accepted
    keys dropped; ``None`` when the whole file is accepted as changed."""
    import fnmatch

    keys: set[str] = set()
    for pattern, listed in accepted.items():
        if fnmatch.fnmatch(name, pattern):
            keys |= listed
    if "*" in keys:
        return None
    if name.endswith(".txt"):
        return text
    if name.endswith(".jsonl"):
        return [_drop(json.loads(line), keys) for line in text.splitlines() if line.strip()]
    return _drop(json.loads(text), keys)
