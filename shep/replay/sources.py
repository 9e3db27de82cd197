"""Where a replay reads a run from: the store, read-only, or an audit bundle.

The store is opened read-only in a way that changes no byte of the database,
its WAL or its shared-memory file (see ``_open_unchanged``); a bundle is read
from its ``export.jsonl``, without a database.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar
from uuid import UUID

import msgspec

from events.audit import run_in_log
from events.base import Event
from events.catalog import EVENT_CLASSES, decode_event, topic_of
from events.checkpoints import WritesSaved
from events.errors import (
    ChainBrokenError,
    RunNotFoundError,
    StoreUnavailableError,
    UnknownEventError,
)
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    QuestionAnswered,
    QuestionAsked,
    item_stream_id,
)
from events.run_ids import hex_prefix, single_run
from events.runs import RunCreated, RunSuspended
from events.words import counted
from shep.replay.builder import (
    STORY_TOPICS,
    OutputBatch,
    Story,
    build_replay,
)
from shep.replay.frames import Replay, ReplayInputError
from shep.replay.output import (
    OUTPUT_TOPIC,
)
from shep.replay.state import decode_typed

if TYPE_CHECKING:
    import apsw

    from shep.audit.bundle_verify import BundleReport

#: Told the report of a bundle that verified, before anything of it is shown.
OnVerified = Callable[["BundleReport"], None]

_T = TypeVar("_T")

RUN_CREATED = topic_of(RunCreated)
_ITEM_EVENTS: frozenset[type[Event]] = frozenset(
    (QuestionAsked, ApprovalRequested, QuestionAnswered, ApprovalGranted, ApprovalRejected)
)
_ITEM_TOPICS = frozenset(topic_of(cls) for cls in _ITEM_EVENTS)


class BundleError(ReplayInputError):
    """A file given as an audit bundle is not one, or cannot be read."""


class BundleNotVerifiedError(ChainBrokenError):
    """A bundle that does not verify is not replayed: exit 4, as `shep audit verify --bundle`."""


#: A replay holds at most this many of a run's output events at once (see ``iter_story``).
OUTPUT_CHUNK = 1000


def story(rows: Iterable[tuple[int, str, bytes]]) -> list[tuple[int, Story]]:
    """The events of stored ``(position, topic, state)`` rows that a replay reads: see
    ``iter_story``.
    """
    return list(iter_story(rows))


def iter_story(rows: Iterable[tuple[int, str, bytes]]) -> Iterator[tuple[int, Story]]:
    """The events of stored ``(position, topic, state)`` rows that a replay reads, as the rows
    are read: the story's events decoded, output gathered undecoded into batches of at most
    ``OUTPUT_CHUNK`` events (a batch is a run of consecutive output, cut in chunks: the
    builder folds two chunks as it folds one batch), the rest skipped.
    """
    batch: OutputBatch | None = None
    for position, topic, state in rows:
        if topic == OUTPUT_TOPIC:
            if batch is None:
                batch = OutputBatch()
            batch.positions.append(position)
            batch.states.append(state)
            if len(batch.states) == OUTPUT_CHUNK:
                yield batch.positions[0], batch
                batch = None
        elif topic in STORY_TOPICS:
            if batch is not None:
                yield batch.positions[0], batch
                batch = None
            yield position, decode_event(topic, state)
        elif topic not in EVENT_CLASSES:
            raise UnknownEventError(topic)  # a newer shep's event: not skipped as if known
    if batch is not None:
        yield batch.positions[0], batch


# --- reading the store ----------------------------------------------------------------


def frames_from_store(db_path: str | os.PathLike[str], run_ref: str) -> Replay:
    """The replay of run ``run_ref`` (an id or a unique prefix) read from the store at
    ``db_path``, changing nothing: see ``_open_unchanged``.
    """
    # Folded as it is read: a long run's output is never all in memory.
    return read_store(os.fspath(db_path), lambda conn: build_replay(iter_run_events(conn, run_ref)))


def read_store(path: str, read: Callable[[apsw.Connection], _T]) -> _T:
    """``read(conn)`` inside one read transaction of a connection that writes nothing."""
    import apsw

    from events.sqlite_file import store_error

    if not os.path.isfile(path):
        raise StoreUnavailableError(f"No event store at {path}: nothing to replay.")
    for _ in range(3):
        try:
            conn, unchanged = _open_unchanged(path)
            try:
                conn.execute("BEGIN")
                result = read(conn)
                conn.execute("COMMIT")
            except UnknownEventError as e:
                from events.migrations import written_by

                raise e.naming(written_by(conn), where=f"The event store {path}") from None
            finally:
                conn.close()
        except apsw.Error as e:
            raise store_error(e, path) from e
        if unchanged():
            return result
    raise StoreUnavailableError(
        f"The event store {path} kept changing while it was read. Try again."
    )


def _open_unchanged(path: str) -> tuple[apsw.Connection, Callable[[], bool]]:
    """A read-only connection that writes no byte, and a check that what it read holds.

    SQLite's usual read-only connection still writes the WAL index (``-shm``)
    and creates ``-wal`` and ``-shm`` when they are missing. Instead: with a
    ``-wal`` file, its index is opened read-only (``readonly_shm``: SQLite reads
    it, or rebuilds it in private memory when no writer has it); without one no
    writer has the file open in WAL mode, so it is read as immutable, and the
    check says whether a writer came and changed the file meanwhile (then the
    caller reads again, through the WAL).
    """
    import apsw

    # A URI's own characters escaped, the rest as is (urllib costs an import for this).
    uri = "file:" + "".join(f"%{ord(c):02x}" if c in "%?#" else c for c in os.path.abspath(path))
    flags = apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    wal = path + "-wal"
    if os.path.exists(wal):
        conn = apsw.Connection(f"{uri}?mode=ro&readonly_shm=1", flags=flags)
        conn.setbusytimeout(10_000)
        unchanged: Callable[[], bool] = lambda: True  # noqa: E731
    else:
        before = _file_state(path)
        conn = apsw.Connection(f"{uri}?immutable=1", flags=flags)
        unchanged = lambda: not os.path.exists(wal) and _file_state(path) == before  # noqa: E731
    # Not memory-mapped: the pages of a long run, once touched, would count in this
    # process's memory (the file is read once, in order; SQLite's small cache does).
    return conn, unchanged


def _file_state(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def iter_run_events(conn: apsw.Connection, run_ref: str) -> Iterator[tuple[int, Story]]:
    """The story of run ``run_ref`` and of the inbox items it asked, in log order, read as
    it is folded (see ``iter_story``): the run's stream and each item's, merged by position.

    The items are found first, in a pass that decodes only what names them (suspensions,
    and the writes that record an interrupt).
    """
    run_id = resolve_run(conn, run_ref)
    items = item_ids(run_id, _naming_items(conn, run_id))
    streams = [iter_story(_rows(conn, run_id))]
    streams += [
        ((p, e) for p, e in iter_story(_rows(conn, item)) if type(e) in _ITEM_EVENTS)
        for item in items
    ]
    return heapq.merge(*streams, key=_position)


def _position(pair: tuple[int, Story]) -> int:
    return pair[0]


def _rows(conn: apsw.Connection, stream: UUID) -> apsw.Cursor:
    """A stream's stored events in order, with log positions, read as they are iterated."""
    return conn.execute(
        "SELECT notification_id, topic, state FROM stored_events "
        "WHERE originator_id = ? ORDER BY originator_version",
        (stream.hex,),
    )


_SUSPENDED = topic_of(RunSuspended)
_WRITES = topic_of(WritesSaved)


def _naming_items(conn: apsw.Connection, run_id: UUID) -> Iterator[Event]:
    """The run's events that may name an inbox item (see ``item_ids``), one at a time."""
    rows = conn.execute(
        "SELECT topic, state FROM stored_events WHERE originator_id = ? AND topic IN (?, ?) "
        "ORDER BY originator_version",
        (run_id.hex, _SUSPENDED, _WRITES),
    )
    for topic, state in rows:
        # Most writes are channel values: only one naming the interrupt channel is decoded.
        if topic == _SUSPENDED or b"__interrupt__" in state:
            yield decode_event(topic, state)


def item_ids(run_id: UUID, events: Iterable[Story]) -> list[UUID]:
    """The inbox items a run asked: those it suspended on, and every interrupt it recorded
    (a fork's reapplied decisions are asked and decided without a suspension).
    """
    found: dict[UUID, None] = {}
    for event in events:
        if isinstance(event, RunSuspended):
            found.update(dict.fromkeys(event.item_ids))
        elif isinstance(event, WritesSaved):
            for write in event.writes:
                if write.channel == "__interrupt__":
                    for interrupt_id in _interrupt_ids(write.value_type, write.value):
                        found[item_stream_id(run_id, interrupt_id)] = None
    return list(found)


def _interrupt_ids(type_tag: str, data: bytes) -> Iterator[str]:
    try:
        value = decode_typed(type_tag, data)
    except Exception:  # an unreadable write names no item
        return
    for interrupt in value if isinstance(value, list) else [value]:
        if isinstance(interrupt, dict) and isinstance(interrupt.get("id"), str):
            yield interrupt["id"]


def resolve_run(conn: apsw.Connection, run_ref: str) -> UUID:
    """The run whose id is ``run_ref`` or starts with it (dashes ignored), read from the log
    itself (``RunCreated`` events), not from a projection.
    """
    return UUID(run_in_log(conn, run_ref))


# --- reading a bundle -----------------------------------------------------------------


class _Line(msgspec.Struct):
    """The fields of an export line a replay needs (see shep/audit/export.py)."""

    type: str
    position: int = 0
    stream: str = ""
    topic: str = ""
    state: str = ""
    format: str = ""


_line_decoder = msgspec.json.Decoder(_Line)


def frames_from_bundle(
    path: str | os.PathLike[str],
    run_ref: str | None = None,
    *,
    on_verified: OnVerified | None = None,
) -> Replay:
    """The replay of a run read from an audit bundle's ``export.jsonl`` (no database).

    The bundle is verified first (see ``read_bundle``). ``run_ref`` may be left
    out when the bundle holds one run. Snapshot diff stats are made from the
    repository named in the run, if it is on this machine.
    """
    rows = read_bundle(path, on_verified=on_verified)
    run_id = bundle_run(rows, run_ref, path)
    own = story((p, t, s) for p, stream, t, s in rows if stream == run_id.hex)
    items = {i.hex for i in item_ids(run_id, (e for _, e in own))}
    asked = story((p, t, s) for p, stream, t, s in rows if t in _ITEM_TOPICS)
    for position, event in asked:
        stream = getattr(event, "originator_id", None)
        if stream is not None and (stream.hex in items or getattr(event, "run_id", None) == run_id):
            own.append((position, event))
    own.sort(key=lambda pair: pair[0])
    return build_replay(own)


#: An export's event lines that a replay reads: (position, stream, topic, state).
BundleRows = list[tuple[int, str, str, bytes]]


def read_bundle(
    path: str | os.PathLike[str], *, on_verified: OnVerified | None = None
) -> BundleRows:
    """The story's event lines of the bundle's export (see ``story``), in file order.

    Only a bundle that verifies (``shep audit verify --bundle``: the chain, the
    manifest, the statement, the signature if any) is read, and what is read is the
    very export that verified; otherwise ``BundleNotVerifiedError``.
    """
    import tempfile
    from binascii import Error as Base64Error
    from binascii import a2b_base64
    from pathlib import Path

    from shep.audit.bundle_verify import verify_bundle

    name = os.fspath(path)
    _check_is_bundle(name)
    with tempfile.TemporaryDirectory(prefix="shep-replay-") as work:
        export = Path(work) / "export.jsonl"
        report = verify_bundle(Path(name), keep_export=export)
        if not report.ok:
            raise BundleNotVerifiedError(
                f"{name} does not verify, so it is not replayed: {report.problem}"
                f"{'' if report.problem.endswith('.') else '.'}"
            )
        raw = export.read_bytes()
    if on_verified is not None:
        on_verified(report)
    rows: BundleRows = []
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            record = _line_decoder.decode(line)
            if number == 1 and (record.type != "export-start" or not record.format):
                raise BundleError(f"{name}: export.jsonl does not start with an export-start line.")
            if record.type == "event" and (
                record.topic in STORY_TOPICS or record.topic == OUTPUT_TOPIC
            ):
                state = a2b_base64(record.state)
                rows.append((record.position, record.stream, record.topic, state))
        except (msgspec.DecodeError, Base64Error, ValueError) as e:
            raise BundleError(f"{name}: line {number} of export.jsonl cannot be read ({e}).") from e
    return rows


def _check_is_bundle(name: str) -> None:
    """A tar with an ``export.jsonl``, or ``BundleError`` saying what the file is instead."""
    import tarfile

    try:
        with tarfile.open(name, "r:") as tar:
            member = next(
                (m for m in tar.getmembers() if os.path.basename(m.name) == "export.jsonl"), None
            )
    except FileNotFoundError:
        raise BundleError(f"No bundle at {name}.") from None
    except (tarfile.TarError, EOFError) as e:
        raise BundleError(f"{name} is not a readable shep audit bundle (not a tar file).") from e
    except OSError as e:
        raise BundleError(f"Cannot read the bundle {name}: {e.strerror or e}.") from e
    if member is None or not member.isfile():
        raise BundleError(f"{name} is not a shep audit bundle: it has no export.jsonl.")


def bundle_run(rows: BundleRows, run_ref: str | None, path: str | os.PathLike[str]) -> UUID:
    runs = [UUID(stream) for _, stream, topic, _ in rows if topic == RUN_CREATED]
    if run_ref is None:
        if len(runs) == 1:
            return runs[0]
        raise BundleError(
            f"{os.fspath(path)} holds {len(runs)} runs: name one (`shep replay RUN --bundle FILE`)."
        )
    prefix = hex_prefix(run_ref) or "-"  # "-": no hex id starts with it
    matches = [r.hex for r in runs if r.hex.startswith(prefix)][:3]
    if not matches:
        # The runs that exist are the bundle's, not the local store's.
        raise RunNotFoundError(run_ref, runs_are=_bundle_runs(runs, os.fspath(path)))
    return UUID(single_run(matches, run_ref))


#: At most this many of a bundle's runs are named when the one asked for is not in it.
_RUNS_NAMED = 10


def _bundle_runs(runs: list[UUID], path: str) -> str:
    """Which runs the bundle at ``path`` holds, said in one sentence."""
    if not runs:
        return f"The bundle {path} holds no run."
    named = ", ".join(r.hex[:8] for r in runs[:_RUNS_NAMED])
    more = f" and {len(runs) - _RUNS_NAMED} more" if len(runs) > _RUNS_NAMED else ""
    return f"The bundle {path} holds {counted(len(runs), 'run')}: {named}{more}."
