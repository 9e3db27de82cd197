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
so two bundles of the same export are the same bytes. ``shep.audit.bundle_verify`` needs no
database: a bundle can be checked on any machine with Python and ``ssh-keygen``.
"""

from __future__ import annotations

import base64
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events.errors import ShepError
from shep.audit.export import ExportFileError, ExportFilter, canonical, write_jsonl

if TYPE_CHECKING:
    pass

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
SMALL_MEMBER_LIMIT = 1 << 20
SSH_TIMEOUT_S = 60
MANIFEST_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")
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
    scan = scan_export(export_path)
    statement = statement_of(scan)
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
    members[MANIFEST_MEMBER] = manifest_of(digests)
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


def manifest_of(digests: dict[str, str]) -> bytes:
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
class ExportScan:
    sha256: str
    size: int
    header: dict[str, Any]
    footer: dict[str, Any]
    merges: list[dict[str, Any]]


def scan_export(path: Path) -> ExportScan:
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
    return ExportScan(
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


def statement_of(scan: ExportScan) -> dict[str, Any]:
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
    result = run_ssh_keygen(["-y", "-f", str(key)], b"", "read the public key of")
    return _one_line(result)


def _one_line(public: bytes) -> bytes:
    return public.strip().splitlines()[0] + b"\n"


def _ssh_sign(key: Path, message: bytes) -> bytes:
    return run_ssh_keygen(
        ["-Y", "sign", "-f", str(key), "-n", SIGNING_NAMESPACE], message, "sign with"
    )


def run_ssh_keygen(args: list[str], stdin: bytes, doing: str) -> bytes:
    key = args[args.index("-f") + 1]
    try:
        result = subprocess.run(
            [_ssh_keygen(), *args],
            input=stdin,
            capture_output=True,
            timeout=SSH_TIMEOUT_S,
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
            timeout=SSH_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"ssh-keygen could not run: {e}"
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        return said[-1] if said else f"ssh-keygen exited {result.returncode}"
    return None
