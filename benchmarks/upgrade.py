"""The first command after an upgrade that needs no migration, against the same command
before it (issue 21: ``upgrade_open_ratio`` ≤ 1.1).

A store last written by an older shep of the same store schema and projection versions
needs no migration: the first shep command of the new release only raises the store's
``newest_writer`` (``events.migrations``) the first time it opens the store to write.
Each round copies one home twice, as the older shep left it (``newest_writer`` older
than this shep) and as this shep leaves it, and runs the same command in each fresh
copy, interleaved: ``shep status`` (a read) and ``shep settings set`` (a write, which
opens the store and so raises the writer).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import apsw

from benchmarks.history import write_history
from benchmarks.run import ROOT, _compile_sources, _timed
from events.store import EventStore
from events.versions import SHEP_VERSION

#: A release older than this one with the same store schema (only its name matters here).
OLDER = "0.1.9"

COMMANDS = {
    "read": ["status"],
    "write": ["settings", "set", "heartbeat_interval", "30"],
}


def _writer(db: Path) -> str | None:
    conn = apsw.Connection(str(db))
    try:
        row = conn.execute("SELECT value FROM shep_meta WHERE key='newest_writer'").fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def _set_writer(db: Path, version: str) -> None:
    conn = apsw.Connection(str(db))
    try:
        conn.execute("UPDATE shep_meta SET value=? WHERE key='newest_writer'", (version,))
    finally:
        conn.close()


def bench(quick: bool) -> dict[str, float]:
    runs, rounds = (300, 5) if quick else (2_000, 11)
    _compile_sources()
    with tempfile.TemporaryDirectory(prefix="shep-bench-upgrade-") as tmp:
        work = Path(tmp)
        home = work / "home"
        home.mkdir(mode=0o700)
        with EventStore(home / "shep.db") as store:
            write_history(store, runs, 103)
        env = {**os.environ, "SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}
        shep = [sys.executable, "-m", "shep"]
        _timed([*shep, "status"], env)  # projections caught up once, in the original
        assert _writer(home / "shep.db") == SHEP_VERSION
        figures: dict[str, float] = {}
        for name, args in COMMANDS.items():
            before: list[float] = []
            after: list[float] = []
            for _ in range(rounds):
                for older, times in ((False, before), (True, after)):
                    copy = work / "copy"
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(home, copy)
                    if older:
                        _set_writer(copy / "shep.db", OLDER)
                    times.append(_timed([*shep, *args], {**env, "SHEP_HOME": str(copy)})[1])
                    if older and name == "write":  # the upgrade happened, and only once
                        assert _writer(copy / "shep.db") == SHEP_VERSION
            figures[f"upgrade_{name}_cpu_s"] = round(statistics.median(after), 4)
            figures[f"upgrade_{name}_before_cpu_s"] = round(statistics.median(before), 4)
            figures[f"upgrade_{name}_ratio"] = round(
                statistics.median(after) / statistics.median(before), 3
            )
        figures["upgrade_open_ratio"] = max(
            figures["upgrade_read_ratio"], figures["upgrade_write_ratio"]
        )
        return figures
