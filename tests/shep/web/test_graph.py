"""A workflow's graph as the run page draws it: its real shape, loops and gates visible,
every name escaped."""

from __future__ import annotations

import re

from shep.web.graph import graph_svg, layout
from shep.workflows import WORKFLOWS
from shep.workflows.shape import END, START, GraphShape, ShapeEdge, ShapeNode, workflow_shape
from tests.support.workflows import GATED_REVIEW


def test_the_shape_is_the_compiled_graphs_own() -> None:
    """gated-review: its five nodes of four kinds, the router's choices as conditional
    edges, and the gate's rejection back to the draft."""
    shape = workflow_shape(GATED_REVIEW)
    assert [(n.name, n.kind) for n in shape.nodes] == [
        (START, "start"),
        ("draft", "agent"),
        ("scope", "question"),
        ("check", "step"),
        ("approve", "gate"),
        ("finish", "agent"),
        (END, "end"),
    ]
    edges = {(e.source, e.target, e.conditional) for e in shape.edges}
    assert ("approve", "draft", True) in edges
    assert ("draft", "scope", True) in edges
    assert ("scope", "check", False) in edges


def test_loops_go_back_and_the_rest_goes_down() -> None:
    """The feature workflow's repair loops and gate rejections are loops; every other edge
    leads to a lower row, and the end is the last row."""
    drawn = layout(workflow_shape(WORKFLOWS["feature"]))
    assert ("plan_gate", "plan") in drawn.loops
    assert ("repair", "validate_spec") in drawn.loops
    assert ("clarify", "clarify") in drawn.loops
    assert ("validate_plan", "plan_gate") not in drawn.loops
    for edge in drawn.edges:
        if (edge.source, edge.target) not in drawn.loops:
            assert drawn.nodes[edge.target].rank > drawn.nodes[edge.source].rank, edge
    assert drawn.nodes[END].rank == max(n.rank for n in drawn.nodes.values())
    boxes = {(n.x, n.y) for n in drawn.nodes.values()}
    assert len(boxes) == len(drawn.nodes), "no two nodes share a place"


def test_states_are_classes_and_names_are_escaped() -> None:
    """Each node carries its state as a class; a hostile node name is text, not markup."""
    evil = '<script>alert(1)</script>"onload="x'
    shape = GraphShape(
        (
            ShapeNode(START, "start", "start"),
            ShapeNode(evil, "agent", "t"),
            ShapeNode(END, "end", "end"),
        ),
        (ShapeEdge(START, evil, False), ShapeEdge(evil, END, False)),
    )
    svg = str(graph_svg(shape, {evil: "running"}, evil))
    assert "<script" not in svg
    assert 'onload="' not in svg
    assert "state-running current" in svg
    assert "&lt;script&gt;" in svg
    assert not re.search(r"\sstyle=", svg)
