"""What the audit page reads from shep's core: the verification of the log and its exports.

Beside ``shep.web.core`` (the other pages' reads), and like it the one place these pages
reach the core: ``shep.audit.verify`` decides the verdict ``shep audit verify`` prints,
``shep.audit.export`` and ``shep.audit.bundle`` write the downloads as ``shep audit
export`` does. Nothing is copied out of ``shep/cli/``.
"""

from __future__ import annotations

from typing import Any, BinaryIO

Row = dict[str, Any]


def verify(db_file: str, store_url: str | None) -> Row:
    """The log verified as ``shep audit verify`` verifies it (``shep.audit.verify``): on a
    shared store the server's chain and this home's copy against it. The verdict's
    sentence, the head hash to anchor, and what does not verify and where.
    """
    from shep.audit.verify import verify_store

    result = verify_store(db_file, store_url)
    return {
        "ok": result.ok,
        "events": result.events,
        "summary": result.summary,
        "head_hash": result.head_hash.hex(),
        "first_bad_position": result.first_bad_position,
        "problem": result.problem,
        "offline": result.offline,
    }


def write_export(db_file: str, fmt: str, kind: str, out: BinaryIO) -> None:
    """Write the audit export of the whole log in ``fmt`` to ``out``, streamed as
    ``shep audit export`` writes it (``kind``: decisions, approvals or all).
    """
    from shep.audit.export import ExportFilter, write_csv, write_jsonl

    flt = ExportFilter(run_id=None, since=None, kind=kind)
    if fmt == "jsonl":
        write_jsonl(db_file, flt, out)
    elif fmt == "otlp-json":
        from shep.audit.otlp import write_otlp

        write_otlp(db_file, flt, out)
    elif fmt == "csv":
        import io

        text = io.TextIOWrapper(out, encoding="utf-8", newline="")
        try:
            write_csv(db_file, flt, text)
        finally:
            text.flush()
            text.detach()
    else:
        raise ValueError(fmt)


def write_bundle(db_file: str, kind: str, path: str) -> None:
    """Write the unsigned audit bundle (a tar: JSONL, manifest, in-toto statement) to
    ``path``; a tar is written whole before it is sent."""
    from pathlib import Path

    from shep.audit.bundle import write_bundle as write
    from shep.audit.export import ExportFilter

    write(Path(db_file), ExportFilter(run_id=None, since=None, kind=kind), Path(path), None)
