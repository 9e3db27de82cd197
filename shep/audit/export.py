"""``shep audit export``: the log, or its decisions, as a file anyone can verify offline.

Format ``shep-audit-export/1``: JSON lines, each one canonical JSON (sorted keys,
no whitespace, UTF-8; what ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`` writes) and a newline.

1. ``export-start``: the format, the filter, and the store's head (position and
   chain hash) when the export was made.
2. One ``event`` line per exported event: its log position, the chain hash of
   the position before it (``prev_hash``) and its own, the stored fields
   (``stream``, ``version``, ``topic``, ``state``: the stored bytes in base64),
   the decoded event, its time (``at``), and for questions, approvals and their
   decisions who decided (``actor``), what (``verdict``, ``answer``,
   ``reason``), on which item and run, under which ``policy`` and
   ``prompt_version``, and ``seen_hash``: the sha256 of what the decider was
   shown. The supervisor's decisions (and those it could not record: a user
   decided first) and users' cosign votes are decisions too, side by side
   with the users' in log order; a supervisor decision's ``seen_hash`` is its
   ``input_hash``. Each event line verifies alone: its chain hash is
   recomputed from ``prev_hash`` and its own fields.
3. ``export-end``: the count, the range of positions, the head again, the
   sha256 of the first line and of all lines before this one, so a cut, a
   reordered or an edited file is detected even where no hash links two lines.

The export reads one snapshot of the store (a single read transaction) and
streams it: memory stays flat whatever the size of the log. ``shep.audit.verify_export``
checks an export offline (``shep.audit.verify_export.verify_export``).
"""

from __future__ import annotations

import binascii
import csv
import hashlib
import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import IO, TYPE_CHECKING, Any, TextIO
from uuid import UUID

import apsw
import msgspec

from events.audit import open_log, run_in_log, table_exists
from events.base import utc_now
from events.chain import GENESIS_HASH
from events.errors import (
    RunNotFoundError,
    ShepError,
    StoreCorruptedError,
)
from events.inbox import (
    notification_stream_id,
)
from events.sqlite_file import store_error
from events.supervisor import (
    supervisor_stream_id,
)
from shep.audit.format import (
    APPROVAL_REQUESTED,
    ASKED,
    AUDITED,
    CSV_COLUMNS,
    DECIDED,
    DETAIL_FIELDS,
    FORMAT,
    GATE_DECIDED,
    GENESIS_HEX,
    KINDS,
    SUPERVISED,
    VERDICTS,
    Asked,
    Json,
    about,
    asked_of,
    canonical,
    hex_id,
    item_of,
)

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CSV_COLUMNS",
    "DETAIL_FIELDS",
    "FORMAT",
    "KINDS",
    "Asked",
    "ExportFileError",
    "ExportFilter",
    "ExportFilterError",
    "ExportSummary",
    "canonical",
    "iter_export",
    "parse_since",
    "write_csv",
    "write_jsonl",
]

#: Cells a spreadsheet would read as a formula (OWASP, CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_FLUSH_LINES = 256
_QUEUED = 2


class ExportFilterError(ShepError):
    """An export option is not valid (``--since``, ``--kind``, ``--format``, ...)."""

    exit_code = 2


class ExportFileError(ShepError):
    """An export file cannot be written, or read to verify it."""


class MissingFileError(ExportFileError):
    """The export or bundle to verify is not there: the path given names nothing."""

    exit_code = 2


@dataclass(frozen=True)
class ExportFilter:
    """What to export: one run (its id or a unique prefix), events since a moment, a kind.

    ``kind``: ``all`` (every event), ``decisions`` (answers, approvals and
    rejections, with the questions and gates they decide) or ``approvals``
    (approval gates and their decisions only).
    """

    run_id: str | None = None
    since: datetime | None = None
    kind: str = "all"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ExportFilterError(f"--kind must be one of {', '.join(KINDS)}, not {self.kind!r}.")
        if self.since is not None and self.since.tzinfo is None:
            object.__setattr__(self, "since", self.since.replace(tzinfo=UTC))

    @property
    def selects_all(self) -> bool:
        return self.run_id is None and self.since is None and self.kind == "all"


def parse_since(text: str) -> datetime:
    """``--since``: an ISO date (midnight UTC) or date and time (UTC unless it says otherwise)."""
    value = text.strip()
    try:
        moment = (
            datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC)
            if len(value) == 10
            else datetime.fromisoformat(value)
        )
    except ValueError:
        raise ExportFilterError(
            "--since must be an ISO date or date and time (2025-05-01, 2025-05-01T12:00:00Z), "
            f"not {text!r}."
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ExportSummary:
    """What ``write_jsonl`` wrote: how many events, which positions, the store's head."""

    count: int
    first_position: int | None
    last_position: int | None
    head_position: int
    head_hash: str
    lines_sha256: str


# --- reading the store ---------------------------------------------------------------------

_ORDER = " ORDER BY e.notification_id"
_SELECT_ALL = (
    "SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state, "
    "e.chain_hash, NULL FROM stored_events e ORDER BY e.notification_id"
)
#: With the chain hash of the position before each row (NULL at position 1).
_SELECT = (
    "SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state, "
    "e.chain_hash, (SELECT p.chain_hash FROM stored_events p "
    "WHERE p.notification_id = e.notification_id - 1) FROM stored_events e"
)


#: A decision, or a question or gate that has one: on its own stream, or a supervisor's
#: decision about it (topics bound as JSON arrays: decisions, asks, the asks' own
#: decisions, the supervisor's decisions). The supervisor's subjects are read once.
_OF_KIND = (
    "(e.topic IN (SELECT value FROM json_each(?)) OR (e.topic IN (SELECT value FROM json_each(?)) "
    "AND (EXISTS (SELECT 1 FROM stored_events d WHERE d.originator_id = e.originator_id "
    "AND d.originator_version > e.originator_version "
    "AND d.topic IN (SELECT value FROM json_each(?))) "
    "OR e.originator_id IN (SELECT replace(json_extract(CAST(s.state AS TEXT), '$.subject_id'), "
    "'-', '') FROM stored_events s WHERE s.topic IN (SELECT value FROM json_each(?)) "
    "AND json_valid(CAST(s.state AS TEXT))))))"
)


class _Selection:
    """The events a filter selects, read from one snapshot of the store."""

    def __init__(self, conn: apsw.Connection, flt: ExportFilter) -> None:
        self.conn = conn
        self.flt = flt
        self.json = Json()
        has_log = table_exists(conn, "stored_events")
        head = (
            conn.execute(
                "SELECT notification_id, chain_hash FROM stored_events "
                "ORDER BY notification_id DESC LIMIT 1"
            ).fetchone()
            if has_log
            else None
        )
        self.has_log = has_log
        self.head_position: int = head[0] if head else 0
        self.head_hash: str = bytes(head[1]).hex() if head else GENESIS_HEX
        self.run: str | None = (
            run_in_log(self.conn, flt.run_id) if flt.run_id is not None and has_log else None
        )
        if flt.run_id is not None and self.run is None:
            raise RunNotFoundError(flt.run_id)

    def header(self) -> dict[str, Any]:
        since = self.flt.since.isoformat() if self.flt.since is not None else None
        return {
            "type": "export-start",
            "format": FORMAT,
            "head_position": self.head_position,
            "head_hash": self.head_hash,
            "filter": {"run": self.run, "since": since, "kind": self.flt.kind},
            "exported_at": utc_now().isoformat().replace("+00:00", "Z"),
        }

    def _run_streams(self, run: str) -> list[str]:
        """The run's stream, its supervisor's, and its items' (with their notifications)."""
        run_uuid = UUID(hex=run)
        streams = [run, supervisor_stream_id(run_uuid).hex]
        owner = msgspec.json.Decoder(_RunOf)
        for stream, state in self.conn.execute(
            "SELECT originator_id, state FROM stored_events WHERE topic IN (?, ?)", ASKED
        ):
            with suppress(ValueError, TypeError):
                if owner.decode(state).run_id == run_uuid:
                    streams += [str(stream), notification_stream_id(UUID(hex=str(stream))).hex]
        return streams

    def records(self) -> Iterator[tuple[dict[str, Any], bool]]:
        """Each selected event's line, in log order, and whether it holds a float.

        ``state`` is still bytes: msgspec writes bytes as base64 itself, faster
        than converting them first (``_text`` does, for everyone else).
        """
        if not self.has_log:
            return
        codec = self.json
        decode = codec.decode
        since = self.flt.since
        gates_only = self.flt.kind == "approvals"
        last, last_hash = 0, GENESIS_HASH
        for position, stream, version, topic, state, stored, linked in self._rows():
            before = linked
            if before is None:
                before = last_hash if position == last + 1 else self._hash_before(position)
            last, last_hash = position, stored
            codec.floats = False
            try:
                if type(state) is not bytes or type(stored) is not bytes:
                    raise TypeError("its state or hash is not stored as a blob")
                event = decode(state)
            except (ValueError, TypeError) as e:
                raise StoreCorruptedError(
                    f"The event at position {position} cannot be read ({e}): the log is damaged "
                    "or was edited. Run `shep audit verify`."
                ) from e
            at = event.get("timestamp") if type(event) is dict else None
            if since is not None and not _at_or_after(at, since):
                continue
            record = {
                "type": "event",
                "position": position,
                "prev_hash": before.hex(),
                "chain_hash": stored.hex(),
                "stream": stream,
                "version": version,
                "topic": topic,
                "state": state,
                "event": event,
                "at": at,
            }
            if topic in AUDITED:
                floats = codec.floats
                ask = self._ask_of(item_of(topic, stream, event), topic)
                if (
                    topic in SUPERVISED
                    and gates_only
                    and (ask is None or ask[0] != APPROVAL_REQUESTED)
                ):
                    continue  # --kind approvals: the supervisor's decisions on gates only
                record.update(about(topic, stream, event, ask[1] if ask else None))
                codec.floats = floats
            yield record, codec.floats

    def _rows(self) -> apsw.Cursor:
        """The selected rows with, where the row before is not selected, its chain hash."""
        where: list[str] = []
        params: list[Any] = []
        if self.run is not None:
            where.append("e.originator_id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(self._run_streams(self.run)))
        if self.flt.kind != "all":
            # --kind approvals: the supervisor's decisions on questions are left out as read.
            gates = self.flt.kind == "approvals"
            decided = (*GATE_DECIDED, *SUPERVISED) if gates else DECIDED
            asked = (APPROVAL_REQUESTED,) if gates else ASKED
            own = GATE_DECIDED if gates else tuple(t for t in DECIDED if t not in SUPERVISED)
            where.append(_OF_KIND)
            params += [json.dumps(t) for t in (decided, asked, own, SUPERVISED)]
        if not where:
            # Every row: each one's predecessor is the row read before it.
            return self.conn.execute(_SELECT_ALL)
        return self.conn.execute(_SELECT + " WHERE " + " AND ".join(where) + _ORDER, params)

    def _hash_before(self, position: int) -> bytes:
        row = self.conn.execute(
            "SELECT chain_hash FROM stored_events WHERE notification_id = ?", (position - 1,)
        ).fetchone()
        if row is None:
            raise StoreCorruptedError(
                f"The log has no event at position {position - 1}, before an exported one: "
                "it is damaged or was edited. Run `shep audit verify`."
            )
        return bytes(row[0])

    def _ask_of(self, item: str | None, topic: str) -> tuple[str, Asked | None] | None:
        """A decision's item: the topic of its question or gate, and what was asked there."""
        if topic in ASKED or item is None:
            return None
        row = self.conn.execute(
            "SELECT topic, state FROM stored_events WHERE originator_id = ? "
            "AND originator_version = 1",
            (item,),
        ).fetchone()
        if row is None or row[0] not in ASKED:
            return None
        try:
            return row[0], asked_of(row[0], self.json.decode(row[1]))
        except (ValueError, TypeError):
            return row[0], None


class _RunOf(msgspec.Struct):
    run_id: UUID


def _at_or_after(at: Any, since: datetime) -> bool:
    if not isinstance(at, str):
        return False
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        return False
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) >= since


@contextmanager
def _selection(db_path: str | Path, flt: ExportFilter) -> Iterator[_Selection]:
    """The filter's events on one read transaction of the store, opened read-only."""
    conn = open_log(db_path)
    try:
        conn.execute("BEGIN")
        yield _Selection(conn, flt)
    except apsw.Error as e:
        raise store_error(e, db_path) from e
    finally:
        with suppress(apsw.Error):
            conn.execute("COMMIT")
        conn.close()


def iter_export(db_path: str | Path, flt: ExportFilter) -> Iterator[dict[str, Any]]:
    """The export's event lines as dicts, in log order, read from one snapshot of the store."""
    with _selection(db_path, flt) as selection:
        for record, _ in selection.records():
            yield _text(record)


def _text(record: dict[str, Any]) -> dict[str, Any]:
    """The record as its line says it: ``state`` in base64."""
    record["state"] = binascii.b2a_base64(record["state"], newline=False).decode("ascii")
    return record


def write_jsonl(db_path: str | Path, flt: ExportFilter, out: IO[bytes]) -> ExportSummary:
    """Write the ``shep-audit-export/1`` lines of the filter's events to ``out``."""
    with _selection(db_path, flt) as selection:
        encode = selection.json.encode
        fast = selection.json.encode_sorted
        start = encode(selection.header(), floats=False) + b"\n"
        out.write(start)
        digest = hashlib.sha256(start)
        pending: list[bytes] = []
        count = 0
        first: int | None = None
        last: int | None = None
        with _Pipe(out, digest) as pipe:
            for record, floats in selection.records():
                pending.append(encode(_text(record), floats=True) if floats else fast(record))
                last = record["position"]
                if first is None:
                    first = last
                count += 1
                if len(pending) == _FLUSH_LINES:
                    pipe.put(b"\n".join(pending) + b"\n")
                    pending.clear()
            if pending:
                pipe.put(b"\n".join(pending) + b"\n")
        summary = ExportSummary(
            count, first, last, selection.head_position, selection.head_hash, digest.hexdigest()
        )
        end = {
            "type": "export-end",
            "count": count,
            "first_position": first,
            "last_position": last,
            "head_position": summary.head_position,
            "head_hash": summary.head_hash,
            "lines_sha256": summary.lines_sha256,
            "start_sha256": hashlib.sha256(start).hexdigest(),
        }
        out.write(encode(end, floats=False) + b"\n")
    return summary


class _Pipe:
    """Hashes and writes chunks of lines in a thread of its own.

    hashlib and file writes release the GIL, so on a machine with two cores
    they overlap with encoding the next chunk (a third of an export's time).
    At most ``_QUEUED`` chunks wait: memory stays flat. The first error of the
    writer is raised in the caller, at its next ``put`` or at the end.
    """

    def __init__(self, out: IO[bytes], digest: Any) -> None:
        self._out, self._digest = out, digest
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=_QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write, name="audit-export", daemon=True)

    def __enter__(self) -> _Pipe:
        self._thread.start()
        return self

    def _write(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._digest.update(chunk)
                    self._out.write(chunk)
                except BaseException as e:  # handed to the caller, in its thread
                    self._error = e

    def put(self, chunk: bytes) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(chunk)

    def __exit__(self, *exc: object) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error


def write_csv(db_path: str | Path, flt: ExportFilter, out: TextIO) -> int:
    """Write the filter's events as CSV (``CSV_COLUMNS``, RFC 4180); return how many.

    A cell that a spreadsheet would run as a formula (it begins with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return) gets a ``'`` in front.
    A decision's ``DETAIL_FIELDS`` come from its event: true or false,
    numbers as JSON writes them, ``rules`` as canonical JSON.
    ``out`` should be opened with ``newline=""``.
    """
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    count = 0
    for record in iter_export(db_path, flt):
        event = record["event"] if isinstance(record["event"], dict) else {}
        row = dict(record)
        row.setdefault("run", hex_id(event.get("run_id")))
        row.setdefault("node", event.get("node"))
        if record["topic"] in VERDICTS:
            row.update({key: _detail(event.get(key)) for key in DETAIL_FIELDS})
        writer.writerow([_cell(row.get(column)) for column in CSV_COLUMNS])
        count += 1
    return count


def _detail(value: Any) -> Any:
    """A value of a decision's event as its CSV cell says it (JSON's words and forms)."""
    if value is None or isinstance(value, str):
        return value
    return canonical(value).decode()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text
