"""``shep audit``: prove what happened."""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeVar

import click

from events.errors import AnchorFormatError, ChainBrokenError, ShepError
from events.words import counted, events_verify
from shep.audit.verify import verify_store
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    from shep.audit.export import ExportFilter

T = TypeVar("T")
FORMATS = ("jsonl", "csv", "otlp-json", "bundle")

_ANCHOR = re.compile(r"([0-9]+):([0-9a-fA-F]{64})")


@click.group()
def audit() -> None:
    """Verify and export the audit trail."""


@audit.command("verify")
@click.option(
    "--anchor",
    metavar="POSITION:HASH",
    help="Also prove that the event at POSITION still has chain hash HASH "
    "(a head printed by an earlier verify).",
)
@click.option(
    "--export",
    "export_file",
    metavar="FILE",
    help="Verify an export written by `shep audit export` (JSONL), offline: no store needed.",
)
@click.option(
    "--bundle",
    "bundle_file",
    metavar="FILE",
    help="Verify a bundle written by `shep audit export --format bundle`, offline.",
)
@click.pass_obj
def verify(
    runtime: Runtime, anchor: str | None, export_file: str | None, bundle_file: str | None
) -> None:
    """Recompute the hash chain over every event; name the first bad position.

    Prints the head hash on success, so you can record it somewhere else and
    later prove that nothing before it changed. Reads the store only, so it
    also works on a read-only or damaged store.

    With --export or --bundle it verifies that file instead, without any
    database: each event's chain hash is recomputed from the file, and a
    problem is named by its line, byte offset and log position.
    """
    anchor_position, anchor_hash = _parse_anchor(anchor) if anchor is not None else (None, b"")
    if export_file is not None and bundle_file is not None:
        raise _option_error("Give --export FILE or --bundle FILE, not both.")
    if export_file is not None:
        _verify_export(Path(export_file), anchor_position, anchor_hash)
        return
    if bundle_file is not None:
        if anchor_position is not None:
            raise _option_error("--anchor works on the store or an --export file, not a bundle.")
        _verify_bundle(Path(bundle_file))
        return
    if runtime.store_url is None:
        runtime.require_home()
    result = verify_store(runtime.db_file, runtime.store_url, anchor_position=anchor_position)
    if result.offline:
        click.echo(f"shep: {result.offline}", err=True)
    if not result.ok:
        raise ChainBrokenError(result.problem)
    line = result.summary + " "
    if anchor_position is not None:
        if anchor_position > result.events:
            raise ChainBrokenError(
                f"Anchor not found: there is no event at position {anchor_position}; "
                f"the log ends at position {result.events}."
            )
        line += _anchor_matches(anchor_position, anchor_hash, result.anchor_hash)
    click.echo(line + f"Head hash: {result.head_hash.hex()}")


def _anchor_matches(position: int, expected: bytes, found: bytes | None) -> str:
    if found != expected:
        raise ChainBrokenError(
            f"Anchor differs: the chain hash at position {position} is "
            f"{found.hex() if found else '(none)'}, not {expected.hex()}. "
            "History up to that position was rewritten."
        )
    return f"Anchor at position {position} matches. "


def _verify_export(path: Path, anchor_position: int | None, anchor_hash: bytes) -> None:
    from shep.audit.export import ExportFileError, MissingFileError
    from shep.audit.verify_export import verify_export

    try:
        report = verify_export(path, anchor_position=anchor_position)
    except FileNotFoundError as e:
        raise MissingFileError(f"No export at {path}.") from e
    except OSError as e:
        raise ExportFileError(f"Cannot read {path} ({e.strerror}).") from e
    if not report.ok:
        where = f"line {report.line} (byte {report.byte_offset}"
        where += f", log position {report.position})" if report.position is not None else ")"
        raise ChainBrokenError(
            f"Export {path} does not verify at {where}: {report.problem}. "
            f"{events_verify(report.count, ' before it')}."
        )
    line = f"OK: {events_verify(report.count)}. "
    if anchor_position is not None:
        if report.anchor_hash is None:
            raise ChainBrokenError(
                f"Anchor not found: the export holds no event at position {anchor_position}."
            )
        line += _anchor_matches(anchor_position, anchor_hash, bytes.fromhex(report.anchor_hash))
    click.echo(line + f"Head hash: {report.head_hash}")


class BundleInvalidError(ChainBrokenError):
    """A bundle does not verify (its own line says why): exit 4, like a broken chain in
    the store or in an export, so scripts check one code for any tampering.
    """


def _verify_bundle(path: Path) -> None:
    # Written by the bundle's own module; imported only here (it may pull in more).
    from shep.audit.bundle_verify import verify_bundle
    from shep.audit.export import MissingFileError

    if not path.is_file():  # a name that names nothing is bad input, not tampering
        raise MissingFileError(f"No bundle at {path}.")
    result = verify_bundle(path)
    if not result.ok:
        raise BundleInvalidError(result.problem)
    click.echo(f"OK: {events_verify(result.count or 0)}. Head hash: {result.head_hash}")
    if result.signer is not None:
        click.echo(f"Signed by {result.signer}: check that this is a key you trust.")


@audit.command("export")
@click.option(
    "--run",
    "run_ref",
    metavar="RUN",
    help="Only this run (an id or a unique prefix): its events, its questions and gates "
    "and their decisions, its supervisor's.",
)
@click.option(
    "--since",
    metavar="DATE",
    help="Only events at or after DATE: an ISO date or date and time (UTC unless it says).",
)
@click.option(
    "--kind",
    default="all",
    show_default=True,
    metavar="decisions|approvals|all",
    help="decisions: answers, approvals, rejections, cosign votes and the supervisor's "
    "decisions, with the questions and gates they are about; approvals: approval gates and "
    "their decisions (the supervisor's included); all: every event.",
)
@click.option(
    "--format",
    "fmt",
    default="jsonl",
    show_default=True,
    metavar="jsonl|csv|otlp-json|bundle",
    help="jsonl: verifiable JSON lines; csv: a spreadsheet; otlp-json: OpenTelemetry "
    "traces and logs; bundle: a tar of the JSONL export with a manifest and an in-toto "
    "statement, signed with --sign-key (needs --output).",
)
@click.option("--output", metavar="FILE", help="Write FILE (replaced whole, only on success).")
@click.option(
    "--sign-key",
    metavar="FILE",
    help="Sign the bundle with this SSH private key (ssh-keygen -Y sign).",
)
@click.pass_obj
def export(
    runtime: Runtime,
    run_ref: str | None,
    since: str | None,
    kind: str,
    fmt: str,
    output: str | None,
    sign_key: str | None,
) -> None:
    """Export the audit trail: every event, or the decisions, with their chain hashes.

    Streams from one snapshot of the store, read-only, so memory stays flat on
    any size of log. JSONL (the default) is canonical JSON, one event a line
    between a first and a last line that carry the range, the count and the
    head hash: `shep audit verify --export FILE` checks it anywhere, offline.
    Writes to stdout unless --output is given.
    """
    from shep.audit.export import ExportFilter, parse_since

    if fmt not in FORMATS:
        raise _option_error(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}.")
    flt = ExportFilter(
        run_id=run_ref, since=parse_since(since) if since is not None else None, kind=kind
    )
    if fmt == "bundle" and output is None:
        raise _option_error("--format bundle writes a tar file: give --output FILE.")
    if sign_key is not None and fmt != "bundle":
        raise _option_error("--sign-key signs a bundle: use it with --format bundle.")
    runtime.require_home()
    with ExitStack() as stack:
        db = runtime.db_path
        if not db.exists():
            # An empty home: an empty export (no events, the genesis head), not an error.
            import apsw

            db = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "empty.db"
            apsw.Connection(str(db)).close()
        _export(db, flt, fmt, output, sign_key)


def _export(
    db: Path, flt: ExportFilter, fmt: str, output: str | None, sign_key: str | None
) -> None:
    target = Path(output) if output is not None else None
    if fmt == "bundle":
        assert target is not None
        _export_bundle(db, flt, target, Path(sign_key) if sign_key is not None else None)
        return
    count = _export_stream(db, flt, fmt, target)
    if target is not None:
        # write_otlp counts the lines it wrote (a run's trace, a batch of log records).
        what = counted(count, "OTLP line" if fmt == "otlp-json" else "event")
        click.echo(f"Exported {what} to {target}.")


def _export_stream(db: Path, flt: ExportFilter, fmt: str, target: Path | None) -> int:
    """Write a streamed format to ``target`` (atomically) or stdout; the number of events."""
    from shep.audit.export import write_csv, write_jsonl

    def write_to(out: BinaryIO) -> int:
        if fmt == "jsonl":
            return write_jsonl(db, flt, out).count
        if fmt == "otlp-json":
            from shep.audit.otlp import write_otlp

            return int(write_otlp(db, flt, out))
        text = io.TextIOWrapper(out, encoding="utf-8", newline="")
        try:
            return write_csv(db, flt, text)
        finally:
            text.flush()
            text.detach()

    if target is None:
        stdout = sys.stdout.buffer
        count = write_to(stdout)
        stdout.flush()
        return count
    with _replacing(target) as temporary:
        return _to_file(temporary, write_to)


def _export_bundle(db: Path, flt: ExportFilter, target: Path, sign_key: Path | None) -> None:
    from shep.audit.bundle import write_bundle

    if sign_key is not None and not sign_key.is_file():
        raise _option_error(f"--sign-key {sign_key}: no such file.")
    with _replacing(target) as temporary:
        summary = write_bundle(db, flt, temporary, sign_key)
        _sync(temporary)
    signed = f", signed by {summary.signer}" if summary.signer is not None else ""
    click.echo(f"Exported {counted(summary.count, 'event')} to bundle {target}{signed}.")


def _to_file(path: Path, write: Callable[[BinaryIO], T]) -> T:
    with open(path, "wb") as f:
        result = write(f)
        f.flush()
        os.fsync(f.fileno())
    return result


def _sync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


@contextmanager
def _replacing(target: Path) -> Iterator[Path]:
    """A path to write that replaces ``target`` only when the block succeeds.

    It is in a private directory beside ``target`` (same file system, so the
    rename is atomic; same name, for writers that look at it): a failed or
    interrupted export leaves ``target`` as it was, never half a file.
    """
    from shep.audit.export import ExportFileError

    try:
        workdir = tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as e:
        raise ExportFileError(f"Cannot write {target} ({e.strerror}).") from e
    try:
        temporary = Path(workdir) / target.name
        yield temporary
        os.replace(temporary, target)
    except OSError as e:
        raise ExportFileError(f"Cannot write {target} ({e.strerror}).") from e
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _option_error(message: str) -> ShepError:
    from shep.audit.export import ExportFilterError

    return ExportFilterError(message)


def _parse_anchor(value: str) -> tuple[int, bytes]:
    match = _ANCHOR.fullmatch(value.strip())
    if match is None or int(match[1]) < 1:
        raise AnchorFormatError(
            f"--anchor must be POSITION:HASH, a position from 1 and the 64 hex digits of a "
            f"chain hash (as `shep audit verify` prints them), not {value!r}."
        )
    return int(match[1]), bytes.fromhex(match[2])
