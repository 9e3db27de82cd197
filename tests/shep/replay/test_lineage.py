"""`shep replay RUN --tree`: the fork lineage, up through origins and down through forks.

The history is written with events, as `shep fork` records it: the fork's
``RunCreated`` names its origin and checkpoint, and the origin gets
``RunForked`` naming the fork.
"""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

import pytest

from events.base import utc_now
from events.runs import RunCreated, RunForked
from events.store import EventStore
from shep.audit.bundle import write_bundle
from shep.audit.export import ExportFilter
from tests.support.cli import shep

ORIGIN = UUID("aaaaaaaa-0000-4000-8000-000000000001")
FORK = UUID("bbbbbbbb-0000-4000-8000-000000000002")
GRANDCHILD = UUID("cccccccc-0000-4000-8000-000000000003")
SIBLING = UUID("dddddddd-0000-4000-8000-000000000004")
UNKNOWN = UUID("eeeeeeee-0000-4000-8000-000000000005")


def _created(run: UUID, origin: UUID | None = None, checkpoint: str | None = None) -> RunCreated:
    return RunCreated(
        originator_id=run,
        originator_version=1,
        timestamp=utc_now(),
        workflow="gated-review",
        agent_type="demo",
        repo="/repos/app",
        created_by="user:tester" if origin else "tester@host",
        origin_run_id=origin,
        origin_checkpoint_id=checkpoint,
    )


def _forked(origin: UUID, version: int, fork: UUID, checkpoint: str) -> RunForked:
    return RunForked(
        originator_id=origin,
        originator_version=version,
        timestamp=utc_now(),
        fork_run_id=fork,
        checkpoint_id=checkpoint,
        forked_by="user:tester",
        restore="state",
    )


@pytest.fixture
def forks(store: EventStore) -> EventStore:
    """origin -> fork (at cp-a-2) -> grandchild (at cp-b-1); origin -> sibling (at cp-a-1);
    origin -> a fork whose own events are not in this log.
    """
    store.append([_created(ORIGIN)])
    store.append([_forked(ORIGIN, 2, FORK, "cp-a-2"), _created(FORK, ORIGIN, "cp-a-2")])
    store.append([_forked(FORK, 2, GRANDCHILD, "cp-b-1"), _created(GRANDCHILD, FORK, "cp-b-1")])
    store.append([_forked(ORIGIN, 3, SIBLING, "cp-a-1"), _created(SIBLING, ORIGIN, "cp-a-1")])
    store.append([_forked(ORIGIN, 4, UNKNOWN, "cp-a-3")])
    return store


def _tree(run: UUID, *extra: str) -> list[str]:
    done = shep("replay", run.hex[:8], "--tree", *extra, check=True)
    return done.stdout.splitlines()


def test_tree_from_a_fork_shows_its_origin_and_all_forks(forks: EventStore) -> None:
    """From the middle run: the oldest origin on top, forks indented under the run they
    were made from, each with its checkpoint; this run marked; a fork missing from the
    log shown as such.
    """
    lines = _tree(FORK)
    assert len(lines) == 5
    assert lines[0].startswith("aaaaaaaa  gated-review  ")
    assert lines[0].endswith("by tester@host")
    assert lines[1].startswith("├── bbbbbbbb  gated-review  ")
    assert lines[1].endswith("by user:tester  at checkpoint cp-a-2  ◀ this run")
    assert lines[2].startswith("│   └── cccccccc  gated-review  ")
    assert lines[2].endswith("at checkpoint cp-b-1")
    assert lines[3].startswith("├── dddddddd  ")
    assert lines[3].endswith("at checkpoint cp-a-1")
    assert lines[4] == "└── eeeeeeee  (not in this log)  at checkpoint cp-a-3"


def test_tree_is_the_same_from_every_run_of_it(forks: EventStore) -> None:
    """Asked from the origin or the grandchild, the tree is the same; only the mark moves."""
    from_fork = [line.replace("  ◀ this run", "") for line in _tree(FORK)]
    for run in (ORIGIN, GRANDCHILD, SIBLING):
        lines = _tree(run)
        assert [line.replace("  ◀ this run", "") for line in lines] == from_fork
        [marked] = [line for line in lines if line.endswith("◀ this run")]
        assert run.hex[:8] in marked


def test_tree_as_json(forks: EventStore) -> None:
    """--tree --json: one object, each run with its checkpoint and its forks."""
    tree = json.loads(shep("replay", GRANDCHILD.hex, "--tree", "--json", check=True).stdout)
    assert tree["run"] == ORIGIN.hex
    assert [f["run"] for f in tree["forks"]] == [FORK.hex, SIBLING.hex, UNKNOWN.hex]
    assert tree["forks"][0]["forks"][0]["run"] == GRANDCHILD.hex
    assert tree["forks"][0]["forks"][0]["checkpoint_id"] == "cp-b-1"
    assert tree["forks"][0]["forked_by"] == "user:tester"
    assert tree["forks"][2]["known"] is False


def test_a_fork_replays_with_its_origin(forks: EventStore) -> None:
    """A fork's own frames name where it came from; the origin's show each fork made."""
    text = shep("replay", FORK.hex, check=True).stdout
    assert "forked from aaaaaaaa at cp-a-2" in text.splitlines()[0]
    assert f"forked from run {ORIGIN.hex} at checkpoint cp-a-2" in text
    origin = [json.loads(line) for line in shep("replay", ORIGIN.hex, "--json").stdout.splitlines()]
    assert [f["title"] for f in origin[1:]] == [
        f"Forked as run {FORK.hex} at checkpoint cp-a-2",
        f"Forked as run {SIBLING.hex} at checkpoint cp-a-1",
        f"Forked as run {UNKNOWN.hex} at checkpoint cp-a-3",
    ]


def test_tree_from_a_bundle(forks: EventStore, db_path: Path, tmp_path: Path) -> None:
    """The same tree from a bundle of the whole log, without the store."""
    bundle = tmp_path / "all.tar"
    write_bundle(db_path, ExportFilter(), bundle, None)
    expected = _tree(FORK)
    done = shep(
        "replay",
        FORK.hex,
        "--tree",
        "--bundle",
        str(bundle),
        env={"SHEP_HOME": str(tmp_path / "nowhere")},
        check=True,
    )
    assert done.stdout.splitlines() == expected
