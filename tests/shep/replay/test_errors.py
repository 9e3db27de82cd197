"""Bad input to `shep replay` gives one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from events.base import utc_now
from events.runs import RunCreated
from events.store import EventStore
from tests.shep.replay.conftest import Recorded
from tests.support.cli import shep


def _one_line(*args: str, code: int = 2) -> str:
    done = shep("replay", *args)
    assert done.returncode == code, done
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.rstrip("\n")


@pytest.mark.parametrize("ref", ["ffffffff", "not-a-run", "x" * 40, "-"])
def test_unknown_run(history: Recorded, ref: str) -> None:
    """A run id (or prefix) no run has."""
    assert _one_line(ref) == f"shep: No run {ref!r}. List runs with `shep status --all`."


def test_an_item_id_is_not_a_run(history: Recorded) -> None:
    """Ids of other streams (an inbox item) are not runs: only RunCreated names a run."""
    frames = shep("replay", history.gated, "--json", check=True).stdout
    item = frames.split('"item":"', 1)[1][:32]
    assert _one_line(item) == f"shep: No run {item!r}. List runs with `shep status --all`."


def test_ambiguous_prefix(history: Recorded) -> None:
    """A prefix two runs share."""
    twin = UUID(history.gated[:8] + "0" * 24)
    with EventStore(history.home / "shep.db") as store:
        created = RunCreated(
            originator_id=twin,
            originator_version=1,
            timestamp=utc_now(),
            workflow="w",
            agent_type="demo",
            repo="/r",
            created_by="t",
        )
        store.append([created])
    prefix = history.gated[:8]
    assert _one_line(prefix) == (
        f"shep: Run id {prefix!r} matches several runs; type more characters of it."
    )


@pytest.mark.parametrize(
    ("at", "message"),
    [
        ("0", "shep: --at 0: the run has frames 1 to 13."),
        ("14", "shep: --at 14: the run has frames 1 to 13."),
        ("-1", "shep: --at -1: the run has frames 1 to 13."),
        ("first", "shep: --at takes a frame number or `last`, not 'first'."),
    ],
)
def test_frame_out_of_range(history: Recorded, at: str, message: str) -> None:
    """--at past either end, or not a number."""
    assert _one_line(history.gated, "--json", "--at", at) == message


def test_no_store_yet(shep_home: Path) -> None:
    """An empty home: nothing to replay, and no store (or home) is created."""
    message = _one_line("abcd", code=1)
    assert message == f"shep: No event store at {shep_home / 'shep.db'}: nothing to replay."
    assert not shep_home.exists()


def test_not_a_database(shep_home: Path) -> None:
    """A store that is not SQLite: the store's own error, one line."""
    shep_home.mkdir()
    (shep_home / "shep.db").write_bytes(b"this is not a database" * 100)
    message = _one_line("abcd", code=1)
    assert message.startswith(f"shep: The event store {shep_home / 'shep.db'} is damaged")


def test_missing_run_argument() -> None:
    """RUN is required (click's usage error, exit 2)."""
    done = shep("replay")
    assert done.returncode == 2
    assert "Missing argument 'RUN'" in done.stderr
