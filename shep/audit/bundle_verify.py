"""Verifying an audit bundle (``verify_bundle``), offline: its members, the manifest, the
export line by line, the in-toto statement against the export, and the signature
(``ssh-keygen -Y verify``). It needs no database: a bundle can be checked on any
machine with Python and ``ssh-keygen``. The format is ``shep.audit.bundle``'s.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from shep.audit.bundle import (
    EXPORT_MEMBER,
    KNOWN_MEMBERS,
    MANIFEST_LINE,
    MANIFEST_MEMBER,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    SIGNER_MEMBER,
    SMALL_MEMBER_LIMIT,
    STATEMENT_MEMBER,
    STATEMENT_TYPE,
    ExportScan,
    fingerprint,
    manifest_of,
    pae,
    scan_export,
    ssh_verify,
    statement_of,
)
from shep.audit.verify_export import verify_export

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True)
class BundleReport:
    """What ``verify_bundle`` found: ok, or the first problem, the member and the log position.

    ``line`` is the export's line (from 1), ``position`` the log position of the
    event on it and ``byte_offset`` where that line starts in the bundle file, when
    the problem is in ``export.jsonl``. ``signer`` is the
    fingerprint of the key that signed a verified signature: check that it is a key
    you trust, the bundle only proves that this key signed it.
    """

    ok: bool
    problem: str
    member: str | None = None
    position: int | None = None
    line: int | None = None
    #: Where the bad line of ``export.jsonl`` starts in the bundle file.
    byte_offset: int | None = None
    count: int | None = None
    head_hash: str | None = None
    signer: str | None = None


# Writing ---------------------------------------------------------------------


class _Problem(Exception):
    def __init__(self, member: str | None, problem: str, **where: int | None) -> None:
        super().__init__(problem)
        self.member = member
        self.problem = problem
        self.where = where


def verify_bundle(path: Path, *, keep_export: Path | None = None) -> BundleReport:
    """Check a bundle offline; the report names the first problem, its member and position.

    ``keep_export``: where to leave the ``export.jsonl`` that was checked, so that a
    reader (``shep replay --bundle``) reads the very bytes that verified, not the
    bundle again.

    In order: the tar and its members (present, regular files, safe names); the
    export itself (``verify_export``: the line and log position of a bad event);
    the manifest against every member; the statement's subject digest of the export
    and its predicate against the export's head and count; the merge commits; and
    the signature, if any, with ``ssh-keygen -Y verify``.
    """
    try:
        with tempfile.TemporaryDirectory(prefix="shep-bundle-") as work:
            return _verify(Path(path), Path(work), keep_export)
    except _Problem as p:
        text = f"{p.member}: {p.problem}" if p.member else p.problem
        return BundleReport(
            False,
            text,
            p.member,
            position=p.where.get("position"),
            line=p.where.get("line"),
            byte_offset=p.where.get("byte_offset"),
        )


def _verify(path: Path, work: Path, keep_export: Path | None) -> BundleReport:
    if not path.is_file():
        raise _Problem(None, f"{path}: no such file")
    try:
        tar = tarfile.open(path, mode="r:")  # noqa: SIM115 - closed by the `with` below
    except (OSError, tarfile.TarError) as e:
        raise _Problem(None, f"{path} is not a readable tar archive ({e})") from e
    with tar:
        infos = _members(tar)
        export_path = keep_export or work / EXPORT_MEMBER
        with _extract(tar, infos[EXPORT_MEMBER]) as data, export_path.open("wb") as out:
            shutil.copyfileobj(data, out)
        small = {
            name: _read_small(tar, info) for name, info in infos.items() if name != EXPORT_MEMBER
        }
    report = verify_export(export_path)
    if not report.ok:
        where = f"line {report.line}" if report.line is not None else "the file"
        at = []
        if report.position is not None:
            at.append(f"log position {report.position}")
        offset = None
        if report.byte_offset is not None:
            offset = infos[EXPORT_MEMBER].offset_data + report.byte_offset
            at.append(f"byte {offset} of the bundle")
        if at:
            where += f" ({', '.join(at)})"
        raise _Problem(
            EXPORT_MEMBER,
            f"{where}: {report.problem}",
            line=report.line,
            position=report.position,
            byte_offset=offset,
        )
    scan = scan_export(export_path)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in small.items()}
    digests[EXPORT_MEMBER] = scan.sha256
    _check_manifest(small[MANIFEST_MEMBER], digests)
    payload = _check_statement(small[STATEMENT_MEMBER], scan)
    signer = _check_signatures(small[STATEMENT_MEMBER], payload, small.get(SIGNER_MEMBER), work)
    return BundleReport(
        True,
        "",
        count=int(scan.footer.get("count") or 0),
        head_hash=str(scan.header.get("head_hash") or ""),
        signer=signer,
    )


def _members(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    found: dict[str, tarfile.TarInfo] = {}
    try:
        infos = tar.getmembers()
    except tarfile.TarError as e:
        raise _Problem(None, f"the tar archive is damaged ({e})") from e
    for info in infos:
        name = info.name
        parts = PurePosixPath(name).parts
        if name.startswith("/") or PurePosixPath(name).is_absolute():
            raise _Problem(name, "unsafe member: an absolute path")
        if ".." in parts or "\\" in name:
            raise _Problem(name, "unsafe member: its path leaves the bundle (..)")
        if not info.isreg():
            raise _Problem(name, "unsafe member: not a regular file (a link, device or folder)")
        if name not in KNOWN_MEMBERS:
            raise _Problem(
                name, "unexpected member: a bundle holds only " + ", ".join(KNOWN_MEMBERS)
            )
        if name in found:
            raise _Problem(name, "the member appears twice")
        found[name] = info
    for name in (EXPORT_MEMBER, MANIFEST_MEMBER, STATEMENT_MEMBER):
        if name not in found:
            raise _Problem(name, "missing from the bundle")
    return found


@contextlib.contextmanager
def _extract(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Iterator[IO[bytes]]:
    try:
        data = tar.extractfile(info)
    except (OSError, tarfile.TarError) as e:
        raise _Problem(info.name, f"cannot be read ({e})") from e
    if data is None:
        raise _Problem(info.name, "cannot be read")
    with data:
        yield data


def _read_small(tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    if info.size > SMALL_MEMBER_LIMIT:
        raise _Problem(info.name, f"too large ({info.size} bytes)")
    with _extract(tar, info) as data:
        return data.read()


def _check_manifest(manifest: bytes, digests: dict[str, str]) -> None:
    listed: dict[str, str] = {}
    try:
        text = manifest.decode()
    except UnicodeDecodeError as e:
        raise _Problem(MANIFEST_MEMBER, "is not UTF-8 text") from e
    for number, line in enumerate(text.splitlines(), 1):
        match = MANIFEST_LINE.fullmatch(line)
        if match is None:
            raise _Problem(MANIFEST_MEMBER, f"line {number} is not `SHA256  NAME`", line=number)
        digest, name = match[1], match[2]
        if name in listed:
            raise _Problem(MANIFEST_MEMBER, f"line {number} lists {name} again", line=number)
        listed[name] = digest
    for name in sorted(digests):
        if name == MANIFEST_MEMBER:
            continue
        if name not in listed:
            raise _Problem(name, f"is not listed in {MANIFEST_MEMBER}")
        if listed[name] != digests[name]:
            raise _Problem(
                name, f"its sha256 {digests[name]} is not the {listed[name]} of {MANIFEST_MEMBER}"
            )
    for name in listed:
        if name not in digests:
            raise _Problem(MANIFEST_MEMBER, f"lists {name}, which is not in the bundle")
    if manifest != manifest_of(listed):
        # Same digests, other bytes (order, spacing): harmless, but a bundle is written
        # one way only, so any change to it is reported.
        raise _Problem(
            MANIFEST_MEMBER,
            "is not as written (one `SHA256  NAME` line per member, sorted by name)",
        )


def _envelope(raw: bytes) -> dict[str, Any]:
    try:
        envelope = json.loads(raw)
    except ValueError as e:
        raise _Problem(STATEMENT_MEMBER, f"is not JSON ({e})") from e
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), str):
        raise _Problem(STATEMENT_MEMBER, "is not a DSSE envelope (no payload)")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise _Problem(STATEMENT_MEMBER, f"payloadType is not {PAYLOAD_TYPE}")
    if not isinstance(envelope.get("signatures"), list):
        raise _Problem(STATEMENT_MEMBER, "is not a DSSE envelope (no signatures list)")
    return envelope


def _check_statement(raw: bytes, scan: ExportScan) -> bytes:
    envelope = _envelope(raw)
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        statement = json.loads(payload)
    except ValueError as e:
        raise _Problem(STATEMENT_MEMBER, f"the payload is not base64 JSON ({e})") from e
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise _Problem(STATEMENT_MEMBER, f"the payload is not an in-toto {STATEMENT_TYPE}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise _Problem(STATEMENT_MEMBER, f"predicateType is not {PREDICATE_TYPE}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list):
        raise _Problem(STATEMENT_MEMBER, "the statement has no subject list")
    by_name = {s.get("name"): s.get("digest") or {} for s in subjects if isinstance(s, dict)}
    export_digest = (by_name.get(EXPORT_MEMBER) or {}).get("sha256")
    if export_digest != scan.sha256:
        raise _Problem(
            EXPORT_MEMBER,
            f"its sha256 {scan.sha256} is not the statement's subject digest {export_digest}",
        )
    expected = statement_of(scan)
    predicate = statement.get("predicate")
    if predicate != expected["predicate"]:
        raise _Problem(
            STATEMENT_MEMBER,
            "the predicate (range, count, head, filter) does not describe export.jsonl",
        )
    commits = {
        str((s.get("digest") or {}).get("gitCommit"))
        for s in subjects
        if isinstance(s, dict) and "gitCommit" in (s.get("digest") or {})
    }
    merged = {m["commit"] for m in scan.merges}
    if commits != merged:
        raise _Problem(
            STATEMENT_MEMBER,
            "the merge-commit subjects are not the FeatureMerged commits of export.jsonl",
        )
    return payload


def _check_signatures(raw: bytes, payload: bytes, public: bytes | None, work: Path) -> str | None:
    signatures = _envelope(raw)["signatures"]
    if not signatures:
        if public is not None:
            raise _Problem(STATEMENT_MEMBER, f"unsigned, but the bundle has a {SIGNER_MEMBER}")
        return None
    if public is None:
        raise _Problem(SIGNER_MEMBER, "missing: the statement is signed")
    if len(signatures) != 1 or not isinstance(signatures[0], dict):
        raise _Problem(STATEMENT_MEMBER, "expected exactly one signature")
    try:
        signer = fingerprint(public)
    except ValueError as e:
        raise _Problem(SIGNER_MEMBER, "is not an OpenSSH public key") from e
    signature = signatures[0]
    if signature.get("keyid") != signer:
        raise _Problem(
            STATEMENT_MEMBER, f"the signature's keyid is not {signer}, the key in {SIGNER_MEMBER}"
        )
    try:
        armored = base64.b64decode(str(signature.get("sig", "")), validate=True)
    except ValueError as e:
        raise _Problem(STATEMENT_MEMBER, "the signature is not base64") from e
    failure = ssh_verify(public, armored, pae(PAYLOAD_TYPE, payload), work)
    if failure is not None:
        raise _Problem(
            STATEMENT_MEMBER, f"the signature does not verify with {SIGNER_MEMBER} ({failure})"
        )
    return signer
