"""A workflow's graph as its nodes and edges, for a face to draw: nothing of it runs.
Its fingerprint is what a run is pinned to (``current_pin``, see ``shep.runs.pin``).

The shape is read from the compiled LangGraph graph itself (``get_graph``), so
what is drawn is what runs: conditional edges are the routers' declared
destinations, loops are edges back to an earlier node. The graph is built
with a kit whose node functions are never called, and compiled without a
checkpointer. Building imports langgraph (about a second), so a face asks
for a shape only when it draws one, and keeps it.

A decision's check (``shep approve``) needs only the fingerprint: a home keeps
the fingerprints it computed in ``graph-fingerprints.json``, keyed by what
decides the graph (shep's version, the workflow's name, version and steps, the
source of the module that builds it and of this one), so the check reads it
there instead of importing langgraph. A changed source is a new key, so a
stale entry is never used; a graph built from code in yet another module is
keyed by its build function's module only (bump the workflow's ``version``
when such code changes its graph).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from events.versions import SHEP_VERSION
from shep.workflows.base import (
    AgentStep,
    ApprovalGate,
    DeterministicStep,
    NodeFn,
    QuestionStep,
    Workflow,
)

#: LangGraph's names for the graph's entry and exit.
START = "__start__"
END = "__end__"


@dataclass(frozen=True)
class ShapeNode:
    """A node: its name, its kind (agent, step, question, gate; start and end for the
    graph's entry and exit) and its title.
    """

    name: str
    kind: str
    title: str


@dataclass(frozen=True)
class ShapeEdge:
    """An edge; ``conditional``: a router chooses it (one of the router's destinations)."""

    source: str
    target: str
    conditional: bool


@dataclass(frozen=True)
class GraphShape:
    """The nodes in the order the workflow declares them, and every edge."""

    nodes: tuple[ShapeNode, ...]
    edges: tuple[ShapeEdge, ...]


def _inert(_state: Any) -> dict[str, Any]:
    raise RuntimeError("a workflow's shape is drawn, never run")


class _InertKit:
    """Node functions that are never called: the graph is only compiled to be read."""

    def agent(self, step: AgentStep) -> NodeFn:
        return _inert

    def deterministic(self, step: DeterministicStep) -> NodeFn:
        return _inert

    def question(self, step: QuestionStep) -> NodeFn:
        return _inert

    def gate(self, step: ApprovalGate) -> NodeFn:
        return _inert


_KINDS: dict[type[Any], str] = {
    AgentStep: "agent",
    DeterministicStep: "step",
    QuestionStep: "question",
    ApprovalGate: "gate",
}


def workflow_shape(workflow: Workflow) -> GraphShape:
    """The nodes and edges of ``workflow``'s compiled graph (imports langgraph)."""
    drawn = workflow.build(_InertKit()).compile().get_graph()
    steps = {step.name: step for step in workflow.steps}
    nodes = []
    for name in drawn.nodes:
        step = steps.get(name)
        if name == START:
            nodes.append(ShapeNode(name, "start", "start"))
        elif name == END:
            nodes.append(ShapeNode(name, "end", "end"))
        elif step is not None:
            nodes.append(ShapeNode(name, _KINDS.get(type(step), "step"), step.title))
        else:
            nodes.append(ShapeNode(name, "step", name))
    edges = tuple(
        ShapeEdge(str(edge.source), str(edge.target), bool(edge.conditional))
        for edge in drawn.edges
    )
    return GraphShape(tuple(nodes), edges)


def graph_fingerprint(shape: GraphShape) -> str:
    """A short digest of the graph's nodes, their kinds and its edges.

    The same graph gives the same fingerprint in every process (sorted JSON,
    SHA-256: no hash seed, no declaration order); titles and prompts do not
    count, only what decides where a run goes next.
    """
    import hashlib
    import json

    nodes = sorted([node.name, node.kind] for node in shape.nodes)
    edges = sorted([edge.source, edge.target, edge.conditional] for edge in shape.edges)
    text = json.dumps({"nodes": nodes, "edges": edges}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Pin:
    """The code a run is pinned to (None: not known, a run from before pins)."""

    shep_version: str | None
    workflow_version: str | None
    fingerprint: str | None


_SHAPES: dict[str, tuple[Workflow, GraphShape, str]] = {}


def _shape(workflow: Workflow) -> tuple[GraphShape, str]:
    """The workflow's graph and its fingerprint, computed once per process."""
    known = _SHAPES.get(workflow.name)
    if known is None or known[0] is not workflow:
        shape = workflow_shape(workflow)
        known = _SHAPES[workflow.name] = (workflow, shape, graph_fingerprint(shape))
    return known[1], known[2]


#: The file in a home where computed fingerprints are kept (see the module's docstring).
FINGERPRINTS = "graph-fingerprints.json"
#: How many keys the file keeps (the newest): a few workflows across a few upgrades.
KEPT = 64


def current_pin(workflow: Workflow, home: Path | None = None) -> Pin:
    """What a run of ``workflow`` created now is pinned to. Imports langgraph, unless
    ``home`` has kept the fingerprint of this very graph (and then it keeps it)."""
    if home is None:
        return Pin(SHEP_VERSION, workflow.version, _shape(workflow)[1])
    key = source_key(workflow)
    kept = _kept(home)
    fingerprint = kept.get(key) if key is not None else None
    if fingerprint is None:
        fingerprint = _shape(workflow)[1]
        if key is not None:
            _keep(home, kept, key, fingerprint)
    return Pin(SHEP_VERSION, workflow.version, fingerprint)


def source_key(workflow: Workflow) -> str | None:
    """A digest of what decides ``workflow``'s graph (None: its build's source is not a
    readable file, so nothing is kept)."""
    import hashlib
    import json

    digest = hashlib.sha256()
    steps = [[step.name, type(step).__name__] for step in workflow.steps]
    digest.update(json.dumps([SHEP_VERSION, workflow.name, workflow.version, steps]).encode())
    for module in (getattr(workflow.build, "__module__", None), __name__):
        source = getattr(sys.modules.get(module or ""), "__file__", None)
        if not source:
            return None
        try:
            digest.update(Path(source).read_bytes())
        except OSError:
            return None
    return digest.hexdigest()


def _kept(home: Path) -> dict[str, str]:
    import json

    try:
        kept = json.loads((home / FINGERPRINTS).read_text())
    except (OSError, ValueError):
        return {}  # none kept yet, or damaged: computed again and rewritten
    if not isinstance(kept, dict):
        return {}
    return {k: v for k, v in kept.items() if isinstance(k, str) and isinstance(v, str)}


def _keep(home: Path, kept: dict[str, str], key: str, fingerprint: str) -> None:
    """Add ``key`` to the home's file, written whole and renamed into place (a reader
    sees the old file or the new one); a home it cannot write to keeps nothing."""
    import json

    kept.pop(key, None)
    kept[key] = fingerprint
    newest = dict(list(kept.items())[-KEPT:])
    part = home / f".{FINGERPRINTS}.{os.getpid()}"
    try:
        part.write_text(json.dumps(newest, indent=0))
        os.replace(part, home / FINGERPRINTS)
    except OSError:
        part.unlink(missing_ok=True)


def workflow_shape_of(workflow: Workflow) -> GraphShape:
    """``workflow_shape``, computed once per process."""
    return _shape(workflow)[0]


class PinFields(TypedDict):
    """``create_run``'s and ``fork_run``'s pin arguments."""

    workflow_version: str | None
    graph_fingerprint: str | None


def pin_fields(workflow: Workflow, home: Path | None = None) -> PinFields:
    """The pin arguments for a run of ``workflow`` made now (kept in ``home``, if given)."""
    pin = current_pin(workflow, home)
    return {"workflow_version": pin.workflow_version, "graph_fingerprint": pin.fingerprint}
