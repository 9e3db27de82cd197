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


#: A plug-in workflow whose graph its own ``build`` draws: ``{extra}`` adds a node.
PLUGIN = """
from shep.workflows.base import AgentStep, Workflow, add_step

STEPS = (AgentStep("draft", "Draft", "Write it."), AgentStep("check", "Check", "Check it."))


def build(kit):
    from langgraph.graph import END, START, StateGraph
    from shep.workflows.base import StepState

    graph = StateGraph(StepState)
    for step in STEPS:
        add_step(graph, kit, step)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "check")
    graph.add_edge("check", {last})
    {extra}
    return graph


def again(state):
    return "draft"


WORKFLOWS = [Workflow("keyed", "A plug-in.", STEPS, build)]
"""
KEEP = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from shep.workflows import get_workflow\n"
    "from shep.workflows.shape import current_pin\n"
    "home = Path(sys.argv[1]) if len(sys.argv) > 1 else None\n"
    "pin = current_pin(get_workflow('keyed'), home)\n"
    "print(json.dumps([pin.fingerprint, 'langgraph' in sys.modules]))\n"
)


def _pin(plug: Path, home: Path | None) -> tuple[str, bool]:
    """The plug-in workflow's fingerprint in a fresh process (kept in ``home`` if given),
    and whether that process imported langgraph."""
    import json

    env = {
        **os.environ,
        "SHEP_WORKFLOW_MODULES": "keyed_flow",
        "PYTHONPATH": f"{plug}{os.pathsep}{ROOT}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    argv = [sys.executable, "-c", KEEP, *([str(home)] if home else [])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    fingerprint, imported = json.loads(done.stdout)
    return fingerprint, imported


@pytest.mark.slow
def test_a_home_keeps_a_graphs_fingerprint_until_its_source_changes(tmp_path: Path) -> None:
    """Once a home has computed a graph's fingerprint, a check there (``shep approve``)
    reads it without importing langgraph, and gets what the graph gives. A rewritten
    ``build`` is a new key: computed again (langgraph imported), and it is the new graph's
    fingerprint, not the kept one. A damaged file is computed again too."""
    plug, home = tmp_path / "plug", tmp_path / "home"
    plug.mkdir()
    home.mkdir()
    (plug / "keyed_flow.py").write_text(PLUGIN.format(last="END", extra=""))
    drawn, _ = _pin(plug, None)

    assert _pin(plug, home) == (drawn, True)  # computed, and kept
    assert _pin(plug, home) == (drawn, False)  # read: no langgraph
    (home / "graph-fingerprints.json").write_text(
        (home / "graph-fingerprints.json").read_text().replace(drawn, "f" * 16)
    )
    assert _pin(plug, home) == ("f" * 16, False)  # what is kept is what is read

    (plug / "keyed_flow.py").write_text(
        PLUGIN.format(
            last="END", extra='graph.add_conditional_edges("draft", again, ["draft", "check"])'
        )
    )
    changed, _ = _pin(plug, None)
    assert changed != drawn
    assert _pin(plug, home) == (changed, True)
    assert _pin(plug, home) == (changed, False)

    (home / "graph-fingerprints.json").write_text("{not json")
    assert _pin(plug, home) == (changed, True)
    assert _pin(plug, home) == (changed, False)
