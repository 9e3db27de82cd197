"""``shep audit verify --export``: an audit export checked offline, without any database.

The format is ``shep-audit-export/1``, as ``shep.audit.export`` writes it (its
docstring describes the lines); the audit fields of questions, gates and
decisions are recomputed with the functions that write them. A problem names
the line, the byte offset where it starts, and the log position of its event.
"""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import re
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from events.chain import chain_hash
from events.words import counted
from shep.audit.format import (
    ASKED,
    FORMAT,
    GENESIS_HEX,
    KINDS,
    VERDICTS,
    Asked,
    Json,
    about,
    asked_of,
    item_of,
)

if TYPE_CHECKING:
    from pathlib import Path

_EVENT_KEYS = frozenset(
    {"type", "position", "prev_hash", "chain_hash", "stream", "version", "topic", "state"}
    | {"event", "at"}
)
_ABOUT_KEYS = frozenset(
    {"actor", "item", "run", "node", "verdict", "reason", "answer", "seen_hash", "policy"}
    | {"prompt_version"}
)
#: Keys a decision line takes from the item's question or gate (``about``).
_FROM_ASK = frozenset({"run", "node", "seen_hash", "prompt_version"})
_START_KEYS = frozenset({"type", "format", "head_position", "head_hash", "filter", "exported_at"})
_END_KEYS = frozenset(
    {"type", "count", "first_position", "last_position", "head_position", "head_hash"}
    | {"lines_sha256", "start_sha256"}
)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RAW_BOTH = re.compile(rb'"position":([0-9]{1,19}),"prev_hash":"([0-9a-f]{64})"')
_RAW_PREV = re.compile(rb'"prev_hash":"([0-9a-f]{64})"')
_RAW_POSITION = re.compile(rb'"position":([0-9]{1,19}),')
#: ``position`` with a byte of its name changed: the value before ``prev_hash`` still says.
_RAW_RENAMED = re.compile(rb'"[^"]{8}":([0-9]{1,19}),"prev_hash":"')


@dataclass(frozen=True)
class ExportReport:
    """What ``verify_export`` found. On a problem: the line (from 1), the byte offset where
    that line starts, and the log position of the event it holds when that is known.
    """

    ok: bool
    count: int
    problem: str = ""
    line: int | None = None
    byte_offset: int | None = None
    position: int | None = None
    head_position: int = 0
    head_hash: str = ""
    anchor_hash: str | None = None


class _Problem(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def _is_position(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Verifier:
    """One pass over an export; ``_Problem`` names what is wrong with the current line."""

    def __init__(self, anchor_position: int | None) -> None:
        self.json = Json()
        self.anchor_position = anchor_position
        self.anchor_hash: str | None = None
        self.start: dict[str, Any] | None = None
        self.start_line = b""
        self.lines = hashlib.sha256()
        self.count = 0
        self.first: int | None = None
        self.last: int | None = None
        self.last_hash = ""
        self.gap: tuple[int, int, int] | None = None  # line, offset, position
        self.asks: dict[str, Asked] = {}

    def parse(self, raw: bytes) -> dict[str, Any]:
        if not raw.endswith(b"\n"):
            raise _Problem("the line is cut short (no newline at its end)")
        codec = self.json
        codec.floats = False
        try:
            value = codec.decode(raw[:-1])
        except ValueError as e:
            raise _Problem(f"the line is not valid JSON ({e})") from None
        if not isinstance(value, dict):
            raise _Problem("the line is not a JSON object")
        if codec.encode(value, floats=codec.floats) != raw[:-1]:
            raise _Problem("the line is not in canonical form (sorted keys, no whitespace)")
        return value

    def check_start(self, value: dict[str, Any], raw: bytes) -> None:
        if value.get("type") != "export-start":
            raise _Problem("the first line is not an export-start line")
        if set(value) != _START_KEYS:
            raise _Problem(f"the export-start line has keys {sorted(value)}")
        if value["format"] != FORMAT:
            raise _Problem(f"unknown format {value['format']!r} (this shep reads {FORMAT})")
        flt = value["filter"]
        if not (
            _is_position(value["head_position"])
            and _is_hash(value["head_hash"])
            and isinstance(value["exported_at"], str)
            and isinstance(flt, dict)
            and set(flt) == {"run", "since", "kind"}
            and flt["kind"] in KINDS
            and (flt["run"] is None or re.fullmatch(r"[0-9a-f]{32}", str(flt["run"])))
            and (flt["since"] is None or isinstance(flt["since"], str))
        ):
            raise _Problem("the export-start line has a field of the wrong kind")
        self.start = value
        self.start_line = raw

    @property
    def selects_all(self) -> bool:
        flt = self.start["filter"] if self.start else {}
        return flt.get("run") is None and flt.get("since") is None and flt.get("kind") == "all"

    def check_event(self, value: dict[str, Any], line: int, offset: int) -> None:
        keys = set(value)
        if not keys >= _EVENT_KEYS or keys - _EVENT_KEYS - _ABOUT_KEYS:
            raise _Problem(f"the event line has keys {sorted(keys)}")
        position, version = value["position"], value["version"]
        stream, topic, state = value["stream"], value["topic"], value["state"]
        if not (
            _is_position(position)
            and position >= 1
            and isinstance(version, int)
            and not isinstance(version, bool)
            and isinstance(stream, str)
            and isinstance(topic, str)
            and isinstance(state, str)
            and _is_hash(value["prev_hash"])
            and _is_hash(value["chain_hash"])
        ):
            raise _Problem("the event line has a field of the wrong kind")
        if self.last is not None and position <= self.last:
            raise _Problem(f"position {position} comes after position {self.last} (out of order)")
        follows = position == (self.last or 0) + 1
        if follows and self.last is None and value["prev_hash"] != GENESIS_HEX:
            raise _Problem("position 1 does not start from the genesis hash")
        if follows and self.last is not None and value["prev_hash"] != self.last_hash:
            raise _Problem(f"prev_hash is not the chain hash of position {self.last} before it")
        if not follows and self.gap is None:
            self.gap = (line, offset, (self.last or 0) + 1)
        try:
            stored = binascii.a2b_base64(state, strict_mode=True)
        except binascii.Error as e:
            raise _Problem(f"state is not base64 ({e})") from None
        if binascii.b2a_base64(stored, newline=False).decode("ascii") != state:
            raise _Problem("state is not in canonical base64")
        computed = chain_hash(
            bytes.fromhex(value["prev_hash"]),
            position,
            stream.encode(),
            version,
            topic.encode(),
            stored,
        )
        if computed.hex() != value["chain_hash"]:
            raise _Problem("the chain hash does not match the event and prev_hash")
        self._check_fields(value, stored, topic, stream)
        if position == self.anchor_position:
            self.anchor_hash = value["chain_hash"]
        self.count += 1
        self.first = self.first if self.first is not None else position
        self.last, self.last_hash = position, value["chain_hash"]

    def _check_fields(self, value: dict[str, Any], stored: bytes, topic: str, stream: str) -> None:
        """The readable fields (``event``, ``at``, the audit fields) say what ``state`` says."""
        codec = self.json
        codec.floats = False
        try:
            event = codec.decode(stored)
        except ValueError as e:
            raise _Problem(f"state is not JSON ({e})") from None
        floats = codec.floats
        if codec.encode(value["event"], floats=floats) != codec.encode(event, floats=floats):
            raise _Problem("event differs from the stored state")
        at = event.get("timestamp") if isinstance(event, dict) else None
        if value["at"] != at:
            raise _Problem("at differs from the event's timestamp")
        given = {key: value[key] for key in _ABOUT_KEYS if key in value}
        if topic not in VERDICTS and topic not in ASKED:
            if given:
                raise _Problem(f"{sorted(given)} on an event that is no question or decision")
            return
        asked = self.asks.get(item_of(topic, stream, event) or stream)
        expected = about(topic, stream, event, asked)
        if asked is None and topic in VERDICTS:
            # The question or gate is not in this export: what came from it cannot be checked.
            for key in _FROM_ASK - expected.keys():
                if key in given and not isinstance(given[key], str):
                    raise _Problem(f"{key} is not text")
                expected.setdefault(key, given.get(key))
            expected = {k: v for k, v in expected.items() if v is not None or k in given}
        if given != expected:
            wrong = sorted(
                k for k in given.keys() | expected.keys() if given.get(k) != expected.get(k)
            )
            raise _Problem(f"{', '.join(wrong)} differ from what the event says")
        if topic in ASKED:
            self.asks[stream] = asked_of(topic, event)

    def check_end(self, value: dict[str, Any], line: int, offset: int) -> None:
        """Check the export-end line against the lines before it.

        What it finds wrong elsewhere (the first line changed, a position missing
        from a whole-log export) it raises as ``_Elsewhere``.
        """
        if set(value) != _END_KEYS:
            raise _Problem(f"the export-end line has keys {sorted(value)}")
        start = self.start
        assert start is not None
        start_sha = hashlib.sha256(self.start_line).hexdigest()
        lines_sha = self.lines.hexdigest()
        if value["start_sha256"] != start_sha:
            if value["lines_sha256"] != lines_sha:
                raise _Elsewhere(
                    "the export-start line was changed (its sha256 is not start_sha256)", 1, 0
                )
            raise _Problem("start_sha256 is not the sha256 of the export-start line")
        if self.selects_all and self.gap is not None:
            gap_line, gap_offset, position = self.gap
            raise _Elsewhere(
                f"position {position} is missing from an export of the whole log",
                gap_line,
                gap_offset,
                position,
            )
        if value["lines_sha256"] != lines_sha:
            raise _Problem(
                "the lines before it do not hash to lines_sha256 "
                "(lines were removed, reordered or changed, or this line was)"
            )
        expected = {
            "count": self.count,
            "first_position": self.first,
            "last_position": self.last,
            "head_position": start["head_position"],
            "head_hash": start["head_hash"],
        }
        wrong = sorted(k for k, v in expected.items() if value[k] != v)
        if wrong:
            raise _Problem(f"{', '.join(wrong)} differ from the lines before it")
        self._check_head(start["head_position"], start["head_hash"])

    def _check_head(self, head: int, head_hash: str) -> None:
        if self.last is not None and self.last > head:
            raise _Problem(f"position {self.last} lies beyond the head, position {head}")
        if self.selects_all and self.count != head:
            raise _Problem(
                f"an export of the whole log holds {self.count} of {counted(head, 'event')}"
            )
        if self.last == head and self.last_hash != head_hash:
            raise _Problem("the head hash is not the chain hash of the last event")


class _Elsewhere(_Problem):
    """A problem found at the export-end line that lies on an earlier line."""

    def __init__(self, message: str, line: int, offset: int, position: int | None = None) -> None:
        super().__init__(message)
        self.line, self.offset, self.position = line, offset, position


@dataclass
class _Cursor:
    line: int = 0
    offset: int = 0


def verify_export(path: str | Path, *, anchor_position: int | None = None) -> ExportReport:
    """Verify a ``shep-audit-export/1`` file without any database.

    Every line parses and is canonical; each event line's chain hash is
    recomputed from its own fields, and its readable fields match its stored
    state; consecutive positions link (``prev_hash`` is the previous line's
    chain hash); the export-start and export-end lines agree on the count, the
    range, the head and the sha256 of the lines. A problem names the line,
    the byte offset where it starts, and the log position of its event.
    """
    verifier = _Verifier(anchor_position)
    at = _Cursor()
    end: dict[str, Any] | None = None
    with open(path, "rb") as f:
        raw = b""
        try:
            for raw in f:
                at.line += 1
                if end is not None:
                    raise _Problem("there is more after the export-end line")
                value = verifier.parse(raw)
                if at.line == 1:
                    verifier.check_start(value, raw)
                elif value.get("type") == "event":
                    verifier.check_event(value, at.line, at.offset)
                elif value.get("type") == "export-end":
                    verifier.check_end(value, at.line, at.offset)
                    end = value
                else:
                    raise _Problem(f"unknown line type {value.get('type')!r}")
                if end is None:
                    verifier.lines.update(raw)
                at.offset += len(raw)
            if at.line == 0:
                at.line = 1
                raise _Problem("the file is empty")
            if end is None:
                at.line, raw = at.line + 1, b""
                raise _Problem("the export ends without its export-end line: it was cut short")
        except _Elsewhere as problem:
            where = _Cursor(problem.line, problem.offset)
            report = _report(verifier, problem, where, problem.position)
            # Events are on the lines between the first and this one.
            return dataclasses.replace(report, count=max(0, problem.line - 2))
        except _Problem as problem:
            position = _position_of(verifier, raw, f)
            return _report(verifier, problem, at, position)
    start = verifier.start
    assert start is not None
    return ExportReport(
        True,
        verifier.count,
        head_position=start["head_position"],
        head_hash=start["head_hash"],
        anchor_hash=verifier.anchor_hash,
    )


def _report(
    verifier: _Verifier, problem: _Problem, at: _Cursor, position: int | None
) -> ExportReport:
    start = verifier.start or {}
    return ExportReport(
        False,
        verifier.count,
        problem.message,
        at.line,
        at.offset,
        position,
        head_position=start.get("head_position", 0),
        head_hash=start.get("head_hash", ""),
    )


def _position_of(verifier: _Verifier, raw: bytes, rest: IO[bytes]) -> int | None:
    """The log position of the event on a bad line, from what of it can still be trusted.

    One changed byte leaves ``prev_hash`` or ``position`` as written: a line
    whose ``prev_hash`` is the previous line's chain hash holds the next
    position, and otherwise its ``position`` is what it says. The first match
    is the line's own (two lines run together when a newline was changed); a
    line cut in two by a new newline is read on into the next line.
    """
    follows = (verifier.last or 0) + 1
    linked = verifier.last_hash if verifier.last is not None else GENESIS_HEX

    def found(text: bytes) -> int | None:
        both = _RAW_BOTH.search(text)
        if both is not None:
            return follows if both[2].decode() == linked else int(both[1])
        prev = _RAW_PREV.search(text)
        if prev is not None and prev[1].decode() == linked:
            return follows
        claimed = _RAW_POSITION.search(text) or _RAW_RENAMED.search(text)
        return int(claimed[1]) if claimed is not None else None

    position = found(raw)
    if position is not None or not raw or b'"type":"export-' in raw:
        return position
    after = rest.readline()
    if not after.startswith(b'{"'):  # the rest of the bad line, cut off by a newline
        position = found(after)
    if position is None and verifier.selects_all and b'"type":"event"' in raw + after:
        position = follows
    return position
