"""The readers of a whole run (`shep logs`, `shep replay`) hold a bounded window of it.

A long-running agent writes hundreds of thousands of events in a day: a reader that
loaded them all would need the log's size in memory. These tests count what is read
from SQLite against what has been handed on (printed, or folded into frames); the
peak memory itself is a figure of benchmarks/readers.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import apsw
import pytest

from commands.complete_run import complete_run
from commands.create_run import create_run
from commands.record_agent_output import OutputItem, record_agent_output
from commands.record_node import record_node_completed, record_node_started
from commands.start_run import start_run
from events.store import EventStore
from projections.queries import LOG_PAGE
from shep.replay import OutputBatch, frames_from_store
from shep.replay.output import OUTPUT_HEAD, OUTPUT_TAIL
from shep.replay.sources import OUTPUT_CHUNK, iter_run_events
from tests.support.cli import shep

#: Lines of agent output of the long run: a few pages, and a few chunks, and a bit.
LINES = 3 * max(LOG_PAGE, OUTPUT_CHUNK) + 17


def _long_run(store: EventStore, lines: int = LINES) -> UUID:
    """A completed run of one node that wrote ``lines`` lines of output, 500 per batch."""
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["n"], created_by="me"
    )
    start_run(store, run_id, pid=1, host="h")
    record_node_started(store, run_id, "n", epoch=1)
    for start in range(0, lines, 500):
        items = [
            OutputItem(kind="text", text=f"line {i}") for i in range(start, min(start + 500, lines))
        ]
        record_agent_output(store, run_id, "n", items, epoch=1)
    record_node_completed(store, run_id, "n", duration_ms=1, epoch=1)
    complete_run(store, run_id, duration_ms=1, epoch=1)
    return run_id


#: Runs `shep ARGS` in this process, counting the rows SQLite hands any connection and the
#: lines the command prints; prints the most rows ever read ahead of the printed lines.
_PROBE = """
import sys
import apsw
import click

counts = {"rows": 0, "lines": 0, "ahead": 0}

def row(cursor, values):
    counts["rows"] += 1
    counts["ahead"] = max(counts["ahead"], counts["rows"] - counts["lines"])
    return values

apsw.connection_hooks.append(lambda conn: setattr(conn, "row_trace", row))
echo = click.echo

def counting_echo(message=None, *args, **kwargs):
    counts["lines"] += 1
    return echo(message, *args, **kwargs)

click.echo = counting_echo
from shep.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
sys.stderr.write(f"LINES={counts['lines']} AHEAD={counts['ahead']}\\n")
"""


@pytest.mark.parametrize("json_lines", [False, True])
def test_logs_reads_a_long_run_a_page_at_a_time(
    store: EventStore, tmp_path: Path, json_lines: bool
) -> None:
    """`shep logs RUN` (and --json) prints every line of a run of thousands, never having
    read more than a page of them (and a few rows of its own) ahead of what it printed.
    """
    run_id = _long_run(store)
    shep("status", check=True)  # the projections caught up, as a user's would be
    args = ["logs", run_id.hex, *(["--json"] if json_lines else [])]
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    lines, ahead = (int(part.split("=")[1]) for part in result.stderr.split()[-2:])
    # Created, started, node started, the output, node completed, completed.
    assert lines == LINES + 5
    assert ahead <= LOG_PAGE + 20, f"read {ahead} rows ahead of what it printed"


def test_replay_folds_a_long_run_a_chunk_at_a_time(store: EventStore, db_path: Path) -> None:
    """A replay reads the run's events as it folds them: never more than a chunk of output
    (and the few events of the first pass, which looks for inbox items) ahead of the fold,
    and no batch larger than a chunk.
    """
    run_id = _long_run(store)
    conn = apsw.Connection(
        f"file:{db_path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    fetched = 0

    def count(cursor: apsw.Cursor, row: apsw.SQLiteValues) -> apsw.SQLiteValues:
        nonlocal fetched
        fetched += 1
        return row

    conn.row_trace = count
    folded = ahead = 0
    for _, event in iter_run_events(conn, run_id.hex):
        size = len(event.states) if isinstance(event, OutputBatch) else 1
        assert size <= OUTPUT_CHUNK
        folded += size
        ahead = max(ahead, fetched - folded)
    conn.close()
    assert folded == LINES + 5  # the heartbeat-free run: every event is in the story
    assert ahead <= OUTPUT_CHUNK + 10, f"read {ahead} events ahead of the fold"


def test_replay_of_a_long_run_shows_its_first_and_last_lines(
    store: EventStore, db_path: Path
) -> None:
    """Output cut in chunks is folded as one batch was: the node's frame shows its first and
    last lines and counts those between.
    """
    run_id = _long_run(store)
    replay = frames_from_store(db_path, run_id.hex)
    node = next(replay.frame(i) for i in range(1, len(replay) + 1) if replay.frames[i - 1].node)
    assert node.output == [
        *(f"line {i}" for i in range(OUTPUT_HEAD)),
        f"… {LINES - OUTPUT_HEAD - OUTPUT_TAIL} more lines not shown …",
        *(f"line {i}" for i in range(LINES - OUTPUT_TAIL, LINES)),
    ]
