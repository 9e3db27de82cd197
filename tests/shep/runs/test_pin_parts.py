"""The parts of a run's pin: a graph's fingerprint, a checkpoint's next nodes, a migration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shep.runs.pin import migrate_checkpoint, next_nodes
from shep.workflows.base import Migration

ROOT = Path(__file__).resolve().parents[3]

PRINT = (
    "from shep.workflows.shape import current_pin\n"
    "from shep.workflows import WORKFLOWS\n"
    "for w in WORKFLOWS.values(): print(w.name, current_pin(w).fingerprint)\n"
)


def _prints(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    env.pop("SHEP_WORKFLOW_MODULES", None)
    return subprocess.run(
        [sys.executable, "-c", PRINT], env=env, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.slow
def test_a_graphs_fingerprint_is_the_same_in_every_process() -> None:
    """The built-in workflows' fingerprints do not depend on the hash seed or the process,
    and differ between workflows (their graphs differ)."""
    first, second = _prints("1"), _prints("4242")
    assert first == second
    prints = [line.split()[1] for line in first.splitlines()]
    assert len(prints) >= 3
    assert len(set(prints)) == len(prints)


def _waiting_at(node: str) -> dict[str, object]:
    """A checkpoint (shep's integer channel versions) whose next node is ``node``."""
    return {
        "channel_values": {"results": {"draft": "plan", "old": "x"}},
        "channel_versions": {"branch:to:draft": 1, f"branch:to:{node}": 2, "results": 3},
        "versions_seen": {"draft": {"branch:to:draft": 1}, node: {f"branch:to:{node}": 1}},
    }


def test_a_checkpoints_next_nodes_are_its_triggered_ones() -> None:
    """The nodes whose trigger changed since they last saw it; versions compare as numbers
    (10 is after 9)."""
    checkpoint = _waiting_at("review")
    assert next_nodes(checkpoint) == {"review"}
    checkpoint["channel_versions"] = {"branch:to:review": 10}
    checkpoint["versions_seen"] = {"review": {"branch:to:review": 9}}
    assert next_nodes(checkpoint) == {"review"}
    checkpoint["versions_seen"] = {"review": {"branch:to:review": 10}}
    assert next_nodes(checkpoint) == set()


def test_a_migration_moves_the_next_node_renames_state_and_adds_defaults() -> None:
    """A renamed node takes the old one's trigger and state entries; a removed node's
    pending trigger goes to the node the migration names; a new state key gets its
    default; each changed channel is reported."""
    renamed = _waiting_at("old")
    changed = migrate_checkpoint(renamed, Migration(renamed={"old": "new"}))
    assert next_nodes(renamed) == {"new"}
    assert renamed["channel_values"]["results"] == {"draft": "plan", "new": "x"}  # type: ignore[index]
    assert changed == {"branch:to:new", "results"}

    removed = _waiting_at("old")
    changed = migrate_checkpoint(
        removed, Migration(removed={"old": "draft"}, defaults={"budget": 3})
    )
    assert next_nodes(removed) == {"draft"}
    assert removed["channel_values"]["budget"] == 3  # type: ignore[index]
    assert changed == {"branch:to:draft", "budget"}

    untouched = _waiting_at("review")
    assert migrate_checkpoint(untouched, Migration(renamed={"later": "after"})) == set()
    assert untouched == _waiting_at("review")
