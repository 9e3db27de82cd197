"""An audit bundle: the JSONL export, a manifest and a signed in-toto statement, in one tar.

Members (in this order, which is sorted order):

- ``export.jsonl``: the export (``shep.audit.export.write_jsonl``), which verifies on
  its own, line by line;
- ``manifest.sha256``: ``sha256sum`` lines for every other member;
- ``signer.pub``: the OpenSSH public key that signed, when signed;
- ``statement.dsse.json``: an in-toto Statement v1 in a DSSE envelope. Its subjects
  are ``export.jsonl`` (sha256) and, for feature runs in the export, each merge
  commit (``gitCommit``); its predicate (``PREDICATE_TYPE``) repeats the export's
  range, count, head and filter. Signed with ``ssh-keygen -Y sign`` over the DSSE
  pre-authentication encoding, namespace ``SIGNING_NAMESPACE``.

The tar is deterministic (fixed mtime, owner and mode, members in sorted order),
so two bundles of the same export are the same bytes. ``verify_bundle`` needs no
database: a bundle can be checked on any machine with Python and ``ssh-keygen``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from events.errors import ShepError
from shep.audit.export import ExportFileError, ExportFilter, canonical, write_jsonl
from shep.audit.verify_export import verify_export

if TYPE_CHECKING:
    from collections.abc import Iterator

EXPORT_MEMBER = "export.jsonl"
MANIFEST_MEMBER = "manifest.sha256"
STATEMENT_MEMBER = "statement.dsse.json"
SIGNER_MEMBER = "signer.pub"
KNOWN_MEMBERS = (EXPORT_MEMBER, MANIFEST_MEMBER, SIGNER_MEMBER, STATEMENT_MEMBER)

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://shep.dev/audit-export/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: The ``ssh-keygen -Y`` namespace of bundle signatures, and the principal verified.
SIGNING_NAMESPACE = "shep-audit"

#: Members other than the export are small; a bigger one is refused before it is read.
_SMALL_MEMBER_LIMIT = 1 << 20
_SSH_TIMEOUT_S = 60
_MANIFEST_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class BundleSigningError(ShepError):
    """The bundle could not be signed: ``ssh-keygen`` is missing or refused the key."""


@dataclass(frozen=True)
class BundleSummary:
    """What ``write_bundle`` wrote: the export's range and head, and who signed it."""

    path: Path
    count: int
    first_position: int | None
    last_position: int | None
    head_position: int
    head_hash: str
    export_sha256: str
    merge_commits: tuple[str, ...]
    #: The signing key's fingerprint (``SHA256:...``), None when unsigned.
    signer: str | None = None


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


def write_bundle(
    db_path: str | Path, flt: ExportFilter, out_path: Path, sign_key: Path | None
) -> BundleSummary:
    """Export ``flt`` from the store into a bundle at ``out_path`` (replaced atomically).

    With ``sign_key`` (an OpenSSH private key, or a public key whose private half is
    in ``ssh-agent``) the statement is signed with ``ssh-keygen -Y sign``. The export
    is streamed through a temporary file next to ``out_path``; memory stays flat.
    """
    out_path = Path(out_path)
    try:
        with tempfile.TemporaryDirectory(prefix=".shep-bundle-", dir=out_path.parent) as work:
            export_path = Path(work) / EXPORT_MEMBER
            with export_path.open("wb") as out:
                write_jsonl(db_path, flt, out)
            return bundle_export(export_path, out_path, sign_key)
    except OSError as e:
        raise ExportFileError(
            f"Cannot write the bundle {out_path}: {e.strerror or e}. "
            "Check that its folder exists and is writable."
        ) from e


def bundle_export(export_path: Path, out_path: Path, sign_key: Path | None) -> BundleSummary:
    """Bundle an export file already written (``write_bundle`` without the store)."""
    scan = _scan_export(export_path)
    statement = _statement(scan)
    payload = canonical(statement)
    signatures: list[dict[str, str]] = []
    members: dict[str, bytes] = {}
    signer: str | None = None
    if sign_key is not None:
        public = _public_key(Path(sign_key))
        signer = fingerprint(public)
        armored = _ssh_sign(Path(sign_key), pae(PAYLOAD_TYPE, payload))
        # A KEY.pub that is not KEY's would make a bundle nobody can verify: check now.
        with tempfile.TemporaryDirectory(prefix="shep-sign-") as work:
            failure = ssh_verify(public, armored, pae(PAYLOAD_TYPE, payload), Path(work))
        if failure is not None:
            raise BundleSigningError(
                f"The signature made with {sign_key} does not verify with its public key "
                f"({failure}); is {sign_key}.pub the public half of {sign_key}?"
            )
        signatures.append({"keyid": signer, "sig": base64.b64encode(armored).decode()})
        members[SIGNER_MEMBER] = public
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": signatures,
    }
    members[STATEMENT_MEMBER] = canonical(envelope) + b"\n"
    digests = {EXPORT_MEMBER: scan.sha256}
    digests.update({name: hashlib.sha256(data).hexdigest() for name, data in members.items()})
    members[MANIFEST_MEMBER] = _manifest(digests)
    fd, tmp_name = tempfile.mkstemp(prefix=".shep-bundle-", suffix=".tar", dir=out_path.parent)
    tmp = Path(tmp_name)
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for name in sorted([EXPORT_MEMBER, *members]):
                if name == EXPORT_MEMBER:
                    with export_path.open("rb") as data:
                        tar.addfile(_tarinfo(name, scan.size), data)
                else:
                    tar.addfile(_tarinfo(name, len(members[name])), io.BytesIO(members[name]))
        tmp.chmod(0o644)
        tmp.replace(out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return BundleSummary(
        path=out_path,
        count=int(scan.footer.get("count") or 0),
        first_position=scan.footer.get("first_position"),
        last_position=scan.footer.get("last_position"),
        head_position=int(scan.header.get("head_position") or 0),
        head_hash=str(scan.header.get("head_hash") or ""),
        export_sha256=scan.sha256,
        merge_commits=tuple(m["commit"] for m in scan.merges),
        signer=signer,
    )


def _manifest(digests: dict[str, str]) -> bytes:
    """``sha256sum`` lines (digest, two spaces, name), sorted by name."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, type and body together."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def fingerprint(public_key: bytes) -> str:
    """The OpenSSH SHA256 fingerprint (``SHA256:...``) of an ``authorized_keys`` line."""
    fields = public_key.split()
    if len(fields) < 2:
        raise ValueError("not an OpenSSH public key")
    blob = base64.b64decode(fields[1], validate=True)
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


@dataclass
class _ExportScan:
    sha256: str
    size: int
    header: dict[str, Any]
    footer: dict[str, Any]
    merges: list[dict[str, Any]]


def _scan_export(path: Path) -> _ExportScan:
    """Hash the export and read its first and last lines and its merges, in one pass."""
    digest = hashlib.sha256()
    size = 0
    first: bytes | None = None
    last = b""
    merges: dict[str, dict[str, Any]] = {}
    with path.open("rb") as export:
        for line in export:
            digest.update(line)
            size += len(line)
            if first is None:
                first = line
            last = line
            merge = _merge_of(line)
            if merge is not None:
                merges.setdefault(merge["commit"], merge)
    return _ExportScan(
        digest.hexdigest(),
        size,
        _json_object(first or b""),
        _json_object(last),
        list(merges.values()),
    )


def _merge_of(line: bytes) -> dict[str, Any] | None:
    """A FeatureMerged event line's commit, run and target branch (None for other lines)."""
    if b":FeatureMerged" not in line:
        return None
    record = _json_object(line)
    if record.get("type") != "event" or not str(record.get("topic", "")).endswith(":FeatureMerged"):
        return None
    event = record.get("event") or {}
    commit = str(event.get("commit") or "")
    if not commit:
        return None
    return {
        "commit": commit,
        "run": str(record.get("stream")),
        "into": str(event.get("into") or ""),
        "position": record.get("position"),
    }


def _json_object(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _statement(scan: _ExportScan) -> dict[str, Any]:
    subjects: list[dict[str, Any]] = [{"name": EXPORT_MEMBER, "digest": {"sha256": scan.sha256}}]
    for merge in scan.merges:
        subjects.append(
            {
                "name": f"git+commit:{merge['commit']}",
                "digest": {"gitCommit": merge["commit"]},
                "annotations": {
                    "run": merge["run"],
                    "into": merge["into"],
                    "log_position": merge["position"],
                },
            }
        )
    header, footer = scan.header, scan.footer
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "format": header.get("format"),
            "exported_at": header.get("exported_at"),
            "filter": header.get("filter"),
            "head_position": header.get("head_position"),
            "head_hash": header.get("head_hash"),
            "count": footer.get("count"),
            "first_position": footer.get("first_position"),
            "last_position": footer.get("last_position"),
            "lines_sha256": footer.get("lines_sha256"),
        },
    }


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise BundleSigningError(
            "ssh-keygen was not found on PATH; install OpenSSH (8.1 or later) to sign bundles."
        )
    return found


def _public_key(key: Path) -> bytes:
    """The key's public half: the key itself if public, ``KEY.pub``, or derived from it."""
    try:
        head = key.read_bytes()[:64]
    except OSError as e:
        raise BundleSigningError(f"Cannot read the signing key {key}: {e.strerror}.") from e
    if head.startswith((b"ssh-", b"ecdsa-", b"sk-")):
        return _one_line(key.read_bytes())
    sibling = key.with_name(key.name + ".pub")
    if sibling.is_file():
        return _one_line(sibling.read_bytes())
    result = _run_ssh_keygen(["-y", "-f", str(key)], b"", "read the public key of")
    return _one_line(result)


def _one_line(public: bytes) -> bytes:
    return public.strip().splitlines()[0] + b"\n"


def _ssh_sign(key: Path, message: bytes) -> bytes:
    return _run_ssh_keygen(
        ["-Y", "sign", "-f", str(key), "-n", SIGNING_NAMESPACE], message, "sign with"
    )


def _run_ssh_keygen(args: list[str], stdin: bytes, doing: str) -> bytes:
    key = args[args.index("-f") + 1]
    try:
        result = subprocess.run(
            [_ssh_keygen(), *args],
            input=stdin,
            capture_output=True,
            timeout=_SSH_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BundleSigningError(f"ssh-keygen could not {doing} {key}: {e}.") from e
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        raise BundleSigningError(
            f"ssh-keygen could not {doing} {key}: {said[-1] if said else 'it failed'}. "
            "Use an OpenSSH key without a passphrase, or one loaded in ssh-agent."
        )
    return result.stdout


# Verifying -------------------------------------------------------------------


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
    scan = _scan_export(export_path)
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
    if info.size > _SMALL_MEMBER_LIMIT:
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
        match = _MANIFEST_LINE.fullmatch(line)
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
    if manifest != _manifest(listed):
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


def _check_statement(raw: bytes, scan: _ExportScan) -> bytes:
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
    expected = _statement(scan)
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


def ssh_verify(public: bytes, armored: bytes, message: bytes, work: Path) -> str | None:
    """Check an SSH signature of ``message`` by ``public`` (namespace and principal
    ``SIGNING_NAMESPACE``) with ``ssh-keygen -Y verify``; None if good, else why not.
    """
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        return "ssh-keygen is not on PATH to verify it"
    allowed = work / "allowed_signers"
    allowed.write_bytes(
        f'{SIGNING_NAMESPACE} namespaces="{SIGNING_NAMESPACE}" '.encode() + public.strip() + b"\n"
    )
    signature = work / "statement.sig"
    signature.write_bytes(armored)
    try:
        result = subprocess.run(
            [
                keygen, "-Y", "verify", "-f", str(allowed), "-I", SIGNING_NAMESPACE,
                "-n", SIGNING_NAMESPACE, "-s", str(signature),
            ],
            input=message,
            capture_output=True,
            timeout=_SSH_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"ssh-keygen could not run: {e}"
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        return said[-1] if said else f"ssh-keygen exited {result.returncode}"
    return None
