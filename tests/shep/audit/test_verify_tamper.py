"""Tampering: one byte flipped anywhere in the database's events or in an export is found,
and the exact log position (and for an export, the line and its byte offset) is named.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest

from events.audit import open_log, verify_chain
from events.store import EventStore
from shep.audit.export import ExportFilter, canonical, write_jsonl
from shep.audit.verify_export import ExportReport, verify_export
from tests.shep.audit.test_export import decide_some
from tests.support.cli import shep
from tests.support.histories import random_decisions, random_run

SEEDS = range(1, 9)


@pytest.fixture
def history(store: EventStore, tmp_path: Path) -> Path:
    """Runs through the real commands, with questions, gates and their decisions."""
    rng = random.Random(7)
    decide_some(store, tmp_path)
    for _ in range(6):
        random_decisions(store, random_run(store, rng), rng)
    return store.path


def settle(db: Path) -> None:
    """Move everything from the WAL into the database file, as a closed store has it."""
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


# --- the database file -----------------------------------------------------------------------


def row_spans(db: Path) -> list[tuple[int, int, int]]:
    """(position, start, end) of each event's state and chain hash bytes in the file.

    A record stores ``state`` and then ``chain_hash``, so their bytes lie side by
    side; rows whose bytes are not found exactly once (an overflow page, a
    coincidence) are left out.
    """
    conn = apsw.Connection(str(db))
    stored = conn.execute(
        "SELECT notification_id, state, chain_hash FROM stored_events ORDER BY notification_id"
    ).fetchall()
    conn.close()
    data = db.read_bytes()
    spans = []
    for position, state, chained in stored:
        needle = bytes(state) + bytes(chained)
        at = data.find(needle)
        if at >= 0 and data.find(needle, at + 1) < 0:
            spans.append((position, at, at + len(needle)))
    return spans


@pytest.mark.parametrize("seed", SEEDS)
def test_a_byte_flipped_in_the_database_is_named_by_its_position(history: Path, seed: int) -> None:
    """A random byte of a random event's state or hash: verify names that event's position."""
    settle(history)
    spans = row_spans(history)
    conn = open_log(history)
    total = verify_chain(conn).events
    conn.close()
    assert len(spans) > total * 0.9
    rng = random.Random(seed)
    position, start, end = rng.choice(spans)
    offset = rng.randrange(start, end)
    data = bytearray(history.read_bytes())
    data[offset] ^= rng.randrange(1, 256)
    history.write_bytes(bytes(data))
    conn = open_log(history)
    report = verify_chain(conn)
    conn.close()
    assert not report.ok
    assert report.first_bad_position == position
    assert report.events == position - 1
    done = shep("audit", "verify")
    assert done.returncode == 4
    assert f"at position {position}:" in done.stderr


# --- an export -------------------------------------------------------------------------------


@dataclass
class Lines:
    """An export's bytes, where each line starts, and the log position each line holds."""

    data: bytes
    starts: list[int]
    positions: list[int | None]

    @classmethod
    def of(cls, data: bytes) -> Lines:
        starts, offset = [], 0
        for line in data.split(b"\n")[:-1]:
            starts.append(offset)
            offset += len(line) + 1
        positions = [json.loads(line).get("position") for line in data.split(b"\n")[:-1]]
        return cls(data, starts, positions)

    def line_at(self, offset: int) -> int:
        """The line (from 1) holding the byte at ``offset`` (a newline ends its line)."""
        return max(n for n, start in enumerate(self.starts, start=1) if start <= offset)


def export_of(db: Path, flt: ExportFilter) -> Lines:
    out = io.BytesIO()
    write_jsonl(db, flt, out)
    return Lines.of(out.getvalue())


def verify_bytes(tmp_path: Path, data: bytes) -> ExportReport:
    path = tmp_path / "tampered.jsonl"
    path.write_bytes(data)
    return verify_export(path)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_byte_flipped_in_an_export_is_named_by_line_offset_and_position(
    history: Path, tmp_path: Path, seed: int
) -> None:
    """Any byte of a whole-log export: the line holding it, where that line starts, its
    position (none on the first and last lines); 25 flips per seed.
    """
    lines = export_of(history, ExportFilter())
    assert verify_bytes(tmp_path, lines.data).ok
    rng = random.Random(seed)
    for _ in range(25):
        offset = rng.randrange(len(lines.data))
        data = bytearray(lines.data)
        data[offset] ^= rng.randrange(1, 256)
        report = verify_bytes(tmp_path, bytes(data))
        line = lines.line_at(offset)
        assert not report.ok
        assert (report.line, report.byte_offset, report.position) == (
            line,
            lines.starts[line - 1],
            lines.positions[line - 1],
        ), (offset, report.problem)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_byte_flipped_in_a_filtered_export_is_named_by_its_line(
    history: Path, tmp_path: Path, seed: int
) -> None:
    """A decisions export (positions with gaps): every flip is found, on its own line."""
    lines = export_of(history, ExportFilter(kind="decisions"))
    assert verify_bytes(tmp_path, lines.data).ok
    rng = random.Random(seed)
    for _ in range(25):
        offset = rng.randrange(len(lines.data))
        data = bytearray(lines.data)
        data[offset] ^= rng.randrange(1, 256)
        report = verify_bytes(tmp_path, bytes(data))
        assert not report.ok
        line = lines.line_at(offset)
        if report.line != line:
            # Only what no hash covers can be found no sooner than the last line.
            assert report.line == len(lines.starts), (offset, report.problem)
            assert "lines_sha256" in report.problem
        assert report.position in (lines.positions[line - 1], None), (offset, report.problem)


def test_the_report_names_the_exact_position_in_words(history: Path, tmp_path: Path) -> None:
    """`shep audit verify --export`: one line, exit 4, with the line, offset and position."""
    lines = export_of(history, ExportFilter())
    line = 12
    start = lines.starts[line - 1]
    at = lines.data.index(b'"version":', start) + len(b'"version":')
    data = bytearray(lines.data)
    data[at] = ord("9") if data[at] != ord("9") else ord("8")
    path = tmp_path / "tampered.jsonl"
    path.write_bytes(bytes(data))
    done = shep("audit", "verify", "--export", str(path), env={"SHEP_HOME": str(tmp_path / "x")})
    assert done.returncode == 4
    assert done.stdout == ""
    assert done.stderr == (
        f"shep: Export {path} does not verify at line {line} (byte {start}, log position "
        f"{lines.positions[line - 1]}): the chain hash does not match the event and prev_hash. "
        f"{line - 2} events before it verify.\n"
    )


def remove_line(lines: Lines, n: int) -> bytes:
    start = lines.starts[n - 1]
    end = lines.starts[n] if n < len(lines.starts) else len(lines.data)
    return lines.data[:start] + lines.data[end:]


def test_cut_removed_and_reordered_lines_are_found(history: Path, tmp_path: Path) -> None:
    """Truncation (at a line or within one), a removed line, two lines swapped: each named."""
    lines = export_of(history, ExportFilter())
    last = len(lines.starts)
    cut = verify_bytes(tmp_path, lines.data[: lines.starts[-1]])
    assert (cut.ok, cut.line, cut.byte_offset) == (False, last, lines.starts[-1])
    assert cut.problem == "the export ends without its export-end line: it was cut short"
    mid = verify_bytes(tmp_path, lines.data[: lines.starts[20] - 7])
    assert (mid.line, mid.position) == (20, lines.positions[19])
    assert mid.problem == "the line is cut short (no newline at its end)"
    removed = verify_bytes(tmp_path, remove_line(lines, 10))
    assert (removed.line, removed.position) == (10, lines.positions[9])
    assert (
        removed.problem
        == f"position {lines.positions[9]} is missing from an export of the whole log"
    )
    a, b = lines.starts[9], lines.starts[10]
    swapped = (
        lines.data[:a]
        + lines.data[b : lines.starts[11]]
        + lines.data[a:b]
        + lines.data[lines.starts[11] :]
    )
    report = verify_bytes(tmp_path, swapped)
    assert (report.line, report.position) == (11, lines.positions[9])
    assert "out of order" in report.problem
    footerless = verify_bytes(tmp_path, remove_line(lines, last))
    assert footerless.problem == "the export ends without its export-end line: it was cut short"
    extra = verify_bytes(tmp_path, lines.data + lines.data[lines.starts[5] : lines.starts[6]])
    assert (extra.line, extra.problem) == (last + 1, "there is more after the export-end line")
    empty = verify_bytes(tmp_path, b"")
    assert (empty.ok, empty.line, empty.byte_offset, empty.problem) == (
        False,
        1,
        0,
        "the file is empty",
    )


def test_a_line_removed_from_a_filtered_export_is_found_at_its_end(
    history: Path, tmp_path: Path
) -> None:
    """No hash links two lines far apart in the log: the last line's lines_sha256 does."""
    lines = export_of(history, ExportFilter(kind="approvals"))
    report = verify_bytes(tmp_path, remove_line(lines, 3))
    assert not report.ok
    assert report.line == len(lines.starts) - 1
    assert "lines_sha256" in report.problem


def test_an_edited_readable_field_is_found_although_the_state_is_intact(
    history: Path, tmp_path: Path
) -> None:
    """The readable fields must say what the hashed state says: a changed reason is caught."""
    lines = export_of(history, ExportFilter(kind="decisions"))
    n = next(i for i, p in enumerate(lines.data.split(b"\n"), 1) if b'"reason":"' in p)
    raw = lines.data.split(b"\n")[n - 1]
    record = json.loads(raw)
    record["reason"] = "nothing to see"
    edited = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    report = verify_bytes(tmp_path, lines.data.replace(raw, edited))
    assert (report.line, report.position) == (n, record["position"])
    assert report.problem == "reason differ from what the event says"


def test_a_forged_head_is_caught(history: Path, tmp_path: Path) -> None:
    """A head hash replaced in the first and last lines, with the last line's hashes made
    again as a forger would: the last event of a whole-log export is the head, so it fails.
    """
    lines = export_of(history, ExportFilter())
    start, *events, end = (json.loads(x) for x in lines.data.split(b"\n")[:-1])
    start["head_hash"] = end["head_hash"] = "0" * 64
    body = b"".join(canonical(x) + b"\n" for x in (start, *events))
    end["lines_sha256"] = hashlib.sha256(body).hexdigest()
    end["start_sha256"] = hashlib.sha256(canonical(start) + b"\n").hexdigest()
    report = verify_bytes(tmp_path, body + canonical(end) + b"\n")
    assert not report.ok
    assert (report.line, report.byte_offset) == (len(lines.starts), lines.starts[-1])
    assert report.problem == "the head hash is not the chain hash of the last event"
