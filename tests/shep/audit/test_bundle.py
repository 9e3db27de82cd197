"""Audit bundles: a deterministic tar of the export, its manifest and a DSSE-wrapped in-toto
statement, signed with ssh-keygen; ``verify_bundle`` names the member and position of any change.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from freezegun import freeze_time

from events.store import EventStore
from shep.audit.bundle import (
    EXPORT_MEMBER,
    MANIFEST_MEMBER,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    SIGNER_MEMBER,
    STATEMENT_MEMBER,
    STATEMENT_TYPE,
    BundleSigningError,
    fingerprint,
    pae,
    write_bundle,
)
from shep.audit.bundle_verify import verify_bundle
from shep.audit.export import ExportFilter
from tests.shep.audit.test_otlp import MERGE_COMMIT, History, build_history

needs_ssh = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")


@pytest.fixture
def history(store: EventStore) -> History:
    return build_history(store)


@pytest.fixture
def key(tmp_path: Path) -> Path:
    """A fresh ed25519 key without a passphrase."""
    path = tmp_path / "keys" / "audit_ed25519"
    path.parent.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "auditor", "-f", str(path)],
        check=True,
    )
    return path


def members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        out: dict[str, bytes] = {}
        for info in tar.getmembers():
            data = tar.extractfile(info)
            assert data is not None
            out[info.name] = data.read()
        return out


def rewrite(bundle: Path, change: Callable[[dict[str, bytes]], dict[str, bytes]]) -> None:
    """Rewrite the bundle's members as a forger would: same tar layout, new contents."""
    new = change(members(bundle))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in new.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    bundle.write_bytes(buffer.getvalue())


def remanifest(files: dict[str, bytes]) -> dict[str, bytes]:
    """The manifest recomputed for the members as they are now."""
    digests = {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if n != MANIFEST_MEMBER}
    files[MANIFEST_MEMBER] = "".join(f"{digests[n]}  {n}\n" for n in sorted(digests)).encode()
    return files


def envelope_of(files: dict[str, bytes]) -> dict[str, object]:
    value = json.loads(files[STATEMENT_MEMBER])
    assert isinstance(value, dict)
    return value


def test_unsigned_round_trip(tmp_path: Path, db_path: Path, history: History) -> None:
    """An unsigned bundle verifies; it holds the export, a sha256sum manifest and an in-toto
    statement in a DSSE envelope whose subjects are the export and the feature's merge commit.
    """
    bundle = tmp_path / "audit.tar"
    summary = write_bundle(db_path, ExportFilter(), bundle, None)
    assert summary.signer is None
    assert summary.merge_commits == (MERGE_COMMIT,)
    files = members(bundle)
    with tarfile.open(bundle) as tar:
        assert tar.getnames() == [EXPORT_MEMBER, MANIFEST_MEMBER, STATEMENT_MEMBER]
    export_sha = hashlib.sha256(files[EXPORT_MEMBER]).hexdigest()
    assert summary.export_sha256 == export_sha
    manifest = files[MANIFEST_MEMBER].decode()
    assert f"{export_sha}  {EXPORT_MEMBER}\n" in manifest
    envelope = envelope_of(files)
    assert envelope["payloadType"] == PAYLOAD_TYPE
    assert envelope["signatures"] == []
    statement = json.loads(base64.b64decode(str(envelope["payload"])))
    assert statement["_type"] == STATEMENT_TYPE
    assert statement["predicateType"] == PREDICATE_TYPE
    subjects = {s["name"]: s["digest"] for s in statement["subject"]}
    assert subjects == {
        EXPORT_MEMBER: {"sha256": export_sha},
        f"git+commit:{MERGE_COMMIT}": {"gitCommit": MERGE_COMMIT},
    }
    last = json.loads(files[EXPORT_MEMBER].splitlines()[-1])
    predicate = statement["predicate"]
    assert predicate["count"] == last["count"] == summary.count
    assert predicate["head_hash"] == last["head_hash"] == summary.head_hash
    assert predicate["filter"] == {"run": None, "since": None, "kind": "all"}

    report = verify_bundle(bundle)
    assert report.ok, report.problem
    assert report.count == summary.count
    assert report.signer is None


@needs_ssh
def test_signed_round_trip(tmp_path: Path, db_path: Path, history: History, key: Path) -> None:
    """With a key, the DSSE PAE is signed by ``ssh-keygen -Y sign`` (namespace shep-audit);
    the signer's public key travels in the bundle and the keyid is its fingerprint.
    """
    bundle = tmp_path / "signed.tar"
    summary = write_bundle(db_path, ExportFilter(), bundle, key)
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(key) + ".pub"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert summary.signer == listed
    files = members(bundle)
    assert files[SIGNER_MEMBER] == Path(str(key) + ".pub").read_bytes()
    (signature,) = envelope_of(files)["signatures"]  # type: ignore[misc]
    assert signature["keyid"] == listed
    armored = base64.b64decode(signature["sig"])
    assert armored.startswith(b"-----BEGIN SSH SIGNATURE-----")

    # The signature is over DSSE's PAE, checkable with ssh-keygen alone.
    payload = base64.b64decode(str(envelope_of(files)["payload"]))
    (tmp_path / "sig").write_bytes(armored)
    allowed = tmp_path / "allowed"
    allowed.write_bytes(b'shep-audit namespaces="shep-audit" ' + files[SIGNER_MEMBER])
    subprocess.run(
        [
            *("ssh-keygen", "-Y", "verify", "-f", str(allowed)),
            *("-I", "shep-audit", "-n", "shep-audit", "-s", str(tmp_path / "sig")),
        ],
        input=pae(PAYLOAD_TYPE, payload),
        check=True,
        capture_output=True,
    )
    report = verify_bundle(bundle)
    assert report.ok, report.problem
    assert report.signer == listed


def test_bundles_of_the_same_export_are_the_same_bytes(
    tmp_path: Path, db_path: Path, history: History
) -> None:
    """Fixed mtime, owner and mode and sorted members: the same export at the same moment
    gives a byte-identical bundle (so its digest can be published and compared).
    """
    with freeze_time("2026-03-01T12:00:00Z"):
        first = write_bundle(db_path, ExportFilter(), tmp_path / "a.tar", None)
        second = write_bundle(db_path, ExportFilter(), tmp_path / "b.tar", None)
    assert first.export_sha256 == second.export_sha256
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        for info in tar.getmembers():
            assert (info.mtime, info.uid, info.gid, info.mode) == (0, 0, 0, 0o644)
            assert (info.uname, info.gname) == ("", "")


def _line_of(data: bytes, offset: int) -> tuple[int, int | None]:
    """The line (from 1) holding byte ``offset`` and the log position of its event, if any."""
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    end = data.find(b"\n", offset)
    record = json.loads(data[start : end if end != -1 else len(data)])
    return line, record.get("position") if record.get("type") == "event" else None


@pytest.mark.parametrize("seed", range(12))
def test_a_flipped_byte_in_the_export_is_named_by_line_and_position(
    tmp_path: Path, db_path: Path, history: History, seed: int
) -> None:
    """One byte changed anywhere in the tar's export.jsonl data: verify names export.jsonl,
    the line holding the byte and the log position of the event on it.
    """
    bundle = tmp_path / "audit.tar"
    write_bundle(db_path, ExportFilter(), bundle, None)
    with tarfile.open(bundle) as tar:
        info = tar.getmember(EXPORT_MEMBER)
        start, size = info.offset_data, info.size
    raw = bytearray(bundle.read_bytes())
    export = bytes(raw[start : start + size])
    rng = random.Random(seed)
    offset = rng.randrange(size)
    raw[start + offset] ^= rng.randrange(1, 256)
    bundle.write_bytes(bytes(raw))
    line, position = _line_of(export, offset)

    report = verify_bundle(bundle)
    assert not report.ok
    assert report.member == EXPORT_MEMBER, report.problem
    assert report.line == line, report.problem
    assert report.position == position, report.problem
    assert report.byte_offset == start + export.rfind(b"\n", 0, offset) + 1
    assert report.problem.startswith(f"{EXPORT_MEMBER}: line {line}")
    assert "\n" not in report.problem


@needs_ssh
def test_a_changed_signature_fails(
    tmp_path: Path, db_path: Path, history: History, key: Path
) -> None:
    """A byte of the signature changed, even with the manifest redone to match, fails the
    ssh-keygen check; changed without the manifest, the statement's digest gives it away.
    """
    bundle = tmp_path / "signed.tar"
    write_bundle(db_path, ExportFilter(), bundle, key)
    pristine = bundle.read_bytes()

    def flip_signature(files: dict[str, bytes]) -> dict[str, bytes]:
        envelope = envelope_of(files)
        (signature,) = envelope["signatures"]  # type: ignore[misc]
        armored = bytearray(base64.b64decode(signature["sig"]))
        armored[len(armored) // 2] ^= 0x01
        signature["sig"] = base64.b64encode(bytes(armored)).decode()
        files[STATEMENT_MEMBER] = json.dumps(envelope).encode()
        return files

    rewrite(bundle, lambda files: remanifest(flip_signature(files)))
    report = verify_bundle(bundle)
    assert not report.ok
    assert report.member == STATEMENT_MEMBER
    assert "signature does not verify" in report.problem

    bundle.write_bytes(pristine)
    rewrite(bundle, flip_signature)
    report = verify_bundle(bundle)
    assert report.member == STATEMENT_MEMBER
    assert MANIFEST_MEMBER in report.problem


@needs_ssh
def test_another_key_or_a_stripped_signature_fails(
    tmp_path: Path, db_path: Path, history: History, key: Path
) -> None:
    """Swapping in another public key (keyid updated too) or dropping the signature while
    keeping signer.pub is caught.
    """
    bundle = tmp_path / "signed.tar"
    write_bundle(db_path, ExportFilter(), bundle, key)
    pristine = bundle.read_bytes()
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    other_pub = Path(str(other) + ".pub").read_bytes()

    def swap_key(files: dict[str, bytes]) -> dict[str, bytes]:
        envelope = envelope_of(files)
        envelope["signatures"][0]["keyid"] = fingerprint(other_pub)  # type: ignore[index]
        files[STATEMENT_MEMBER] = json.dumps(envelope).encode()
        files[SIGNER_MEMBER] = other_pub
        return remanifest(files)

    rewrite(bundle, swap_key)
    report = verify_bundle(bundle)
    assert report.member == STATEMENT_MEMBER
    assert "signature does not verify" in report.problem

    bundle.write_bytes(pristine)

    def strip(files: dict[str, bytes]) -> dict[str, bytes]:
        envelope = envelope_of(files)
        envelope["signatures"] = []
        files[STATEMENT_MEMBER] = json.dumps(envelope).encode()
        return remanifest(files)

    rewrite(bundle, strip)
    report = verify_bundle(bundle)
    assert report.member == STATEMENT_MEMBER
    assert "unsigned" in report.problem


def test_a_swapped_manifest_line_fails(tmp_path: Path, db_path: Path, history: History) -> None:
    """Digests swapped between two manifest lines name the member that no longer matches;
    the lines swapped whole (same digests) are reported too: a bundle is written one way.
    """
    bundle = tmp_path / "audit.tar"
    write_bundle(db_path, ExportFilter(), bundle, None)
    pristine = bundle.read_bytes()

    def swap_digests(files: dict[str, bytes]) -> dict[str, bytes]:
        (a, name_a), (b, name_b) = (
            line.split("  ") for line in files[MANIFEST_MEMBER].decode().splitlines()
        )
        files[MANIFEST_MEMBER] = f"{b}  {name_a}\n{a}  {name_b}\n".encode()
        return files

    rewrite(bundle, swap_digests)
    report = verify_bundle(bundle)
    assert not report.ok
    assert report.member == EXPORT_MEMBER
    assert MANIFEST_MEMBER in report.problem

    bundle.write_bytes(pristine)

    def swap_lines(files: dict[str, bytes]) -> dict[str, bytes]:
        first, second = files[MANIFEST_MEMBER].decode().splitlines()
        files[MANIFEST_MEMBER] = f"{second}\n{first}\n".encode()
        return files

    rewrite(bundle, swap_lines)
    report = verify_bundle(bundle)
    assert report.member == MANIFEST_MEMBER
    assert "sorted" in report.problem


def test_an_edited_statement_fails(tmp_path: Path, db_path: Path, history: History) -> None:
    """A statement whose subject digest or predicate no longer describes the export fails,
    even with a consistent manifest.
    """
    bundle = tmp_path / "audit.tar"
    write_bundle(db_path, ExportFilter(), bundle, None)
    pristine = bundle.read_bytes()

    def edit_statement(change: Callable[[dict[str, object]], None]) -> None:
        def apply(files: dict[str, bytes]) -> dict[str, bytes]:
            envelope = envelope_of(files)
            statement = json.loads(base64.b64decode(str(envelope["payload"])))
            change(statement)
            envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
            files[STATEMENT_MEMBER] = json.dumps(envelope).encode()
            return remanifest(files)

        bundle.write_bytes(pristine)
        rewrite(bundle, apply)

    def other_digest(statement: dict[str, object]) -> None:
        statement["subject"][0]["digest"]["sha256"] = "0" * 64  # type: ignore[index]

    edit_statement(other_digest)
    report = verify_bundle(bundle)
    assert report.member == EXPORT_MEMBER
    assert "subject digest" in report.problem

    def other_count(statement: dict[str, object]) -> None:
        statement["predicate"]["count"] += 1  # type: ignore[index]

    edit_statement(other_count)
    report = verify_bundle(bundle)
    assert report.member == STATEMENT_MEMBER
    assert "predicate" in report.problem

    def no_merge(statement: dict[str, object]) -> None:
        statement["subject"] = statement["subject"][:1]  # type: ignore[index]

    edit_statement(no_merge)
    report = verify_bundle(bundle)
    assert report.member == STATEMENT_MEMBER
    assert "merge-commit" in report.problem


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        ("../evil", tarfile.REGTYPE, "leaves the bundle"),
        ("/etc/cron.d/evil", tarfile.REGTYPE, "absolute"),
        ("sub/../../evil", tarfile.REGTYPE, "leaves the bundle"),
        ("link", tarfile.SYMTYPE, "not a regular file"),
        ("notes.txt", tarfile.REGTYPE, "unexpected member"),
    ],
)
def test_unsafe_members_are_rejected(
    tmp_path: Path, db_path: Path, history: History, name: str, kind: bytes, words: str
) -> None:
    """A member that would land outside the bundle, a link, or anything unexpected is refused
    before anything is extracted.
    """
    bundle = tmp_path / "audit.tar"
    write_bundle(db_path, ExportFilter(), bundle, None)
    with tarfile.open(bundle, mode="a") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        info.size = 0 if kind == tarfile.SYMTYPE else 4
        tar.addfile(info, None if kind == tarfile.SYMTYPE else io.BytesIO(b"evil"))
    report = verify_bundle(bundle)
    assert not report.ok
    assert report.member == name
    assert words in report.problem
    assert not (tmp_path / "evil").exists()


def test_missing_members_and_non_tar_files(tmp_path: Path, db_path: Path, history: History) -> None:
    """A bundle without its manifest, or a file that is no tar at all, fails in one line."""
    bundle = tmp_path / "audit.tar"
    write_bundle(db_path, ExportFilter(), bundle, None)

    def drop_manifest(files: dict[str, bytes]) -> dict[str, bytes]:
        del files[MANIFEST_MEMBER]
        return files

    rewrite(bundle, drop_manifest)
    report = verify_bundle(bundle)
    assert (report.member, report.problem) == (
        MANIFEST_MEMBER,
        f"{MANIFEST_MEMBER}: missing from the bundle",
    )
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 100)
    report = verify_bundle(junk)
    assert not report.ok
    assert report.member is None
    assert "tar" in report.problem


def test_a_decisions_bundle_has_no_commit_subjects(
    tmp_path: Path, db_path: Path, history: History
) -> None:
    """A bundle of the decisions alone verifies; merges outside it are not its subjects."""
    bundle = tmp_path / "decisions.tar"
    summary = write_bundle(db_path, ExportFilter(kind="decisions"), bundle, None)
    assert summary.merge_commits == ()
    assert summary.count == 6  # three asks, three decisions
    assert verify_bundle(bundle).ok


def test_a_bad_key_is_one_clear_error(tmp_path: Path, db_path: Path, history: History) -> None:
    """Signing with a file that is no key raises BundleSigningError and leaves no bundle."""
    not_a_key = tmp_path / "not-a-key"
    not_a_key.write_text("hello\n")
    not_a_key.chmod(0o600)
    bundle = tmp_path / "audit.tar"
    with pytest.raises(BundleSigningError, match="ssh-keygen could not"):
        write_bundle(db_path, ExportFilter(), bundle, not_a_key)
    assert not bundle.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".shep")) == []


@needs_ssh
def test_a_public_key_that_is_not_the_keys_is_refused(
    tmp_path: Path, db_path: Path, history: History, key: Path
) -> None:
    """KEY.pub from another key would make an unverifiable bundle: signing checks it first."""
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    Path(str(key) + ".pub").write_bytes(Path(str(other) + ".pub").read_bytes())
    with pytest.raises(BundleSigningError, match=r"match|does not verify"):
        write_bundle(db_path, ExportFilter(), tmp_path / "audit.tar", key)
    assert not (tmp_path / "audit.tar").exists()


@needs_ssh
def test_without_a_pub_file_the_public_key_is_derived(
    tmp_path: Path, db_path: Path, history: History, key: Path
) -> None:
    """Without KEY.pub next to it, the public key is derived from the private key."""
    Path(str(key) + ".pub").unlink()
    bundle = tmp_path / "audit.tar"
    summary = write_bundle(db_path, ExportFilter(), bundle, key)
    report = verify_bundle(bundle)
    assert report.ok, report.problem
    assert report.signer == summary.signer
