"""`shep replay --bundle`: the same frames from an audit bundle, with no database at all."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from shep.audit.bundle import write_bundle
from shep.audit.export import ExportFilter
from tests.shep.replay.conftest import Recorded
from tests.support.cli import shep


def _bundle(history: Recorded, run: str | None, out: Path) -> Path:
    write_bundle(history.home / "shep.db", ExportFilter(run_id=run), out, None)
    return out


def _frames(*args: str, home: Path) -> list[dict[str, Any]]:
    done = shep("replay", *args, "--json", env={"SHEP_HOME": str(home)}, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_bundle_of_a_run_replays_like_the_store(history: Recorded, tmp_path: Path) -> None:
    """A bundle exported for one run gives the very frames the store gives, decisions and
    state diffs included, with SHEP_HOME pointing nowhere (and still nowhere after).
    """
    bundle = _bundle(history, history.gated, tmp_path / "gated.tar")
    from_store = _frames(history.gated, home=history.home)
    nowhere = tmp_path / "no-home"
    from_bundle = _frames(history.gated[:8], "--bundle", str(bundle), home=nowhere)
    assert from_bundle == from_store
    assert [f["decision"]["actor"] for f in from_bundle if f["decision"]] == [
        "user:alice",
        "user:bob",
        "user:carol",
    ]
    assert not nowhere.exists()


def test_bundle_of_everything_names_the_run(history: Recorded, tmp_path: Path) -> None:
    """From a bundle of the whole log, each run is replayed by its id; --at works there too,
    and so does a feature run's snapshot diff (its repository is on this machine).
    """
    bundle = _bundle(history, None, tmp_path / "all.tar")
    nowhere = tmp_path / "no-home"
    last = _frames(history.analyze, "--bundle", str(bundle), "--at", "last", home=nowhere)
    assert [(f["kind"], f["status"]) for f in last] == [("run", "completed")]
    feature = _frames(history.feature, "--bundle", str(bundle), home=nowhere)
    assert feature == _frames(history.feature, home=history.home)
    assert any("FEATURE-add-a-greeting-function.md" in (f["diff_stat"] or "") for f in feature)


def test_not_a_bundle_is_one_line(history: Recorded, tmp_path: Path) -> None:
    """A missing file, a file that is not a tar, and a tar without an export each give one
    line on stderr and exit 2.
    """
    not_tar = tmp_path / "notes.txt"
    not_tar.write_text("hello\n")
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w") as tar:
        info = tarfile.TarInfo("README")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    for path, says in (
        (tmp_path / "missing.tar", "No bundle at"),
        (not_tar, "is not a readable shep audit bundle"),
        (empty, "has no export.jsonl"),
    ):
        done = shep("replay", history.gated, "--bundle", str(path))
        assert done.returncode == 2
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert says in done.stderr


def test_a_run_not_in_the_bundle(history: Recorded, tmp_path: Path) -> None:
    """A run the bundle does not hold is not found, in one line (after the line saying that
    the bundle verified) naming the runs the bundle holds, not the local store's list;
    --tree says the same."""
    bundle = _bundle(history, history.gated, tmp_path / "gated.tar")
    for tree in ([], ["--tree"]):
        done = shep("replay", history.analyze, "--bundle", str(bundle), *tree)
        assert done.returncode == 2
        verified, missing = done.stderr.splitlines()
        assert verified.startswith(f"{bundle} verifies: ")
        assert missing == (
            f"shep: No run {history.analyze!r}. The bundle {bundle} holds 1 run: "
            f"{history.gated[:8]}."
        )
    everything = _bundle(history, None, tmp_path / "all.tar")
    done = shep("replay", "0000dead", "--bundle", str(everything))
    assert done.returncode == 2
    missing = done.stderr.splitlines()[-1]
    assert missing.startswith(f"shep: No run '0000dead'. The bundle {everything} holds ")
    for run in (history.analyze, history.gated, history.feature):
        assert run[:8] in missing
    assert "shep status" not in missing


def _tamper(bundle: Path, out: Path, old: bytes, new: bytes) -> Path:
    """A copy of ``bundle`` whose export holds, in one event's state, ``new`` for ``old``
    (the way someone would edit who approved), every other member left as it was.
    """
    import base64

    with tarfile.open(bundle) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    edited = 0
    with tarfile.open(out, "w") as tar:
        for member, data in members:
            written = data
            if member.name == "export.jsonl":
                lines = []
                for line in data.splitlines():
                    record = json.loads(line)
                    state = base64.b64decode(record.get("state", ""))
                    if record.get("type") == "event" and old in state:
                        record["state"] = base64.b64encode(state.replace(old, new)).decode()
                        edited += 1
                        lines.append(json.dumps(record, separators=(",", ":")).encode())
                    else:
                        lines.append(line)
                written = b"\n".join(lines) + b"\n"
                member.size = len(written)
            tar.addfile(member, io.BytesIO(written))
    assert edited == 1
    return out


def test_a_tampered_bundle_is_not_replayed(history: Recorded, tmp_path: Path) -> None:
    """A bundle whose approval was edited (carol -> mallory) is refused by replay as by
    `shep audit verify --bundle`: exit 4, one line saying it does not verify and where,
    and nothing of the edited history shown, in text, --json or --tree.
    """
    bundle = _bundle(history, history.gated, tmp_path / "gated.tar")
    forged = _tamper(bundle, tmp_path / "forged.tar", b'"user:carol"', b'"user:mallo"')
    verified = shep("audit", "verify", "--bundle", str(forged))
    assert verified.returncode == 4
    nowhere = {"SHEP_HOME": str(tmp_path / "no-home")}
    for extra in ((), ("--json",), ("--tree",)):
        done = shep("replay", history.gated[:8], "--bundle", str(forged), *extra, env=nowhere)
        assert done.returncode == 4, (extra, done.stdout, done.stderr)
        assert done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith(f"shep: {forged} does not verify, so it is not replayed: ")
        assert "export.jsonl: line " in line
        assert "mallo" not in done.stdout + done.stderr


def test_a_genuine_bundle_says_it_verified(history: Recorded, tmp_path: Path) -> None:
    """Replaying a genuine bundle says on stderr that it verified, with its event count and
    head hash and whether it was signed; stdout holds the frames alone.
    """
    bundle = _bundle(history, history.gated, tmp_path / "gated.tar")
    verified = shep("audit", "verify", "--bundle", str(bundle), check=True).stdout
    head = verified.split("Head hash: ")[1].split()[0]
    done = shep("replay", history.gated[:8], "--bundle", str(bundle), "--json", check=True)
    assert done.stderr == (
        f"{bundle} verifies: {verified.split('OK: ')[1].split(' verify')[0]}, head hash "
        f"{head}; not signed.\n"
    )
    assert all(json.loads(line)["run"] == history.gated for line in done.stdout.splitlines())
